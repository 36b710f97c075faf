"""What the env checks share: how episodes are driven, what is resolved and validated before
any episode, what an env returns, and the determinism and reset-state comparisons.

Which actions and how many steps drive an episode is described in :mod:`tinker_core.testing.envs`.
Every seed plays every script on the env under test and, when a second fresh env can be built,
on that one too (``determinism``); then the first episode is replayed on the env that has
played all the others (``reset-state``), and both envs are closed (``close``).
"""

from __future__ import annotations

import copy
import inspect
import math
import string
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, TypedDict

import numpy as np

from tinker_core.contracts import Action
from tinker_core.env import EnvSpec, MultiAgentTextEnv, TextEnv
from tinker_core.testing._common import (
    Reporter,
    callable_name,
    is_real_number,
    json_problem,
    short,
)
from tinker_core.tools import format_tool_call, parse_tool_calls

DEFAULT_ACTIONS: tuple[str, ...] = (
    "",
    "0",
    "hello",
    ' \n\t{"a": [1, <b>}\\',
    "héllo wörld ✓ 日本語 🙂",
)
"""The fixed actions every env is driven with when ``actions`` is None."""

AFTER_END_ACTIONS = ("", "hello")
"""What is stepped after an episode ended (``step-after-end``)."""
_RANDOM_CHARS = string.printable + "éü日本語🙂\u200b"
_REWARD_TOL = 1e-9

Policy = Callable[[Any, dict[str, Any]], str]
ActionsArg = Sequence[str] | Callable[..., str] | None


class CheckOptions(TypedDict, total=False):
    """The keyword options of :func:`~tinker_core.testing.check_env` and
    :func:`~tinker_core.testing.check_multi_agent_env` (their defaults are :func:`prepare`'s)."""

    seeds: Sequence[int]
    max_steps: int
    actions: ActionsArg


# ---- scripts: how an episode is driven ---------------------------------------------------------
@dataclass(frozen=True)
class Script:
    name: str
    build: Callable[[int], Policy]  # episode seed -> a fresh policy for that episode


def _constant(action: str) -> Script:
    return Script(f"constant action {short(action, 30)}", lambda seed: lambda obs, info: action)


def _cycle(actions: Sequence[str]) -> Script:
    def build(seed: int) -> Policy:
        state = {"i": 0}

        def policy(obs: Any, info: dict[str, Any]) -> str:
            a = actions[state["i"] % len(actions)]
            state["i"] += 1
            return a

        return policy

    return Script(f"the given actions {short(list(actions), 40)}", build)


def _random_strings() -> Script:
    def build(seed: int) -> Policy:
        rng = np.random.default_rng([seed, 0x7E57])

        def policy(obs: Any, info: dict[str, Any]) -> str:
            n = int(rng.integers(0, 48))
            return "".join(_RANDOM_CHARS[int(i)] for i in rng.integers(0, len(_RANDOM_CHARS), n))

        return policy

    return Script("random printable strings", build)


def episode_scripts(actions: ActionsArg) -> list[Script]:
    if actions is None:
        return [*(_constant(a) for a in DEFAULT_ACTIONS), _random_strings()]
    if isinstance(actions, str):
        actions = [actions]
    if callable(actions):
        policy = actions
        return [Script(f"policy {callable_name(policy)}", lambda seed: policy), _random_strings()]
    actions = list(actions)
    bad = [a for a in actions if not isinstance(a, str)]
    if not actions or bad:
        raise TypeError(
            "actions must be None, a non-empty sequence of str, or a callable "
            f"policy(observation, info) -> str; got {short(actions)}"
        )
    return [_cycle(actions), _random_strings()]


def tool_actions(spec: EnvSpec) -> list[str]:
    """For an env that declares tools, the extra fixed actions: a valid call of each tool (its
    required arguments set to ``"1"``), a malformed call and an unknown tool's call."""
    out = []
    for tool in spec.tools:
        fn = tool["function"]
        out.append(format_tool_call(fn["name"], dict.fromkeys(fn.get("parameters", {}).get("required", []), "1")))
    return [*out, "<tool_call>{\"name\": </tool_call>", format_tool_call("no_such_tool", {})]


def as_action(action: str, spec: EnvSpec) -> str:
    """What a rollout passes ``step()``: for an env with tools, an :class:`Action` carrying the parsed calls."""
    if not spec.tools or not isinstance(action, str):
        return action
    parsed = parse_tool_calls(action, spec.tools)
    return Action(action, None, parsed.calls, parsed.errors)


