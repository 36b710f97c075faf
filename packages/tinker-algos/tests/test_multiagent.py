"""Multi-agent rollouts: self-play, separate learners, scripted opponents, forfeits, GRPO.

Real games (tinker-env-games' tic-tac-toe, tinker-env-echo's call-response) and the untrained
tiny model, whose moves are mostly illegal: games end quickly, often by an illegal-move forfeit,
which is enough to check the bookkeeping. Rewards are checked against an oracle that replays the
transcripts on a fresh env.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

pytest.importorskip("tinker_env_games", reason="these tests play tinker-env-games' tic-tac-toe and its scripted opponents")

import tinker_core  # noqa: E402
import tinker_core.registry  # noqa: E402
from tinker_algos.model.models import PolicyModel, sequence_logprobs  # noqa: E402
from tinker_algos.multiagent import (  # noqa: E402
    Learner,
    MultiAgentParams,
    MultiAgentRolloutResult,
    Scripted,
    multi_agent_rollout,
    opponent,
)
from tinker_algos.rollout.episodes import RolloutError  # noqa: E402
from tinker_algos.sampling.sampler import SamplingParams  # noqa: E402
from tinker_core.config import MultiAgentConfig  # noqa: E402
from tinker_core.contracts import Trajectory  # noqa: E402
from tinker_core.errors import ConfigError  # noqa: E402
from tinker_env_echo.envs import CallResponseEnv  # noqa: E402
from tinker_env_games.opponents import minimax_moves  # noqa: E402
from tinker_env_games.tictactoe import parse_board  # noqa: E402

PARAMS = SamplingParams(max_new_tokens=3, stop=("\n",), seed=0)


def tictactoe() -> Any:
    return tinker_core.make_env("games/tictactoe-v0")


def runs(mask_T: np.ndarray) -> list[tuple[int, int, int]]:
    out: list[tuple[int, int, int]] = []
    start = 0
    for t in range(1, len(mask_T) + 1):
        if t == len(mask_T) or mask_T[t] != mask_T[start]:
            out.append((start, t, int(mask_T[start])))
            start = t
    return out


def check_role_trajectory(tok: Any, traj: Trajectory, turns: list[Any]) -> None:
    """``<bos> obs_1 act_1 obs_2 act_2 ...``: observations masked and exactly what the role was
    shown, actions trained, decoding to what the coordinator passed to the env."""
    segs = runs(traj.loss_mask_T)
    masked = [s for s in segs if s[2] == 0]
    generated = [s for s in segs if s[2] == 1]
    assert len(masked) == len(generated) == len(turns)
    assert segs[0][2] == 0 and segs[-1][2] == 1  # starts with the observation, ends with an action
    for k, ((a, b, _), turn) in enumerate(zip(masked, turns, strict=True)):
        assert traj.tokens_T[a:b].tolist() == tok.encode(turn.observation, add_special_tokens=k == 0)
    for (a, b, _), turn in zip(generated, turns, strict=True):
        text = tok.decode(traj.tokens_T[a:b].tolist(), skip_special_tokens=True, clean_up_tokenization_spaces=False)
        assert text == turn.action
    assert np.all(traj.sampler_logprobs_T[traj.loss_mask_T == 0] == 0.0)
    assert np.all(traj.sampler_logprobs_T[traj.loss_mask_T == 1] < 0.0)


def replay(make_env: Any, seed: int, transcripts: dict[str, list[Any]]) -> dict[str, float]:
    """Oracle: play the recorded actions on a fresh env in its own turn order; total rewards."""
    env = make_env()
    env.reset(seed=seed)
    queues = {r: [t.action for t in ts] for r, ts in transcripts.items()}
    while not env.done and queues[env.agent_selection]:
        env.step(queues[env.agent_selection].pop(0))
    assert all(not q for q in queues.values()), "every recorded action was played"
    return dict(env._cumulative_rewards)


def check_episodes(result: MultiAgentRolloutResult, tok: Any, make_env: Any, learners: tuple[str, ...]) -> None:
    for ep in result.episodes:
        assert ep.error is None and ep.result is not None
        res = ep.result
        if not res.reason.startswith("forfeit-timeout"):
            assert replay(make_env, ep.seed, res.transcripts) == pytest.approx(res.rewards)
        for ri, role in enumerate(result.roles):
            traj = ep.trajectories.get(role)
            if role not in learners or not res.transcripts[role]:
                assert traj is None  # scripted roles and roles that never acted: no trajectory
                continue
            assert traj is not None
            check_role_trajectory(tok, traj, res.transcripts[role])
            assert traj.turn_rewards == res.turn_rewards[role]
            # a role that acted got every reward through its turns: they sum to its total
            assert traj.reward == pytest.approx(res.rewards[role])
            assert traj.group_id == ep.index * len(result.roles) + ri
            assert traj.info["role"] == role and traj.info["outcome"] == res.outcomes[role]


# ---------------------------------------------------------------------------------------------
def test_self_play_trains_both_roles_with_correct_masks_and_rewards(policy: PolicyModel) -> None:
    result = multi_agent_rollout(policy, tictactoe, list(range(6)), PARAMS)
    assert result.roles == ("x", "o") and not result.errors
    check_episodes(result, policy.tokenizer, tictactoe, learners=("x", "o"))
    both = [ep for ep in result.episodes if set(ep.trajectories) == {"x", "o"}]
    assert both, "some game had both roles move"
    assert {t.info["role"] for t in result.trajectories} == {"x", "o"}
    for ep in result.episodes:  # tic-tac-toe is zero-sum apart from illegal-move penalties
        outcomes = ep.result.outcomes
        assert sorted(outcomes.values()) in (["loss", "win"], ["draw", "draw"])
        assert ep.result.self_play
    m = result.metrics()
    assert m["rollout/episodes"] == 6.0 and m["rollout/trajectories"] == len(result.trajectories)
    assert m["env/x/win_rate"] + m["env/o/win_rate"] + m["env/draw_rate"] == pytest.approx(1.0)
    assert m["rollout/sample_rounds"] >= 1


def test_groups_are_one_per_task_and_role(policy: PolicyModel) -> None:
    result = multi_agent_rollout(policy, tictactoe, [3, 4], PARAMS, group_size=2)
    assert len(result.episodes) == 4 and [ep.seed for ep in result.episodes] == [3, 3, 4, 4]
    groups = result.groups
    assert len(groups) == 2 * len(result.roles)
    for k, group in enumerate(groups):
        task, ri = divmod(k, len(result.roles))
        assert all(t.group_id == k and t.info["role"] == result.roles[ri] and t.info["seed"] == [3, 4][task] for t in group)
    assert sum(len(g) for g in groups) == len(result.trajectories)
    batch = result.batch()
    assert batch.group_ids_B.tolist() == [t.group_id for t in result.trajectories] and batch.group_sizes_G is None


def test_self_play_is_deterministic_under_a_seed(policy: PolicyModel) -> None:
    a = multi_agent_rollout(policy, tictactoe, [3, 3, 4, 5], PARAMS)
    b = multi_agent_rollout(policy, tictactoe, [3, 3, 4, 5], PARAMS)
    assert len(a.trajectories) == len(b.trajectories)
    for x, y in zip(a.trajectories, b.trajectories, strict=True):
        np.testing.assert_array_equal(x.tokens_T, y.tokens_T)
        np.testing.assert_array_equal(x.sampler_logprobs_T, y.sampler_logprobs_T)
        np.testing.assert_array_equal(x.loss_mask_T, y.loss_mask_T)
        assert x.turn_rewards == y.turn_rewards and x.group_id == y.group_id
    assert [ep.result.to_dict() for ep in a.episodes] == [ep.result.to_dict() for ep in b.episodes]


def test_learner_against_minimax_never_wins_and_only_the_learner_trains(policy: PolicyModel) -> None:
    for learner, other in (("x", "o"), ("o", "x")):
        agents = {learner: Learner(), other: opponent("minimax")}
        result = multi_agent_rollout(policy, tictactoe, list(range(4)), PARAMS, agents=agents)
        check_episodes(result, policy.tokenizer, tictactoe, learners=(learner,))
        assert result.trajectories and all(t.info["role"] == learner for t in result.trajectories)
        assert all(ep.result.outcomes[other] in ("win", "draw") for ep in result.episodes)
        assert not any(ep.result.self_play for ep in result.episodes)
        m = result.metrics()
        assert m["env/win_rate"] == 0.0 and m[f"env/{other}/win_rate"] + m["env/draw_rate"] == 1.0


def test_minimax_moves_in_the_transcript_are_optimal(policy: PolicyModel) -> None:
    """The scripted role really is the opponent: its recorded moves are what minimax plays."""
    agents = {"x": opponent("minimax"), "o": Learner()}
    result = multi_agent_rollout(policy, tictactoe, [0, 1], PARAMS, agents=agents)
    for ep in result.episodes:
        assert ep.result.transcripts["x"]
        for turn in ep.result.transcripts["x"]:
            assert int(turn.action) in minimax_moves(parse_board(turn.observation), "X")


class StuckAgent:
    """Answers ``first`` once (when given), then blocks until released: a stuck agent."""

    def __init__(self, release: threading.Event, first: str | None = None) -> None:
        self.release = release
        self.first = first

    def __call__(self, role: str, observation: str) -> str:
        if self.first is not None:
            answer, self.first = self.first, None
            return answer
        self.release.wait(60)
        return "1"


@pytest.fixture
def release() -> Iterator[threading.Event]:
    event = threading.Event()
    yield event
    event.set()


def test_a_stuck_opponent_forfeits_and_the_learner_gets_the_credit(policy: PolicyModel, release: threading.Event) -> None:
    def make_env() -> Any:
        return tinker_core.make_env("echo/call-response-v0")

    agents = {"caller": Learner(), "responder": Scripted(lambda seed: StuckAgent(release))}
    result = multi_agent_rollout(policy, make_env, [0, 1], PARAMS, agents=agents, turn_timeout_s=0.5)
    assert not result.errors
    for ep in result.episodes:
        res = ep.result
        assert res.reason == "forfeit-timeout" and res.forfeited_by == "responder"
        assert res.outcomes == {"caller": "win", "responder": "loss"}
        # call-response has no forfeit(): the coordinator gives the offender the spec's low reward
        assert res.rewards == {"caller": 0.0, "responder": -1.0}
        traj = ep.trajectories["caller"]
        assert traj.turn_rewards == [0.0] and traj.info["outcome"] == "win"
        check_role_trajectory(policy.tokenizer, traj, res.transcripts["caller"])
        assert "responder" not in ep.trajectories and res.transcripts["responder"] == []


def test_a_stuck_tictactoe_player_loses_the_game(policy: PolicyModel, release: threading.Event) -> None:
    agents = {"x": Scripted(lambda seed: StuckAgent(release)), "o": Learner()}
    result = multi_agent_rollout(policy, tictactoe, [0], PARAMS, agents=agents, turn_timeout_s=0.5)
    res = result.episodes[0].result
    assert (res.reason, res.forfeited_by, res.winner) == ("forfeit-timeout", "x", "o")
    assert res.rewards == {"x": -1.0, "o": 1.0}
    # o never moved: its win is in the episode's rewards but in no trajectory
    assert result.trajectories == [] and result.metrics()["env/win_rate"] == 1.0


def test_separate_learners_sample_with_their_own_adapters(policy: PolicyModel) -> None:
    import torch

    policy.add_adapter("alice", seed=1)
    policy.add_adapter("bob", seed=2)
    with torch.no_grad():  # make the two adapters differ (a fresh LoRA is the identity)
        gen = torch.Generator().manual_seed(0)
        for p in policy.adapter_parameters("bob"):
            p.add_(torch.randn(p.shape, generator=gen) * 0.5)
    result = multi_agent_rollout(policy, tictactoe, list(range(4)), PARAMS, agents={"x": "alice", "o": "bob"})
    check_episodes(result, policy.tokenizer, tictactoe, learners=("x", "o"))
    by = {name: result.trajectories_for(name) for name in ("alice", "bob")}
    assert by["alice"] and by["bob"]
    assert {t.info["role"] for t in by["alice"]} == {"x"} and {t.info["role"] for t in by["bob"]} == {"o"}
    for name, trajs in by.items():
        other = "bob" if name == "alice" else "alice"
        for t in trajs:
            tokens = torch.as_tensor(t.tokens_T)[None]
            attn = torch.ones_like(tokens)
            on = t.loss_mask_T > 0
            scored = {}
            for adapter in (name, other):
                with policy.using_adapter(adapter), torch.no_grad():
                    scored[adapter] = sequence_logprobs(policy.module, tokens, attn)[0].numpy()[on]
            # temperature 1, no filtering: the sampler's logprobs are the sampling adapter's own
            np.testing.assert_allclose(t.sampler_logprobs_T[on], scored[name], atol=1e-4)
            assert not np.allclose(t.sampler_logprobs_T[on], scored[other], atol=1e-4)


def test_context_overflow_and_env_errors_are_counted_then_fatal(policy: PolicyModel, release: threading.Event) -> None:
    # a window of 150 tokens holds x's first turn (about 130) but not its second
    result = multi_agent_rollout(policy, tictactoe, list(range(4)), PARAMS, max_context_tokens=150)
    assert result.errors["context_overflow"] >= 1
    failed = [ep for ep in result.episodes if ep.error]
    assert all(ep.error == "context_overflow" and not ep.trajectories for ep in failed)
    assert result.metrics()["rollout/errors/context_overflow"] == float(len(failed))

    class BrokenResponder(CallResponseEnv):
        """Seed 1 mod 4: the responder's step raises; seed 3 mod 4: it hangs."""

        def step(self, action: str) -> None:
            if self.agent_selection == "responder" and self._seed % 4 == 1:
                raise RuntimeError("broken env")
            if self.agent_selection == "responder" and self._seed % 4 == 3:
                release.wait(60)
            super().step(action)

        def reset(self, seed: int | None = None, options: dict[str, Any] | None = None) -> None:
            self._seed = seed or 0
            super().reset(seed=seed, options=options)

    result = multi_agent_rollout(policy, BrokenResponder, [0, 1, 2, 3], PARAMS, max_error_rate=0.5, turn_timeout_s=0.5)
    assert result.errors == {"env_error": 1, "env_timeout": 1}
    assert [ep.error for ep in result.episodes] == [None, "env_error", None, "env_timeout"]
    assert len(result.trajectories) == 4  # caller and responder of the two good episodes
    assert {t.info["episode"] for t in result.trajectories} == {0, 2}
    with pytest.raises(RolloutError, match="2 of 4 multi-agent episodes failed"):
        multi_agent_rollout(policy, BrokenResponder, [0, 1, 2, 3], PARAMS, max_error_rate=0.25, turn_timeout_s=0.5)


