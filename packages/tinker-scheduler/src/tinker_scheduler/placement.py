"""Where jobs run: the Ray cluster's resources, a job's own worker, or a shared model host.

Resources are accounted by the scheduler itself: capacity is the Ray cluster's total CPUs, GPUs
and memory over its live nodes (capped by ``num_cpus`` / ``num_gpus``; :func:`cluster_capacity`,
re-read every few seconds, so a node that joins gets work and a lost node's share is no longer
handed out), free is capacity minus what running jobs and model hosts reserve. The whole cluster
is treated as one pool; on a multi-node cluster a job whose bundle fits in the pool but on no
single node waits (RUNNING) until Ray can place it. Every job actor and model host asks Ray for
its CPUs, GPUs and memory; the scheduler's own process holds no model.

**State travels by a shared filesystem.** A job runs on whichever node Ray places it, and writes
its checkpoints and ``metrics.jsonl`` straight into its run directory under the scheduler's
``runs_dir``; a job resumed on another node (its first node was lost) reads its newest
checkpoint from there. So ``runs_dir`` must be the same path on every Ray node and on the
scheduler: one disk on one machine, or shared storage (NFS, a ReadWriteMany volume; see
``docs/guides/kubernetes.md``). Nothing is copied between nodes by the scheduler or through Ray's
object store.

A job runs either in its own :class:`~tinker_scheduler.worker.JobWorker` actor, placed in a
placement group of the job's resources (:func:`start_worker`), or -- a LoRA job, when the runner
accepts ``shared=`` -- on the model host of its base model (:func:`shared_host_of` gives the
:class:`~tinker_scheduler.host_pool.HostKey`). A :class:`RunningJob` is what the scheduling loop keeps
of a started job either way.
"""

from __future__ import annotations

import logging
import math
import os
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, cast

from tinker_scheduler.host_pool import HostArgs, HostKey
from tinker_scheduler.policy import GIB, Resources

if TYPE_CHECKING:
    from tinker_core.config import JobConfig

logger = logging.getLogger("tinker_scheduler")


@dataclass
class RunningJob:
    """A job the loop started: its actor, placement group and the pending ``run()`` result."""

    job_id: str
    tenant: str
    demand: Resources
    actor: Any
    placement_group: Any
    result_ref: Any
    drain_ref: Any = None
    #: The largest report ``seq`` stored (acknowledged to the actor with the next drain).
    stored_seq: int = 0
    #: Why the loop asked the job to stop: "cancel" or "shutdown" (None: not asked).
    stop_reason: str | None = None
    stop_sent_at: float | None = None
    last_step: tuple[int, float] | None = None
    #: The model host key when the job runs on a shared host (``actor`` is then the host).
    host_key: HostKey | None = None
    aborted: bool = False

    def drain(self, stored: int) -> Any:
        if self.host_key is not None:
            return self.actor.drain_job.remote(self.job_id, stored)
        return self.actor.drain.remote(stored)

    def stop(self) -> None:
        if self.host_key is not None:
            self.actor.stop_job.remote(self.job_id)
        else:
            self.actor.stop.remote()

    def abort(self) -> None:
        """End a job on a shared host at its next turn, without a checkpoint."""
        self.actor.abort_job.remote(self.job_id)


def connect_ray(ray_address: str | None, num_cpus: float | None, num_gpus: float | None) -> tuple[Resources, bool]:
    """Join ``ray_address`` or start a local Ray (unless one is initialised in this process).

    Returns the capacity this scheduler may use and whether it started (and so owns) Ray.
    """
    # Ray under `uv run` would otherwise build a fresh virtualenv for its workers each session.
    os.environ.setdefault("RAY_ENABLE_UV_RUN_RUNTIME_ENV", "0")
    import ray

    owns = False
    if not ray.is_initialized():
        kwargs: dict[str, Any] = {"include_dashboard": False, "log_to_driver": False, "namespace": "opentinker"}
        if ray_address:
            ray.init(address=ray_address, **kwargs)
        else:
            # address="local": always a new local Ray, never a cluster that happens to run on
            # this machine. Ray's local node counts whole CPUs/GPUs; a fractional cap is applied below.
            ray.init(address="local", num_cpus=_whole(num_cpus), num_gpus=_whole(num_gpus), **kwargs)
        owns = True
    return cluster_capacity(num_cpus, num_gpus), owns


