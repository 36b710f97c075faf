"""The conformance check of single-agent text environments: :func:`check_env`.

What it requires of a :class:`~tinker_core.env.TextEnv` (each bullet is a check name used in
:class:`ConformanceError`):

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

How episodes are driven
    With ``actions=None`` every seed plays one episode per fixed action (the same string every
    turn: ``""``, ``"0"``, ``"hello"``, markup and whitespace, non-ASCII text) plus one episode
    of random strings from an RNG seeded by the episode seed. An env that declares tools
    (``env_spec.tools``) is also driven with a valid call of each tool (required arguments
    ``"1"``), a malformed call and a call of an unknown tool, and every action reaches it as a
    rollout passes it: an :class:`~tinker_core.contracts.Action` whose ``tool_calls`` and
    ``tool_call_errors`` were parsed against the declared tools. ``actions`` may instead be a
    sequence of strings (played in order, cycling) or a deterministic policy
    ``actions(observation, info) -> str`` (for a multi-agent env: the acting role's observation
    and info); the random-string episode is always played too. Each episode is driven for at
    most ``min(env_spec.max_turns, max_steps)`` steps; when ``max_turns > max_steps`` the end of
    the episode cannot be verified and a :class:`ConformanceWarning` says so.
"""

from __future__ import annotations

from typing import Any, Unpack

from tinker_core.env import EnvSpec, TextEnv
from tinker_core.testing._common import Reporter, is_bool, short
from tinker_core.testing._episodes import (
    DEFAULT_ACTIONS,
    CheckOptions,
    PlayTrace,
    Script,
    as_action,
    check_info,
    check_reward,
    check_step_after_end,
    observation_problem,
    play_all,
    prepare,
)

__all__ = ["DEFAULT_ACTIONS", "check_env"]


def _reset(rep: Reporter, env: TextEnv, spec: EnvSpec, seed: int) -> tuple[Any, dict[str, Any]]:
    where = f"reset(seed={seed})"
    with rep.guard("reset", where, "reset must work for any seed"):
        result = env.reset(seed=seed, options=None)
    if not isinstance(result, tuple) or len(result) != 2:
        rep.fail("reset", f"{where} returned {short(result)}, not a tuple (observation, info)",
                 "return observation, info")
    obs, info = result
    problem = observation_problem(obs, spec, f"{where}: the observation")
    if problem:
        rep.fail("observation", problem, "return a str for 'text' envs, a list of messages for 'chat' envs")
    check_info(rep, info, where, "reset")
    return obs, info


def _step(rep: Reporter, env: TextEnv, spec: EnvSpec, action: str, where: str, check: str) -> tuple[Any, ...]:
    with rep.guard(check, f"{where}: step({short(action, 50)})",
                   "treat any text as a valid action: garbage in gives a (low) reward and/or ends "
                   "the episode, never an exception"):
        result = env.step(as_action(action, spec))
    return _check_step_result(rep, spec, result, where)


def _check_step_result(rep: Reporter, spec: EnvSpec, result: object, where: str) -> tuple[Any, ...]:
    if not isinstance(result, tuple) or len(result) != 5:
        rep.fail("step", f"{where}: step() returned {short(result)}, not a 5-tuple "
                 "(observation, reward, terminated, truncated, info)",
                 "return observation, reward, terminated, truncated, info")
    obs, reward, terminated, truncated, info = result
    problem = observation_problem(obs, spec, f"{where}: the observation")
    if problem:
        rep.fail("observation", problem, "return a str for 'text' envs, a list of messages for 'chat' envs")
    value = check_reward(rep, reward, spec, where)
    for name, flag in (("terminated", terminated), ("truncated", truncated)):
        if not is_bool(flag):
            rep.fail("step", f"{where}: {name} is {type(flag).__name__} {short(flag)}, not a bool",
                     f"return bool({name})")
    check_info(rep, info, where, "step")
    return obs, value, bool(terminated), bool(truncated), info


def _play(rep: Reporter, env: TextEnv, spec: EnvSpec, seed: int, script: Script, limit: int,
          *, probe_after_end: bool) -> PlayTrace:
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
                check_step_after_end(
                    rep, env, f"seed {seed}, {script.name}",
                    lambda result, at: any(_check_step_result(rep, spec, result, at)[2:4]),
                    went_on="returned terminated=False, truncated=False (the episode silently went on)",
                    fix="once an episode ended, keep returning terminated=True until reset(), or raise "
                        "an error that says to call reset()")
            return PlayTrace(trace, True, action)
    return PlayTrace(trace, False, action)


def check_env(env: Any, **options: Unpack[CheckOptions]) -> None:
    """Check that a single-agent text environment follows the OpenTinker env contract.

    Args:
        env: a :class:`~tinker_core.env.TextEnv` instance, a zero-argument factory (a class
            works), or a registered env id (built with :func:`tinker_core.make_env`). Two fresh
            envs are needed for the determinism check: factories and ids build a second one,
            instances are deep-copied before use.
        seeds: the seeds each episode script is played with (default ``(0, 1, 2)``).
        max_steps: the most steps driven per episode (default 64; episodes must end within
            ``min(env_spec.max_turns, max_steps)``).
        actions: None (the default) for the default actions, a sequence of action strings
            played in order, or a deterministic ``policy(observation, info) -> str``. See the
            module docstring.

    Raises:
        ConformanceError: naming the env, the failed check and the fix.
    """
    run = prepare(env, multi_agent=False, **options)
    rep, spec = run.reporter, run.spec

    def play(e: TextEnv, seed: int, script: Script, probe_after_end: bool) -> PlayTrace:
        return _play(rep, e, spec, seed, script, run.limit, probe_after_end=probe_after_end)

    play_all(run, play,
             unfinished="the episode neither terminated nor truncated after {limit} steps "
                        "(env_spec.max_turns is {max_turns})",
             unfinished_fix="return truncated=True once env_spec.max_turns steps were taken, and end "
                            "the episode on actions it cannot use")
