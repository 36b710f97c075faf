"""Multi-agent envs in any stage, and what games report: an SFT stage's held-out evaluation plays
the game through the multi-agent evaluation (not the single-agent path, which cannot play an env
with roles); the roles' final env infos become ``env/info/<key>_mean`` and ``eval/info/<key>_mean``."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

pytest.importorskip("torch")
pytest.importorskip("tinker_env_games", reason="these tests play tinker-env-games' negotiation game")

import tinker_core  # noqa: E402
from tinker_algos import train  # noqa: E402
from tinker_algos.multiagent import Learner, multi_agent_rollout, opponent  # noqa: E402
from tinker_algos.multiagent.results import info_metrics  # noqa: E402
from tinker_algos.sampling.sampler import SamplingParams  # noqa: E402
from tinker_env_games.negotiation_sft import scripted_dialogues, write_jsonl  # noqa: E402

NEGOTIATION = {"max_messages": 6, "brief": True}


def sft_job(tiny_dir: Path, data: Path) -> dict[str, Any]:
    """A 2-step SFT warm start on games/negotiation-v0, as examples/negotiation.yaml's first stage."""
    return {
        "name": "negotiation-sft",
        "seed": 0,
        "model": {"name": str(tiny_dir), "device": "cpu", "threads": 1},
        "env": {"id": "games/negotiation-v0", "kwargs": NEGOTIATION, "eval_kwargs": {**NEGOTIATION, "split": "test"}},
        "algorithm": {"name": "sft", "data": str(data), "steps": 2, "batch_size": 4, "eval_size": 2},
        "rollout": {"max_new_tokens": 16, "stop": ["\n"]},
        "logging": {"tensorboard": False, "plot": False},
    }


def test_an_sft_stage_on_a_multi_agent_env_evaluates_by_playing_the_game(tiny_dir: Path, tmp_path: Path) -> None:
    data = write_jsonl(scripted_dialogues(8, env_kwargs=NEGOTIATION), tmp_path / "negotiation-sft.jsonl")
    result = train(sft_job(tiny_dir, data), run_dir=tmp_path / "run")
    assert result.status == "completed" and result.step == 2
    rows = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    evals = [r for r in rows if "eval/error_rate" in r]
    assert evals, "the SFT stage logged no held-out evaluation"
    last = evals[-1]
    assert last["eval/error_rate"] < 1.0  # the single-agent path fails every episode of an env with roles
    for key in ("eval/win_rate", "eval/draw_rate", "eval/loss_rate", "eval/alice/win_rate", "eval/bob/win_rate"):
        assert key in last, key
    assert last["eval/win_rate"] + last["eval/draw_rate"] + last["eval/loss_rate"] == pytest.approx(1.0)
    # the game's own end-of-game facts: the deal rate and the policy's score
    assert 0.0 <= last["eval/info/deal_mean"] <= 1.0 and 0.0 <= last["eval/info/score_mean"] <= 10.0


def test_info_metrics_average_the_numeric_and_boolean_values_of_final_infos() -> None:
    infos = [
        {"deal": True, "score": 6, "outcome": "win", "allocation": [1, 0, 2], "values": None},
        {"deal": False, "score": 0.0, "outcome": "draw"},
        {"deal": np.bool_(True), "score": np.float32(3.0), "messages_left": 2},
    ]
    assert info_metrics("env", infos) == {
        "env/info/deal_mean": pytest.approx(2 / 3),
        "env/info/score_mean": pytest.approx(3.0),
        "env/info/messages_left_mean": 2.0,  # over the infos that have the key
    }
    assert info_metrics("eval", []) == {}


def test_rollout_metrics_carry_the_learner_roles_final_infos(policy: Any) -> None:
    def make_env() -> Any:
        return tinker_core.make_env("games/negotiation-v0", **NEGOTIATION)

    params = SamplingParams(max_new_tokens=16, temperature=1.0, stop=("\n",), seed=0)
    agents = {"alice": Learner(None), "bob": opponent("conceder")}
    result = multi_agent_rollout(policy, make_env, [0, 1, 2, 3], params, agents=agents)
    games = [ep.result for ep in result.episodes if ep.error is None and ep.result is not None]
    assert games
    for res in games:  # the coordinator keeps what the env reported at the end
        assert set(res.infos) == {"alice", "bob"} and isinstance(res.infos["alice"]["deal"], bool)
    m = result.metrics()
    assert m["env/info/deal_mean"] == pytest.approx(np.mean([res.infos["alice"]["deal"] for res in games]))
    assert m["env/info/score_mean"] == pytest.approx(np.mean([res.infos["alice"]["score"] for res in games]))
    assert "env/info/outcome_mean" not in m and "env/info/allocation_mean" not in m


