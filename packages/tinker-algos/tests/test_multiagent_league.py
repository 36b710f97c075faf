"""``multi_agent.mode: league``: the policy against a pool of its past snapshots, rated by Elo.

Tic-tac-toe (tinker-env-games) on the untrained tiny model, as in test_multiagent_learners.py.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest

pytest.importorskip("tinker_env_games", reason="these tests play tinker-env-games' tic-tac-toe")

from tinker_algos import train  # noqa: E402
from tinker_algos.algorithms.league import ELO_ANCHOR, elo_rating  # noqa: E402
from tinker_core.errors import ConfigError  # noqa: E402


def league_config(tiny_dir: Path, *, steps: int = 3, league: dict[str, Any] | None = None) -> dict[str, Any]:
    league = league if league is not None else {"pool_size": 2, "snapshot_every": 1, "sample": "win_rate", "scripted": ["random"]}
    return {
        "name": "tictactoe-league",
        "seed": 0,
        "model": {"name": str(tiny_dir), "device": "cpu", "threads": 1},
        "lora": {"rank": 4, "alpha": 8},
        "env": {"id": "games/tictactoe-v0", "kwargs": {"max_illegal_moves": 2}},
        "algorithm": {
            "name": "grpo", "steps": steps, "eval_size": 2, "eval_every": 1,
            "params": {"multi_agent": {"mode": "league", "eval_opponent": "random", "league": league}},
        },
        "rollout": {"prompts_per_step": 3, "group_size": 2, "max_new_tokens": 3, "stop": ["\n"], "max_error_rate": 0.5},
        "optimizer": {"lr": 5e-3},
        "checkpoint": {"every": 1, "keep": 4},
        "logging": {"tensorboard": False, "plot": False},
    }


def test_elo_rating_is_the_maximum_likelihood_rating() -> None:
    assert elo_rating([(0.5, 1000.0)] * 4) == pytest.approx(1000.0, abs=1e-6)
    # a 3:1 score against 1000 -> E = 0.75 -> 1000 + 400 log10(3)
    assert elo_rating([(1.0, 1000.0)] * 3 + [(0.0, 1000.0)]) == pytest.approx(1000 + 400 * math.log10(3), abs=1e-6)
    # against two opponents the expected scores add up to the real ones
    games = [(1.0, 1000.0), (0.0, 1400.0), (0.5, 1200.0)]
    r = elo_rating(games)
    assert sum(1 / (1 + 10 ** ((rj - r) / 400)) for _, rj in games) == pytest.approx(1.5, abs=1e-6)
    assert elo_rating([(1.0, 1000.0)]) == 4000.0 and elo_rating([(0.0, 1000.0)]) == -1000.0
    assert elo_rating([]) == ELO_ANCHOR


def test_league_trains_against_its_past_snapshots_and_rates_the_policy(tiny_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from tinker_algos.multiagent import grpo as multiagent_grpo
    from tinker_algos.multiagent.roles import Learner

    real, opponents = multiagent_grpo.evaluate_multi_agent, []

    def counted(*args: Any, **kwargs: Any) -> dict[str, float]:
        opponents.append(kwargs.get("opponent_agent") or kwargs["opponent_name"])
        return real(*args, **kwargs)

    monkeypatch.setattr(multiagent_grpo, "evaluate_multi_agent", counted)
    result = train(league_config(tiny_dir), run_dir=tmp_path / "run")
    assert result.status == "completed" and result.step == 3
    rows = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    # a snapshot after every step, at most pool_size of them, plus the scripted member
    assert [r["league/snapshots"] for r in rows] == [2.0, 2.0, 2.0]
    assert [r["league/pool_size"] for r in rows] == [3.0, 3.0, 3.0]
    assert [r["league/newest_snapshot_step"] for r in rows] == [1.0, 2.0, 3.0]
    for r in rows:
        assert np.isfinite(r["eval/elo"]) and np.isfinite(r["losses/policy"])
        assert r["rollout/trajectories"] > 0
        for member in ("random",):
            rates = [r[f"eval/league/{member}/{w}_rate"] for w in ("win", "draw", "loss")]
            assert sum(rates) == pytest.approx(1.0)
        # the scripted member is the evaluation's own opponent: its games are played once, not again for the league
        assert r["eval/league/random/win_rate"] == r["eval/win_rate"]
    # each evaluation (one a step): the scripted `random` once, then the pool's 2 snapshots, oldest first
    assert opponents == [x for step in (0, 1, 2) for x in ("random", *(Learner(f"policy-past-{s:06d}") for s in (step, step + 1)))]
    from tinker_algos.records.metrics import curve_panels

    assert ("held-out Elo", ["eval/elo"], "linear") in curve_panels(rows)
    pool = json.loads((tmp_path / "run" / "checkpoints" / "step-000003" / "league" / "pool.json").read_text())
    assert [m["name"] for m in pool["snapshots"]] == ["past-000002", "past-000003"]
    assert [m["name"] for m in pool["scripted"]] == ["random"]
    assert sum(m["wins"] + m["draws"] + m["losses"] for m in pool["snapshots"] + pool["scripted"]) > 0
    assert pool["elo"] == rows[-1]["eval/elo"]
    for name in ("past-000002", "past-000003"):
        assert (tmp_path / "run" / "checkpoints" / "step-000003" / "league" / name / "adapter_model.safetensors").is_file()


def test_the_pool_survives_resume(tiny_dir: Path, tmp_path: Path, stop_after: Any, deterministic_metrics: Any) -> None:
    cfg = league_config(tiny_dir, league={"pool_size": 2, "snapshot_every": 1, "sample": "recency", "scripted": ["minimax"]})
    full = train(cfg, run_dir=tmp_path / "full")
    part = train(cfg, run_dir=tmp_path / "part", callbacks=stop_after(2))
    assert part.status == "interrupted" and part.step == 2
    rest = train(cfg, run_dir=tmp_path / "part", callbacks=stop_after(10**9))
    assert rest.status == "completed" and rest.step == full.step == 3
    assert deterministic_metrics(tmp_path / "part") == deterministic_metrics(tmp_path / "full")
    pools = [json.loads((tmp_path / run / "checkpoints" / "step-000003" / "league" / "pool.json").read_text()) for run in ("full", "part")]
    assert pools[0] == pools[1]


@pytest.mark.parametrize(
    ("change", "fragment"),
    [
        ({"league": {"scripted": ["alphazero"]}}, "algorithm.params.multi_agent.league.scripted[0]: 'alphazero' is not a scripted opponent"),
        ({"lora": None}, "algorithm.params.multi_agent.mode: league keeps past snapshots of the policy as LoRA adapters"),
        ({"mode": "self_play"}, "algorithm.params.multi_agent.league: only used with mode: league"),
    ],
)
def test_bad_league_configs_fail_naming_the_field(tiny_dir: Path, tmp_path: Path, change: dict[str, Any], fragment: str) -> None:
    cfg = league_config(tiny_dir)
    if "lora" in change:
        cfg["lora"] = None
    else:
        cfg["algorithm"]["params"]["multi_agent"].update(change)
    with pytest.raises(ConfigError) as e:
        train(cfg, run_dir=tmp_path / "run")
    assert fragment in str(e.value)
