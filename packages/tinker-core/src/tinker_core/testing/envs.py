"""Conformance checks of text environments: :func:`check_env` and :func:`check_multi_agent_env`.

What the checks require (each bullet is a check name used in :class:`ConformanceError`):

Single-agent (:class:`~tinker_core.env.TextEnv`)
    * ``type``: the env is a ``TextEnv`` (hence a ``gymnasium.Env``).
    * ``env_spec``: ``env.env_spec`` is an :class:`~tinker_core.env.EnvSpec` whose JSON round
      trip is exact, with no roles; when checked by id, ``env_spec.id`` is that id.
    * ``reset``: ``reset(seed=..., options=...)`` is accepted and returns ``(observation, info)``.
    * ``observation``: a ``str`` when ``env_spec.observation_type == "text"``, a list of
      ``{"role": str, "content": str, ...}`` dicts when it is ``"chat"``.
    * ``step``: ``step(action)`` returns ``(observation, reward, terminated, truncated, info)``;
      the reward is a real number (not a bool), finite, within ``env_spec.reward_range``;
      ``terminated`` and ``truncated`` are bools.
    * ``info-json``: every info dict is standard JSON (``json.dumps(info, allow_nan=False)``),
      because envs are served over gRPC as JSON. Convert numpy values with ``.item()``.
    * ``robustness``: no action string raises. Garbage in gives a reward, not an exception.
    * ``episode-length``: every episode ends (terminated or truncated) within
      ``env_spec.max_turns`` steps, whatever the actions.
    * ``step-after-end``: a step after the episode ended either raises an exception with a
      message, or returns ``terminated`` or ``truncated`` true. It must not silently start
      playing again.
    * ``determinism``: two fresh envs reset with the same seed show the same observation, and
      the same actions then give the same observations, rewards and end flags.
    * ``reset-state``: replaying an episode on an env that has played others gives the same
      trace (``reset`` restores every per-episode attribute).
    * ``close``: ``close()`` does not raise.

    Different seeds may give the same episode; that is not required to differ.

Multi-agent (:class:`~tinker_core.env.MultiAgentTextEnv`)
    The same ideas in the agent-environment-cycle shape: ``env_spec.roles == possible_agents``
    (``roles``); after ``reset`` ``agent_selection`` is a role and the episode is live;
    ``observe(role)`` works for every role (``observation``); ``rewards``, ``terminations``,
    ``truncations``, ``infos`` and ``_cumulative_rewards`` are keyed by exactly the roles
    (``role-dicts``); while the episode is live ``agent_selection`` names a live role
    (``turn-order``); ``_cumulative_rewards`` equals the sum of the per-step ``rewards``
    (``cumulative-rewards``); the episode is ``done`` within ``env_spec.max_turns`` steps, the
    steps of all roles counted together, whatever the actions (an illegal move must end the
    episode or be answered, never loop forever) (``episode-length``); plus ``robustness``,
    ``step-after-end`` (raise or stay ``done``), ``determinism``, ``reset-state``, ``info-json``
    and ``close``.

How episodes are driven
    With ``actions=None`` every seed plays one episode per fixed action (the same string every
    turn: ``""``, ``"0"``, ``"hello"``, markup and whitespace, non-ASCII text) plus one episode
    of random strings from an RNG seeded by the episode seed. ``actions`` may instead be a
    sequence of strings (played in order, cycling) or a deterministic policy
    ``actions(observation, info) -> str`` (for a multi-agent env: the acting role's observation
    and info); the random-string episode is always played too. Each episode is driven for at
    most ``min(env_spec.max_turns, max_steps)`` steps; when ``max_turns > max_steps`` the end of
    the episode cannot be verified and a :class:`ConformanceWarning` says so.
"""

from __future__ import annotations

import copy
import inspect
import math
import string
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from tinker_core.env import EnvSpec, MultiAgentTextEnv, TextEnv
from tinker_core.testing._common import (
    Reporter,
    callable_name,
    is_bool,
    is_real_number,
    json_problem,
    short,
)

__all__ = ["DEFAULT_ACTIONS", "check_env", "check_multi_agent_env"]

DEFAULT_ACTIONS: tuple[str, ...] = (
    "",
    "0",
    "hello",
    ' \n\t{"a": [1, <b>}\\',
    "héllo wörld ✓ 日本語 🙂",
)
"""The fixed actions every env is driven with when ``actions`` is None."""

