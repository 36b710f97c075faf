"""Ray for one job: joining or starting it, and where the job's actors go.

A job's actors live in one Ray placement group with a bundle per actor: its rollout workers
first, then its learners 1..M-1. On a scheduler the job's own actor was placed in such a group
(bundle 0 is the job's, :func:`tinker_scheduler.placement.start_worker`), and the job uses it;
embedded (``opentinker train``), the job joins the Ray cluster of ``RAY_ADDRESS`` when that is
set, else starts a local Ray, and makes its own group. ``execution.placement`` picks Ray's
``PACK`` or ``SPREAD`` strategy; both are soft, so when a node is lost Ray places its bundles on
the nodes left and restarts the actors there.
"""

from __future__ import annotations

import logging
import math
import os
from dataclasses import dataclass
from typing import Any

from tinker_core.config import JobConfig
from tinker_core.config.execution import WorkerResources
from tinker_core.errors import ConfigError

logger = logging.getLogger(__name__)
GIB = 1024**3
READY_TIMEOUT_S = 300.0


def ensure_ray(job: JobConfig) -> None:
    """Join ``RAY_ADDRESS`` or start a local Ray sized for the job's actors (unless this process
    is already connected, as a scheduler's job actor is)."""
    try:
        import ray
    except ImportError:
        raise ConfigError([
            "execution: rollout workers and learner actors run on Ray, which is not installed; "
            "pip install 'tinker-algos[distributed]' (or ray), or remove the execution section"
        ]) from None
    if ray.is_initialized():
        return
    os.environ.setdefault("RAY_ENABLE_UV_RUN_RUNTIME_ENV", "0")
    kwargs: dict[str, Any] = {"include_dashboard": False, "log_to_driver": False, "namespace": "opentinker"}
    address = os.environ.get("RAY_ADDRESS")
    if address:
        ray.init(address=address, **kwargs)
        return
    needed = sum(b.get("CPU", 0.0) for b in bundles(job))
    cpus = max(os.cpu_count() or 1, math.ceil(needed))
    if needed > (os.cpu_count() or 1):
        logger.warning("execution: the job's actors ask for %.1f CPUs, this machine has %d; they share them", needed, os.cpu_count() or 1)
    ray.init(address="local", num_cpus=cpus, **kwargs)


def _bundle(r: WorkerResources) -> dict[str, float]:
    b = {"CPU": r.num_cpus}
    if r.num_gpus:
        b["GPU"] = r.num_gpus
    if r.memory_gb:
        b["memory"] = r.memory_gb * GIB
    b.update(r.resources)
    return b


def bundles(job: JobConfig) -> list[dict[str, float]]:
    """The job's actor bundles: one per rollout worker, then one per learner actor."""
    ex = job.execution
    return [_bundle(ex.rollout_worker)] * ex.rollout_workers + [_bundle(ex.learner)] * (ex.learners - 1)


@dataclass
class Placement:
    """The placement group of a job's actors and where its own bundles start (``base``)."""

    job: JobConfig
    group: Any
    base: int
    owned: bool

    @classmethod
    def for_job(cls, job: JobConfig) -> Placement:
        """The current placement group when it has the job's bundles (a scheduler's job), else a new one."""
        import ray
        from ray.util import get_current_placement_group
        from ray.util.placement_group import placement_group

        wanted = bundles(job)
        current = get_current_placement_group()
        if current is not None and len(current.bundle_specs) >= 1 + len(wanted):
            return cls(job, current, 1, owned=False)
        strategy = job.execution.placement.upper()
        group = placement_group(wanted, strategy=strategy, name=f"opentinker-{job.name}-{os.getpid()}")
        try:
            ray.get(group.ready(), timeout=READY_TIMEOUT_S)
        except Exception as e:  # noqa: BLE001 - GetTimeoutError and friends
            from ray.util.placement_group import remove_placement_group

            remove_placement_group(group)
            raise ConfigError([
                f"execution: Ray could not place the job's {len(wanted)} actors ({_total(wanted)}) within "
                f"{READY_TIMEOUT_S:.0f} s ({type(e).__name__}); lower execution.rollout_worker/learner resources "
                f"or the worker counts, or add nodes (the cluster has {ray.cluster_resources()})"
            ]) from None
        return cls(job, group, 0, owned=True)

    def actor(self, cls: type, role: str, index: int, *, name: str, max_restarts: int) -> Any:
        """``ray.remote(cls)`` with the options of the ``index``-th ``role`` (``rollout`` or ``learner``)."""
        import ray
        from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

        ex = self.job.execution
        res = ex.rollout_worker if role == "rollout" else ex.learner
        bundle = self.base + index + (ex.rollout_workers if role == "learner" else 0)
        return ray.remote(cls).options(
            num_cpus=res.num_cpus,
            num_gpus=res.num_gpus,
            memory=res.memory_gb * GIB if res.memory_gb else None,
            resources=dict(res.resources) or None,
            max_restarts=max_restarts,
            max_task_retries=0,
            max_concurrency=1,
            scheduling_strategy=PlacementGroupSchedulingStrategy(placement_group=self.group, placement_group_bundle_index=bundle),
        )

    def close(self) -> None:
        if self.owned:
            from ray.util.placement_group import remove_placement_group

            try:
                remove_placement_group(self.group)
            except Exception:  # noqa: BLE001 - already gone
                logger.debug("placement group already removed", exc_info=True)


def kill_actors(actors: list[Any]) -> None:
    """Kill ``actors`` for good (those already gone are skipped)."""
    import contextlib

    import ray

    for actor in actors:
        with contextlib.suppress(Exception):
            ray.kill(actor, no_restart=True)


def _total(wanted: list[dict[str, float]]) -> str:
    cpus = sum(b.get("CPU", 0.0) for b in wanted)
    gpus = sum(b.get("GPU", 0.0) for b in wanted)
    return f"{cpus:g} CPUs" + (f", {gpus:g} GPUs" if gpus else "")
