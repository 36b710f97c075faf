"""Data-parallel learners: one batch's gradient pass split over ``execution.learners`` processes.

The job's own process is learner 0 and keeps everything else a trainer does (no-grad forward
passes, the reference policy, checkpoints); learners 1..M-1 are :class:`LearnerActor` Ray actors
holding a replica of the policy and a trainer with the stage's settings. All of them join one
``torch.distributed`` group (gloo on the CPU, NCCL on CUDA).

:class:`DataParallelTrainer` is the trainer the stage gets. Its ``forward_backward`` splits the
batch's rows into contiguous shares (pairs kept together for a preference loss), sends share
``j`` to learner ``j`` and runs share 0 itself, each weighted into the whole batch's loss
(``batch_totals``), so the shares' gradients add up to the whole batch's; the metrics are summed
and the logprobs gathered. Its ``optim_step`` runs every learner's ``optim_step`` together: each
first sums the gradients over the group (one all-reduce), then clips and steps the same
optimizer on the same gradients, so the learners stay equal -- checked every step by comparing
their gradient norms. Two learners give one learner's update up to float rounding (the sums run
in another order).

At each stage start (:meth:`LearnerGroup.start_stage`) the actors get the job's trainable
weights and the trainer's state (optimizer moments, step) from learner 0, so a resumed stage
starts every learner from the checkpoint. A learner that dies fails the step with
:class:`LearnerLost`; :func:`tinker_algos.run.train` then restarts the job from its newest
checkpoint with a new group (``execution.max_restarts`` times).
"""

from __future__ import annotations

import datetime
import socket
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from tinker_algos.distributed.cluster import kill_actors
from tinker_algos.distributed.faults import Faults
from tinker_algos.distributed.replica import add_job_adapter, load_job_policy, trainable
from tinker_algos.distributed.weights import copy_into, pack, params_digest, unpack
from tinker_algos.training.trainer import Trainer, TrainerConfig
from tinker_core.config import JobConfig
from tinker_core.errors import OpenTinkerError

#: how long a collective waits for a learner before the step fails (a dead peer usually fails it at once)
COLLECTIVE_TIMEOUT_S = 300.0
PER_ROW_KEYS = ("advantages_B_T", "ref_logprobs_B_T", "weights_B_T", "values_B_T", "old_values_B_T", "returns_B_T")
"""``forward_backward`` keyword arguments that hold one row per batch row (split with the batch)."""


class LearnerLost(OpenTinkerError, RuntimeError):
    """A data-parallel learner died or left the group; the job restarts from its newest checkpoint."""