_AFTER_END_ACTIONS = ("", "hello")
_RANDOM_CHARS = string.printable + "éü日本語🙂\u200b"
_REWARD_TOL = 1e-9

Policy = Callable[[Any, dict[str, Any]], str]
ActionsArg = Sequence[str] | Callable[..., str] | None


# ---- scripts: how an episode is driven ---------------------------------------------------------
@dataclass(frozen=True)
class _Script:
    name: str
    build: Callable[[int], Policy]  # episode seed -> a fresh policy for that episode


def _constant(action: str) -> _Script:
    return _Script(f"constant action {short(action, 30)}", lambda seed: lambda obs, info: action)


def _cycle(actions: Sequence[str]) -> _Script:
    def build(seed: int) -> Policy:
        state = {"i": 0}

        def policy(obs: Any, info: dict[str, Any]) -> str:
            a = actions[state["i"] % len(actions)]
            state["i"] += 1
            return a

        return policy

    return _Script(f"the given actions {short(list(actions), 40)}", build)


def _random_strings() -> _Script:
    def build(seed: int) -> Policy:
        rng = np.random.default_rng([seed, 0x7E57])

        def policy(obs: Any, info: dict[str, Any]) -> str:
            n = int(rng.integers(0, 48))
            return "".join(_RANDOM_CHARS[int(i)] for i in rng.integers(0, len(_RANDOM_CHARS), n))

        return policy

    return _Script("random printable strings", build)


def _scripts(actions: ActionsArg) -> list[_Script]:
    if actions is None:
        return [*(_constant(a) for a in DEFAULT_ACTIONS), _random_strings()]
    if isinstance(actions, str):
        actions = [actions]
    if callable(actions):
        policy = actions
        return [_Script(f"policy {callable_name(policy)}", lambda seed: policy), _random_strings()]
    actions = list(actions)
    bad = [a for a in actions if not isinstance(a, str)]
    if not actions or bad:
        raise TypeError(
            "actions must be None, a non-empty sequence of str, or a callable "
            f"policy(observation, info) -> str; got {short(actions)}"
        )
    return [_cycle(actions), _random_strings()]


def _check_args(seeds: Sequence[int], max_steps: int) -> list[int]:
    seeds = list(seeds)
    if not seeds or not all(isinstance(s, int | np.integer) and not isinstance(s, bool) for s in seeds):
        raise TypeError(f"seeds must be a non-empty sequence of ints, got {short(seeds)}")
    if not isinstance(max_steps, int) or max_steps < 1:
        raise ValueError(f"max_steps must be an int >= 1, got {max_steps!r}")
    return [int(s) for s in seeds]


# ---- resolving what was passed -----------------------------------------------------------------
@dataclass
class _Target:
    reporter: Reporter
    env: Any
    fresh: Callable[[], Any] | None  # builds another fresh env, when possible
    expected_id: str | None


def _resolve(env: Any, *, what: str) -> _Target:
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
        return _Target(rep, first, lambda: make_env(env_id), env_id)
    if isinstance(env, TextEnv | MultiAgentTextEnv) or not callable(env):
        rep = Reporter(_label(env, what))
        try:
            pristine = copy.deepcopy(env)
            fresh: Callable[[], Any] | None = lambda: copy.deepcopy(pristine)  # noqa: E731
        except Exception as e:
            rep.warn("determinism", f"could not deepcopy the env ({type(e).__name__}: {e}); "
                     "pass a factory to compare two fresh envs")
            fresh = None
        return _Target(rep, env, fresh, None)
    factory = env
    rep = Reporter(f"{what} factory {callable_name(factory)}")
    with rep.guard("factory", "calling the factory with no arguments",
                   "pass a zero-argument factory, e.g. functools.partial(MyEnv, size=3)"):
        first = factory()
    rep.plugin = _label(first, what)
    return _Target(rep, first, factory, None)


def _label(env: Any, what: str) -> str:
    spec = getattr(env, "env_spec", None)
    if isinstance(spec, EnvSpec):
        return f"{what} {spec.id!r} ({type(env).__qualname__})"
    return f"{what} {callable_name(type(env))}"


def _check_type(t: _Target, expected_cls: type, other_cls: type, other_fn: str) -> None:
    env = t.env
    if isinstance(env, other_cls):
        t.reporter.fail("type", f"is a {other_cls.__name__}, not a {expected_cls.__name__}",
                        f"check it with tinker_core.testing.{other_fn} instead")
    if not isinstance(env, expected_cls):
        t.reporter.fail("type", f"is a {callable_name(type(env))}, not a tinker_core.env.{expected_cls.__name__}",
                        f"subclass tinker_core.env.{expected_cls.__name__}")


