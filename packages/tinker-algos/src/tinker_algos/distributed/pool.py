"""The job's rollout worker actors: one pool per run, across stages (started by
:meth:`tinker_algos.distributed.runtime.Runtime.rollout_pool` when a stage first samples on them).

Each worker is placed in its own bundle of the job's placement group and restarted by Ray up to
``execution.max_restarts`` times; :meth:`RolloutPool.live_worker` sends a unit to another worker
once Ray gave up on one.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from tinker_algos.distributed.cluster import Placement, kill_actors
from tinker_algos.distributed.rollout_worker import RolloutWorker, Unit


class RolloutPool:
    """The job's rollout worker actors (one pool for the whole run, across stages)."""

    def __init__(self, placement: Placement, probe: np.ndarray, *, threads: int, faults: str, run_dir: str) -> None:
        job = placement.job
        self.names = [f"rollout-{i}" for i in range(job.execution.rollout_workers)]
        job_json = job.model_dump_json()
        self.actors = [
            placement.actor(RolloutWorker, "rollout", i, name=name, max_restarts=job.execution.max_restarts).remote(
                job_json, name, threads, faults, run_dir, probe, job.execution.staleness_strategy
            )
            for i, name in enumerate(self.names)
        ]
        self.dead: set[int] = set()
        self.call([a.ready.remote() for a in self.actors])

    def call(self, refs: list[Any]) -> list[Any]:
        import ray

        return list(ray.get(refs))

    def submit(self, worker: int, unit: Unit) -> Any:
        return self.actors[worker].collect.remote(unit)

    def live_worker(self, preferred: int) -> int:
        """``preferred`` unless Ray gave up restarting it, else the next live worker."""
        n = len(self.actors)
        for k in range(n):
            w = (preferred + k) % n
            if w not in self.dead:
                return w
        raise RuntimeError(f"all {n} rollout workers died and Ray restarts no more of them (execution.max_restarts)")

    def close(self) -> None:
        kill_actors(self.actors)
