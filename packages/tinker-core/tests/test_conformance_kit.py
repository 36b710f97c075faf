"""The conformance kit (tinker_core.testing): real plugins pass, each kind of broken plugin fails
with a message naming the plugin, the check and the fix."""

from __future__ import annotations

import importlib.util
import pickle
import random
import subprocess
import sys
import types
from typing import Any

import gymnasium as gym
import numpy as np
import pytest

import tinker_core
import tinker_core.registry
from tinker_core import EnvSpec, MultiAgentTextEnv, TextEnv, hookimpl
from tinker_core.contracts import AdvantageInputs, AdvantageOutputs, LossInputs, LossOutputs
from tinker_core.testing import (
    ConformanceError,
    ConformanceWarning,
    TorchNotInstalledError,
    check_advantage_estimator,
    check_all_registered,
    check_env,
    check_loss,
    check_multi_agent_env,
    check_optimizer,
    registered_checks,
)

pytest_plugins = ["pytester"]

HAVE_ECHO = importlib.util.find_spec("tinker_env_echo") is not None
needs_echo = pytest.mark.skipif(not HAVE_ECHO, reason="tinker-env-echo not installed: the echo plugin's envs are the real-plugin fixtures")
ECHO_IDS = ["echo/echo-v0", "echo/countdown-v0", "echo/call-response-v0"]


def torch_or_skip() -> Any:
    return pytest.importorskip("torch", reason="torch not installed: check_loss / check_optimizer need it (install tinker-algos)")


def fails(check: str, match: str | None = None):
    """pytest.raises(ConformanceError) that also checks the failed check's name."""

    class _Ctx:
        def __enter__(self):
            self._cm = pytest.raises(ConformanceError, match=match)
            self.info = self._cm.__enter__()
            return self.info

        def __exit__(self, *exc):
            handled = self._cm.__exit__(*exc)
            err = self.info.value
            assert err.check == check, f"expected check {check!r}, got {err.check!r}: {err}"
            assert "fix:" in str(err) or not err.fix
            return handled

    return _Ctx()


@pytest.fixture
def echo_only(monkeypatch):
    if not HAVE_ECHO:
        pytest.skip("tinker-env-echo not installed: the echo plugin's envs are the real-plugin fixtures")
    monkeypatch.setenv("OPENTINKER_LOAD_PLUGINS", "tinker-env-echo")  # ignore other installed plugins


# ---- good envs, written here so the positive cases run with tinker-core alone --------------------
GUESS_SPEC = EnvSpec(id="kit/guess-v0", description="Guess a digit in three tries.", max_turns=3,
                     reward_range=(0.0, 1.0), observation_type="chat")


class GuessEnv(TextEnv):
    """Chat observations, several turns, a clear error when stepped after the end."""

    env_spec = GUESS_SPEC

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.secret = int(self.np_random.integers(10))
        self.turns = 0
        self.over = False
        return [{"role": "user", "content": "Guess a digit."}], {"tries": 3}

    def step(self, action):
        if self.over:
            raise RuntimeError("GuessEnv: the episode is over; call reset()")
        self.turns += 1
        hit = action.strip() == str(self.secret)
        truncated = not hit and self.turns >= self.env_spec.max_turns
        self.over = hit or truncated
        hint = "higher" if action.strip().isdigit() and int(action.strip()) < self.secret else "lower"
        return [{"role": "user", "content": "Right." if hit else hint}], float(hit), hit, truncated, {"turn": self.turns}


DUEL_SPEC = EnvSpec(id="kit/duel-v0", max_turns=4, reward_range=(-1.5, 1.5), roles=("a", "b"))


class DuelEnv(MultiAgentTextEnv):
    """Two roles say numbers in turn; the bigger total after two rounds wins."""

    env_spec = DUEL_SPEC

    def __init__(self):
        self.possible_agents = list(DUEL_SPEC.roles)

    def reset(self, seed=None, options=None):
        super().reset(seed=seed, options=options)
        self.agent_selection = "a" if self.np_random.integers(2) == 0 else "b"
        self.totals = {"a": 0, "b": 0}
        self.steps = 0

    def observe(self, agent):
        return f"You are {agent}; totals {self.totals}; your turn: {agent == self.agent_selection}\n"

    def step(self, action):
        if self.done:
            return
        me = self.agent_selection
        self.totals[me] += int(action) if action.strip().isdigit() and len(action.strip()) == 1 else 0
        self.steps += 1
        self.rewards = {r: 0.0 for r in self.possible_agents}
        if self.steps >= self.env_spec.max_turns:
            a, b = self.totals["a"], self.totals["b"]
            win = 0.0 if a == b else (1.0 if a > b else -1.0)
            self.rewards = {"a": win, "b": -win}
            self.truncations = {r: True for r in self.possible_agents}
        self.rewards[me] -= 0.1  # a cost per move
        self.agent_selection = "b" if me == "a" else "a"
        self._accumulate_rewards()