def test_agents_argument_is_checked(policy: PolicyModel) -> None:
    with pytest.raises(ValueError, match="missing \\['o'\\]"):
        multi_agent_rollout(policy, tictactoe, [0], PARAMS, agents={"x": Learner()})
    with pytest.raises(ValueError, match="no Learner"):
        multi_agent_rollout(policy, tictactoe, [0], PARAMS, agents={"x": opponent("random"), "o": opponent("random")})
    with pytest.raises(ValueError, match="adapter 'nope', which the policy does not have"):
        multi_agent_rollout(policy, tictactoe, [0], PARAMS, agents="nope")
    with pytest.raises(TypeError, match="not a MultiAgentTextEnv"):
        multi_agent_rollout(policy, lambda: tinker_core.make_env("echo/echo-v0"), [0], PARAMS)


def test_multi_agent_params_are_checked_against_the_env() -> None:
    """The job config types multi_agent (tinker-core's tests cover its field errors); what only the
    env can tell -- its roles and the opponents it offers -- is checked by MultiAgentParams.for_env."""
    spec = tinker_core.registry.env_spec("games/tictactoe-v0")

    def settings(**kw: object) -> MultiAgentConfig:
        return MultiAgentConfig.model_validate(kw)

    assert MultiAgentParams.for_env(None, spec) == MultiAgentParams()
    p = MultiAgentParams.for_env(settings(mode="opponent", opponent="minimax", learner_role="o"), spec)
    agents = p.agents(spec.roles, "policy")
    assert agents == {"o": Learner("policy"), "x": opponent("minimax")}
    assert MultiAgentParams.for_env(settings(mode="opponent"), spec).agents(spec.roles, None) == {
        "x": Learner(None),
        "o": opponent("random"),
    }
    with pytest.raises(ConfigError) as e:
        MultiAgentParams.for_env(settings(mode="opponent", opponent="alphazero", learner_role="z"), spec, where="stages[1].algorithm.params.multi_agent")
    text = str(e.value)
    for fragment in ("stages[1].algorithm.params.multi_agent.opponent: 'alphazero'", ".learner_role: 'z' is not a role of games/tictactoe-v0"):
        assert fragment in text
    c4 = tinker_core.registry.env_spec("games/connect-four-v0")
    # the env says which opponents it offers: connect four has no minimax
    with pytest.raises(ConfigError, match=r"'minimax' is not a scripted opponent of games/connect-four-v0 \(it offers: random;"):
        MultiAgentParams.for_env(settings(mode="opponent", opponent="minimax"), c4)
    with pytest.raises(ConfigError, match=r"\.eval_opponent: 'minimax' is not a scripted opponent"):
        MultiAgentParams.for_env(settings(eval_opponent="minimax"), c4)
    assert MultiAgentParams.for_env(settings(eval_opponent="random"), c4).eval_opponent == "random"
    # several held-out opponents: each must be offered, named by its index; the first is the primary
    neg = tinker_core.registry.env_spec("games/negotiation-v0")
    with pytest.raises(ConfigError, match=r"\.eval_opponents\[1\]: 'minimax' is not a scripted opponent of games/negotiation-v0 \(it offers: boulware, conceder, random;"):
        MultiAgentParams.for_env(settings(eval_opponents=["conceder", "minimax"]), neg)
    both = MultiAgentParams.for_env(settings(eval_opponents=["conceder", "boulware"]), neg)
    assert (both.eval_opponent, both.held_out_opponents, both.per_opponent) == ("conceder", ("conceder", "boulware"), True)
    one = MultiAgentParams.for_env(settings(eval_opponent="boulware"), neg)
    assert (one.held_out_opponents, one.per_opponent) == (("boulware",), False)
    # an env that offers none cannot be evaluated against an opponent: refused before training
    duel = tinker_core.registry.env_spec("echo/call-response-v0")
    with pytest.raises(ConfigError, match=r"\.opponent: 'random' \(the default\) is not a scripted opponent of echo/call-response-v0 \(it offers: none"):
        MultiAgentParams.for_env(settings(mode="self_play"), duel)


