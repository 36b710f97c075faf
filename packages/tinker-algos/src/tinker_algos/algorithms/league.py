"""``multi_agent.mode: league``: the policy plays a pool of its own past snapshots.

The pool (:class:`League`) holds up to ``league.pool_size`` snapshots of the policy's adapter --
copies of its weights, each a LoRA adapter ``<adapter>-past-<step>`` on the same base model, taken
when the stage starts and then every ``league.snapshot_every`` steps (the oldest leaves when the
pool is full) -- plus the scripted opponents of ``league.scripted``, which never leave.

A step (:meth:`League.collect`):

1. Task ``k`` of step ``s`` draws its opponent from the pool with a generator seeded by
   ``(seed, stage, s, "league")`` -- by ``recency`` (weight ``1/(1+age)``, the newest snapshot
   age 0, scripted members one older than the oldest snapshot) or by ``win_rate`` (weight
   ``1.1 - w``, ``w`` the policy's win rate against the member so far, 0.5 before any game: the
   members it beats least are played most) -- and the policy plays role ``roles[(k + s) % n]``,
   so every seat is trained.
2. The tasks with the same opponent and role are played in one
   :func:`~tinker_algos.multiagent.multi_agent_rollout` (a snapshot plays as a
   :class:`~tinker_algos.multiagent.Learner` with its adapter, sampled but never trained); only the
   policy's trajectories are kept (:meth:`MultiAgentRolloutResult.for_role`), and the parts are
   joined with :meth:`MultiAgentRolloutResult.concat`.
3. The outcomes update each member's record (wins, draws, losses of the policy against it).

Held-out evaluation (:meth:`League.evaluate`) plays the greedy policy against every member on
fixed seeds and rates it: ``eval/elo`` is the maximum-likelihood Elo rating of the policy given
those games, with the evaluation's scripted opponent (``eval_opponent``) anchored at
:data:`ELO_ANCHOR` and each snapshot rated at the policy's ``eval/elo`` when it was taken (the
anchor before any evaluation); other scripted members are reported (``eval/league/<member>/...``)
but not rated.

The pool survives resume: each checkpoint holds ``league/pool.json`` (the members and their
records) and ``league/<member>/`` (each snapshot's adapter), loaded back mid-stage.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import numpy as np

from tinker_algos.multiagent.results import MultiAgentRolloutResult
from tinker_algos.multiagent.roles import Learner, RoleSpec, opponent
from tinker_algos.multiagent.rollout import multi_agent_rollout
from tinker_algos.training.checkpoint import save_adapter
from tinker_core.seeding import derive_seed

if TYPE_CHECKING:
    from tinker_algos.algorithms.base import StageContext
    from tinker_algos.multiagent.params import MultiAgentParams
    from tinker_core.env import EnvSpec

__all__ = ["ELO_ANCHOR", "LEAGUE_DIR", "League", "Member", "elo_rating"]

LEAGUE_DIR = "league"
"""The folder of a run checkpoint holding the pool (``league/pool.json``, ``league/<member>/``)."""
ELO_ANCHOR = 1000.0
"""The Elo rating the evaluation's scripted opponent is held at."""


@dataclass
class Member:
    """A member of the pool and the policy's record against it."""

    name: str
    kind: Literal["snapshot", "scripted"]
    step: int = -1
    adapter: str | None = None
    elo: float = ELO_ANCHOR
    wins: int = 0
    draws: int = 0
    losses: int = 0

    @property
    def games(self) -> int:
        return self.wins + self.draws + self.losses

    @property
    def win_rate(self) -> float:
        """The policy's win rate against this member (0.5 before any game)."""
        return self.wins / self.games if self.games else 0.5

    def agent(self) -> RoleSpec:
        """Who plays this member's roles: its adapter (a snapshot) or the env's scripted opponent."""
        return Learner(self.adapter) if self.kind == "snapshot" else opponent(self.name)


def elo_rating(games: Sequence[tuple[float, float]], lo: float = -1000.0, hi: float = 4000.0) -> float:
    """The maximum-likelihood Elo rating of a player with scores ``(score, opponent_rating)``
    (score 1 win, 0.5 draw, 0 loss): the root of ``sum(score - E(R - R_j))`` by bisection,
    ``E(d) = 1 / (1 + 10**(-d/400))``; a perfect or null record is held to ``[lo, hi]``."""
    if not games:
        return ELO_ANCHOR

    def excess(r: float) -> float:
        return sum(s - 1.0 / (1.0 + 10.0 ** ((rj - r) / 400.0)) for s, rj in games)

    if excess(hi) >= 0:
        return hi
    if excess(lo) <= 0:
        return lo
    for _ in range(60):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if excess(mid) > 0 else (lo, mid)
    return (lo + hi) / 2