def _check_spec(t: _Target, *, multi_agent: bool) -> EnvSpec:
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


def _check_reset_signature(t: _Target) -> None:
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


def _observation_problem(obs: Any, spec: EnvSpec, where: str) -> str | None:
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


def _check_reward(rep: Reporter, reward: Any, spec: EnvSpec, where: str) -> float:
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


def _check_info(rep: Reporter, info: Any, where: str, check: str) -> None:
    if not isinstance(info, dict):
        rep.fail(check, f"{where}: info is {type(info).__name__}, not a dict",
                 "return a dict (may be empty) as info")
    problem = json_problem(info, f"{where}: info")
    if problem:
        rep.fail("info-json", problem,
                 "keep info values plain JSON (str, int, finite float, bool, None, lists, dicts "
                 "with str keys): envs are served over gRPC as JSON")


# ---- single-agent ------------------------------------------------------------------------------
@dataclass
class _Episode:
    trace: list[tuple[Any, ...]]
    ended: bool
    last_action: str


def _reset(rep: Reporter, env: TextEnv, spec: EnvSpec, seed: int) -> tuple[Any, dict[str, Any]]:
    where = f"reset(seed={seed})"
    with rep.guard("reset", where, "reset must work for any seed"):
        result = env.reset(seed=seed, options=None)
    if not isinstance(result, tuple) or len(result) != 2:
        rep.fail("reset", f"{where} returned {short(result)}, not a tuple (observation, info)",
                 "return observation, info")
    obs, info = result
    problem = _observation_problem(obs, spec, f"{where}: the observation")
    if problem:
        rep.fail("observation", problem, "return a str for 'text' envs, a list of messages for 'chat' envs")
    _check_info(rep, info, where, "reset")
    return obs, info


def _step(rep: Reporter, env: TextEnv, spec: EnvSpec, action: str, where: str, check: str) -> tuple[Any, ...]:
    with rep.guard(check, f"{where}: step({short(action, 50)})",
                   "treat any text as a valid action: garbage in gives a (low) reward and/or ends "
                   "the episode, never an exception"):
        result = env.step(action)
    return _check_step_result(rep, spec, result, where)


def _check_step_result(rep: Reporter, spec: EnvSpec, result: Any, where: str) -> tuple[Any, ...]:
    if not isinstance(result, tuple) or len(result) != 5:
        rep.fail("step", f"{where}: step() returned {short(result)}, not a 5-tuple "
                 "(observation, reward, terminated, truncated, info)",
                 "return observation, reward, terminated, truncated, info")
    obs, reward, terminated, truncated, info = result
    problem = _observation_problem(obs, spec, f"{where}: the observation")
    if problem:
        rep.fail("observation", problem, "return a str for 'text' envs, a list of messages for 'chat' envs")
    value = _check_reward(rep, reward, spec, where)
    for name, flag in (("terminated", terminated), ("truncated", truncated)):
        if not is_bool(flag):
            rep.fail("step", f"{where}: {name} is {type(flag).__name__} {short(flag)}, not a bool",
                     f"return bool({name})")
    _check_info(rep, info, where, "step")
    return obs, value, bool(terminated), bool(truncated), info


def _play(rep: Reporter, env: TextEnv, spec: EnvSpec, seed: int, script: _Script, limit: int,
          *, probe_after_end: bool) -> _Episode:
    obs, info = _reset(rep, env, spec, seed)
    trace: list[tuple[Any, ...]] = [("reset", obs)]
    policy = script.build(seed)
    action = ""
    for t in range(limit):
        where = f"seed {seed}, {script.name}, step {t}"
        with rep.guard("actions", f"{where}: the action policy"):
            action = policy(obs, info)
        obs, reward, terminated, truncated, info = _step(rep, env, spec, action, where, "robustness")
        trace.append((action, obs, reward, terminated, truncated))
        if terminated or truncated:
            if probe_after_end:
                _probe_after_end(rep, env, spec, f"seed {seed}, {script.name}")
            return _Episode(trace, True, action)
    return _Episode(trace, False, action)