# ---- real plugins pass --------------------------------------------------------------------------
@pytest.mark.parametrize("env_id", ECHO_IDS)
def test_the_echo_plugin_envs_pass_by_registered_id(echo_only, env_id):
    spec = tinker_core.registry.env_spec(env_id)
    (check_multi_agent_env if spec.is_multi_agent else check_env)(env_id)


@needs_echo
def test_envs_pass_as_instance_class_or_factory_and_with_given_actions():
    from tinker_env_echo import CallResponseEnv, CountdownEnv, EchoEnv

    check_env(EchoEnv())
    check_env(CountdownEnv)
    check_env(lambda: CountdownEnv(max_start=3), seeds=(5,))
    check_multi_agent_env(CallResponseEnv)

    def count_down(obs, info):  # a correct policy drives countdown to its natural end
        return str(int(obs.strip().splitlines()[-1]) - 1)

    check_env(CountdownEnv, actions=count_down)
    check_env(CountdownEnv, actions=["3", "2", "1", "0"])
    check_multi_agent_env(CallResponseEnv, actions=["apple"])


def test_good_local_envs_pass_and_a_clear_error_after_the_end_is_accepted():
    check_env(GuessEnv)
    check_env(GuessEnv(), actions=[str(d) for d in range(10)])
    check_multi_agent_env(DuelEnv, seeds=(0, 1, 2, 3))


def test_wrong_check_for_the_env_kind_says_which_to_use():
    with fails("type", "check_multi_agent_env"):
        check_env(DuelEnv)
    with fails("type", "check_env instead"):
        check_multi_agent_env(GuessEnv)


@needs_echo
def test_unknown_env_id_gets_did_you_mean(echo_only):
    with fails("registered", r"did you mean 'echo/echo-v0'"):
        check_env("echo/ecoh-v0")


# ---- broken single-agent envs -------------------------------------------------------------------
def make_spec(**kw) -> EnvSpec:
    return EnvSpec(**{"id": "broken/env-v0", "max_turns": 3, "reward_range": (0.0, 1.0), **kw})


class Base(TextEnv):
    env_spec = make_spec()

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        return "go", {}

    def step(self, action):
        self.t += 1
        return "", 0.0, self.t >= 1, False, {}


class NonDeterministic(Base):
    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        return f"target {random.random()}", {}  # global RNG: not seeded by reset(seed)


class RaisesOnGarbage(Base):
    def step(self, action):
        return "", float(int(action) == 3), True, False, {}


class NeverEnds(Base):
    env_spec = make_spec(max_turns=5)

    def step(self, action):
        return "again", 0.0, False, False, {}


class RewardOutOfRange(Base):
    def step(self, action):
        return "", 2.0, True, False, {}


class NanReward(Base):
    def step(self, action):
        return "", float("nan"), True, False, {}


class BoolReward(Base):
    def step(self, action):
        return "", action == "0", True, False, {}


class NumpyInInfo(Base):
    def step(self, action):
        return "", 0.0, True, False, {"length": np.int64(len(action))}


class ResetReturnsObsOnly(Base):
    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        return "go"


class LeaksStateAcrossEpisodes(Base):
    episodes = 0

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.episodes += 1
        return f"episode {self.episodes}", {}


class KeepsGoingAfterEnd(Base):
    env_spec = make_spec(max_turns=2)

    def step(self, action):
        self.t += 1
        return "", 0.0, self.t == 2, False, {}  # only step 2 is terminal; step 3 plays on


class SilentErrorAfterEnd(Base):
    def step(self, action):
        if self.t >= 1:
            raise RuntimeError()
        return super().step(action)


class TupleMetadata(Base):
    env_spec = make_spec(metadata={"sizes": (1, 2)})  # JSON gives back a list


class ChatSpecTextObs(Base):
    env_spec = make_spec(observation_type="chat")


class NotATextEnv(gym.Env):
    env_spec = make_spec()


class NoSeedInReset(Base):
    def reset(self):
        return "go", {}