def cluster_capacity(num_cpus: float | None, num_gpus: float | None) -> Resources:
    """What the scheduler may use now: the connected Ray cluster's CPUs, GPUs and memory over its
    live nodes, CPUs and GPUs capped at ``num_cpus`` / ``num_gpus`` (None: no cap)."""
    import ray

    total = ray.cluster_resources()
    cpus = float(total.get("CPU", 0.0))
    gpus = float(total.get("GPU", 0.0))
    if num_cpus is not None:
        cpus = min(cpus, float(num_cpus))
    if num_gpus is not None:
        gpus = min(gpus, float(num_gpus))
    return Resources(cpus=cpus, gpus=gpus, memory_gb=float(total.get("memory", 0.0)) / GIB)


def _whole(amount: float | None) -> int | None:
    return None if amount is None else math.ceil(amount)


def shared_host_of(config: JobConfig) -> tuple[HostKey, HostArgs] | None:
    """The model host key and ``ModelHost`` arguments of a job (a ``JobConfig``) that may share
    a host -- a LoRA job -- else None."""
    if config.lora is None or config.execution.distributed:
        return None  # a distributed job needs its own process (its learner group, its workers)
    model = config.model
    precision = model.precision
    key = HostKey.of(model.name, precision, model.device, revision=model.revision, tokenizer=model.tokenizer)
    return key, {"base_model": model.name, "precision": precision, "device": model.device,
                 "revision": model.revision, "tokenizer": model.tokenizer}


def start_worker(
    job_id: str, demand: Resources, runner: str, config: JobConfig, run_dir: str, *,
    allowed_imports: tuple[str, ...] | None = None,
) -> tuple[Any, Any, Any]:
    """Start a job in a :class:`~tinker_scheduler.worker.JobWorker` actor in a placement group
    of ``demand`` (a bundle for the job's actor, one for each of its rollout workers and learner
    actors, placed PACK or SPREAD by ``execution.placement``), on whichever nodes Ray finds room; returns ``(actor, placement group, ref of
    run())``. ``run_dir`` must be reachable at this path from every node (see the module doc).
    ``allowed_imports``: the import policy the worker enforces while the job runs."""
    import ray
    from ray.util.placement_group import placement_group
    from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

    from tinker_algos.distributed.cluster import bundles
    from tinker_scheduler.worker import JobWorker

    own = config.resources  # the job's own actor; ``demand`` adds its rollout workers and learners
    bundle: dict[str, float] = {"CPU": own.cpus}
    if own.gpus > 0:
        bundle["GPU"] = own.gpus
    if own.memory_gb:
        bundle["memory"] = own.memory_gb * GIB
    # bundle 0: the job's actor; then one per rollout worker and learner actor (tinker_algos.distributed)
    strategy = config.execution.placement.upper() if config.execution.distributed else "PACK"
    group = placement_group([bundle, *bundles(config)], strategy=strategy, name=f"opentinker-{job_id}")
    actor = (
        cast(Any, ray.remote(JobWorker))
        .options(
            num_cpus=own.cpus,
            num_gpus=own.gpus,
            memory=own.memory_gb * GIB if own.memory_gb else None,
            max_concurrency=4,
            max_restarts=0,
            scheduling_strategy=PlacementGroupSchedulingStrategy(
                placement_group=group, placement_group_bundle_index=0,
                placement_group_capture_child_tasks=True,
            ),
        )
        .remote(job_id)
    )
    return actor, group, actor.run.remote(runner, config, run_dir, allowed_imports=allowed_imports)


def release_worker(run: RunningJob) -> None:
    """Kill a job's own actor and free its placement group (errors: already gone)."""
    import ray
    from ray.util.placement_group import remove_placement_group

    for action in (lambda: ray.kill(run.actor, no_restart=True), lambda: remove_placement_group(run.placement_group)):
        try:
            action()
        except Exception:  # noqa: BLE001 - already gone
            logger.debug("cleanup of %s", run.job_id, exc_info=True)


def death_reason(error: Exception) -> str:
    """Why a job's actor died, in one line."""
    text = str(error).strip().splitlines()
    first = next((line for line in text if line.strip()), type(error).__name__)
    return f"the job's actor died ({type(error).__name__}: {first[:200]})"
