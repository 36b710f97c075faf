"""What a multi-agent rollout returns: its episodes, the learners' trajectories, its metrics."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from tinker_core.contracts import Batch, Trajectory, TrajectoryGroup
from tinker_core.coordinator import EpisodeResult

__all__ = ["MultiAgentEpisode", "MultiAgentRolloutResult"]


@dataclass
class MultiAgentEpisode:
    """One episode: the coordinator's result, the learners' trajectories, or the error."""

    index: int
    seed: int
    result: EpisodeResult | None
    trajectories: dict[str, Trajectory]
    learner_roles: tuple[str, ...]
    error: str | None = None
    error_message: str | None = None


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

    def trajectories_for(self, adapter: str | None) -> list[Trajectory]:
        """The trajectories of roles played with ``adapter`` (separate learners)."""
        return [t for t in self.trajectories if t.info.get("adapter") == adapter]

    def metrics(self, prefix: str = "env") -> dict[str, float]:
        """Learner-role means (``reward_mean``, ``success_rate`` = win rate, ``win/draw/loss_rate``),
        episode means (``turns_mean`` = env steps, ``truncated_rate``, ``forfeit_rate``), per role
        ``<prefix>/<role>/reward_mean`` and ``.../win_rate``, and ``rollout/*``."""
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
