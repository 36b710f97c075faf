"""The conformance check of turn-based multi-agent environments: :func:`check_multi_agent_env`.

What it requires of a :class:`~tinker_core.env.MultiAgentTextEnv` (check names as used in
:class:`ConformanceError`, in parentheses; episodes are driven as described in
:mod:`tinker_core.testing.envs`):

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
"""

from __future__ import annotations

import math
from typing import Any, Unpack

from tinker_core.env import EnvSpec, MultiAgentTextEnv
from tinker_core.testing._common import Reporter, is_bool, is_real_number, short
from tinker_core.testing._episodes import (
    CheckOptions,
    PlayTrace,
    Script,
    check_info,
    check_reward,
    check_step_after_end,
    observation_problem,
    play_all,
    prepare,
)

__all__ = ["check_multi_agent_env"]

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
        check_reward(rep, r, spec, f"{where}: rewards[{role!r}]")
        for name in ("terminations", "truncations"):
            flag = getattr(env, name)[role]
            if not is_bool(flag):
                rep.fail("step", f"{where}: {name}[{role!r}] is {type(flag).__name__} {short(flag)}, not a bool",
                         "store bools")
        c = env._cumulative_rewards[role]
        if not is_real_number(c) or not math.isfinite(float(c)):
            rep.fail("cumulative-rewards", f"{where}: _cumulative_rewards[{role!r}] is {short(c)}",
                     "call self._accumulate_rewards() after setting self.rewards in step()")
        check_info(rep, env.infos[role], f"{where}: infos[{role!r}]", "role-dicts")
    selection = getattr(env, "agent_selection", None)
    if selection not in roles:
        rep.fail("turn-order", f"{where}: agent_selection is {short(selection)}, not one of the roles {roles}",
                 "set agent_selection to the role whose turn it is")


def _ma_snapshot(rep: Reporter, env: MultiAgentTextEnv, spec: EnvSpec, roles: list[str], where: str) -> tuple[Any, ...]:
    views = []
    for role in roles:
        with rep.guard("observation", f"{where}: observe({role!r})", "observe(role) must work for every role"):
            obs = env.observe(role)
        problem = observation_problem(obs, spec, f"{where}: observe({role!r})")
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
             script: Script, limit: int, *, probe_after_end: bool) -> PlayTrace:
    where = f"reset(seed={seed})"
    with rep.guard("reset", where, "reset must work for any seed"):
        env.reset(seed=seed, options=None)
    _ma_validate(rep, env, spec, roles, where)
    if _ma_done(rep, env, where):
        rep.fail("reset", f"{where}: the episode is already done", "reset() must start a live episode")
    views, *_, selection = _ma_snapshot(rep, env, spec, roles, where)
    trace: list[tuple[Any, ...]] = [("reset", views, selection)]
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
        trace.append((action, *snap))
        if _ma_done(rep, env, where):
            if probe_after_end:
                check_step_after_end(rep, env, f"seed {seed}, {script.name}", lambda _, at: _ma_done(rep, env, at),
                                     went_on="made it live again",
                                     fix="ignore steps once done (or raise an error that says to call reset())")
            return PlayTrace(trace, True, action)
    return PlayTrace(trace, False, action)


def check_multi_agent_env(env: Any, **options: Unpack[CheckOptions]) -> None:
    """Check that a turn-based multi-agent env follows the OpenTinker AEC contract.

    Args:
        env: a :class:`~tinker_core.env.MultiAgentTextEnv` instance, a zero-argument factory,
            or a registered env id.
        seeds: the seeds each episode script is played with (default ``(0, 1, 2)``).
        max_steps: the most steps (all roles together) driven per episode (default 64).
        actions: None (the default) for the default actions, a sequence of action strings
            played in order (whoever's turn it is), or a deterministic
            ``policy(observation, info) -> str`` called with the acting role's observation and
            info.

    Raises:
        ConformanceError: naming the env, the failed check and the fix.
    """
    run = prepare(env, multi_agent=True, **options)
    rep, spec = run.reporter, run.spec
    possible = getattr(run.target.env, "possible_agents", None)
    if not isinstance(possible, list | tuple) or tuple(possible) != spec.roles:
        rep.fail("roles", f"possible_agents is {short(possible)} but env_spec.roles is {spec.roles}",
                 "set self.possible_agents = list(env_spec.roles) in __init__")
    roles = list(possible)

    def play(e: MultiAgentTextEnv, seed: int, script: Script, probe_after_end: bool) -> PlayTrace:
        return _ma_play(rep, e, spec, roles, seed, script, run.limit, probe_after_end=probe_after_end)

    play_all(run, play,
             unfinished="the episode was not done after {limit} steps (env_spec.max_turns is "
                        "{max_turns}, counting every role's steps)",
             unfinished_fix="truncate every role once env_spec.max_turns steps were taken, and end "
                            "the episode (or penalise and move on) on illegal moves")
