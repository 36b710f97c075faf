"""Single-agent rollouts through the turn FSM: masks, the zero-gradient guarantee, errors, seeds.

The envs are real plugins (tinker-env-echo; tinker-env-math when installed) plus two faulty envs
registered in-process. The multi-turn countdown uses the tiny model after a short SFT warm start
(about 3 s), so its episodes really run several turns.
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest
import torch

import tinker_core
import tinker_core.registry
from tinker_algos.model.models import PolicyModel
from tinker_algos.rollout.episodes import RolloutError, RolloutResult, rollout
from tinker_algos.sampling.sampler import SamplingParams
from tinker_algos.training.trainer import Trainer, TrainerConfig
from tinker_core import EnvSpec, TextEnv, hookimpl
from tinker_core.contracts import Batch, Trajectory
from tinker_core.fsm import TurnFSM, TurnState


# ---------------------------------------------------------------------------------------------
# helpers
# ---------------------------------------------------------------------------------------------
def runs(mask_T: np.ndarray) -> list[tuple[int, int, int]]:
    """``(start, end, value)`` of each maximal run of equal values in a 0/1 mask."""
    out: list[tuple[int, int, int]] = []
    start = 0
    for t in range(1, len(mask_T) + 1):
        if t == len(mask_T) or mask_T[t] != mask_T[start]:
            out.append((start, t, int(mask_T[start])))
            start = t
    return out


def check_turn_structure(tok: Any, traj: Trajectory, transcript: list[tuple[str, str]]) -> None:
    """The FSM rule, checked from the outside: the sequence is ``<bos> obs_1 act_1 obs_2 act_2
    ...``; observation runs are masked (weight 0, logprob 0) and decode to exactly what the env
    said, action runs are trained (weight 1, a real logprob) and decode to the action text."""
    mask = traj.loss_mask_T
    assert set(np.unique(mask)) <= {0.0, 1.0}
    assert mask[0] == 0 and traj.tokens_T[0] == tok.bos_token_id
    segs = runs(mask)
    masked = [s for s in segs if s[2] == 0]
    generated = [s for s in segs if s[2] == 1]
    assert len(generated) == len(transcript), "one trained run per turn"
    # masked runs: the first observation (with <bos>), then each later observation
    for k, (a, b, _) in enumerate(masked):
        ids = traj.tokens_T[a:b].tolist()
        if k == 0:
            assert ids == tok.encode(transcript[0][0], add_special_tokens=True)
        else:
            assert ids == tok.encode(transcript[k][0], add_special_tokens=False)
    for k, (a, b, _) in enumerate(generated):
        text = tok.decode(traj.tokens_T[a:b].tolist(), skip_special_tokens=True, clean_up_tokenization_spaces=False)
        assert text == transcript[k][1]
    off = mask == 0
    assert np.all(traj.sampler_logprobs_T[off] == 0.0)
    on = traj.sampler_logprobs_T[mask == 1]
    assert np.all(np.isfinite(on)) and np.all(on <= 0.0)


def replay_rewards(make_env: Any, seed: int, actions: list[str]) -> list[float]:
    """Oracle: the per-turn rewards a fresh env gives for the same actions."""
    env = make_env()
    env.reset(seed=seed)
    out = []
    for a in actions:
        _, r, term, trunc, _ = env.step(a)
        out.append(float(r))
        if term or trunc:
            break
    return out


def assert_same_trajectories(a: RolloutResult, b: RolloutResult) -> None:
    assert len(a.episodes) == len(b.episodes)
    for ea, eb in zip(a.episodes, b.episodes, strict=True):
        assert (ea.error, ea.turns, ea.reward) == (eb.error, eb.turns, eb.reward)
        if ea.trajectory is None:
            assert eb.trajectory is None
            continue
        assert eb.trajectory is not None
        np.testing.assert_array_equal(ea.trajectory.tokens_T, eb.trajectory.tokens_T)
        np.testing.assert_array_equal(ea.trajectory.loss_mask_T, eb.trajectory.loss_mask_T)
        np.testing.assert_array_equal(ea.trajectory.sampler_logprobs_T, eb.trajectory.sampler_logprobs_T)
        assert ea.trajectory.turn_rewards == eb.trajectory.turn_rewards


def make(env_id: str, **kwargs: Any) -> Any:
    return lambda: tinker_core.make_env(env_id, **kwargs)


def calculator_factory() -> Any:
    pytest.importorskip("tinker_env_math", reason="math/calculator-v0 comes from tinker-env-math")
    return make("math/calculator-v0", digits=1, num_terms=2, max_turns=3)


# ---------------------------------------------------------------------------------------------
# fixtures
# ---------------------------------------------------------------------------------------------
def countdown_episode(tok: Any, start: int) -> Trajectory:
    """A perfect countdown episode built through the FSM (the SFT target)."""
    fsm = TurnFSM()
    fsm.append(tok.encode(f"Count down from {start}.\n{start}\n"))
    for k in range(start - 1, -1, -1):
        fsm.transition(TurnState.GENERATING)
        ids = tok.encode(f"{k}\n", add_special_tokens=False)
        fsm.append(ids, logprobs=[0.0] * len(ids))
        fsm.transition(TurnState.INTERACTING)
        fsm.end_turn(1.0)
        if k:
            fsm.append(tok.encode(f"{k}\n", add_special_tokens=False))
    fsm.transition(TurnState.TERMINATED)
    return fsm.to_trajectory()


@pytest.fixture(scope="module")
def countdown_policy(tiny_dir: Any) -> PolicyModel:
    """The tiny model after 80 SFT steps on perfect countdowns from 1..5 (it then counts down)."""
    from tinker_algos.model.device import seed_everything

    seed_everything(0)
    policy = PolicyModel.load(tiny_dir, device="cpu", precision="fp32")
    tok = policy.tokenizer
    batch = Batch.from_trajectories([countdown_episode(tok, n) for n in range(1, 6)], pad_token_id=policy.pad_token_id)
    trainer = Trainer(policy, TrainerConfig(lr=3e-3))
    for _ in range(80):
        trainer.forward_backward(batch, "cross_entropy")
        trainer.optim_step()
    return policy


class FaultyEnv(TextEnv):
    """``Say hi:``; ``step`` raises for ``fail_seeds`` and blocks (until ``release``) for ``hang_seeds``."""

    env_spec = EnvSpec(id="algostest/faulty-v0", description="a test env that fails on purpose", max_turns=1)

    def __init__(self, fail_seeds: tuple[int, ...] = (), hang_seeds: tuple[int, ...] = (), release: Any = None) -> None:
        self.fail_seeds = set(fail_seeds)
        self.hang_seeds = set(hang_seeds)
        self.release = release
        self.seed: int | None = None

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[str, dict[str, Any]]:
        super().reset(seed=seed)
        self.seed = seed
        return "Say hi:\n", {}

    def step(self, action: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        if self.seed in self.fail_seeds:
            raise RuntimeError(f"faulty env: seed {self.seed} always fails")
        if self.seed in self.hang_seeds:
            self.release.wait(60)
        return "", 1.0, True, False, {}


class _FaultyPlugin:
    @hookimpl
    def opentinker_register_envs(self, register: Any) -> None:
        register(FaultyEnv.env_spec, FaultyEnv)


@pytest.fixture
def faulty_env() -> Iterator[threading.Event]:
    """Registers ``algostest/faulty-v0`` in-process; yields the event that frees hung steps."""
    if "algostest/faulty-v0" not in tinker_core.registry.get_registry("envs"):
        tinker_core.registry.register_plugin(_FaultyPlugin(), name="algostest-faulty")
    release = threading.Event()
    yield release
    release.set()


# ---------------------------------------------------------------------------------------------
# masks through the FSM
# ---------------------------------------------------------------------------------------------
def test_single_turn_rollout_masks_and_rewards(policy: PolicyModel) -> None:
    factory = make("echo/echo-v0")
    seeds = list(range(6))
    result = rollout(policy, factory, seeds, SamplingParams(max_new_tokens=6, stop=("\n",), seed=0))
    assert not result.errors and len(result.trajectories) == 6
    for seed, ep in zip(seeds, result.episodes, strict=True):
        assert ep.trajectory is not None and ep.turns == 1 and len(ep.transcript) == 1
        check_turn_structure(policy.tokenizer, ep.trajectory, ep.transcript)
        assert ep.trajectory.turn_rewards == replay_rewards(factory, seed, [ep.transcript[0][1]])
        assert ep.trajectory.group_id == seed  # default group ids: the episode index
    assert result.metrics()["rollout/episodes"] == 6.0


def test_multi_turn_countdown_masks_and_per_turn_rewards(countdown_policy: PolicyModel) -> None:
    factory = make("echo/countdown-v0")
    seeds = list(range(6))
    result = rollout(countdown_policy, factory, seeds, SamplingParams(max_new_tokens=4, temperature=0.0, stop=("\n",)))
    assert not result.errors
    for seed, ep in zip(seeds, result.episodes, strict=True):
        start = factory().reset(seed=seed)[1]["start"]
        assert ep.trajectory is not None
        # the warm-started policy counts all the way down: one rewarded turn per number
        assert ep.turns == start and ep.trajectory.turn_rewards == [1.0] * start
        assert ep.success and not ep.truncated
        check_turn_structure(countdown_policy.tokenizer, ep.trajectory, ep.transcript)
        actions = [a for _, a in ep.transcript]
        assert ep.trajectory.turn_rewards == replay_rewards(factory, seed, actions)
    assert max(ep.turns for ep in result.episodes) >= 3


def test_multi_turn_calculator_masks(policy: PolicyModel) -> None:
    factory = calculator_factory()
    seeds = list(range(5))
    result = rollout(policy, factory, seeds, SamplingParams(max_new_tokens=8, stop=("\n",), seed=1))
    assert not result.errors
    for seed, ep in zip(seeds, result.episodes, strict=True):
        assert ep.trajectory is not None
        check_turn_structure(policy.tokenizer, ep.trajectory, ep.transcript)
        assert ep.trajectory.turn_rewards == replay_rewards(factory, seed, [a for _, a in ep.transcript])
    # an untrained policy rarely answers: most episodes use every turn (tool errors in between)
    assert max(ep.turns for ep in result.episodes) == 3


# ---------------------------------------------------------------------------------------------
# the key property: no gradient reaches the logits at prompt and environment positions
# ---------------------------------------------------------------------------------------------
def test_policy_gradient_is_exactly_zero_at_prompt_and_env_positions(countdown_policy: PolicyModel, tiny_dir: Any) -> None:
    results = [
        rollout(
            countdown_policy, make("echo/countdown-v0"), [0, 1, 2],
            SamplingParams(max_new_tokens=4, temperature=1.0, stop=("\n",), seed=3),
        )
    ]
    try:
        calc = calculator_factory()
    except pytest.skip.Exception:
        pass
    else:
        results.append(rollout(countdown_policy, calc, [0, 1], SamplingParams(max_new_tokens=6, stop=("\n",), seed=4)))
    episodes = [ep for r in results for ep in r.episodes if ep.trajectory is not None]
    trajs = [ep.trajectory for ep in episodes]
    for ep in episodes:  # the masks are those of the transcripts (observations off, actions on)
        check_turn_structure(countdown_policy.tokenizer, ep.trajectory, ep.transcript)
    assert any(ep.turns >= 2 for ep in episodes), "needs a multi-turn episode"
    batch = Batch.from_trajectories(trajs, pad_token_id=countdown_policy.pad_token_id)
    B, T = batch.shape
    # non-zero advantages everywhere, so only the mask can zero the gradient
    adv_B_T = np.random.default_rng(0).normal(1.0, 0.5, size=(B, T)).astype(np.float32)

    captured: list[torch.Tensor] = []

    def keep_grad(_module: Any, _inputs: Any, output: torch.Tensor) -> None:
        if output.requires_grad:
            output.register_hook(lambda g: captured.append(g.detach().clone()))

    # the full-logits pass: the head's output covers every position, so the mask is what zeroes them
    trainer = Trainer(countdown_policy, TrainerConfig(lr=1e-3, chunked_logprobs=False))
    handle = countdown_policy.base_model.lm_head.register_forward_hook(keep_grad)
    try:
        trainer.forward_backward(batch, "importance_sampling", agg="token-sum", advantages_B_T=adv_B_T)
    finally:
        handle.remove()
    assert len(captured) == 1
    grad_B_T_V = captured[0]
    assert grad_B_T_V.shape[:2] == (B, T)
    # logits at position t predict token t + 1: they carry gradient iff token t + 1 was generated
    trained_next_B_T = np.zeros((B, T), dtype=bool)
    for i, t in enumerate(trajs):
        trained_next_B_T[i, : len(t) - 1] = t.loss_mask_T[1:] > 0
    per_pos_B_T = grad_B_T_V.abs().amax(-1).numpy()
    assert np.all(per_pos_B_T[~trained_next_B_T] == 0.0), "prompt/env/pad positions must get exactly 0"
    assert np.all(per_pos_B_T[trained_next_B_T] > 0.0), "every generated position gets a gradient"
    # and there are plenty of both kinds of position, environment tokens included
    env_positions = 0
    for t in trajs:
        for a, b, v in runs(t.loss_mask_T)[1:]:
            if v == 0:
                env_positions += b - a
    assert env_positions > 0 and trained_next_B_T.sum() > 0
    # the head route (the default): the head runs at the trained positions only, each with a gradient
    captured.clear()
    trainer.zero_grad()
    chunked = Trainer(countdown_policy, TrainerConfig(lr=1e-3))
    handle = countdown_policy.base_model.lm_head.register_forward_hook(keep_grad)
    try:
        chunked.forward_backward(batch, "importance_sampling", agg="token-sum", advantages_B_T=adv_B_T)
    finally:
        handle.remove()
    rows_N_V = torch.cat([g.reshape(-1, g.shape[-1]) for g in captured])
    assert rows_N_V.shape[0] == trained_next_B_T.sum() and bool((rows_N_V.abs().amax(-1) > 0).all())


# ---------------------------------------------------------------------------------------------
# errors: counted per reason, fatal above max_error_rate
# ---------------------------------------------------------------------------------------------
def test_env_errors_and_timeouts_are_counted_not_fatal(policy: PolicyModel, faulty_env: threading.Event) -> None:
    factory = make("algostest/faulty-v0", fail_seeds=(0, 5), hang_seeds=(3,), release=faulty_env)
    params = SamplingParams(max_new_tokens=3, stop=("\n",), seed=0)
    result = rollout(policy, factory, list(range(10)), params, turn_timeout_s=0.5, max_error_rate=0.3)
    assert result.errors == Counter({"env_error": 2, "env_timeout": 1})
    failed = {i: ep.error for i, ep in enumerate(result.episodes) if ep.error}
    assert failed == {0: "env_error", 5: "env_error", 3: "env_timeout"}
    assert all(ep.trajectory is None for ep in result.episodes if ep.error)
    assert len(result.trajectories) == 7  # failed episodes are left out of training
    assert [len(g) for g in result.groups] == [0 if i in failed else 1 for i in range(10)]  # ...and out of their groups
    assert result.batch().group_sizes_G.tolist() == [1] * 7  # empty groups do not reach the estimator
    m = result.metrics()
    assert m["rollout/errors/env_error"] == 2.0 and m["rollout/errors/env_timeout"] == 1.0
    assert m["rollout/error_rate"] == pytest.approx(0.3)
    assert m["env/reward_mean"] == 1.0  # the mean is over the episodes that finished


def test_error_rate_above_the_limit_is_fatal(policy: PolicyModel, faulty_env: threading.Event) -> None:
    factory = make("algostest/faulty-v0", fail_seeds=(0, 5), hang_seeds=(3,), release=faulty_env)
    params = SamplingParams(max_new_tokens=3, stop=("\n",), seed=0)
    with pytest.raises(RolloutError, match="3 of 10 episodes failed.*max_error_rate=0.2"):
        rollout(policy, factory, list(range(10)), params, turn_timeout_s=0.5, max_error_rate=0.2)


# ---------------------------------------------------------------------------------------------
# determinism
# ---------------------------------------------------------------------------------------------
def test_same_seeds_give_identical_trajectories(policy: PolicyModel) -> None:
    factory = calculator_factory()
    seeds = [7, 8, 9]
    params = SamplingParams(max_new_tokens=6, stop=("\n",), seed=11)
    a = rollout(policy, factory, seeds, params, group_size=2)
    b = rollout(policy, factory, seeds, params, group_size=2)
    assert_same_trajectories(a, b)
    assert [t.group_id for t in a.trajectories] == [0, 0, 1, 1, 2, 2]
    assert [[t.group_id for t in g] for g in a.groups] == [[0, 0], [1, 1], [2, 2]]
    # the same task (seed 7) twice in one batch, sampled differently
    assert a.episodes[0].transcript[0][0] == a.episodes[1].transcript[0][0]
    c = rollout(policy, factory, seeds, SamplingParams(max_new_tokens=6, stop=("\n",), seed=12), group_size=2)
    assert any(
        not np.array_equal(x.tokens_T, y.tokens_T) for x, y in zip(a.trajectories, c.trajectories, strict=True)
    ), "another sampling seed gives other samples"
