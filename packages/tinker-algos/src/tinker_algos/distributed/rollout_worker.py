"""A rollout worker: a Ray actor with a replica of the policy and the envs beside it.

It samples :class:`Unit` s -- a contiguous chunk of one step's groups -- with exactly the weights
the unit names (a versioned record, :mod:`tinker_algos.distributed.weights`), and hands back a
:class:`UnitResult`: the episodes (token-level trajectories with the sampler's logprobs), the
version they were sampled with, and a :class:`SyncReport` proving which weights it holds: the
digest of its own parameters (not of the bytes it received) and its logprobs of the fixed probe
batch, which the job compares with the record's manifest and the learner's probe logprobs.

Everything a unit needs travels with it (the stage, the task seeds, the sampling seed, the
weight record's reference), so a worker that Ray restarted after a crash picks up any unit: it
loads the model, then the unit's weights (from the object store, or from the durable weight
directory when the object is gone), then samples.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from tinker_algos.distributed.faults import Faults
from tinker_algos.distributed.replica import add_job_adapter, load_job_policy, trainable
from tinker_algos.distributed.weights import (
    WeightDirectory,
    WeightRecord,
    copy_into,
    params_digest,
    unpack,
)
from tinker_algos.rollout.episodes import RolloutResult
from tinker_algos.sampling.engine import HFEngine
from tinker_core.config import JobConfig
from tinker_core.engines import WeightUpdate


@dataclass(frozen=True)
class Unit:
    """Groups ``first_group .. first_group + len(task_seeds) - 1`` of step ``step`` of stage
    ``stage``, sampled with weights ``version`` (``record``: ``[ObjectRef]`` of its
    :class:`WeightRecord`, in a list so that Ray hands over the reference, not the bytes)."""

    stage: int
    step: int
    chunk: int
    first_group: int
    task_seeds: tuple[int, ...]
    sample_seed: int
    version: int
    record: list[Any]
    weights_dir: str


@dataclass
class SyncReport:
    """What a worker holds: the version it loaded, the SHA-256 of its own trainable parameters,
    and its logprobs of the probe batch (None when it did not load new weights for this unit)."""

    worker: str
    version: int
    digest: str
    probe_logprobs: np.ndarray | None


@dataclass
class UnitResult:
    unit_step: int
    chunk: int
    version: int
    result: RolloutResult
    sync: SyncReport
    worker: str
    busy_s: float
    loaded_s: float = 0.0
    notes: list[str] = field(default_factory=list)


def probe_logprobs(policy: Any, adapter: str | None, tokens: np.ndarray) -> np.ndarray:
    """Logprobs of the probe batch ``tokens`` ``[B, T]`` under ``policy`` (eval mode, ``adapter``
    active): the one computation both the learner and every worker run."""
    from tinker_algos.training.shared_prefix import batch_logprobs

    module = policy.module
    was_training = module.training
    module.eval()
    try:
        with torch.no_grad(), policy.using_adapter(adapter):
            t = torch.as_tensor(tokens, dtype=torch.long, device=policy.device)
            lp = batch_logprobs(module, t, torch.ones_like(t, dtype=torch.float32), share=False, spec=policy.spec)
    finally:
        module.train(was_training)
    return lp.float().cpu().numpy()


class RolloutWorker:
    """Rollout worker ``name`` of a job (see the module docstring)."""

    def __init__(self, job_json: str, name: str, threads: int | None, faults: str, run_dir: str, probe_tokens: np.ndarray, strategy: str) -> None:
        self.job = JobConfig.model_validate_json(job_json)
        self.name = name
        self.policy = load_job_policy(self.job, threads=threads)
        self.adapter = add_job_adapter(self.policy, self.job)
        self.engine = HFEngine(self.policy, adapter=self.adapter, apply=apply_record)  # samples; takes the records' weights
        self.faults = Faults.parse(faults, name, run_dir)
        self.probe_tokens = probe_tokens
        self.strategy = strategy
        self.version: tuple[int, int] | None = None  # (stage, version) of the weights held
        self.digest: str | None = None  # SHA-256 of the trainable parameters at the last load
        self.stage_index: int | None = None
        self.env_factory: Any = None
        self.renderer: Any = None

    # ---- set-up -------------------------------------------------------------------------------
    def _stage(self, si: int) -> None:
        from tinker_algos.model.prompts import PromptRenderer
        from tinker_algos.rollout.episodes import env_factories

        stage = self.job.resolved_stages()[si]
        renderer = PromptRenderer.from_config(self.policy.tokenizer, self.job.model.chat_template)
        self.renderer = renderer.with_system_prompt(stage.env.system_prompt if stage.env is not None else None)
        self.env_factory, _ = env_factories(stage.env)
        self.stage_index = si

    def _load(self, unit: Unit) -> float:
        """Load the unit's weights unless held; seconds spent."""
        if self.version == (unit.stage, unit.version):
            return 0.0
        t0 = time.perf_counter()
        record = self._fetch(unit)
        held = self.engine.version
        if self.version is None or self.version[0] != unit.stage or held is None or unit.version <= held:
            self.engine.forget_version()  # another stage, a reload or an older version: not a step forward
        keep = self.faults.active("keep-weights", unit.step)  # the fault: acknowledge, keep the old weights
        self.engine.start_weight_update(unit.version)
        self.engine.update_weights(WeightUpdate(
            unit.version, record.manifest.kind, sha256=record.manifest.sha256, payload=None if keep else record,
        ))
        self.engine.finish_weight_update(unit.version)
        self.version = (unit.stage, unit.version)
        return time.perf_counter() - t0

    def _fetch(self, unit: Unit) -> WeightRecord:
        import ray

        try:
            record: WeightRecord = ray.get(unit.record[0], timeout=600)
            return record
        except Exception:  # noqa: BLE001 - the object is gone (its owner restarted): the durable copy
            return WeightDirectory(unit.weights_dir).read(unit.version)

    def report(self, with_probe: bool) -> SyncReport:
        """What this worker holds. ``with_probe`` (after a load): hash the parameters again and
        score the probe batch; otherwise the digest of the last load (nothing changed them since)."""
        version = self.version[1] if self.version is not None else -1
        if with_probe or self.digest is None:
            self.digest = params_digest(trainable(self.policy, self.adapter).items())
        probe = probe_logprobs(self.policy, self.adapter, self.probe_tokens) if with_probe else None
        return SyncReport(self.name, version, self.digest, probe)

    # ---- work ---------------------------------------------------------------------------------
    def ready(self) -> str:
        return self.name

    def collect(self, unit: Unit) -> UnitResult:
        """Sample the unit's groups (see the module docstring)."""
        self.faults.maybe_exit("exit", unit.step)
        t0 = time.perf_counter()
        notes: list[str] = []
        if self.stage_index != unit.stage:
            self._stage(unit.stage)
        lag = self.version is not None and self.version[0] == unit.stage and self.faults.due("lag", unit.step)
        if lag and self.strategy == "drop":
            notes.append(f"{self.name}: sampled step {unit.step} with the weights it held (v{self.version[1]}), not v{unit.version} (fault: lag)")
            loaded_s, fresh = 0.0, False
        else:
            before = self.version
            loaded_s = self._load(unit)
            fresh = self.version != before
        rollout_cfg = self.job.resolved_stages()[unit.stage].rollout
        result = sample_unit(unit, self.policy, self.env_factory, self.renderer, self.adapter, rollout_cfg, self.engine)
        sync = self.report(with_probe=fresh)
        assert self.version is not None
        stamp_version(result, self.version[1], self.name)
        return UnitResult(unit.step, unit.chunk, self.version[1], result, sync, self.name, time.perf_counter() - t0, loaded_s, notes)

    def load_and_report(self, unit: Unit) -> SyncReport:
        """Load the unit's weights (no sampling) and report what is held, probe included."""
        if self.stage_index != unit.stage:
            self._stage(unit.stage)
        self.version = None
        self._load(unit)
        return self.report(with_probe=True)

    def scramble(self, seed: int) -> SyncReport:
        """Add noise to every trainable weight (the sync self-test) and report what is held."""
        gen = torch.Generator().manual_seed(seed)
        with torch.no_grad():
            for p in trainable(self.policy, self.adapter).values():
                p.add_(torch.randn(p.shape, generator=gen).to(p.device, p.dtype) * 0.05)
        return self.report(with_probe=True)