class League:
    """The pool of ``mode: league`` for one stage (see the module docstring)."""

    def __init__(self, ctx: StageContext, settings: MultiAgentParams, spec: EnvSpec) -> None:
        assert ctx.adapter is not None and settings.league is not None, "league mode trains a LoRA adapter (checked by for_env)"
        self.ctx, self.cfg, self.roles = ctx, settings.league, tuple(spec.roles)
        self.eval_opponent = settings.held_out_opponents[0]
        self.scripted = [Member(name, "scripted") for name in self.cfg.scripted]
        self.snapshots: list[Member] = []  # oldest first
        self.elo = ELO_ANCHOR  # the policy's rating at the last evaluation
        self.snapshot(0)

    @property
    def members(self) -> list[Member]:
        """The snapshots, newest first, then the scripted members."""
        return [*reversed(self.snapshots), *self.scripted]

    # ---- the pool -------------------------------------------------------------------------------
    def snapshot(self, step: int) -> Member:
        """Add a copy of the policy's adapter as it is now; the oldest snapshot leaves a full pool."""
        policy, source = self.ctx.policy, self.ctx.adapter
        assert source is not None
        member = Member(f"past-{step:06d}", "snapshot", step, f"{source}-past-{step:06d}", elo=self.elo)
        if member.adapter in policy.adapter_names:  # pragma: no cover - a stage restarted on this policy
            policy.remove_adapter(member.adapter)
        policy.add_adapter(member.adapter, policy.lora_specs.get(source), seed=0)
        policy.copy_adapter_weights(source, member.adapter)
        for p in policy.adapter_parameters(member.adapter):
            p.requires_grad_(False)
        policy.set_adapter(source)
        self.snapshots.append(member)
        while len(self.snapshots) > self.cfg.pool_size:
            old = self.snapshots.pop(0)
            assert old.adapter is not None
            policy.remove_adapter(old.adapter)
        policy.set_adapter(source)
        return member

    def after_step(self, step: int) -> None:
        """Snapshot the policy after stage step ``step`` when ``snapshot_every`` says so."""
        if (step + 1) % self.cfg.snapshot_every == 0:
            self.snapshot(step + 1)

    def weights(self) -> np.ndarray:
        """The members' sampling weights (see the module docstring), in :attr:`members` order."""
        members = self.members
        if self.cfg.sample == "win_rate":
            return np.array([1.1 - m.win_rate for m in members])
        n = len(self.snapshots)
        return np.array([1.0 / (1 + (i if m.kind == "snapshot" else n)) for i, m in enumerate(members)])

    # ---- a step ---------------------------------------------------------------------------------
    def collect(self, step: int) -> MultiAgentRolloutResult:
        """The step's episodes: each task against a member drawn from the pool; the policy's trajectories."""
        ctx, r = self.ctx, self.ctx.rollout_cfg
        members, weights = self.members, self.weights()
        rng = np.random.default_rng(ctx.step_seed(step, "league"))
        seeds = ctx.task_seeds(step)
        plan: dict[tuple[int, str], list[int]] = {}
        for k in range(len(seeds)):
            m = int(rng.choice(len(members), p=weights / weights.sum()))
            plan.setdefault((m, self.roles[(k + step) % len(self.roles)]), []).append(k)
        parts: list[MultiAgentRolloutResult] = []
        base = ctx.sampling_params(step)
        for i, ((m, role), tasks) in enumerate(plan.items()):
            member = members[m]
            agents: dict[str, RoleSpec] = {x: Learner(ctx.adapter) if x == role else member.agent() for x in self.roles}
            result = multi_agent_rollout(
                ctx.policy, ctx.require_env(), [seeds[k] for k in tasks],
                replace(base, seed=None if base.seed is None else derive_seed(base.seed, "league", i)),
                agents=agents, group_size=r.group_size, turn_timeout_s=r.turn_timeout_s, max_steps=r.max_turns,
                max_error_rate=r.max_error_rate, renderer=ctx.renderer,
            ).for_role(role)
            self.record(member, role, result)
            parts.append(result)
        return MultiAgentRolloutResult.concat(parts)

    @staticmethod
    def record(member: Member, role: str, result: MultiAgentRolloutResult) -> None:
        for ep in result.episodes:
            if ep.error is None and ep.result is not None:
                outcome = ep.result.outcomes[role]
                member.wins += outcome == "win"
                member.draws += outcome == "draw"
                member.losses += outcome == "loss"

    def metrics(self) -> dict[str, float]:
        """``league/pool_size`` (members), ``league/snapshots`` and ``league/newest_snapshot_step``."""
        return {
            "league/pool_size": float(len(self.members)),
            "league/snapshots": float(len(self.snapshots)),
            "league/newest_snapshot_step": float(self.snapshots[-1].step),
        }

    # ---- evaluation -----------------------------------------------------------------------------
    def evaluate(self, play: Any, num_episodes: int, played: Mapping[str, Mapping[str, float]] | None = None) -> dict[str, float]:
        """``play(opponent_agent)`` -> the evaluation metrics against one opponent
        (:func:`~tinker_algos.multiagent.evaluate_multi_agent`: the greedy policy, seats
        alternating, ``num_episodes`` games on fixed seeds); ``played``: those metrics of scripted
        opponents this evaluation already played (the stage's own held-out games, by name), which
        are not played again. Returns ``eval/league/<member>/win_rate`` (and ``draw_rate``,
        ``loss_rate``) per member and ``eval/elo`` (see the module docstring); the policy's rating
        is kept for the snapshots taken from now on."""
        out: dict[str, float] = {}
        games: list[tuple[float, float]] = []
        rated = [(m, m.elo) for m in self.snapshots]
        anchor = next((m for m in self.scripted if m.name == self.eval_opponent), Member(self.eval_opponent, "scripted"))
        others = [m for m in self.scripted if m.name != self.eval_opponent]
        for member, rating in [*rated, (anchor, ELO_ANCHOR), *((m, None) for m in others)]:
            known = (played or {}).get(member.name) if member.kind == "scripted" else None
            ev = known if known is not None else play(member.agent())
            n = max(round((1.0 - ev["eval/error_rate"]) * num_episodes), 0)
            for what in ("win", "draw", "loss"):
                out[f"eval/league/{member.name}/{what}_rate"] = ev[f"eval/{what}_rate"]
            if rating is not None:
                wins, draws = round(ev["eval/win_rate"] * n), round(ev["eval/draw_rate"] * n)
                games += [(1.0, rating)] * wins + [(0.5, rating)] * draws + [(0.0, rating)] * (n - wins - draws)
        self.elo = elo_rating(games)
        out["eval/elo"] = self.elo
        return out

    # ---- checkpoints ----------------------------------------------------------------------------
    def save(self, checkpoint_dir: Path) -> None:
        """``league/pool.json`` and each snapshot's adapter in ``league/<member>/``."""
        root = checkpoint_dir / LEAGUE_DIR
        root.mkdir(parents=True, exist_ok=True)
        for m in self.snapshots:
            assert m.adapter is not None
            save_adapter(self.ctx.policy, m.adapter, root / m.name)
        state = {"elo": self.elo, "snapshots": [asdict(m) for m in self.snapshots], "scripted": [asdict(m) for m in self.scripted]}
        (root / "pool.json").write_text(json.dumps(state, indent=1, sort_keys=True), encoding="utf-8")

    def load(self, checkpoint_dir: Path) -> None:
        """Replace the pool with the one :meth:`save` wrote (mid-stage resume)."""
        root = checkpoint_dir / LEAGUE_DIR
        state = json.loads((root / "pool.json").read_text(encoding="utf-8"))
        policy, source = self.ctx.policy, self.ctx.adapter
        assert source is not None
        for m in self.snapshots:
            assert m.adapter is not None
            policy.remove_adapter(m.adapter)
        self.snapshots = [Member(**m) for m in state["snapshots"]]
        self.scripted = [Member(**m) for m in state["scripted"]]
        self.elo = float(state["elo"])
        for m in self.snapshots:
            assert m.adapter is not None
            policy.load_adapter(m.adapter, root / m.name)
            for p in policy.adapter_parameters(m.adapter):
                p.requires_grad_(False)
        policy.set_adapter(source)