def test_named_opponents_come_from_the_env_being_played(policy: PolicyModel) -> None:
    """opponent(name) is looked up on the rollout's env (its scripted_opponents), seeded per episode."""
    agents = {"x": Learner(), "o": opponent("random")}
    a = multi_agent_rollout(policy, tictactoe, [0, 1], PARAMS, agents=agents)
    b = multi_agent_rollout(policy, tictactoe, [0, 1], PARAMS, agents=agents)
    assert [ep.result.to_dict() for ep in a.episodes] == [ep.result.to_dict() for ep in b.episodes]
    with pytest.raises(ValueError, match=r"opponent 'minimax': echo/call-response-v0 offers no such scripted opponent \(it offers: none\)"):
        multi_agent_rollout(
            policy, lambda: tinker_core.make_env("echo/call-response-v0"), [0], PARAMS,
            agents={"caller": Learner(), "responder": opponent("minimax")},
        )


# ---------------------------------------------------------------------------------------------
def grpo_config(tiny_dir: Path, multi_agent: dict[str, Any] | None) -> dict[str, Any]:
    params = {"multi_agent": multi_agent} if multi_agent is not None else {}
    return {
        "name": "tictactoe-self-play",
        "seed": 0,
        "model": {"name": str(tiny_dir), "device": "cpu"},
        "env": {"id": "games/tictactoe-v0", "kwargs": {"max_illegal_moves": 2}},
        "algorithm": {"name": "grpo", "steps": 3, "eval_size": 2, "params": params},
        "rollout": {"prompts_per_step": 1, "group_size": 4, "max_new_tokens": 3, "stop": ["\n"], "max_error_rate": 0.5},
        "optimizer": {"lr": 1e-3},
        "logging": {"tensorboard": False, "plot": False},
    }