def apply_record(policy: Any, adapter: str | None, record: WeightRecord) -> None:
    """A weight record into ``policy``'s trainable weights (its bytes checked against its manifest):
    how the rollout worker's engine applies an update."""
    copy_into(trainable(policy, adapter), unpack(record))


def sample_unit(
    unit: Unit, policy: Any, env_factory: Any, renderer: Any, adapter: str | None, r: Any, engine: Any = None,
) -> RolloutResult:
    """The unit's episodes: :func:`~tinker_algos.rollout.rollout` of its task seeds with its
    sampling seed and the stage's rollout section ``r`` (what the job's process would sample),
    sampled by ``engine`` (default: the in-process sampler on ``policy``)."""
    from tinker_algos.rollout.section import section_rollout, section_sampling_params

    params = section_sampling_params(r, unit.sample_seed)
    return section_rollout(r, policy, env_factory, list(unit.task_seeds), params, adapter=adapter, renderer=renderer, engine=engine)


def stamp_version(result: RolloutResult, version: int, worker: str) -> None:
    """Record on every trajectory the weight version its generated spans were sampled with (one
    per turn: a worker's weights change only between units) and the worker that sampled it."""
    for e in result.episodes:
        if e.trajectory is not None:
            e.trajectory.info["weight_versions"] = [version] * max(e.turns, 1)
            e.trajectory.info["rollout_worker"] = worker


def unit_seeds(task_seeds: list[int], chunks: int) -> list[tuple[int, list[int]]]:
    """``(first group, seeds)`` of each of ``chunks`` contiguous chunks of a step's task seeds."""
    parts = np.array_split(np.arange(len(task_seeds)), chunks)
    return [(int(p[0]), [task_seeds[i] for i in p]) for p in parts if p.size]


def weights_dir(run_dir: str | Path, stage: int) -> str:
    """The durable weight records of a stage: ``<run_dir>/weights/stage-<n>``."""
    return str(Path(run_dir) / "weights" / f"stage-{stage}")