def _check_args(seeds: Sequence[int], max_steps: int) -> list[int]:
    seeds = list(seeds)
    if not seeds or not all(isinstance(s, int | np.integer) and not isinstance(s, bool) for s in seeds):
        raise TypeError(f"seeds must be a non-empty sequence of ints, got {short(seeds)}")
    if not isinstance(max_steps, int) or max_steps < 1:
        raise ValueError(f"max_steps must be an int >= 1, got {max_steps!r}")
    return [int(s) for s in seeds]


# ---- resolving and checking what was passed -------------------------------------------------------
@dataclass
class Target:
    reporter: Reporter
    env: Any
    fresh: Callable[[], Any] | None  # builds another fresh env, when possible
    expected_id: str | None


def _resolve(env: object, *, what: str) -> Target:
    """An id, a factory or an instance -> the env to check plus a way to build a fresh one."""
    if isinstance(env, str):
        from tinker_core.registry import env_spec, make_env

        rep = Reporter(f"{what} {env!r}")
        try:
            env_spec(env)
        except KeyError as e:  # UnknownNameError, with a did-you-mean
            rep.fail("registered", str(e), "install the plugin that registers it (`opentinker "
                     "plugins` lists what is installed) or fix the id", cause=e)
        with rep.guard("make_env", f"make_env({env!r})",
                       "register a factory that builds the env without arguments (defaults for "
                       "every keyword)"):
            first = make_env(env)
        env_id = env
        return Target(rep, first, lambda: make_env(env_id), env_id)
    if isinstance(env, TextEnv | MultiAgentTextEnv) or not callable(env):
        rep = Reporter(_label(env, what))
        try:
            pristine = copy.deepcopy(env)
            fresh: Callable[[], Any] | None = lambda: copy.deepcopy(pristine)  # noqa: E731
        except Exception as e:
            rep.warn("determinism", f"could not deepcopy the env ({type(e).__name__}: {e}); "
                     "pass a factory to compare two fresh envs")
            fresh = None
        return Target(rep, env, fresh, None)
    factory = env
    rep = Reporter(f"{what} factory {callable_name(factory)}")
    with rep.guard("factory", "calling the factory with no arguments",
                   "pass a zero-argument factory, e.g. functools.partial(MyEnv, size=3)"):
        first = factory()
    rep.plugin = _label(first, what)
    return Target(rep, first, factory, None)


def _label(env: object, what: str) -> str:
    spec = getattr(env, "env_spec", None)
    if isinstance(spec, EnvSpec):
        return f"{what} {spec.id!r} ({type(env).__qualname__})"
    return f"{what} {callable_name(type(env))}"


def _check_type(t: Target, expected_cls: type, other_cls: type, other_fn: str) -> None:
    env = t.env
    if isinstance(env, other_cls):
        t.reporter.fail("type", f"is a {other_cls.__name__}, not a {expected_cls.__name__}",
                        f"check it with tinker_core.testing.{other_fn} instead")
    if not isinstance(env, expected_cls):
        t.reporter.fail("type", f"is a {callable_name(type(env))}, not a tinker_core.env.{expected_cls.__name__}",
                        f"subclass tinker_core.env.{expected_cls.__name__}")


def _check_spec(t: Target, *, multi_agent: bool) -> EnvSpec:
    rep = t.reporter
    spec = getattr(t.env, "env_spec", None)
    if not isinstance(spec, EnvSpec):
        rep.fail("env_spec", f"env_spec is {short(spec)}, not an EnvSpec",
                 "set a class attribute env_spec = EnvSpec(id='namespace/name-v0', ...)")
    with rep.guard("env_spec", "the JSON round trip of env_spec",
                   "keep EnvSpec fields (metadata included) plain JSON: str, numbers, lists, dicts"):
        text = spec.to_json()
        back = EnvSpec.from_json(text)
    if back != spec or back.to_json() != text:
        rep.fail("env_spec", f"EnvSpec.from_json(spec.to_json()) != spec: {short(back.to_dict(), 200)} "
                 f"vs {short(spec.to_dict(), 200)}",
                 "use only JSON types in metadata (lists, not tuples; str keys) and finite numbers")
    if t.expected_id is not None and spec.id != t.expected_id:
        rep.fail("env_spec", f"registered as {t.expected_id!r} but env_spec.id is {spec.id!r}",
                 "register the env with the same EnvSpec the env carries")
    if multi_agent and not spec.is_multi_agent:
        rep.fail("env_spec", "a multi-agent env whose env_spec has no roles",
                 "set EnvSpec(roles=(...)) to the env's possible_agents")
    if not multi_agent and spec.is_multi_agent:
        rep.fail("env_spec", f"a single-agent env whose env_spec has roles {spec.roles}",
                 "remove roles from the EnvSpec, or make it a MultiAgentTextEnv")
    return spec