@pytest.mark.parametrize(
    "env_cls, check, match",
    [
        (NonDeterministic, "determinism", r"reset\(seed=0\) gave different observations on two fresh envs"),
        (RaisesOnGarbage, "robustness", r"step\(''\) raised ValueError"),
        (NeverEnds, "episode-length", r"neither terminated nor truncated after 5 steps"),
        (RewardOutOfRange, "step", r"reward 2\.0 is outside env_spec.reward_range \(0\.0, 1\.0\)"),
        (NanReward, "step", r"the reward is nan"),
        (BoolReward, "step", r"the reward is bool"),
        (NumpyInInfo, "info-json", r"info\['length'\] holds a numpy.int64.*\.item\(\)"),
        (ResetReturnsObsOnly, "reset", r"not a tuple \(observation, info\)"),
        (LeaksStateAcrossEpisodes, "reset-state", r"the same env before and after other episodes"),
        (KeepsGoingAfterEnd, "step-after-end", r"silently went on"),
        (SilentErrorAfterEnd, "step-after-end", r"raised RuntimeError without a message"),
        (TupleMetadata, "env_spec", r"from_json\(spec.to_json\(\)\) != spec"),
        (ChatSpecTextObs, "observation", r"observation_type is 'chat'"),
        (NotATextEnv, "type", r"not a tinker_core.env.TextEnv"),
        (NoSeedInReset, "reset", r"does not accept seed and options"),
    ],
)
def test_broken_envs_fail_naming_the_problem(env_cls, check, match):
    with fails(check, match) as info:
        check_env(env_cls)
    if isinstance(getattr(env_cls, "env_spec", None), EnvSpec) and env_cls is not TupleMetadata:
        assert "broken/env-v0" in str(info.value)


def test_non_determinism_is_found_with_an_instance_too():
    with fails("determinism"):
        check_env(NonDeterministic())


def test_long_episodes_beyond_max_steps_warn_that_the_end_was_not_verified():
    class Long(NeverEnds):
        env_spec = make_spec(max_turns=1000)

    with pytest.warns(ConformanceWarning, match="max_turns=1000 exceeds max_steps=8"):
        check_env(Long, max_steps=8, seeds=(0,))


def test_bad_arguments_are_type_errors():
    with pytest.raises(TypeError, match="seeds"):
        check_env(GuessEnv, seeds=())
    with pytest.raises(ValueError, match="max_steps"):
        check_env(GuessEnv, max_steps=0)
    with pytest.raises(TypeError, match="actions"):
        check_env(GuessEnv, actions=[1, 2])


# ---- broken multi-agent envs --------------------------------------------------------------------
class DuelNeverEnds(DuelEnv):
    def step(self, action):  # illegal moves are ignored and nobody ever finishes
        self.rewards = {r: 0.0 for r in self.possible_agents}
        if action.strip().isdigit():
            self.agent_selection = "b" if self.agent_selection == "a" else "a"
        self._accumulate_rewards()


class DuelRolesMismatch(DuelEnv):
    def __init__(self):
        self.possible_agents = ["b", "a"]


class DuelForgetsToAccumulate(DuelEnv):
    def _accumulate_rewards(self):
        pass


class DuelNonDeterministic(DuelEnv):
    def reset(self, seed=None, options=None):
        super().reset(seed=seed, options=options)
        self.agent_selection = random.choice(["a", "b"])


class DuelRaisesOnGarbage(DuelEnv):
    def step(self, action):
        int(action)
        super().step(action)


class DuelDropsARole(DuelEnv):
    def step(self, action):
        super().step(action)
        self.rewards = {"a": self.rewards["a"]}


class DuelBadSelection(DuelEnv):
    def step(self, action):
        super().step(action)
        self.agent_selection = "nobody"


class DuelLiveAgainAfterEnd(DuelEnv):
    def step(self, action):
        if self.done:  # starts playing again
            self.truncations = {r: False for r in self.possible_agents}
            return
        super().step(action)


class DuelSilentErrorAfterEnd(DuelEnv):
    def step(self, action):
        if self.done:
            raise RuntimeError()
        super().step(action)


@pytest.mark.parametrize(
    "env_cls, check, match",
    [
        (DuelNeverEnds, "episode-length", r"not done after 4 steps"),
        (DuelRolesMismatch, "roles", r"possible_agents is \['b', 'a'\] but env_spec.roles is \('a', 'b'\)"),
        (DuelForgetsToAccumulate, "cumulative-rewards", r"_accumulate_rewards"),
        (DuelNonDeterministic, "determinism", r"two fresh envs"),
        (DuelRaisesOnGarbage, "robustness", r"raised ValueError"),
        (DuelDropsARole, "role-dicts", r"rewards is keyed by \['a'\]"),
        (DuelBadSelection, "turn-order", r"agent_selection is 'nobody'"),
        (DuelLiveAgainAfterEnd, "step-after-end", r"after the episode ended made it live again"),
        (DuelSilentErrorAfterEnd, "step-after-end", r"raised RuntimeError without a message"),
    ],
)
def test_broken_multi_agent_envs_fail_naming_the_problem(env_cls, check, match):
    with fails(check, match) as info:
        check_multi_agent_env(env_cls)
    assert "kit/duel-v0" in str(info.value)


