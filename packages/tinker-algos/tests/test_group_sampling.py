"""Dynamic sampling, the difficulty filter and the curriculum (issue 44): the filter and the
refill against a hand computation; the curriculum moving on a scripted env in a real GRPO run;
both deterministic and resumed exactly."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from typing import Any

import pytest

import tinker_core
import tinker_core.registry
from tinker_algos import train
from tinker_algos.records.metrics import read_metrics
from tinker_algos.rollout.curriculum import Curriculum
from tinker_algos.rollout.episodes import Episode, RolloutResult
from tinker_algos.rollout.group_filter import (
    GroupFilter,
    PassRateFilter,
    collect_filtered,
    refill_size,
    tied_B,
)
from tinker_core import EnvSpec, TextEnv, hookimpl
from tinker_core.config import CurriculumConfig, DynamicSamplingConfig
from tinker_core.errors import ConfigError


def result(rewards_by_group: list[list[float]], prompts: list[str] | None = None, success: bool = False) -> RolloutResult:
    eps = [
        Episode(None, r, 1, r >= 1.0 if not success else bool(r), None, [(prompts[g] if prompts else f"q{g}", "a")], group=g)
        for g, rewards in enumerate(rewards_by_group) for r in rewards
    ]
    return RolloutResult(eps, Counter(), new_tokens=len(eps), seconds=0.0)


def rewards_of(r: RolloutResult) -> list[list[float]]:
    out: dict[int, list[float]] = {}
    for e in r.episodes:
        out.setdefault(e.group, []).append(e.reward)
    return [out[g] for g in sorted(out)]


def test_tied_groups_are_the_groups_with_one_reward():
    assert tied_B([[1, 1], [0, 1], [0, 0], [0.5, 0], []]) == [True, False, True, False, True]


def test_tied_groups_are_dropped_and_the_step_refilled_by_hand():
    """Round 0: groups [1,1] [0,1] [0,0] [0.5,0]: two tie, two kept (tied fraction 1/2). Round 1
    (fresh prompts): [1,0] [1,1] [0,1] [1,0]: the first two informative ones, [1,0] and [0,1],
    fill the step to 4; round 2 is never sampled. Dropped: 8 sampled, 4 trained on."""
    rounds = {1: result([[1, 0], [1, 1], [0, 1], [1, 0]]), 2: result([[0, 1]] * 4)}
    asked: list[tuple[int, int]] = []

    def refill(r: int, n: int) -> RolloutResult:
        asked.append((r, n))
        return rounds[r]

    first = result([[1, 1], [0, 1], [0, 0], [0.5, 0]])
    kept, m = collect_filtered(first, refill, GroupFilter(DynamicSamplingConfig(enabled=True)), want=4, max_rounds=2)
    assert asked == [(1, 4)]  # 2 missing at a kept share of 2/4: 4 prompts
    assert rewards_of(kept) == [[0, 1], [0.5, 0], [1, 0], [0, 1]]
    assert [e.group for e in kept.episodes] == [0, 0, 1, 1, 2, 2, 3, 3]
    assert m["sampling/tied_frac"] == 0.5 and m["sampling/dropped_frac"] == 0.5
    assert m["sampling/rounds"] == 1 and m["sampling/refill_episodes"] == 8
    assert m["sampling/kept_groups"] == 4 and m["sampling/short_groups"] == 0
    assert kept.new_tokens == 16  # both rounds' sampled tokens count


def test_oversampling_is_bounded_and_a_short_step_trains_on_what_it_kept():
    asked: list[tuple[int, int]] = []

    def refill(r: int, n: int) -> RolloutResult:
        asked.append((r, n))
        return result([[1, 1], [0, 1]])  # one informative group a round

    kept, m = collect_filtered(result([[0, 0], [0, 0], [0, 0]]), refill, GroupFilter(DynamicSamplingConfig(enabled=True)), want=3, max_rounds=2)
    # nothing kept yet: the whole 3; then 1 of 5 kept, 2 missing -> 10, at most 3
    assert asked == [(1, 3), (2, 3)] and rewards_of(kept) == [[0, 1], [0, 1]]
    assert m["sampling/tied_frac"] == 1.0 and m["sampling/short_groups"] == 1 and m["sampling/kept_groups"] == 2
    assert m["sampling/dropped_frac"] == pytest.approx(1 - 2 / 7)


def test_a_refill_round_samples_what_the_missing_groups_need_at_the_share_kept_so_far():
    assert refill_size(9, 23, 32, 32) == 13  # ceil(9 / (23 / 32)) = ceil(12.52)
    assert refill_size(4, 16, 32, 32) == 8
    assert refill_size(3, 0, 3, 3) == 3  # nothing kept: at most prompts_per_step
    assert refill_size(1, 1, 1, 32) == 1


def test_the_difficulty_filter_keeps_prompts_whose_recent_pass_rate_is_strictly_between_0_and_1():
    f = PassRateFilter(window=4, max_prompts=10)
    groups = lambda r: [[e for e in r.episodes if e.group == g] for g in range(2)]  # noqa: E731
    # "a" passes 2 of 2, "b" 1 of 2: a's recent pass rate is 1 (dropped), b's 1/2 (kept)
    assert f.keep(groups(result([[1, 1], [1, 0]], ["a", "b"]))) == [False, True]
    # "a" again, failing both: its last 4 episodes are 1, 1, 0, 0 -> 1/2, kept although this group ties
    # "b" again, failing both: 1, 0, 0, 0 -> 1/4, kept
    assert f.keep(groups(result([[0, 0], [0, 0]], ["a", "b"]))) == [True, True]
    # a third time: a's window is 0, 0, 0, 0 -> dropped; b (window 4): 0, 0, 0, 0 -> dropped
    assert f.keep(groups(result([[0, 0], [0, 0]], ["a", "b"]))) == [False, False]
    state = f.state_dict()
    g = PassRateFilter(window=4, max_prompts=10)
    g.load_state_dict(state)
    assert g.history == f.history
    small = PassRateFilter(window=4, max_prompts=1)
    small.keep(groups(result([[1, 0], [1, 0]], ["a", "b"])))
    assert len(small.history) == 1  # only the most recent prompt, "b", is remembered


def test_the_curriculum_moves_by_the_window_of_success():
    levels = [{"digits": 1}, {"digits": 2}, {"digits": 3}]
    c = Curriculum(CurriculumConfig(enabled=True, window=2, promote_at=0.75, demote_below=0.25), levels, env_id="x/y-v0", where="rollout")
    assert c.kwargs({"digits": 2, "ops": ["+"]}) == {"digits": 1, "ops": ["+"]}
    # window means: -, 0.7, 0.7, 1.0 (up to 1; the window empties), -, 0.8 (up to 2), -, 0.1 (down to 1)
    assert [c.observe(r) for r in (1.0, 0.4, 1.0, 1.0, 0.9, 0.7, 0.0, 0.2)] == [None, None, None, 1, None, 2, None, 1]
    assert c.level == 1 and c.rates == []
    with pytest.raises(ConfigError, match="declares no difficulty levels"):
        Curriculum(CurriculumConfig(enabled=True), [], env_id="x/y-v0", where="rollout")
    with pytest.raises(ConfigError, match="start: 5"):
        Curriculum(CurriculumConfig(enabled=True, start=5), levels, env_id="x/y-v0", where="rollout")


class LevelEnv(TextEnv):
    """Scripted: at level ``easy`` every action is right (reward 1), at ``hard`` none is (0)."""

    env_spec = EnvSpec(id="algostest/levels-v0", description="easy: reward 1, hard: reward 0", max_turns=1,
                       difficulty_levels=({"hard": False}, {"hard": True}))

    def __init__(self, hard: bool = False) -> None:
        super().__init__()
        self.hard = hard

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[str, dict[str, Any]]:
        super().reset(seed=seed)
        return f"task {seed}:\n", {}

    def step(self, action: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        return "", 0.0 if self.hard else 1.0, True, False, {}


class ParityEnv(TextEnv):
    """Reward 1 for an action of odd length, else 0: some groups tie, some do not."""

    env_spec = EnvSpec(id="algostest/parity-groups-v0", description="rewards odd-length actions", max_turns=1)

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[str, dict[str, Any]]:
        super().reset(seed=seed)
        return f"say {seed % 7}:\n", {}

    def step(self, action: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        return "", float(len(action) % 2), True, False, {}


class _Envs:
    @hookimpl
    def opentinker_register_envs(self, register: Any) -> None:
        register(LevelEnv.env_spec, LevelEnv)
        register(ParityEnv.env_spec, ParityEnv)


@pytest.fixture
def scripted_envs(algos_and_echo_plugins: None) -> Iterator[None]:
    if "algostest/levels-v0" not in tinker_core.registry.get_registry("envs"):
        tinker_core.registry.register_plugin(_Envs(), name="algostest-group-sampling")
    yield


def job(env: str, steps: int, rollout: dict[str, Any]) -> dict[str, Any]:
    return {
        "name": "groups", "seed": 0, "model": {"name": "tiny", "threads": 1}, "env": {"id": env},
        "algorithm": {"name": "grpo", "steps": steps, "eval_every": 0},
        "rollout": {"prompts_per_step": 3, "group_size": 2, "max_new_tokens": 3, **rollout},
        "checkpoint": {"every": 1, "keep_last": 10}, "logging": {"tensorboard": False, "plot": False},
    }


@pytest.mark.usefixtures("scripted_envs")
def test_the_curriculum_moves_on_a_scripted_env_and_resumes_exactly(tmp_path, stop_after, deterministic_metrics):
    """window 1, promote at 0.8, demote below 0.2: level 0 (every episode succeeds) -> level 1
    (none does) -> level 0 -> ...: the levels drawn at are 0, 1, 0, 1, 0."""
    cfg = job("algostest/levels-v0", 5, {"curriculum": {"enabled": True, "window": 1, "promote_at": 0.8, "demote_below": 0.2}})
    train(cfg, run_dir=tmp_path / "full")
    rows = read_metrics(tmp_path / "full" / "metrics.jsonl")
    assert [r["curriculum/level"] for r in rows] == [0, 1, 0, 1, 0]
    assert [r["env/success_rate"] for r in rows] == [1.0, 0.0, 1.0, 0.0, 1.0]
    part = train(cfg, run_dir=tmp_path / "part", callbacks=stop_after(2))
    assert part.status == "interrupted"
    train(cfg, run_dir=tmp_path / "part")
    assert deterministic_metrics(tmp_path / "part") == deterministic_metrics(tmp_path / "full")


@pytest.mark.usefixtures("scripted_envs")
@pytest.mark.parametrize("group_filter", ["tied", "pass_rate"])
def test_dynamic_sampling_in_a_run_is_deterministic_and_resumes_exactly(tmp_path, stop_after, deterministic_metrics, group_filter):
    cfg = job("algostest/parity-groups-v0", 4, {"dynamic_sampling": {"enabled": True, "filter": group_filter, "max_rounds": 2}})
    train(cfg, run_dir=tmp_path / "full")
    full = deterministic_metrics(tmp_path / "full")
    assert all(0 <= r["sampling/tied_frac"] <= 1 and r["sampling/kept_groups"] + r["sampling/short_groups"] == 3 for r in full)
    assert any(r["sampling/rounds"] > 0 for r in full)  # some step refilled
    train(cfg, run_dir=tmp_path / "again")
    assert deterministic_metrics(tmp_path / "again") == full
    part = train(cfg, run_dir=tmp_path / "part", callbacks=stop_after(2))
    assert part.status == "interrupted"
    train(cfg, run_dir=tmp_path / "part")
    assert deterministic_metrics(tmp_path / "part") == full


@pytest.mark.usefixtures("scripted_envs")
def test_group_sampling_refuses_what_it_does_not_support(tmp_path):
    cfg = job("algostest/parity-groups-v0", 1, {"curriculum": {"enabled": True}})
    with pytest.raises(ConfigError, match="declares no difficulty levels"):
        train(cfg, run_dir=tmp_path / "a")


def test_rollout_workers_refuse_dynamic_sampling_and_the_curriculum_when_the_config_is_read():
    from tinker_core.config import parse_config

    for option in ("dynamic_sampling", "curriculum"):
        cfg = job("algostest/parity-groups-v0", 1, {option: {"enabled": True}})
        cfg["execution"] = {"rollout_workers": 1}
        with pytest.raises(ConfigError, match=f"uses rollout.{option}, which rollout workers do not support yet"):
            parse_config(cfg, check_plugins=False)

    cfg = job("algostest/parity-groups-v0", 1, {"dynamic_sampling": {"enabled": True}})
    cfg["algorithm"] = {"name": "ppo", "steps": 1}
    with pytest.raises(ConfigError, match="rollout.dynamic_sampling is for grpo stages"):
        parse_config(cfg, check_plugins=False)