def row_shares(rows: int, learners: int, *, pairs: bool = False) -> list[np.ndarray]:
    """Contiguous row indices for each learner: as even as can be, earlier learners one more;
    ``pairs`` keeps rows ``2k, 2k+1`` together (a preference loss pairs them). A learner may get
    none when the batch has fewer rows (or pairs) than learners."""
    unit = 2 if pairs else 1
    units = np.array_split(np.arange(rows // unit if pairs else rows), learners)
    if not pairs:
        return [u.astype(np.int64) for u in units]
    return [np.stack([2 * u, 2 * u + 1], axis=1).reshape(-1).astype(np.int64) for u in units]


def backend_for(device: torch.device) -> str:
    """``nccl`` for CUDA devices, ``gloo`` otherwise."""
    return "nccl" if device.type == "cuda" else "gloo"


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("", 0))
        return int(s.getsockname()[1])


def join_group(init_method: str, rank: int, world: int, backend: str) -> None:
    """Join (or re-join) the process-wide ``torch.distributed`` group."""
    import torch.distributed as dist

    if dist.is_initialized():
        dist.destroy_process_group()
    dist.init_process_group(
        backend, init_method=init_method, rank=rank, world_size=world, timeout=datetime.timedelta(seconds=COLLECTIVE_TIMEOUT_S)
    )


def leave_group() -> None:
    import torch.distributed as dist

    if dist.is_initialized():
        dist.destroy_process_group()


@dataclass
class StageStart:
    """What a learner actor needs to mirror learner 0 at a stage's start."""

    trainer_config: dict[str, Any]
    weights: Any  # a WeightRecord of the trainable tensors
    trainer_state: dict[str, Any]


class LearnerActor:
    """Learner ``rank`` (>= 1) of a job: a replica of the policy and a trainer that computes the
    gradients of its share of each batch and applies the group's summed gradients."""

    def __init__(self, job_json: str, rank: int, world: int, init_method: str, threads: int | None, faults: str, run_dir: str) -> None:
        self.job = JobConfig.model_validate_json(job_json)
        self.rank, self.name = rank, f"learner-{rank}"
        self.policy = load_job_policy(self.job, threads=threads)
        self.adapter = add_job_adapter(self.policy, self.job)
        self.faults = Faults.parse(faults, self.name, run_dir)
        self.trainer: Trainer | None = None
        self.init_method, self.world = init_method, world

    def join(self) -> int:
        """Join the group (blocks until every learner has; call while learner 0 joins)."""
        join_group(self.init_method, self.rank, self.world, backend_for(self.policy.device))
        return self.rank

    def start_stage(self, start: StageStart) -> str:
        """A new trainer with the stage's settings, learner 0's weights and trainer state; returns
        the digest of the weights it now holds."""
        self.trainer = Trainer(self.policy, TrainerConfig.from_dict(start.trainer_config), adapter=self.adapter)
        self.trainer.data_parallel = True
        copy_into(trainable(self.policy, self.adapter), unpack(start.weights))
        self.trainer.load_state_dict(start.trainer_state, with_optimizer=True)
        return params_digest(trainable(self.policy, self.adapter).items())

    def forward_backward(self, share: Any, loss: str, kwargs: dict[str, Any]) -> tuple[dict[str, float], np.ndarray | None]:
        """The gradient of this learner's share (``kwargs`` carry ``batch_totals``)."""
        assert self.trainer is not None, "start_stage first"
        out = self.trainer.forward_backward(share, loss, **kwargs)
        return (out[0], out[1]) if isinstance(out, tuple) else (out, None)

    def optim_step(self, lr: float | None, overrides: dict[str, Any], step: int) -> dict[str, float]:
        """Sum the gradients over the group, then the same update as every learner."""
        assert self.trainer is not None, "start_stage first"
        self.faults.maybe_exit("exit", step)
        return self.trainer.optim_step(lr, **overrides)

    def digest(self) -> str:
        return params_digest(trainable(self.policy, self.adapter).items())

    def leave(self) -> None:
        leave_group()


class LearnerGroup:
    """Learner 0's handle on the actors 1..M-1 (created by :func:`start_group`)."""

    def __init__(self, actors: Sequence[Any], names: Sequence[str]) -> None:
        self.actors, self.names = list(actors), list(names)
        self.step = 0

    @property
    def world(self) -> int:
        return len(self.actors) + 1

    def start_stage(self, trainer: Trainer) -> None:
        """Mirror ``trainer`` (learner 0's, after any checkpoint was loaded) on every actor."""
        start = StageStart(trainer.config.to_dict(), pack(zip(trainer.param_names, trainer.params, strict=True), version=-1, kind="stage"), trainer.state_dict())
        digests = self.call([a.start_stage.remote(start) for a in self.actors])
        own = params_digest(zip(trainer.param_names, trainer.params, strict=True))
        for name, d in zip(self.names, digests, strict=True):
            if d != own:
                raise LearnerLost(f"{name} does not hold learner 0's weights after the stage start ({d[:12]} != {own[:12]})")

    def call(self, refs: list[Any]) -> list[Any]:
        """Wait for the actors' calls; a dead learner is :class:`LearnerLost`."""
        import ray

        try:
            return list(ray.get(refs))
        except (ray.exceptions.RayActorError, ray.exceptions.ActorDiedError) as e:
            raise LearnerLost(f"a data-parallel learner died ({type(e).__name__}); the job restarts from its newest checkpoint") from e

    def close(self) -> None:
        leave_group()
        kill_actors(self.actors)


class DataParallelTrainer(Trainer):
    """Learner 0's trainer: ``forward_backward`` and ``optim_step`` run on the whole group (see
    the module docstring); every other primitive runs here alone."""

    group: LearnerGroup

    def attach(self, group: LearnerGroup) -> DataParallelTrainer:
        self.group = group
        self.data_parallel = True
        group.start_stage(self)
        return self

    def forward_backward(self, batch: Any, loss: str = "cross_entropy", **kwargs: Any) -> Any:  # type: ignore[override]
        import tinker_core.registry

        tokens = np.asarray(batch.tokens_B_T)
        mask = np.asarray(batch.loss_mask_B_T, dtype=np.float64) * np.asarray(batch.attention_mask_B_T, dtype=np.float64)
        totals = (float(mask.sum()), float((mask.sum(-1) > 0).sum()))
        if totals[0] == 0:
            return super().forward_backward(batch, loss, **kwargs)  # the trainer's own error for a batch with no trained tokens
        pairs = tinker_core.registry.get_loss(loss).loss_kind == "preference"
        shares = row_shares(tokens.shape[0], self.group.world, pairs=pairs)
        want_logprobs = bool(kwargs.get("return_logprobs"))
        refs, remote_rows = [], []
        for actor, rows in zip(self.group.actors, shares[1:], strict=True):
            if rows.size:
                refs.append(actor.forward_backward.remote(batch.take(rows), loss, _share_kwargs(kwargs, rows, totals)))
                remote_rows.append(rows)
        own: list[tuple[dict[str, float], np.ndarray | None]] = []
        if shares[0].size:
            out = super().forward_backward(batch.take(shares[0]), loss, **_share_kwargs(kwargs, shares[0], totals))
            own.append((out[0], out[1]) if isinstance(out, tuple) else (out, None))
        else:
            self._pending_calls += 1
        results = own + self.group.call(refs)
        metrics = _sum_metrics([m for m, _ in results], totals)
        if not want_logprobs:
            return metrics
        logprobs_B_T = np.zeros(tokens.shape, dtype=np.float32)
        for rows, (_, lp) in zip(([shares[0]] if shares[0].size else []) + remote_rows, results, strict=True):
            assert lp is not None
            logprobs_B_T[rows] = lp
        return metrics, logprobs_B_T

    def optim_step(self, lr: float | None = None, **param_overrides: Any) -> dict[str, float]:
        self.group.step += 1
        if lr is None:  # this trainer's scheduled LR: its base LR may have changed live (tinker_algos.run.live)
            lr = self.current_lr()
        refs = [a.optim_step.remote(lr, param_overrides, self.group.step) for a in self.group.actors]
        try:
            out = super().optim_step(lr, **param_overrides)
        except RuntimeError as e:  # the all-reduce failed: a learner left
            self.group.call(refs)  # names the dead learner when Ray knows it
            raise LearnerLost(f"the gradient all-reduce failed ({e}); a learner left the group") from e
        theirs = self.group.call(refs)
        for name, m in zip(self.group.names, theirs, strict=True):
            if m["grad_norm"] != out["grad_norm"] and not (np.isnan(m["grad_norm"]) and np.isnan(out["grad_norm"])):
                raise LearnerLost(f"{name} computed another gradient norm ({m['grad_norm']} != {out['grad_norm']}): the learners diverged")
        return out


def _share_kwargs(kwargs: dict[str, Any], rows: np.ndarray, totals: tuple[float, float]) -> dict[str, Any]:
    out = {k: (np.asarray(v)[rows] if k in PER_ROW_KEYS and v is not None else v) for k, v in kwargs.items()}
    out["batch_totals"] = totals
    return out


def _sum_metrics(parts: list[dict[str, float]], totals: tuple[float, float]) -> dict[str, float]:
    """One call's metrics from its shares': the weighted loss values add up, the counts are the batch's."""
    out: dict[str, float] = {}
    for m in parts:
        for k, v in m.items():
            if k in ("num_tokens", "num_sequences"):
                continue
            out[k] = max(out.get(k, 0.0), v) if k == "nonfinite" else out.get(k, 0.0) + v
    out["num_tokens"], out["num_sequences"] = totals
    out.setdefault("loss", 0.0)
    out.setdefault("nonfinite", 0.0)
    return out


def start_group(job: JobConfig, device: torch.device, placement: Any, threads: int | None, faults: str, run_dir: str) -> LearnerGroup:
    """Start learners 1..M-1 (``placement``: :class:`~tinker_algos.distributed.cluster.Placement`)
    and join them with this process as learner 0."""
    import ray

    world = job.execution.learners
    host = ray.util.get_node_ip_address()
    init_method = f"tcp://{host}:{_free_port()}"
    job_json = job.model_dump_json()
    names = [f"learner-{r}" for r in range(1, world)]
    actors = [
        placement.actor(LearnerActor, "learner", r - 1, name=names[r - 1], max_restarts=0).remote(
            job_json, r, world, init_method, threads, faults, run_dir
        )
        for r in range(1, world)
    ]
    joins = [a.join.remote() for a in actors]
    join_group(init_method, 0, world, backend_for(device))
    group = LearnerGroup(actors, names)
    group.call(joins)
    return group
