"""``execution``: how one job spreads over processes and machines.

By default (``rollout_workers: 0, learners: 1``) a job runs in one process: it samples its
episodes and updates its policy on one model copy. ``rollout_workers: N`` samples each step's
episodes on N Ray actors holding copies of the policy (the envs beside them); ``learners: M``
splits each batch's gradient pass over M data-parallel learners (a ``torch.distributed`` group:
gloo on the CPU, NCCL on GPUs), the job's own process being the first. After every update the
new weights (only the adapter for a LoRA job) reach every rollout worker as a versioned record
with a SHA-256 manifest, and each worker proves it loaded them (see ``docs/guides/distributed.md``).

The staleness bound is ``rollout.max_staleness`` (one knob for the in-process sample-ahead and for
rollout workers): the episodes a step trains on were sampled with weights at most that many
updates old. ``staleness_strategy`` says what happens to a group found older than that when its
step trains. Kept apart from :mod:`tinker_core.config.models`: its own section, no torch, no Ray.
"""

from __future__ import annotations

import re
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

MAX_ROLLOUT_WORKERS = 1024
"""``execution.rollout_workers``."""
MAX_LEARNERS = 256
"""``execution.learners``."""
RESOURCE_NAME_RE = re.compile(r"^[A-Za-z0-9_.:-]{1,64}$")


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", validate_default=True)


class WorkerResources(_Model):
    """What one rollout worker or one learner asks Ray for (fractions share a CPU or a GPU)."""

    num_cpus: float = Field(1.0, gt=0.0, le=1024.0, description="CPU cores the actor reserves (fractions allowed, e.g. 0.5).")
    num_gpus: float = Field(0.0, ge=0.0, le=64.0, description="GPUs the actor reserves; a fraction shares one GPU between actors (e.g. 0.25).")
    memory_gb: float | None = Field(None, gt=0.0, le=100_000.0, description="Memory the actor reserves, in GiB; None reserves none.")
    resources: dict[str, float] = Field(
        default_factory=dict, max_length=16,
        description="Custom Ray resources the actor reserves, e.g. {rollout-node: 1} to place it on the nodes started with "
        "ray start --resources '{\"rollout-node\": 4}' (names of 1-64 letters, digits, '-', '_', '.', ':'; amounts > 0).",
    )

    @field_validator("resources")
    @classmethod
    def _resource_names(cls, v: dict[str, float]) -> dict[str, float]:
        for name, amount in v.items():
            if not RESOURCE_NAME_RE.fullmatch(name) or name in ("CPU", "GPU", "memory"):
                raise ValueError(f"resource name {name!r}: use 1-64 letters, digits, '-', '_', '.', ':' (CPUs, GPUs and memory have their own fields)")
            if not 0 < amount <= 1e6:
                raise ValueError(f"resources[{name!r}] = {amount}: give an amount above 0 (at most 1e6)")
        return v


