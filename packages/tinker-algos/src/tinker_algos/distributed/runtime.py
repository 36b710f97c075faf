"""The distributed parts of one run: Ray, the placement group, the learner group, the rollout
workers -- created when the run starts (rollout workers when a stage first samples), closed
when it ends. :func:`tinker_algos.run.train` holds one :class:`Runtime` per run when
``execution`` asks for actors; see :mod:`tinker_algos.distributed`."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from tinker_algos.distributed import faults as faults_module
from tinker_algos.distributed.cluster import Placement, ensure_ray
from tinker_core.config import JobConfig

if TYPE_CHECKING:
    from tinker_algos.distributed.learners import LearnerGroup
    from tinker_algos.distributed.pool import RolloutPool


class Runtime:
    """Ray, the job's placement group, its learner actors and rollout workers."""

    def __init__(self, job: JobConfig, run_dir: Path, device: torch.device) -> None:
        self.job = job
        self.run_dir = str(run_dir)
        self.threads = torch.get_num_threads()
        self.faults = faults_module.from_environment()
        faults_module.Faults.parse(self.faults, "", None)  # a malformed list fails now, naming the variable
        ensure_ray(job)
        self.placement = Placement.for_job(job)
        self.device = device
        self.learners: LearnerGroup | None = None
        self.pool: RolloutPool | None = None
        if job.execution.learners > 1:
            from tinker_algos.distributed.learners import start_group

            self.learners = start_group(job, device, self.placement, self.threads, self.faults, self.run_dir)

    def rollout_pool(self, probe: np.ndarray) -> RolloutPool:
        """The rollout workers, started on first use."""
        if self.pool is None:
            from tinker_algos.distributed.pool import RolloutPool

            self.pool = RolloutPool(self.placement, probe, threads=self.threads, faults=self.faults, run_dir=self.run_dir)
        return self.pool

    def close(self) -> None:
        """Stop every actor and free the placement group (the Ray connection stays)."""
        for part in (self.pool, self.learners):
            if part is not None:
                part.close()
        self.pool = self.learners = None
        self.placement.close()

    def __enter__(self) -> Runtime:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()
