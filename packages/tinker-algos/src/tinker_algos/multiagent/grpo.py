"""What a GRPO stage calls when its env has roles (``algorithm.params.multi_agent``).

:func:`stage_env_spec` tells whether the stage's env is multi-agent; :func:`collect_for_grpo`
plays a step's episodes (``prompts_per_step`` tasks x ``group_size`` episodes, groups by task
and role); :func:`evaluate_multi_agent` plays held-out greedy games against a scripted opponent
the env offers, alternating the policy's role, and :func:`evaluate_stage` does so with a stage's
settings (every algorithm's held-out evaluation on an env with roles: GRPO's, SFT's, ...).
Settings: :class:`~tinker_algos.multiagent.params.MultiAgentParams`. ``ctx`` is the stage's
:class:`~tinker_algos.algorithms.base.StageContext` (typed ``Any``: ``Algorithm.evaluate`` calls
this module, so it does not import that one).
See ``docs/algorithms/rollouts.md``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from tinker_algos.model.models import PolicyModel
from tinker_algos.multiagent.params import MultiAgentParams
from tinker_algos.multiagent.results import (
    MultiAgentEpisode,
    MultiAgentRolloutResult,
    info_metrics,
    seat_metrics,
)
from tinker_algos.multiagent.roles import Learner, RoleSpec, opponent
from tinker_algos.multiagent.rollout import multi_agent_rollout
from tinker_algos.records.recording import record_eval
from tinker_algos.sampling.sampler import SamplingParams
from tinker_core.config.multi_agent_env import offered_opponents
from tinker_core.errors import ConfigError
from tinker_core.registry import env_spec
from tinker_core.seeding import derive_seed

if TYPE_CHECKING:
    from tinker_algos.model.prompts import PromptRenderer
    from tinker_core.env import EnvSpec, MultiAgentTextEnv

__all__ = ["collect_for_grpo", "default_eval_opponent", "env_spec_of", "evaluate_multi_agent", "evaluate_opponents", "evaluate_stage",
           "held_out_keys", "stage_env_spec", "stage_eval_opponents"]


def env_spec_of(env_factory: Callable[[], MultiAgentTextEnv]) -> EnvSpec | None:
    """The spec of the env ``env_factory`` builds (one env is built and closed)."""
    env = env_factory()
    try:
        return getattr(env, "env_spec", None)
    finally:
        close = getattr(env, "close", None)
        if callable(close):
            close()


def stage_env_spec(ctx: Any) -> EnvSpec | None:
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


def collect_for_grpo(ctx: Any, step: int, settings: MultiAgentParams, spec: EnvSpec) -> MultiAgentRolloutResult:
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


def default_eval_opponent(spec: EnvSpec) -> str:
    """The scripted opponent a stage without ``multi_agent`` settings (SFT, DPO, ...) is evaluated
    against: ``random`` when the env of ``spec`` offers it, else the first it offers by name.

    Raises ConfigError when the env offers none (a multi-agent env cannot then be evaluated).
    """
    offered = offered_opponents(spec)  # an env not registered under its id offers none by name
    if not offered:
        raise ConfigError([
            f"env {spec.id!r} has roles but offers no scripted opponent to evaluate against; declare "
            "scripted_opponents on its class (see tinker_core.opponents) or set algorithm.eval_size: 0"
        ])
    return "random" if "random" in offered else offered[0]


def stage_eval_opponents(ctx: Any, settings: MultiAgentParams | None, spec: EnvSpec) -> tuple[tuple[str, ...], bool]:
    """``(names, per_opponent)``: the scripted opponents a stage's held-out evaluation plays, and
    whether it logs each one's numbers under ``eval/vs/<opponent>/``.

    A stage with ``multi_agent`` settings: their :attr:`~MultiAgentParams.held_out_opponents`
    (per opponent when it listed ``eval_opponents``). A stage without (SFT, DPO, ... -- a warm
    start): those of the job's next stage with ``multi_agent`` settings on the same env, when
    this env offers them all, so that the warm start's last evaluation is the same measurement
    the learning stage's curve continues; else :func:`default_eval_opponent`.
    """
    if settings is not None:
        return settings.held_out_opponents, settings.per_opponent
    for stage in ctx.job.resolved_stages()[ctx.stage_index + 1:]:
        config = getattr(stage.algorithm.params, "multi_agent", None)
        if config is None:
            continue
        if stage.env is not None and stage.env.id == spec.id and set(config.held_out_opponents()) <= set(offered_opponents(spec)):
            return tuple(config.held_out_opponents()), config.eval_opponents is not None
        break
    return (default_eval_opponent(spec),), False


def evaluate_stage(
    ctx: Any,
    settings: MultiAgentParams | None,
    *,
    adapters: Mapping[str, str] | None = None,
    opponent_agent: RoleSpec | None = None,
) -> dict[str, float]:
    """A stage's held-out evaluation on its multi-agent env: :func:`evaluate_multi_agent` on the
    eval env (``env.eval_kwargs``; else the training env) with the stage's rollout section
    (``max_new_tokens``, ``stop``, ``turn_timeout_s``, ``max_turns``), ``algorithm.eval_size``
    episodes on the job's fixed eval seeds, against each opponent of :func:`stage_eval_opponents`
    (:func:`evaluate_opponents`), keyed by :func:`held_out_keys`.

    ``settings``: a GRPO stage's ``multi_agent``; None for a stage without them (SFT, DPO, ...).
    ``adapters`` and ``opponent_agent`` as for :func:`evaluate_multi_agent` (``learners`` and
    ``league`` modes); with ``opponent_agent``, the policy plays that agent alone, under the
    plain ``eval/`` keys.
    """
    if opponent_agent is not None:
        _roles_spec(ctx)
        return _held_out_play(ctx, adapters, opponent_agent=opponent_agent)
    return held_out_keys(*evaluate_opponents(ctx, settings, adapters=adapters))


def evaluate_opponents(
    ctx: Any, settings: MultiAgentParams | None, *, adapters: Mapping[str, str] | None = None,
) -> tuple[dict[str, dict[str, float]], bool]:
    """``(each, per_opponent)``: the held-out metrics of :func:`evaluate_multi_agent` (plain
    ``eval/`` keys) against each scripted opponent of :func:`stage_eval_opponents`, by name in
    its order, and whether the stage logs each one under ``eval/vs/<opponent>/``."""
    names, per_opponent = stage_eval_opponents(ctx, settings, _roles_spec(ctx))
    return {name: _held_out_play(ctx, adapters, opponent_name=name) for name in names}, per_opponent


def held_out_keys(each: Mapping[str, Mapping[str, float]], per_opponent: bool) -> dict[str, float]:
    """One evaluation's metrics from :func:`evaluate_opponents`: the first opponent's keep their
    keys (``eval/accuracy``, ``eval/<role>/reward_mean``, ...); with ``per_opponent``, every
    opponent's, the first's included, are logged again under ``eval/vs/<opponent>/``
    (``eval/vs/boulware/alice/reward_mean``)."""
    out: dict[str, float] = {}
    for i, (name, metrics) in enumerate(each.items()):
        if i == 0:
            out.update(metrics)
        if per_opponent:
            out.update({f"eval/vs/{name}/{key.removeprefix('eval/')}": v for key, v in metrics.items()})
    return out


def _roles_spec(ctx: Any) -> EnvSpec:
    spec = stage_env_spec(ctx)
    if spec is None or not spec.roles:
        raise ValueError("a multi-agent evaluation needs a stage whose env has roles")
    return spec


def _held_out_play(ctx: Any, adapters: Mapping[str, str] | None, *, opponent_name: str = "random",
                   opponent_agent: RoleSpec | None = None) -> dict[str, float]:
    r = ctx.rollout_cfg
    return evaluate_multi_agent(
        ctx.policy,
        ctx.eval_env_factory or ctx.require_env(),
        ctx.algo.eval_size,
        seed=derive_seed(ctx.job.seed, "eval"),
        max_new_tokens=r.max_new_tokens,
        stop=r.stop,
        opponent_name=opponent_name,
        adapter=ctx.adapter,
        adapters=adapters,
        opponent_agent=opponent_agent,
        turn_timeout_s=r.turn_timeout_s,
        max_steps=r.max_turns,
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
    adapters: Mapping[str, str] | None = None,
    opponent_agent: RoleSpec | None = None,
    turn_timeout_s: float | None = 30.0,
    max_steps: int | None = None,
    renderer: PromptRenderer | None = None,
) -> dict[str, float]:
    """Greedy held-out play against the scripted opponent ``opponent_name`` that the env offers
    (its ``scripted_opponents``), the policy's role alternating.

    Episode ``i`` (of ``num_episodes``, reset with seed ``seed + i``: fixed seeds, the same at
    every evaluation) has the policy play ``roles[i % num_roles]``, with ``adapters[role]`` when
    given (``learners`` mode: each role's own adapter), else ``adapter``; the other roles are
    played by ``opponent_agent`` when given (``league`` mode: a past snapshot), else by the
    env's scripted ``opponent_name``. Returns
    ``eval/accuracy`` (= ``eval/win_rate``), ``eval/draw_rate``, ``eval/loss_rate``,
    ``eval/reward_mean``, ``eval/turns_mean``, ``eval/error_rate``, and per role (the games the
    policy played it) the outcome rates ``eval/<role>/win_rate``, ``draw_rate``, ``loss_rate`` and
    its mean reward ``eval/<role>/reward_mean``, per seat (``eval/seat<k>/...``,
    seat 1 the first mover), and the policy's final env infos as ``eval/info/<key>_mean``
    (:func:`~tinker_algos.multiagent.results.info_metrics`; e.g. ``eval/info/deal_mean``), and
    per role as ``eval/<role>/info/<key>_mean`` (the negotiation game's
    ``eval/alice/info/score_mean``: alice's deal value, 0 without a deal, whatever the outside option).
    """
    params = SamplingParams(max_new_tokens=max_new_tokens, temperature=0.0, stop=tuple(stop), seed=seed)
    spec = env_spec_of(env_factory)
    roles = tuple(spec.roles) if spec is not None else ()
    if not roles:
        raise ValueError("evaluate_multi_agent() needs an env whose spec has roles")
    played: list[tuple[str, MultiAgentEpisode]] = []  # (the policy's role, a game that ended)
    for ri, role in enumerate(roles):
        idx = [i for i in range(num_episodes) if i % len(roles) == ri]
        if not idx:
            continue
        own = Learner((adapters or {}).get(role, adapter))
        other = opponent_agent if opponent_agent is not None else opponent(opponent_name)
        agents: dict[str, RoleSpec] = {r: own if r == role else other for r in roles}
        res = multi_agent_rollout(
            policy, env_factory, [seed + i for i in idx], params, agents=agents,
            turn_timeout_s=turn_timeout_s, max_steps=max_steps, renderer=renderer,
        )
        record_eval(res, policy.tokenizer)  # the transcripts, when a run records them
        played += [(role, ep) for ep in res.episodes if ep.error is None and ep.result is not None]
    return held_out_metrics(roles, played, num_episodes)


def held_out_metrics(roles: Sequence[str], played: Sequence[tuple[str, MultiAgentEpisode]], num_episodes: int) -> dict[str, float]:
    """The metrics of :func:`evaluate_multi_agent` from the games that ended (``(role, episode)``:
    the role the policy played) of ``num_episodes`` (the others failed)."""
    games = [(role, ep.result) for role, ep in played if ep.result is not None]
    every = [res.outcomes[role] for role, res in games]
    ok = max(len(every), 1)
    out = {
        "eval/accuracy": every.count("win") / ok,
        "eval/win_rate": every.count("win") / ok,
        "eval/draw_rate": every.count("draw") / ok,
        "eval/loss_rate": every.count("loss") / ok,
        "eval/reward_mean": float(np.mean([res.rewards[role] for role, res in games])) if games else 0.0,
        "eval/turns_mean": float(np.mean([res.num_steps for _, res in games])) if games else 0.0,
        "eval/error_rate": (num_episodes - len(games)) / max(num_episodes, 1),
    }
    for role in roles:
        mine = [res for r, res in games if r == role]
        if mine:
            os = [res.outcomes[role] for res in mine]
            out.update({f"eval/{role}/{what}_rate": os.count(what) / len(os) for what in ("win", "draw", "loss")})
            out[f"eval/{role}/reward_mean"] = float(np.mean([res.rewards[role] for res in mine]))
            out.update(info_metrics(f"eval/{role}", [res.infos.get(role, {}) for res in mine]))
    out.update(seat_metrics("eval", [(ep.seat_of(role), ep.result.outcomes[role]) for role, ep in played if ep.result is not None]))
    out.update(info_metrics("eval", [res.infos.get(role, {}) for role, res in games]))
    return out