def test_grpo_self_play_on_tictactoe_runs_and_logs(tiny_dir: Path, tmp_path: Path) -> None:
    from tinker_algos import train

    result = train(grpo_config(tiny_dir, None), run_dir=tmp_path / "run")  # self-play is the default
    assert result.status == "completed" and result.step == 3
    rows = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [1, 2, 3]
    for r in rows:
        for key in ("env/reward_mean", "env/x/reward_mean", "env/o/reward_mean", "losses/policy", "optim/grad_norm"):
            assert np.isfinite(r[key]), key
        assert r["rollout/episodes"] == 4.0 and r["rollout/trajectories"] >= 4.0
    for key in ("eval/accuracy", "eval/win_rate", "eval/draw_rate", "eval/loss_rate"):
        assert key in rows[-1] and key in result.eval
    assert rows[-1]["eval/win_rate"] + rows[-1]["eval/draw_rate"] + rows[-1]["eval/loss_rate"] == pytest.approx(1.0)


def test_grpo_rejects_multi_agent_params_on_a_single_agent_env(tiny_dir: Path, tmp_path: Path) -> None:
    from tinker_algos import train

    cfg = grpo_config(tiny_dir, {"mode": "self_play"})
    cfg["env"] = {"id": "echo/echo-v0"}
    with pytest.raises(ConfigError, match="is single-agent"):
        train(cfg, run_dir=tmp_path / "run")