# ---- advantage estimators -----------------------------------------------------------------------
def grpo(inputs: AdvantageInputs, eps: float = 1e-6) -> AdvantageOutputs:
    """Group-normalised advantages, numpy only (docs/reference/oracles.md: unbiased std, size-1 group -> 0)."""
    adv_B = np.zeros_like(inputs.rewards_B)
    for g in np.unique(inputs.group_ids_B):
        idx = np.flatnonzero(inputs.group_ids_B == g)
        if idx.size > 1:
            r = inputs.rewards_B[idx]
            adv_B[idx] = (r - r.mean()) / (r.std(ddof=1) + eps)
    adv_B_T = adv_B[:, None] * inputs.mask_B_T
    return AdvantageOutputs(adv_B_T, adv_B_T.copy(), {"adv_mean": float(adv_B.mean())})


def critic_baseline(inputs: AdvantageInputs) -> AdvantageOutputs:
    """A = return-to-go - V on response tokens (gamma = 1); needs the critic."""
    assert inputs.values_B_T is not None
    returns = np.cumsum(inputs.token_rewards()[:, ::-1], axis=1)[:, ::-1] * inputs.mask_B_T
    return AdvantageOutputs((returns - inputs.values_B_T) * inputs.mask_B_T, returns)


def test_a_numpy_only_correct_estimator_passes_and_matches_the_oracle():
    check_advantage_estimator(grpo)
    out = grpo(AdvantageInputs(rewards_B=[1, 0, 0, 1], mask_B_T=np.ones((4, 1)), group_ids_B=[0] * 4))
    np.testing.assert_allclose(out.advantages_B_T[:, 0], [0.866025, -0.866025, -0.866025, 0.866025], atol=1e-5)


def test_needs_critic_passes_values_and_comes_from_the_registry(monkeypatch):
    check_advantage_estimator(critic_baseline, needs_critic=True)
    with fails("call", "AssertionError"):
        check_advantage_estimator(critic_baseline)  # needs_critic defaults to False: values_B_T=None
    critic_baseline.needs_critic = True  # type: ignore[attr-defined]
    try:
        check_advantage_estimator(critic_baseline)
    finally:
        del critic_baseline.needs_critic  # type: ignore[attr-defined]

    monkeypatch.setenv("OPENTINKER_DISABLE_PLUGIN_AUTOLOAD", "1")
    plugin = types.ModuleType("kit_estimators")

    @hookimpl
    def opentinker_register_advantage_estimators(register):
        register("kit-critic", critic_baseline, needs_critic=True)
        register("kit-grpo", grpo)

    plugin.opentinker_register_advantage_estimators = opentinker_register_advantage_estimators
    tinker_core.registry.register_plugin(plugin, distribution="kit-dist")
    check_advantage_estimator("kit-critic")
    check_advantage_estimator("kit-grpo", config={"eps": 1e-4})
    with fails("registered", r"did you mean 'kit-grpo'"):
        check_advantage_estimator("kit-grp")


def wrong_shape(inputs):
    return AdvantageOutputs(inputs.rewards_B.copy(), inputs.rewards_B.copy())


def nan_on_singletons(inputs):  # unbiased std of a group of one is NaN
    adv = np.zeros_like(inputs.rewards_B)
    for g in np.unique(inputs.group_ids_B):
        idx = inputs.group_ids_B == g
        r = inputs.rewards_B[idx]
        adv[idx] = (r - r.mean()) / (np.std(r, ddof=1) + 1e-6) if r.size > 1 else np.nan
    a = adv[:, None] * inputs.mask_B_T
    return AdvantageOutputs(a, a)


def zero_std_blowup(inputs):  # divides by the batch std, which is 0 when all rewards are equal
    r = inputs.rewards_B
    with np.errstate(invalid="ignore", divide="ignore"):
        a = ((r - r.mean()) / r.std())[:, None] * inputs.mask_B_T
    return AdvantageOutputs(a, a)


def not_masked(inputs):
    a = np.broadcast_to(grpo(inputs).advantages_B_T.max(axis=1, keepdims=True), inputs.mask_B_T.shape).copy()
    return AdvantageOutputs(a, a)


def noisy(inputs):
    out = grpo(inputs)
    out.advantages_B_T = out.advantages_B_T + np.random.default_rng().normal(size=inputs.mask_B_T.shape) * inputs.mask_B_T
    return out


def mutates(inputs):
    inputs.rewards_B -= inputs.rewards_B.mean()
    return grpo(inputs)


def divides_by_padded_length(inputs):
    out = grpo(inputs)
    T = inputs.mask_B_T.shape[1]
    return AdvantageOutputs(out.advantages_B_T / T, out.returns_B_T / T)