def _check_reset_signature(t: Target) -> None:
    try:
        params = inspect.signature(t.env.reset).parameters
    except (TypeError, ValueError):
        return
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values()):
        return
    missing = [n for n in ("seed", "options") if n not in params]
    if missing:
        t.reporter.fail("reset", f"reset() does not accept {' and '.join(missing)}",
                        "define reset(self, *, seed=None, options=None) and call super().reset(seed=seed)")


def observation_problem(obs: object, spec: EnvSpec, where: str) -> str | None:
    if spec.observation_type == "text":
        if isinstance(obs, str):
            return None
        return f"{where} is {type(obs).__name__} {short(obs)}, but env_spec.observation_type is 'text' (a str)"
    if not isinstance(obs, list):
        return (f"{where} is {type(obs).__name__} {short(obs)}, but env_spec.observation_type is "
                "'chat' (a list of {'role', 'content'} messages)")
    for i, msg in enumerate(obs):
        if not isinstance(msg, dict):
            return f"{where}[{i}] is {type(msg).__name__}, not a {{'role', 'content'}} dict"
        for key in ("role", "content"):
            if not isinstance(msg.get(key), str):
                return f"{where}[{i}][{key!r}] is {short(msg.get(key))}; it must be a str"
        problem = json_problem(msg, f"{where}[{i}]")
        if problem:
            return problem
    return None


def check_reward(rep: Reporter, reward: Any, spec: EnvSpec, where: str) -> float:
    if not is_real_number(reward):
        rep.fail("step", f"{where}: the reward is {type(reward).__name__} {short(reward)}, not a real number",
                 "return float(reward)")
    value = float(reward)
    if not math.isfinite(value):
        rep.fail("step", f"{where}: the reward is {value}", "return a finite reward")
    lo, hi = spec.reward_range
    if not (lo - _REWARD_TOL <= value <= hi + _REWARD_TOL):
        rep.fail("step", f"{where}: the reward {value} is outside env_spec.reward_range {spec.reward_range}",
                 "widen EnvSpec.reward_range or clip the reward")
    return value


def check_info(rep: Reporter, info: object, where: str, check: str) -> None:
    if not isinstance(info, dict):
        rep.fail(check, f"{where}: info is {type(info).__name__}, not a dict",
                 "return a dict (may be empty) as info")
    problem = json_problem(info, f"{where}: info")
    if problem:
        rep.fail("info-json", problem,
                 "keep info values plain JSON (str, int, finite float, bool, None, lists, dicts "
                 "with str keys): envs are served over gRPC as JSON")


# ---- playing and comparing episodes -----------------------------------------------------------
def check_step_after_end(rep: Reporter, env: Any, where: str, still_over: Callable[[Any, str], bool], *,
                         went_on: str, fix: str) -> None:
    """``step-after-end``: step ``env``, whose episode ended, with each of ``AFTER_END_ACTIONS``;
    each step must raise an error that has a message, or return a ``result`` for which
    ``still_over(result, where)`` holds (else: "step(action) after the episode ended {went_on}")."""
    for action in AFTER_END_ACTIONS:
        try:
            result = env.step(action)
        except Exception as e:
            if not str(e).strip():
                rep.fail("step-after-end", f"{where}: step({action!r}) after the episode ended raised "
                         f"{type(e).__name__} without a message",
                         "say why, e.g. raise RuntimeError('episode is over; call reset()')", cause=e)
            continue
        if not still_over(result, f"{where}, after the end"):
            rep.fail("step-after-end", f"{where}: step({action!r}) after the episode ended {went_on}", fix)


@dataclass
class PlayTrace:
    """The trace of one episode the conformance kit played (not an :class:`tinker_core.Episode`: it
    compares envs step by step). ``trace[0]`` is ``("reset", observation)`` (multi-agent:
    ``("reset", observations, agent_selection)``), then one ``(action, observation, reward,
    terminated, truncated)`` per step (multi-agent: per-role tuples, then ``agent_selection``)."""

    trace: list[tuple[Any, ...]]
    ended: bool
    last_action: str


