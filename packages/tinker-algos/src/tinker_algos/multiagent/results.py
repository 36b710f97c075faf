"""What a multi-agent rollout returns: its episodes, the learners' trajectories, its metrics."""

from __future__ import annotations

import numbers
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from tinker_core.contracts import Batch, Trajectory, TrajectoryGroup
from tinker_core.coordinator import EpisodeResult
from tinker_core.episodes import Episode

__all__ = ["MultiAgentEpisode", "MultiAgentRolloutResult", "info_metrics", "seat_metrics"]


def seat_metrics(prefix: str, seated: Sequence[tuple[int, str]]) -> dict[str, float]:
    """``<prefix>/seat<k>/win_rate``, ``draw_rate`` and ``loss_rate`` from ``(seat, outcome)``
    pairs (seat 1 is the first mover; seat 0, unknown, is left out), one set per seat seen."""
    out: dict[str, float] = {}
    for k in sorted({s for s, _ in seated if s > 0}):
        outcomes = [o for s, o in seated if s == k]
        for what in ("win", "draw", "loss"):
            out[f"{prefix}/seat{k}/{what}_rate"] = sum(o == what for o in outcomes) / len(outcomes)
    return out


def info_metrics(prefix: str, infos: Iterable[Mapping[str, Any]]) -> dict[str, float]:
    """``<prefix>/info/<key>_mean``: the mean of each numeric or boolean value in ``infos`` (the
    roles' final env infos, :attr:`~tinker_core.coordinator.EpisodeResult.infos`), over the infos
    that have the key; other values (text, lists, None) are left out. Game-agnostic: the
    negotiation game's ``deal`` and ``score`` give ``<prefix>/info/deal_mean`` (the deal rate)
    and ``<prefix>/info/score_mean``."""
    values: dict[str, list[float]] = {}
    for info in infos:
        for key, value in info.items():
            if isinstance(value, (bool, np.bool_, numbers.Real)):
                values.setdefault(str(key), []).append(float(value))
    return {f"{prefix}/info/{key}_mean": float(np.mean(vs)) for key, vs in sorted(values.items())}