def contiguous_groups(inputs):  # assumes each group's rows are adjacent
    adv = np.zeros_like(inputs.rewards_B)
    start = 0
    ids = list(inputs.group_ids_B)
    for i in range(1, len(ids) + 1):
        if i == len(ids) or ids[i] != ids[start]:
            r = inputs.rewards_B[start:i]
            adv[start:i] = r - r.mean()
            start = i
    a = adv[:, None] * inputs.mask_B_T
    return AdvantageOutputs(a, a)


def group_id_as_weight(inputs):
    out = grpo(inputs)
    w = (inputs.group_ids_B.astype(float) % 3 + 1)[:, None]
    return AdvantageOutputs(out.advantages_B_T * w, out.returns_B_T)


def returns_lists(inputs):
    out = grpo(inputs)
    return AdvantageOutputs(out.advantages_B_T.tolist(), out.returns_B_T)


def returns_a_dict(inputs):
    out = grpo(inputs)
    return {"advantages_B_T": out.advantages_B_T, "returns_B_T": out.returns_B_T}


def sizes_as_one_group(inputs):
    """Misreads group_sizes_G: when it is given, treats the whole batch as one group."""
    if inputs.group_sizes_G is None:
        return grpo(inputs)
    return grpo(AdvantageInputs(inputs.rewards_B, inputs.mask_B_T, np.zeros(len(inputs.rewards_B))))


def array_metric(inputs):
    out = grpo(inputs)
    out.metrics = {"mean": out.advantages_B_T.mean(axis=1)}
    return out


@pytest.mark.parametrize(
    "estimator, check, match",
    [
        (wrong_shape, "output", r"advantages_B_T has shape \(7,\), expected \[B, T\] = \(7, 8\)"),
        (nan_on_singletons, "output", r"advantages_B_T is not finite"),
        (zero_std_blowup, "degenerate", r"on all rewards equal: advantages_B_T is not finite"),
        (not_masked, "mask", r"where mask_B_T is 0"),
        (noisy, "determinism", r"two calls on equal inputs differ"),
        (mutates, "purity", r"modified inputs.rewards_B"),
        (divides_by_padded_length, "padding", r"3 extra masked columns changed"),
        (contiguous_groups, "permutation", r"not just permute"),
        (group_id_as_weight, "group-ids", r"renaming the group ids"),
        (sizes_as_one_group, "group-sizes", r"the same groups given as group_sizes_G changed the result"),
        (returns_lists, "output", r"advantages_B_T is list, not a numpy array"),
        (returns_a_dict, "output", r"returned dict, not AdvantageOutputs"),
        (array_metric, "output", r"metrics\['mean'\] is ndarray"),
    ],
)
def test_broken_estimators_fail_naming_the_problem(estimator, check, match):
    with fails(check, match) as info:
        check_advantage_estimator(estimator)
    assert estimator.__name__ in str(info.value)


# ---- losses (torch) -----------------------------------------------------------------------------
def ppo_like(inputs: LossInputs, clip: float = 0.2) -> LossOutputs:
    import torch

    ratio = torch.exp(torch.clamp(inputs.logprobs_B_T - inputs.sampling_logprobs_B_T, -20, 20))
    a = inputs.advantages_B_T
    loss = torch.maximum(-a * ratio, -a * torch.clamp(ratio, 1 - clip, 1 + clip)) * inputs.mask_B_T
    return LossOutputs(loss, {"ratio_mean": float(ratio.detach().mean())})


def seq_logp(logp, mask):
    return (logp * mask).sum(-1)


def dpo(inputs: LossInputs, beta: float = 0.1) -> LossOutputs:
    import torch

    m = inputs.mask_B_T
    z = seq_logp(inputs.logprobs_B_T, m) - seq_logp(inputs.ref_logprobs_B_T, m)
    pair_loss = -torch.nn.functional.logsigmoid(beta * (z[0::2] - z[1::2]))
    per_row = pair_loss.repeat_interleave(2)
    loss = per_row[:, None] * m / m.sum(-1, keepdim=True).clamp(min=1)
    return LossOutputs(loss, {"dpo": float(pair_loss.detach().mean())})


def value_loss(inputs: LossInputs, clip: float = 0.2) -> LossOutputs:
    import torch

    v, old, ret = inputs.values_B_T, inputs.old_values_B_T, inputs.returns_B_T
    clipped = old + torch.clamp(v - old, -clip, clip)
    return LossOutputs(0.5 * torch.maximum((v - ret) ** 2, (clipped - ret) ** 2) * inputs.mask_B_T)


def k3(inputs: LossInputs) -> LossOutputs:
    import torch

    x = inputs.ref_logprobs_B_T - inputs.logprobs_B_T
    return LossOutputs((torch.exp(x) - x - 1) * inputs.mask_B_T)