@pytest.mark.parametrize(("env_id", "names"), [
    ("games/tictactoe-v0", ("random", "minimax")),
    ("games/negotiation-v0", ("random", "conceder", "boulware")),
])
def test_the_opponent_field_names_opponents_the_envs_offer(env_id: str, names: tuple[str, ...]) -> None:
    from tinker_core.config import MultiAgentConfig
    from tinker_core.opponents import scripted_opponents

    description = MultiAgentConfig.model_fields["opponent"].description or ""
    assert env_id in description and "scripted_opponents" in description
    for name in names:
        assert name in description and name in scripted_opponents(env_id), name


def test_learners_evaluate_each_seat_against_every_eval_opponent(tiny_dir: Path, tmp_path: Path) -> None:
    """``eval_opponents: [conceder, boulware]``: a 2-stage job (an SFT warm start, then two
    learners) logs each opponent's numbers per role under ``eval/vs/<opponent>/``, the first
    opponent's under the usual keys too; the warm start's evaluation plays the same opponents
    (the level the learners' curves start from), and each role's reward is its own games' mean."""
    data = write_jsonl(scripted_dialogues(8, env_kwargs=NEGOTIATION), tmp_path / "negotiation-sft.jsonl")
    job = sft_job(tiny_dir, data)
    sft = {**job.pop("algorithm"), "steps": 1, "eval_size": 4}
    learners = {"name": "grpo", "steps": 1, "eval_size": 4,
                "params": {"multi_agent": {"mode": "learners", "eval_opponents": ["conceder", "boulware"]}}}
    job.update(lora={"rank": 4, "alpha": 8}, stages=[{"algorithm": sft}, {"algorithm": learners}],
               rollout={**job["rollout"], "prompts_per_step": 1, "group_size": 2})
    assert train(job, run_dir=tmp_path / "run").status == "completed"
    rows = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [1, 2]
    for row in rows:  # the warm start (step 1) and the learners (step 2)
        for name in ("conceder", "boulware"):
            vs = f"eval/vs/{name}"
            for role in ("alice", "bob"):
                assert np.isfinite(row[f"{vs}/{role}/reward_mean"]) and 0.0 <= row[f"{vs}/{role}/info/score_mean"] <= 1.0
            assert row[f"{vs}/error_rate"] == 0.0
            # 4 games, 2 per role: the mean over games is the mean of the roles' means
            assert row[f"{vs}/reward_mean"] == pytest.approx((row[f"{vs}/alice/reward_mean"] + row[f"{vs}/bob/reward_mean"]) / 2)
        first = {k.removeprefix("eval/vs/conceder/"): v for k, v in row.items() if k.startswith("eval/vs/conceder/")}
        assert first == {k.removeprefix("eval/"): v for k, v in row.items() if k.startswith("eval/") and not k.startswith("eval/vs/")}


def two_stage_config(multi_agent: dict[str, Any], second_env: str = "games/negotiation-v0") -> Any:
    from tinker_core.config import parse_config

    return parse_config({
        "model": {"name": "tiny"}, "lora": {"rank": 4}, "env": {"id": "games/negotiation-v0"},
        "stages": [{"algorithm": {"name": "sft", "data": "d.jsonl"}},
                   {"env": {"id": second_env}, "algorithm": {"name": "grpo", "params": {"multi_agent": multi_agent}}}],
    }, check_plugins=False)


def test_a_warm_start_plays_the_held_out_opponents_of_the_stage_it_warms() -> None:
    """Who a stage without multi_agent settings (SFT) plays in held-out evaluation: the next
    multi_agent stage's opponents on the same env (per opponent if it lists eval_opponents),
    else random; and ``opentinker eval`` of such a run plays the first."""
    from types import SimpleNamespace

    from tinker_algos.commands.evaluation_settings import eval_settings
    from tinker_algos.multiagent.grpo import stage_eval_opponents

    spec = tinker_core.registry.env_spec("games/negotiation-v0")

    def warm_start_plays(config: Any) -> tuple[tuple[str, ...], bool]:
        return stage_eval_opponents(SimpleNamespace(job=config, stage_index=0), None, spec)

    both = two_stage_config({"mode": "learners", "eval_opponents": ["boulware", "conceder"]})
    assert warm_start_plays(both) == (("boulware", "conceder"), True)
    assert warm_start_plays(two_stage_config({"eval_opponent": "conceder"})) == (("conceder",), False)
    assert warm_start_plays(two_stage_config({"eval_opponents": ["conceder"]}, "games/tictactoe-v0")) == (("random",), False)
    assert eval_settings(both).opponent == "boulware" and eval_settings(both, opponent="conceder").opponent == "conceder"