@dataclass
class MultiAgentEpisode:
    """One game: the coordinator's result, the learners' trajectories, or the error; each learner
    seat's :class:`~tinker_core.episodes.Episode` is :meth:`seat_episodes`."""

    index: int
    seed: int
    result: EpisodeResult | None
    trajectories: dict[str, Trajectory]
    learner_roles: tuple[str, ...]
    error: str | None = None
    error_message: str | None = None
    seats: tuple[str, ...] = ()
    """The roles by seat: ``seats[0]`` moved first (seat 1), ``seats[1]`` second (seat 2), ...;
    empty for an episode that failed."""

    def seat_of(self, role: str) -> int:
        """``role``'s seat, 1 for the first mover (0 when unknown: the episode failed)."""
        return self.seats.index(role) + 1 if role in self.seats else 0

    def seat_episodes(self, roles: Sequence[str], group_size: int = 1) -> list[Episode]:
        """The :class:`~tinker_core.episodes.Episode` of each learner role (the coordinator's
        :meth:`~tinker_core.coordinator.EpisodeResult.episode` with the role's trajectory), for a
        rollout of ``roles`` and ``group_size``; an episode that failed before a result gives one
        per learner role with its error and no turns. A seat's ``group`` is its GRPO group:
        ``task * len(roles) + role index``."""
        out = []
        for role in self.learner_roles:
            group = (self.index // max(group_size, 1)) * len(roles) + list(roles).index(role)
            if self.result is None:
                out.append(Episode(None, 0.0, 0, False, self.error or "error", [], group=group, role=role))
                continue
            seat = self.result.episode(role)
            out.append(replace(seat, trajectory=self.trajectories.get(role) if self.error is None else None,
                               error=self.error or seat.error, group=group))
        return out


@dataclass
class MultiAgentRolloutResult:
    """What :func:`~tinker_algos.multiagent.multi_agent_rollout` returns; ``trajectories`` and
    ``metrics`` as for :class:`~tinker_algos.rollout.RolloutResult`."""

    episodes: list[MultiAgentEpisode]
    roles: tuple[str, ...]
    errors: Counter[str]
    new_tokens: int
    seconds: float
    rounds: int = 0
    group_size: int = 1

    @property
    def groups(self) -> list[TrajectoryGroup]:
        """One :class:`~tinker_core.TrajectoryGroup` per (task, role), task after task and role
        after role: the learner trajectories of that role in the task's episodes without error
        (episode ``i`` plays task ``i // group_size``). Groups of roles nobody learns are empty."""
        n_tasks = -(-len(self.episodes) // self.group_size)
        groups = [TrajectoryGroup([]) for _ in range(n_tasks * len(self.roles))]
        for ep in self.episodes:
            if ep.error is not None:
                continue
            for ri, role in enumerate(self.roles):
                if role in ep.trajectories:
                    groups[(ep.index // self.group_size) * len(self.roles) + ri].trajectories.append(ep.trajectories[role])
        return groups

    @property
    def trajectories(self) -> list[Trajectory]:
        """Every learner trajectory of the episodes without error (episode order, then role order)."""
        return [
            ep.trajectories[r] for ep in self.episodes if ep.error is None for r in self.roles if r in ep.trajectories
        ]

    def batch(self, pad_token_id: int = 0) -> Batch:
        """The training batch: :attr:`trajectories` in episode order (each episode's roles side by
        side), so a group's rows are apart and the batch names groups by label (``group_ids_B``
        is ``task * num_roles + role_index``; no ``group_sizes_G``)."""
        return Batch.from_trajectories(self.trajectories, pad_token_id)

    def for_role(self, role: str) -> MultiAgentRolloutResult:
        """The same episodes with only ``role``'s trajectories (what ``role``'s learner trains on
        in ``learners`` mode); groups, batch and metrics as for the whole result."""
        episodes = [
            replace(ep, trajectories={r: t for r, t in ep.trajectories.items() if r == role},
                    learner_roles=tuple(r for r in ep.learner_roles if r == role))
            for ep in self.episodes
        ]
        return replace(self, episodes=episodes)

    @classmethod
    def concat(cls, parts: Sequence[MultiAgentRolloutResult]) -> MultiAgentRolloutResult:
        """The results of several rollouts (same env, same ``group_size``) as one: episodes
        renumbered part after part, so task ``k`` of a part becomes a task after those of the
        parts before, and each trajectory's ``group_id`` follows (groups stay per task and role)."""
        if not parts:
            raise ValueError("MultiAgentRolloutResult.concat() needs at least one result")
        first = parts[0]
        episodes: list[MultiAgentEpisode] = []
        errors: Counter[str] = Counter()
        for part in parts:
            if part.roles != first.roles or part.group_size != first.group_size:
                raise ValueError("MultiAgentRolloutResult.concat(): the parts must share roles and group_size")
            offset = len(episodes)
            group_offset = (offset // first.group_size) * len(first.roles)
            for ep in part.episodes:
                trajs = {r: replace(t, group_id=t.group_id + group_offset, info={**t.info, "episode": ep.index + offset})
                         for r, t in ep.trajectories.items()}
                episodes.append(replace(ep, index=ep.index + offset, trajectories=trajs))
            errors.update(part.errors)
        return cls(episodes, first.roles, errors, sum(p.new_tokens for p in parts), sum(p.seconds for p in parts),
                   sum(p.rounds for p in parts), first.group_size)

    def trajectories_for(self, adapter: str | None) -> list[Trajectory]:
        """The trajectories of roles played with ``adapter`` (separate learners)."""
        return [t for t in self.trajectories if t.info.get("adapter") == adapter]

    def metrics(self, prefix: str = "env") -> dict[str, float]:
        """Learner-role means (``reward_mean``, ``success_rate`` = win rate, ``win/draw/loss_rate``),
        episode means (``turns_mean`` = env steps, ``truncated_rate``, ``forfeit_rate``), per role
        ``<prefix>/<role>/reward_mean`` and ``.../win_rate``, per seat of the learner roles
        ``<prefix>/seat<k>/win_rate``, ``draw_rate``, ``loss_rate`` (seat 1 moved first; see
        :func:`seat_metrics`), the learner roles' final env infos as ``<prefix>/info/<key>_mean``
        (:func:`info_metrics`), and ``rollout/*``."""
        ok = [(ep.result, ep.learner_roles) for ep in self.episodes if ep.error is None and ep.result is not None]
        games = [res for res, _ in ok]

        def mean(xs: Sequence[float]) -> float:
            return float(np.mean(xs)) if len(xs) else 0.0

        learner = [(res, r) for res, roles in ok for r in roles]
        out: dict[str, float] = {
            f"{prefix}/reward_mean": mean([res.rewards[r] for res, r in learner]),
            f"{prefix}/success_rate": mean([res.outcomes[r] == "win" for res, r in learner]),
            f"{prefix}/win_rate": mean([res.outcomes[r] == "win" for res, r in learner]),
            f"{prefix}/draw_rate": mean([res.outcomes[r] == "draw" for res, r in learner]),
            f"{prefix}/loss_rate": mean([res.outcomes[r] == "loss" for res, r in learner]),
            f"{prefix}/turns_mean": mean([res.num_steps for res in games]),
            f"{prefix}/truncated_rate": mean([res.reason == "truncated" for res in games]),
            f"{prefix}/forfeit_rate": mean([res.reason.startswith("forfeit") for res in games]),
        }
        for r in self.roles:
            out[f"{prefix}/{r}/reward_mean"] = mean([res.rewards[r] for res in games])
            out[f"{prefix}/{r}/win_rate"] = mean([res.outcomes[r] == "win" for res in games])
        seated = [(ep.seat_of(r), ep.result.outcomes[r]) for ep in self.episodes if ep.error is None and ep.result is not None
                  for r in ep.learner_roles]
        out.update(seat_metrics(prefix, seated))
        out.update(info_metrics(prefix, (res.infos.get(r, {}) for res, r in learner)))
        n = len(self.episodes)
        out.update(
            {
                "rollout/episodes": float(n),
                "rollout/trajectories": float(len(self.trajectories)),
                "rollout/new_tokens": float(self.new_tokens),
                "rollout/sample_rounds": float(self.rounds),
                "rollout/error_rate": (n - len(games)) / max(n, 1),
                "rollout/tokens_per_s": self.new_tokens / max(self.seconds, 1e-9),
            }
        )
        for reason, k in sorted(self.errors.items()):
            out[f"rollout/errors/{reason}"] = float(k)
        return out