def cross_entropy(inputs: LossInputs) -> LossOutputs:
    return LossOutputs(-inputs.weights_B_T * inputs.logprobs_B_T)


@pytest.mark.parametrize("loss, kind", [(ppo_like, "policy"), (dpo, "preference"), (value_loss, "value"),
                                        (k3, "kl"), (cross_entropy, "supervised")])
def test_correct_losses_of_every_kind_pass(loss, kind):
    torch_or_skip()
    check_loss(loss, kind=kind)


def test_loss_kind_comes_from_the_registry(monkeypatch):
    torch_or_skip()
    monkeypatch.setenv("OPENTINKER_DISABLE_PLUGIN_AUTOLOAD", "1")
    plugin = types.ModuleType("kit_losses")

    @hookimpl
    def opentinker_register_losses(register):
        register("kit-dpo", dpo, kind="preference")

    plugin.opentinker_register_losses = opentinker_register_losses
    tinker_core.registry.register_plugin(plugin, distribution="kit-dist")
    check_loss("kit-dpo", config={"beta": 0.5})
    with fails("call"):  # as a policy loss it gets no ref_logprobs
        check_loss(dpo)


def per_sequence(inputs):
    return LossOutputs(-(inputs.logprobs_B_T * inputs.mask_B_T).sum(-1))


def detached(inputs):
    return LossOutputs(-inputs.advantages_B_T * inputs.logprobs_B_T.detach())


def dpo_without_mask(inputs, beta: float = 0.1):
    import torch

    z = inputs.logprobs_B_T.sum(-1) - inputs.ref_logprobs_B_T.sum(-1)  # sums prompt and padding too
    pair = -torch.nn.functional.logsigmoid(beta * (z[0::2] - z[1::2]))
    return LossOutputs(pair.repeat_interleave(2)[:, None] * inputs.mask_B_T)


