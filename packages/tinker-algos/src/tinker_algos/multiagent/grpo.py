"""What a GRPO stage calls when its env has roles (``algorithm.params.multi_agent``).

:func:`stage_env_spec` tells whether the stage's env is multi-agent; :func:`collect_for_grpo`
plays a step's episodes (``prompts_per_step`` tasks x ``group_size`` episodes, groups by task
and role); :func:`evaluate_multi_agent` plays held-out greedy games against a scripted opponent
the env offers, alternating the policy's role. Settings: :class:`~tinker_algos.multiagent.params.MultiAgentParams`.
See ``docs/algorithms/rollouts.md``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

import numpy as np

from tinker_algos.models import PolicyModel
from tinker_algos.multiagent.params import MultiAgentParams
from tinker_algos.multiagent.results import MultiAgentRolloutResult
from tinker_algos.multiagent.roles import Learner, RoleSpec, opponent
from tinker_algos.multiagent.rollout import multi_agent_rollout
from tinker_algos.sampler import SamplingParams
from tinker_core.registry import env_spec

if TYPE_CHECKING:
    from tinker_algos.algorithms.base import StageContext
    from tinker_algos.prompts import PromptRenderer
    from tinker_core.env import EnvSpec, MultiAgentTextEnv

__all__ = ["collect_for_grpo", "env_spec_of", "evaluate_multi_agent", "stage_env_spec"]


def env_spec_of(env_factory: Callable[[], MultiAgentTextEnv]) -> EnvSpec | None:
    """The spec of the env ``env_factory`` builds (one env is built and closed)."""
    env = env_factory()
    try:
        return getattr(env, "env_spec", None)
    finally:
        close = getattr(env, "close", None)
        if callable(close):
            close()


def stage_env_spec(ctx: StageContext) -> EnvSpec | None:
    """The spec of a stage's env, building an env only when the registry says it has roles.

    A stage whose env is served from an ``address`` is single-agent here (the training loop
    connects to it with :class:`tinker_core.remote.RemoteEnv`): None.
    """
    env_cfg = getattr(ctx.stage, "env", None)
    if env_cfg is not None and env_cfg.address:
        return None
    if env_cfg is not None:
        spec: EnvSpec = env_spec(env_cfg.id)
        if not spec.roles:
            return spec
    return env_spec_of(ctx.require_env())  # the instance's spec (kwargs may change max_turns)


def collect_for_grpo(ctx: StageContext, step: int, settings: MultiAgentParams, spec: EnvSpec) -> MultiAgentRolloutResult:
    """GRPO's collect for a multi-agent env: ``prompts_per_step`` tasks x ``group_size`` episodes.

    Groups are (task, role): the episodes of one task share a reset seed, and each role's
    trajectories form their own group (zero-sum roles would cancel out in one group).
    """
    r = ctx.rollout_cfg
    return multi_agent_rollout(
        ctx.policy,
        ctx.require_env(),
        ctx.task_seeds(step),
        ctx.sampling_params(step),
        agents=settings.agents(spec.roles, ctx.adapter),
        group_size=r.group_size,
        turn_timeout_s=r.turn_timeout_s,
        max_steps=r.max_turns,
        max_error_rate=r.max_error_rate,
        renderer=ctx.renderer,
    )


def evaluate_multi_agent(
    policy: PolicyModel,
    env_factory: Callable[[], MultiAgentTextEnv],
    num_episodes: int,
    *,
    seed: int,
    max_new_tokens: int,
    stop: Sequence[str] = ("\n",),
    opponent_name: str = "random",
    adapter: str | None = None,
    turn_timeout_s: float | None = 30.0,
    max_steps: int | None = None,
    renderer: PromptRenderer | None = None,
) -> dict[str, float]:
    """Greedy held-out play against the scripted opponent ``opponent_name`` that the env offers
    (its ``scripted_opponents``), the policy's role alternating.

    Episode ``i`` (of ``num_episodes``) has the policy play ``roles[i % num_roles]``. Returns
    ``eval/accuracy`` (= ``eval/win_rate``), ``eval/draw_rate``, ``eval/loss_rate``,
    ``eval/reward_mean``, ``eval/turns_mean``, ``eval/error_rate``.
    """
    params = SamplingParams(max_new_tokens=max_new_tokens, temperature=0.0, stop=tuple(stop), seed=seed)
    spec = env_spec_of(env_factory)
    roles = tuple(spec.roles) if spec is not None else ()
    if not roles:
        raise ValueError("evaluate_multi_agent() needs an env whose spec has roles")
    wins = draws = losses = 0
    rewards: list[float] = []
    turns: list[float] = []
    failed = 0
    for ri, role in enumerate(roles):
        idx = [i for i in range(num_episodes) if i % len(roles) == ri]
        if not idx:
            continue
        agents: dict[str, RoleSpec] = {r: Learner(adapter) if r == role else opponent(opponent_name) for r in roles}
        res = multi_agent_rollout(
            policy, env_factory, [seed + i for i in idx], params, agents=agents,
            turn_timeout_s=turn_timeout_s, max_steps=max_steps, renderer=renderer,
        )
        for ep in res.episodes:
            if ep.error is not None or ep.result is None:
                failed += 1
                continue
            outcome = ep.result.outcomes[role]
            wins += outcome == "win"
            draws += outcome == "draw"
            losses += outcome == "loss"
            rewards.append(ep.result.rewards[role])
            turns.append(ep.result.num_steps)
    ok = max(len(rewards), 1)
    return {
        "eval/accuracy": wins / ok,
        "eval/win_rate": wins / ok,
        "eval/draw_rate": draws / ok,
        "eval/loss_rate": losses / ok,
        "eval/reward_mean": float(np.mean(rewards)) if rewards else 0.0,
        "eval/turns_mean": float(np.mean(turns)) if turns else 0.0,
        "eval/error_rate": failed / max(num_episodes, 1),
    }