def _probe_after_end(rep: Reporter, env: TextEnv, spec: EnvSpec, where: str) -> None:
    for action in _AFTER_END_ACTIONS:
        try:
            result = env.step(action)
        except Exception as e:
            if not str(e).strip():
                rep.fail("step-after-end", f"{where}: step({action!r}) after the episode ended raised "
                         f"{type(e).__name__} without a message",
                         "say why, e.g. raise RuntimeError('episode is over; call reset()')", cause=e)
            continue
        _, _, terminated, truncated, _ = _check_step_result(rep, spec, result, f"{where}, after the end")
        if not (terminated or truncated):
            rep.fail("step-after-end",
                     f"{where}: step({action!r}) after the episode ended returned "
                     "terminated=False, truncated=False (the episode silently went on)",
                     "once an episode ended, keep returning terminated=True until reset(), or raise "
                     "an error that says to call reset()")


def _check_length(rep: Reporter, spec: EnvSpec, ep: _Episode, limit: int, seed: int, script: _Script) -> None:
    if ep.ended:
        return
    if limit >= spec.max_turns:
        rep.fail("episode-length",
                 f"seed {seed}, {script.name}: the episode neither terminated nor truncated after "
                 f"{limit} steps (env_spec.max_turns is {spec.max_turns})",
                 "return truncated=True once env_spec.max_turns steps were taken, and end the "
                 "episode on actions it cannot use")
    rep.warn("episode-length",
             f"env_spec.max_turns={spec.max_turns} exceeds max_steps={limit}: the end of the "
             "episode was not verified; pass a larger max_steps")