def dpo_halves(inputs, beta: float = 0.1):  # pairs the first half with the second half
    import torch

    m = inputs.mask_B_T
    z = seq_logp(inputs.logprobs_B_T, m) - seq_logp(inputs.ref_logprobs_B_T, m)
    B = z.shape[0]
    pair = -torch.nn.functional.logsigmoid(beta * (z[: B // 2] - z[B // 2:]))
    return LossOutputs(pair.repeat(2)[:, None] * m)


def log_of_mask(inputs):
    import torch

    return LossOutputs(-inputs.advantages_B_T * inputs.logprobs_B_T + torch.log(inputs.mask_B_T))


def tensor_metric(inputs):
    out = ppo_like(inputs)
    out.metrics = {"loss": out.loss_B_T.mean()}
    return out


def kl_with_unmasked_baseline(inputs):
    x = inputs.ref_logprobs_B_T - inputs.logprobs_B_T
    return LossOutputs((-x + inputs.ref_logprobs_B_T.mean()) * inputs.mask_B_T)


def in_place(inputs):
    inputs.advantages_B_T.mul_(2)
    return ppo_like(inputs)


def sampled_noise(inputs):
    import torch

    return LossOutputs(-inputs.advantages_B_T * inputs.logprobs_B_T * (1 + 0.1 * torch.rand(inputs.mask_B_T.shape)))


@pytest.mark.parametrize(
    "loss, kind, check, match",
    [
        (per_sequence, "policy", "output", r"loss_B_T has shape \(4,\), expected \[B, T\] = \(4, 8\)"),
        (detached, "policy", "differentiable", r"does not require grad"),
        (dpo_without_mask, "preference", "mask-gradient", r"where mask_B_T is 0"),
        (dpo_halves, "preference", "preference-order", r"not lower than with the pairs swapped"),
        (log_of_mask, "policy", "output", r"loss_B_T is -inf"),
        (tensor_metric, "policy", "output", r"metrics\['loss'\] is Tensor"),
        (kl_with_unmasked_baseline, "kl", "off-mask", r"changed the loss on the mask"),
        (in_place, "policy", "purity", r"modified inputs.advantages_B_T in place"),
        (sampled_noise, "policy", "determinism", r"different loss_B_T"),
    ],
)
def test_broken_losses_fail_naming_the_problem(loss, kind, check, match):
    torch_or_skip()
    with fails(check, match) as info:
        check_loss(loss, kind=kind)
    assert loss.__name__ in str(info.value) and f"[{kind}]" in str(info.value)


# ---- optimizers (torch) -------------------------------------------------------------------------
def adamw(params, **config):
    import torch

    return torch.optim.AdamW(params, **config)


def sgd_momentum(params, **config):
    import torch

    return torch.optim.SGD(params, momentum=0.9, **config)


def test_correct_optimizers_pass():
    torch_or_skip()
    check_optimizer(adamw)
    check_optimizer(sgd_momentum, config={"lr": 0.02})


def ignores_lr(params, **config):
    import torch

    return torch.optim.SGD(params, lr=0.1)


def ascends(params, **config):
    import torch

    return torch.optim.SGD(params, maximize=True, **config)


def lists_params_twice(params, **config):
    import torch

    n = len(list(params))  # consumes the generator
    assert n >= 0
    return torch.optim.SGD(params, **config)


def always_decays(params, lr, weight_decay=0.0):
    import torch

    return torch.optim.AdamW(params, lr=lr, weight_decay=0.1)


def forgets_momentum(params, **config):
    import torch

    class Forgetful(torch.optim.SGD):
        def state_dict(self):
            sd = super().state_dict()
            sd["state"] = {}
            return sd

    return Forgetful(params, momentum=0.9, **config)


def not_an_optimizer(params, **config):
    return list(params)


@pytest.mark.parametrize(
    "factory, check, match",
    [
        (ignores_lr, "lr", r"config lr=0.0123 but param_groups\[0\]\['lr'\] is 0.1"),
        (ascends, "descent", r"did not lower the loss"),
        (lists_params_twice, "call", r"empty parameter list"),
        (always_decays, "zero-grad", r"all-zero gradients moved the parameters"),
        (forgets_momentum, "state-dict", r"differs from an uninterrupted run"),
        (not_an_optimizer, "type", r"returned list, not a torch.optim.Optimizer"),
    ],
)
def test_broken_optimizers_fail_naming_the_problem(factory, check, match):
    torch_or_skip()
    with fails(check, match) as info:
        check_optimizer(factory)
    assert factory.__name__ in str(info.value)


def test_without_torch_the_torch_checks_say_to_install_tinker_algos_and_the_kit_imports():
    code = (
        "import sys\n"
        "sys.modules['torch'] = None  # as if torch were not installed\n"
        "import tinker_core.testing, tinker_core.testing.pytest_plugin\n"
        "from tinker_core.testing import check_loss, check_optimizer, TorchNotInstalledError\n"
        "for check, target in ((check_loss, lambda inputs: None), (check_optimizer, lambda params: None)):\n"
        "    try:\n"
        "        check(target)\n"
        "    except ImportError as e:\n"
        "        assert isinstance(e, TorchNotInstalledError), type(e)\n"
        "        assert 'tinker-algos' in str(e) and e.check == 'torch', str(e)\n"
        "    else:\n"
        "        raise SystemExit('no error without torch')\n"
        "print('ok')\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr


def test_importing_the_kit_and_its_pytest_plugin_imports_no_torch():
    code = (
        "import sys\n"
        "import tinker_core.testing.pytest_plugin\n"
        "assert 'numpy' not in sys.modules and 'gymnasium' not in sys.modules, 'pytest plugin must stay light'\n"
        "import tinker_core.testing\n"
        "assert 'torch' not in sys.modules\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


# ---- everything registered ----------------------------------------------------------------------
def broken_plugin_module() -> types.ModuleType:
    plugin = types.ModuleType("kit_broken")

    @hookimpl
    def opentinker_register_envs(register):
        register(GUESS_SPEC, GuessEnv)
        register(make_spec(), RaisesOnGarbage)
        register(DUEL_SPEC, DuelNeverEnds)

    @hookimpl
    def opentinker_register_advantage_estimators(register):
        register("kit-grpo", grpo)
        register("kit-noisy", noisy)

    plugin.opentinker_register_envs = opentinker_register_envs
    plugin.opentinker_register_advantage_estimators = opentinker_register_advantage_estimators
    return plugin


def test_check_all_registered_collects_every_failure(monkeypatch):
    monkeypatch.setenv("OPENTINKER_DISABLE_PLUGIN_AUTOLOAD", "1")
    tinker_core.registry.register_plugin(broken_plugin_module(), distribution="kit-dist")
    failures = check_all_registered(raise_on_failure=False)
    assert sorted((e.plugin.split("'")[1], e.check) for e in failures) == [
        ("broken/env-v0", "robustness"),
        ("kit-noisy", "determinism"),
        ("kit/duel-v0", "episode-length"),
    ]
    with pytest.raises(ConformanceError, match=r"3 registered plugin\(s\) failed") as info:
        check_all_registered()
    assert len(info.value.failures) == 3
    assert check_all_registered("advantage-estimator", raise_on_failure=False)[0].check == "determinism"
    assert [name for _, name, _ in registered_checks("envs")] == ["broken/env-v0", "kit/duel-v0", "kit/guess-v0"]
    with pytest.raises(ValueError, match="unknown kind 'widgets'"):
        check_all_registered("widgets")


def test_check_all_registered_passes_over_the_echo_plugin(echo_only):
    assert check_all_registered() == []
    assert check_all_registered("envs") == []


def test_conformance_errors_pickle_with_their_fields():
    err = ConformanceError("it broke", plugin="env 'a/b-v0'", check="determinism", fix="seed it")
    again = pickle.loads(pickle.dumps(err))
    assert (again.plugin, again.check, again.fix, str(again)) == (err.plugin, err.check, err.fix, str(err))
    assert str(err) == "env 'a/b-v0' failed conformance check 'determinism': it broke\n  fix: seed it"
    assert isinstance(err, AssertionError)
    assert issubclass(TorchNotInstalledError, ImportError)


# ---- the pytest plugin --------------------------------------------------------------------------
def test_the_pytest_plugin_provides_the_fixtures_in_a_fresh_run(pytester, monkeypatch):
    monkeypatch.delenv("PYTEST_DISABLE_PLUGIN_AUTOLOAD", raising=False)  # load it via its entry point
    pytester.makepyfile(
        test_plugin_author="""
        import types
        import numpy as np
        from tinker_core import EnvSpec, TextEnv, hookimpl
        from tinker_core.registry import register_plugin
        from tinker_core.contracts import AdvantageOutputs

        class Hello(TextEnv):
            env_spec = EnvSpec(id="author/hello-v0")

            def reset(self, *, seed=None, options=None):
                super().reset(seed=seed)
                return "Say hello.", {}

            def step(self, action):
                return "", float(action == "hello"), True, False, {}

        def centered(inputs):
            a = (inputs.rewards_B - inputs.rewards_B.mean())[:, None] * inputs.mask_B_T
            return AdvantageOutputs(a, a)

        def test_env(opentinker_check_env, opentinker_check_multi_agent_env):
            opentinker_check_env(Hello)
            assert callable(opentinker_check_multi_agent_env)

        def test_estimator(opentinker_check_advantage_estimator):
            opentinker_check_advantage_estimator(centered)

        def test_loss(opentinker_check_loss):
            from tinker_core.contracts import LossOutputs
            opentinker_check_loss(lambda inputs: LossOutputs(-inputs.advantages_B_T * inputs.logprobs_B_T))

        def test_optimizer(opentinker_check_optimizer):
            import torch
            opentinker_check_optimizer(lambda params, **cfg: torch.optim.SGD(params, **cfg))

        def test_registry_adds_a_plugin(monkeypatch, opentinker_registry, opentinker_check_all_registered):
            monkeypatch.setenv("OPENTINKER_DISABLE_PLUGIN_AUTOLOAD", "1")
            mod = types.ModuleType("author_plugin")
            mod.opentinker_register_envs = hookimpl(lambda register: register(Hello.env_spec, Hello))
            register_plugin(mod, distribution="author")
            assert opentinker_registry("envs").names() == ["author/hello-v0"]
            assert opentinker_check_all_registered() == []

        def test_registry_was_reset_after_the_previous_test(monkeypatch, opentinker_registry):
            monkeypatch.setenv("OPENTINKER_DISABLE_PLUGIN_AUTOLOAD", "1")
            assert opentinker_registry("envs").names() == []
        """
    )
    result = pytester.runpytest("-p", "no:cacheprovider", "-q")
    outcomes = result.parseoutcomes()
    has_torch = importlib.util.find_spec("torch") is not None
    assert outcomes.get("failed", 0) == 0, result.stdout.str()
    assert outcomes.get("passed") == (6 if has_torch else 4)

    listing = pytester.runpytest("--fixtures", "-p", "no:cacheprovider")
    listing.stdout.fnmatch_lines([
        "*opentinker_check_env*", "*opentinker_check_multi_agent_env*",
        "*opentinker_check_advantage_estimator*", "*opentinker_check_loss*",
        "*opentinker_check_optimizer*", "*opentinker_registry*",
    ], consecutive=False)


def test_a_failing_check_reads_well_in_a_pytest_report(pytester, monkeypatch):
    monkeypatch.delenv("PYTEST_DISABLE_PLUGIN_AUTOLOAD", raising=False)
    pytester.makepyfile(
        """
        import random
        from tinker_core import EnvSpec, TextEnv

        class Flaky(TextEnv):
            env_spec = EnvSpec(id="author/flaky-v0")

            def reset(self, *, seed=None, options=None):
                super().reset(seed=seed)
                return str(random.random()), {}

            def step(self, action):
                return "", 0.0, True, False, {}

        def test_flaky(opentinker_check_env):
            opentinker_check_env(Flaky)
        """
    )
    result = pytester.runpytest("-p", "no:cacheprovider")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines([
        "*ConformanceError: env 'author/flaky-v0' (Flaky) failed conformance check 'determinism'*",
        "*fix: call super().reset(seed=seed)*",
    ])