def _compare(rep: Reporter, a: PlayTrace, b: PlayTrace, seed: int, script: Script, *, check: str,
             what: str, fix: str) -> None:
    for i, (x, y) in enumerate(zip(a.trace, b.trace, strict=False)):
        if x == y:
            continue
        if i == 0:
            rep.fail(check, f"reset(seed={seed}) gave different observations on {what}: "
                     f"{short(x[1] if len(x) == 2 else x[1:])} vs {short(y[1] if len(y) == 2 else y[1:])}", fix)
        fields = ("action", "observation", "reward", "terminated", "truncated", "agent_selection")
        diff = next((n for n, u, v in zip(fields, x, y, strict=False) if u != v), "state")
        rep.fail(check, f"with seed {seed} and {script.name}, {what} differ at step {i - 1} in the "
                 f"{diff}: {short(x)} vs {short(y)}", fix)
    if len(a.trace) != len(b.trace):
        rep.fail(check, f"with seed {seed} and {script.name}, {what} ended after "
                 f"{len(a.trace) - 1} and {len(b.trace) - 1} steps", fix)


_DETERMINISM_FIX = ("call super().reset(seed=seed) first in reset() and draw all randomness from "
                    "self.np_random (not random, np.random, time or uuid)")
_RESET_FIX = "re-initialise every per-episode attribute in reset()"


Play = Callable[[Any, int, Script, bool], PlayTrace]
"""``play(env, seed, script, probe_after_end)``: one episode on ``env``, validated as it goes."""


@dataclass
class CheckPlan:
    """An env that passed the checks made before any episode, and how to drive it."""

    target: Target
    spec: EnvSpec
    seeds: list[int]
    scripts: list[Script]
    limit: int  # the most steps driven per episode

    @property
    def reporter(self) -> Reporter:
        return self.target.reporter


def prepare(env: object, *, multi_agent: bool, seeds: Sequence[int] = (0, 1, 2), max_steps: int = 64,
            actions: ActionsArg = None) -> CheckPlan:
    """Check the arguments (:class:`CheckOptions`), resolve ``env`` and run the ``type``,
    ``env_spec`` and ``reset`` signature checks."""
    checked_seeds = _check_args(seeds, max_steps)
    scripts = episode_scripts(actions)
    if multi_agent:
        t = _resolve(env, what="multi-agent env")
        _check_type(t, MultiAgentTextEnv, TextEnv, "check_env")
    else:
        t = _resolve(env, what="env")
        _check_type(t, TextEnv, MultiAgentTextEnv, "check_multi_agent_env")
    spec = _check_spec(t, multi_agent=multi_agent)
    _check_reset_signature(t)
    if actions is None and spec.tools:
        scripts[-1:-1] = [_constant(a) for a in tool_actions(spec)]
    return CheckPlan(t, spec, checked_seeds, scripts, min(spec.max_turns, max_steps))


def play_all(run: CheckPlan, play: Play, *, unfinished: str, unfinished_fix: str) -> None:
    """Play every seed with every script; check ``episode-length``, ``determinism``,
    ``reset-state`` and ``close``.

    ``unfinished`` says how an episode failed to end; it may use ``{limit}`` and ``{max_turns}``.
    """
    t, spec, rep = run.target, run.spec, run.reporter
    other = None
    if t.fresh is not None:
        with rep.guard("determinism", "building a second fresh env"):
            other = t.fresh()
    first: PlayTrace | None = None
    for seed in run.seeds:
        for script in run.scripts:
            ep = play(t.env, seed, script, True)
            if not ep.ended:
                if run.limit >= spec.max_turns:
                    problem = unfinished.format(limit=run.limit, max_turns=spec.max_turns)
                    rep.fail("episode-length", f"seed {seed}, {script.name}: {problem}", unfinished_fix)
                rep.warn("episode-length",
                         f"env_spec.max_turns={spec.max_turns} exceeds max_steps={run.limit}: the end of "
                         "the episode was not verified; pass a larger max_steps")
            if first is None:
                first = ep
            if other is not None:
                ep_b = play(other, seed, script, False)
                _compare(rep, ep, ep_b, seed, script, check="determinism",
                         what="two fresh envs", fix=_DETERMINISM_FIX)
    assert first is not None
    again = play(t.env, run.seeds[0], run.scripts[0], False)
    _compare(rep, first, again, run.seeds[0], run.scripts[0],
             check="reset-state" if other else "determinism",
             what="the same env before and after other episodes",
             fix=_RESET_FIX if other else _DETERMINISM_FIX)
    for e in (t.env, other):
        if e is not None:
            with rep.guard("close", "close()"):
                e.close()