def _compare(rep: Reporter, a: _Episode, b: _Episode, seed: int, script: _Script, *, check: str,
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


def check_env(
    env: Any,
    *,
    seeds: Sequence[int] = (0, 1, 2),
    max_steps: int = 64,
    actions: ActionsArg = None,
) -> None:
    """Check that a single-agent text environment follows the OpenTinker env contract.

    Args:
        env: a :class:`~tinker_core.env.TextEnv` instance, a zero-argument factory (a class
            works), or a registered env id (built with :func:`tinker_core.make_env`). Two fresh
            envs are needed for the determinism check: factories and ids build a second one,
            instances are deep-copied before use.
        seeds: the seeds each episode script is played with.
        max_steps: the most steps driven per episode (episodes must end within
            ``min(env_spec.max_turns, max_steps)``).
        actions: None for the default actions, a sequence of action strings played in order,
            or a deterministic ``policy(observation, info) -> str``. See the module docstring.

    Raises:
        ConformanceError: naming the env, the failed check and the fix.
    """
    seeds = _check_args(seeds, max_steps)
    scripts = _scripts(actions)
    t = _resolve(env, what="env")
    _check_type(t, TextEnv, MultiAgentTextEnv, "check_multi_agent_env")
    rep = t.reporter
    spec = _check_spec(t, multi_agent=False)
    _check_reset_signature(t)
    limit = min(spec.max_turns, max_steps)

    other = None
    if t.fresh is not None:
        with rep.guard("determinism", "building a second fresh env"):
            other = t.fresh()
    first: _Episode | None = None
    for seed in seeds:
        for script in scripts:
            ep = _play(rep, t.env, spec, seed, script, limit, probe_after_end=True)
            _check_length(rep, spec, ep, limit, seed, script)
            if first is None:
                first = ep
            if other is not None:
                ep_b = _play(rep, other, spec, seed, script, limit, probe_after_end=False)
                _compare(rep, ep, ep_b, seed, script, check="determinism",
                         what="two fresh envs", fix=_DETERMINISM_FIX)
    assert first is not None
    again = _play(rep, t.env, spec, seeds[0], scripts[0], limit, probe_after_end=False)
    _compare(rep, first, again, seeds[0], scripts[0], check="reset-state" if other else "determinism",
             what="the same env before and after other episodes",
             fix=_RESET_FIX if other else _DETERMINISM_FIX)
    for e in (t.env, other):
        if e is not None:
            with rep.guard("close", "close()"):
                e.close()


# ---- multi-agent -------------------------------------------------------------------------------
_ROLE_DICTS = ("rewards", "terminations", "truncations", "infos", "_cumulative_rewards")


def _ma_validate(rep: Reporter, env: MultiAgentTextEnv, spec: EnvSpec, roles: list[str], where: str) -> None:
    for name in _ROLE_DICTS:
        d = getattr(env, name, None)
        if not isinstance(d, dict) or set(d) != set(roles):
            keys = sorted(d) if isinstance(d, dict) else type(d).__name__
            rep.fail("role-dicts", f"{where}: {name} is keyed by {keys}, not by every role {roles}",
                     f"call super().reset(seed=seed) in reset() and keep {name} keyed by every role "
                     "(possible_agents) after each step")
    for role in roles:
        r = env.rewards[role]
        if not is_real_number(r):
            rep.fail("step", f"{where}: rewards[{role!r}] is {type(r).__name__} {short(r)}", "store float rewards")
        _check_reward(rep, r, spec, f"{where}: rewards[{role!r}]")
        for name in ("terminations", "truncations"):
            flag = getattr(env, name)[role]
            if not is_bool(flag):
                rep.fail("step", f"{where}: {name}[{role!r}] is {type(flag).__name__} {short(flag)}, not a bool",
                         "store bools")
        c = env._cumulative_rewards[role]
        if not is_real_number(c) or not math.isfinite(float(c)):
            rep.fail("cumulative-rewards", f"{where}: _cumulative_rewards[{role!r}] is {short(c)}",
                     "call self._accumulate_rewards() after setting self.rewards in step()")
        _check_info(rep, env.infos[role], f"{where}: infos[{role!r}]", "role-dicts")
    selection = getattr(env, "agent_selection", None)
    if selection not in roles:
        rep.fail("turn-order", f"{where}: agent_selection is {short(selection)}, not one of the roles {roles}",
                 "set agent_selection to the role whose turn it is")


def _ma_snapshot(rep: Reporter, env: MultiAgentTextEnv, spec: EnvSpec, roles: list[str], where: str) -> tuple[Any, ...]:
    views = []
    for role in roles:
        with rep.guard("observation", f"{where}: observe({role!r})", "observe(role) must work for every role"):
            obs = env.observe(role)
        problem = _observation_problem(obs, spec, f"{where}: observe({role!r})")
        if problem:
            rep.fail("observation", problem, "return a str for 'text' envs, a list of messages for 'chat' envs")
        views.append(obs)
    return (
        tuple(views),
        tuple(float(env.rewards[r]) for r in roles),
        tuple(bool(env.terminations[r]) for r in roles),
        tuple(bool(env.truncations[r]) for r in roles),
        env.agent_selection,
    )


def _ma_done(rep: Reporter, env: MultiAgentTextEnv, where: str) -> bool:
    with rep.guard("done", f"{where}: env.done"):
        return bool(env.done)


def _ma_play(rep: Reporter, env: MultiAgentTextEnv, spec: EnvSpec, roles: list[str], seed: int,
             script: _Script, limit: int, *, probe_after_end: bool) -> _Episode:
    where = f"reset(seed={seed})"
    with rep.guard("reset", where, "reset must work for any seed"):
        env.reset(seed=seed, options=None)
    _ma_validate(rep, env, spec, roles, where)
    if _ma_done(rep, env, where):
        rep.fail("reset", f"{where}: the episode is already done", "reset() must start a live episode")
    snap = _ma_snapshot(rep, env, spec, roles, where)
    trace: list[tuple[Any, ...]] = [("reset", snap)]
    sums = {r: float(env.rewards[r]) for r in roles}
    policy = script.build(seed)
    action = ""
    for t in range(limit):
        where = f"seed {seed}, {script.name}, step {t}"
        agent = env.agent_selection
        if env.terminations[agent] or env.truncations[agent]:
            rep.fail("turn-order", f"{where}: agent_selection {agent!r} is already terminated or truncated "
                     "while the episode is not done",
                     "pass the turn to a live role; end the episode when no role can act")
        with rep.guard("actions", f"{where}: the action policy"):
            action = policy(env.observe(agent), env.infos[agent])
        with rep.guard("robustness", f"{where}: step({short(action, 50)}) by {agent!r}",
                       "treat any text as a valid action: an illegal move gives a penalty and/or "
                       "ends the episode, never an exception"):
            env.step(action)
        _ma_validate(rep, env, spec, roles, where)
        for r in roles:
            sums[r] += float(env.rewards[r])
            c = float(env._cumulative_rewards[r])
            if not math.isclose(c, sums[r], rel_tol=1e-9, abs_tol=1e-9):
                rep.fail("cumulative-rewards",
                         f"{where}: _cumulative_rewards[{r!r}] is {c}, but the per-step rewards "
                         f"since reset sum to {sums[r]}",
                         "set self.rewards to this step's rewards (all roles), then call "
                         "self._accumulate_rewards() once per step")
        snap = _ma_snapshot(rep, env, spec, roles, where)
        trace.append((action, snap))
        if _ma_done(rep, env, where):
            if probe_after_end:
                _ma_probe_after_end(rep, env, f"seed {seed}, {script.name}")
            return _Episode(trace, True, action)
    return _Episode(trace, False, action)


def _ma_probe_after_end(rep: Reporter, env: MultiAgentTextEnv, where: str) -> None:
    for action in _AFTER_END_ACTIONS:
        try:
            env.step(action)
        except Exception as e:
            if not str(e).strip():
                rep.fail("step-after-end", f"{where}: step({action!r}) after the episode was done raised "
                         f"{type(e).__name__} without a message",
                         "say why, e.g. raise RuntimeError('episode is over; call reset()')", cause=e)
            continue
        if not _ma_done(rep, env, where):
            rep.fail("step-after-end",
                     f"{where}: step({action!r}) after the episode was done made it live again",
                     "ignore steps once done (or raise an error that says to call reset())")


def check_multi_agent_env(
    env: Any,
    *,
    seeds: Sequence[int] = (0, 1, 2),
    max_steps: int = 64,
    actions: ActionsArg = None,
) -> None:
    """Check that a turn-based multi-agent env follows the OpenTinker AEC contract.

    Args:
        env: a :class:`~tinker_core.env.MultiAgentTextEnv` instance, a zero-argument factory,
            or a registered env id.
        seeds: the seeds each episode script is played with.
        max_steps: the most steps (all roles together) driven per episode.
        actions: None for the default actions, a sequence of action strings played in order
            (whoever's turn it is), or a deterministic ``policy(observation, info) -> str`` called
            with the acting role's observation and info.

    Raises:
        ConformanceError: naming the env, the failed check and the fix.
    """
    seeds = _check_args(seeds, max_steps)
    scripts = _scripts(actions)
    t = _resolve(env, what="multi-agent env")
    _check_type(t, MultiAgentTextEnv, TextEnv, "check_env")
    rep = t.reporter
    spec = _check_spec(t, multi_agent=True)
    _check_reset_signature(t)
    possible = getattr(t.env, "possible_agents", None)
    if not isinstance(possible, list | tuple) or tuple(possible) != spec.roles:
        rep.fail("roles", f"possible_agents is {short(possible)} but env_spec.roles is {spec.roles}",
                 "set self.possible_agents = list(env_spec.roles) in __init__")
    roles = list(possible)
    limit = min(spec.max_turns, max_steps)

    other = None
    if t.fresh is not None:
        with rep.guard("determinism", "building a second fresh env"):
            other = t.fresh()
    first: _Episode | None = None
    for seed in seeds:
        for script in scripts:
            ep = _ma_play(rep, t.env, spec, roles, seed, script, limit, probe_after_end=True)
            if not ep.ended:
                if limit >= spec.max_turns:
                    rep.fail("episode-length",
                             f"seed {seed}, {script.name}: the episode was not done after {limit} "
                             f"steps (env_spec.max_turns is {spec.max_turns}, counting every role's steps)",
                             "truncate every role once env_spec.max_turns steps were taken, and end "
                             "the episode (or penalise and move on) on illegal moves")
                rep.warn("episode-length",
                         f"env_spec.max_turns={spec.max_turns} exceeds max_steps={limit}: the end of "
                         "the episode was not verified; pass a larger max_steps")
            if first is None:
                first = ep
            if other is not None:
                ep_b = _ma_play(rep, other, spec, roles, seed, script, limit, probe_after_end=False)
                _compare(rep, _flatten(ep), _flatten(ep_b), seed, script, check="determinism",
                         what="two fresh envs", fix=_DETERMINISM_FIX)
    assert first is not None
    again = _ma_play(rep, t.env, spec, roles, seeds[0], scripts[0], limit, probe_after_end=False)
    _compare(rep, _flatten(first), _flatten(again), seeds[0], scripts[0],
             check="reset-state" if other else "determinism",
             what="the same env before and after other episodes",
             fix=_RESET_FIX if other else _DETERMINISM_FIX)
    for e in (t.env, other):
        if e is not None:
            with rep.guard("close", "close()"):
                e.close()


def _flatten(ep: _Episode) -> _Episode:
    """Multi-agent trace entries -> the (action, observation, reward, term, trunc, selection) shape."""
    out: list[tuple[Any, ...]] = []
    for entry in ep.trace:
        action, (views, rewards, terms, truncs, selection) = entry
        if action == "reset":
            out.append(("reset", views, selection))
        else:
            out.append((action, views, rewards, terms, truncs, selection))
    return _Episode(out, ep.ended, ep.last_action)