class ExecutionConfig(_Model):
    """Where one job runs: its own process (the default), or rollout workers and data-parallel
    learners as Ray actors."""

    rollout_workers: int = Field(
        0, ge=0, le=MAX_ROLLOUT_WORKERS,
        description="Ray actors that sample the episodes of rollout stages (grpo), each with its own copy of the "
        "policy and its envs; every worker samples whole groups, so at most rollout.prompts_per_step of them. "
        "0: sample in the job's own process.",
    )
    learners: int = Field(
        1, ge=1, le=MAX_LEARNERS,
        description="Data-parallel learners that split every batch's gradient pass (the job's process and "
        "learners - 1 Ray actors, joined by torch.distributed: gloo on the CPU, NCCL on GPUs); at most the rows "
        "of a step's batch. 1: the job's process alone.",
    )
    staleness_strategy: Literal["wait", "drop"] = Field(
        "wait",
        description="What keeps a trained group within rollout.max_staleness updates of the policy. 'wait': a "
        "worker whose weights are too old for a group waits for newer ones before sampling it. 'drop': workers "
        "sample with the weights they hold; a group found too old when its step trains is dropped and exactly its "
        "prompts are sampled again with the current weights.",
    )
    placement: Literal["pack", "spread"] = Field(
        "pack",
        description="How Ray places the job's actors: 'pack' onto as few nodes as fit (Ray's PACK), 'spread' over "
        "as many as there are (SPREAD); both soft, so a lost node's actors move to the nodes left.",
    )
    rollout_worker: WorkerResources = Field(
        default_factory=WorkerResources, description="Resources of each rollout worker (the execution.rollout_worker section)."
    )
    learner: WorkerResources = Field(
        default_factory=WorkerResources,
        description="Resources of each learner actor (the execution.learner section); the first learner is the job's "
        "own process, which reserves the job's resources section.",
    )
    sync_tolerance: float = Field(
        1e-3, gt=0.0, le=10.0,
        description="Largest mean absolute difference (nats per token) between a rollout worker's and the learner's "
        "logprobs of the fixed probe batch after a weight sync; above it the job fails naming the worker and the "
        "version. On the CPU in float32 they agree to about 1e-6; bf16 on GPUs needs a few hundredths.",
    )
    sync_self_test: bool = Field(
        True,
        description="At start, scramble one worker's weights and check that the sync check catches it (a check that "
        "cannot fail proves nothing); the job fails if it does not.",
    )
    worker_restart_timeout_s: float = Field(
        120.0, gt=0.0, le=86_400.0,
        description="How long a step waits for Ray to bring back a rollout worker that died before it gives up on it "
        "(its groups go to the live workers; with none left, the job's own process samples them).",
    )
    max_restarts: int = Field(
        3, ge=0, le=100,
        description="Times Ray restarts a rollout worker that died (its in-flight groups are sampled again; the "
        "restarted worker loads the newest weights first), and times the job restarts its learner group from the "
        "newest checkpoint after a learner died.",
    )

    @property
    def distributed(self) -> bool:
        """Whether the job uses Ray actors at all."""
        return self.rollout_workers > 0 or self.learners > 1


def check_topology(job: Any) -> None:
    """``job.execution`` against its stages (a ``JobConfig``): every learner gets rows, every rollout
    worker whole groups, and rollout workers serve grpo stages only."""
    ex = job.execution
    for i, stage in enumerate(job.resolved_stages()):
        where = "algorithm" if job.algorithm is not None else f"stages[{i}]"
        algo, rollout = stage.algorithm, stage.rollout or job.rollout
        rows = rollout.prompts_per_step * rollout.group_size if algo.name in ("grpo", "ppo") else algo.batch_size * (2 if algo.name == "dpo" else 1)
        if ex.learners > rows:
            raise ValueError(
                f"execution.learners: {ex.learners} learners but {where} trains on {rows} rows per step; "
                f"each learner needs at least one row, so use at most {rows} learners (or a bigger batch)"
            )
        if ex.rollout_workers and algo.name == "ppo":
            raise ValueError(
                f"execution.rollout_workers: {where} is ppo, which samples in the job's process; rollout workers "
                "serve grpo stages (use grpo with loss: ppo for a clipped objective, or set rollout_workers to 0)"
            )
        on = [n for n in ("dynamic_sampling", "curriculum") if getattr(rollout, n).enabled]
        if on and algo.name == "ppo":
            raise ValueError(f"{where}: rollout.{on[0]} is for grpo stages (ppo samples without it); set rollout.{on[0]}.enabled: false, "
                             "or use grpo with loss: ppo")
        if ex.rollout_workers and algo.name == "grpo" and on:
            raise ValueError(
                f"execution.rollout_workers: {where} uses rollout.{on[0]}, which rollout workers do not support yet "
                f"(the refill and the level are chosen in the job's process); set rollout.{on[0]}.enabled: false or rollout_workers: 0"
            )
        if ex.rollout_workers and algo.name == "grpo" and ex.rollout_workers > rollout.prompts_per_step:
            raise ValueError(
                f"execution.rollout_workers: {ex.rollout_workers} workers but {where} samples {rollout.prompts_per_step} "
                f"groups per step (rollout.prompts_per_step); each worker samples whole groups, so use at most "
                f"{rollout.prompts_per_step} workers"
            )
