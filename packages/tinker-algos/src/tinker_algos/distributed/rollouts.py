"""A stage's episodes sampled on rollout workers (``execution.rollout_workers: N``).

:class:`DistributedRollouts` is the collector a GRPO stage uses instead of sampling in its own
process. Each step ``s`` (the learner then holds version ``s``: the stage's weights after ``s``
updates) it

1. **publishes** version ``s``: the trainable weights as a :class:`WeightRecord` in Ray's object
   store and in ``<run_dir>/weights/stage-<n>/v-<s>/`` (the durable copy; the newest
   ``max_staleness + 2`` are kept), and the learner's logprobs of the probe batch;
2. **admits** the steps ``s .. s + S`` (:class:`~tinker_algos.distributed.staleness.StalenessBound`):
   each step's task seeds are cut into N contiguous chunks (:class:`Unit`), chunk ``c`` sampled by
   worker ``c`` with version ``s`` -- the newest -- and the sampling seed of ``(step, c)`` (with one
   worker, the step's own seed: a one-worker job samples exactly what the job's process would);
3. **takes** step ``s``'s units: a unit whose worker died is sent again (to the same worker once
   Ray restarted it, else to a live one; the same seeds and version give the same episodes); each
   worker's :class:`SyncReport` is checked against the record it names -- the digest of its
   parameters must be the manifest's SHA-256, and its probe logprobs within
   ``execution.sync_tolerance`` of the learner's -- else the job fails with
   :class:`~tinker_algos.distributed.weights.WeightSyncError` naming the worker and the version;
   a group sampled more than ``S`` versions ago is dropped and sampled again
   (``staleness_strategy: drop``) or fails the job (``wait``: it cannot happen unless a worker
   ignored the weights it was sent).

With ``S = 0`` and any N the batches are deterministic (the same seed gives the same metrics);
with ``S = k`` they are too, each step sampled with version ``s - k`` exactly, like the
in-process sample-ahead (:mod:`tinker_algos.rollouts_ahead`), and its checkpoint state is the same
shape: the weights of every batch not yet trained on.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections import Counter
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np
import torch

from tinker_algos.distributed.replica import trainable
from tinker_algos.distributed.rollout_worker import (
    SyncReport,
    Unit,
    UnitResult,
    probe_logprobs,
    sample_unit,
    stamp_version,
    unit_seeds,
    weights_dir,
)
from tinker_algos.distributed.staleness import StalenessBound, staleness_metrics
from tinker_algos.distributed.weights import WeightDirectory, WeightRecord, WeightSyncError, pack
from tinker_algos.records.recording import phase
from tinker_algos.rollout.episodes import RolloutError, RolloutResult
from tinker_core.engines import probe_gap, verify_sync

if TYPE_CHECKING:
    from collections.abc import Callable
    from pathlib import Path

    from tinker_algos.distributed.runtime import Runtime
    from tinker_algos.model.models import PolicyModel

logger = logging.getLogger(__name__)
PROBE_TEXT = "Weight sync probe: 12+34=46, 7*8=56. The quick brown fox jumps over the lazy dog."
SELF_TEST_SEED = 1234


def probe_tokens(tokenizer: Any, rows: int = 2) -> np.ndarray:
    """The fixed probe batch: ``rows`` copies of :data:`PROBE_TEXT`'s tokens, shifted by one
    token each (so the rows differ)."""
    ids = list(tokenizer.encode(PROBE_TEXT, add_special_tokens=False))[:48]
    return np.asarray([ids[i:] + ids[:i] for i in range(rows)], dtype=np.int64)


class StageView(Protocol):
    """What the collector reads of its stage (a :class:`tinker_algos.algorithms.base.StageContext`
    is one): declared here, so that the algorithms sit above this room and not beside it."""

    policy: PolicyModel
    adapter: str | None
    run_dir: Path
    stage_index: int
    renderer: Any
    log: Callable[[str], None]

    @property
    def job(self) -> Any: ...
    @property
    def algo(self) -> Any: ...
    @property
    def rollout_cfg(self) -> Any: ...
    @property
    def where(self) -> str: ...
    def task_seeds(self, step: int) -> list[int]: ...
    def step_seed(self, step: int, *what: object) -> int: ...
    def require_env(self) -> Callable[[], Any]: ...


@dataclass
class Published:
    """A version the learner published: its record's reference, manifest and probe logprobs."""

    record: WeightRecord
    ref: Any
    probe: np.ndarray
    publish_s: float


class DistributedRollouts:
    """A GRPO stage's collector on rollout workers (see the module docstring)."""

    def __init__(self, ctx: StageView, k: int, runtime: Runtime) -> None:
        self.ctx, self.k, self.runtime = ctx, k, runtime
        ex = ctx.job.execution
        self.ex = ex
        self.pool = runtime.rollout_pool(probe_tokens(ctx.policy.tokenizer))
        if len(self.pool.actors) > ctx.rollout_cfg.prompts_per_step:
            from tinker_core.errors import ConfigError

            raise ConfigError([f"execution.rollout_workers: {len(self.pool.actors)} workers for {ctx.rollout_cfg.prompts_per_step} groups per step ({ctx.where}); use at most {ctx.rollout_cfg.prompts_per_step}"])
        self.probe = probe_tokens(ctx.policy.tokenizer)
        self.bound = StalenessBound(k, ctx.rollout_cfg.prompts_per_step)
        self.chunks = len(self.pool.actors)
        self.dir = WeightDirectory(weights_dir(ctx.run_dir, ctx.stage_index))
        self.published: dict[int, Published] = {}
        self.pending: dict[int, list[tuple[int, Unit, Any]]] = {}  # step -> (worker, unit, ref)
        self.dispatched_upto = -1
        self.last_take = time.perf_counter()
        self.busy: Counter[str] = Counter()
        self.step_metrics: dict[str, float] = {}
        self.restored: dict[int, dict[str, torch.Tensor]] = {}
        self.self_tested = False

    # ---- the step ------------------------------------------------------------------------------
    def take(self, step: int) -> RolloutResult:
        """Step ``step``'s episodes (publish version ``step``, admit, wait; see the module docstring)."""
        t0 = time.perf_counter()
        self.step_metrics = {}
        self.dispatched_upto = max(self.dispatched_upto, step - 1)  # a resumed stage: the steps before are done
        with phase("sync"):
            self.publish(step)
        if not self.self_tested and self.ex.sync_self_test:
            self.self_test(step)
        self.admit(step)
        with phase("rollout_wait"):
            results = self.gather(step)
        merged = self.merge(results, time.perf_counter() - t0)
        self.step_metrics.update(self.worker_metrics(results))
        self.step_metrics.update(self.staleness(merged, step))
        self.retire(step)
        return merged

    @staticmethod
    def staleness(result: RolloutResult, step: int) -> dict[str, float]:
        """``staleness/*`` of the step's groups, from the versions stamped on their trajectories."""
        versions, spans = [], []
        for group in result.groups:
            stamped = [v for t in group.trajectories for v in t.info.get("weight_versions", [])]
            if stamped:
                versions.append(min(stamped))
                spans.append(max(stamped) - min(stamped))
        return staleness_metrics(versions, step, spans)

    def start(self, step: int) -> None:
        """Nothing: :meth:`take` already started the next steps' units."""

    def metrics(self) -> dict[str, float]:
        """The last step's ``sync/*``, ``staleness/*``, ``rollout/reissued_groups`` and timing keys."""
        return dict(self.step_metrics)

    # ---- publishing ----------------------------------------------------------------------------
    def publish(self, version: int, weights: dict[str, torch.Tensor] | None = None) -> Published:
        """Version ``version``: the learner's trainable weights now (or ``weights``, restored from a checkpoint)."""
        import ray

        if version in self.published:
            return self.published[version]
        t0 = time.perf_counter()
        named = self._named(weights)
        record = pack(named.items(), version=version, kind="adapter" if self.ctx.adapter else "full")
        ref = ray.put(record)
        self.dir.write(record)
        if weights is None:
            probe = probe_logprobs(self.ctx.policy, self.ctx.adapter, self.probe)
        else:  # a restored version: its probe on a copy holding those weights
            probe = self._probe_of(weights)
        pub = Published(record, ref, probe, time.perf_counter() - t0)
        self.published[version] = pub
        if weights is not None:
            return pub  # a resumed run's pending version: not this step's sync
        self.step_metrics["time/sync_s"] = pub.publish_s
        self.step_metrics["sync/mb"] = record.manifest.nbytes / 2**20
        self.step_metrics["sync/changed"] = float(self._previous_sha(version) != record.manifest.sha256)
        return pub

    def _previous_sha(self, version: int) -> str | None:
        """The SHA-256 of version ``version - 1`` (published here, or on disk from before a restart)."""
        previous = self.published.get(version - 1)
        if previous is not None:
            return previous.record.manifest.sha256
        if version - 1 in self.dir.versions():
            return self.dir.read(version - 1).manifest.sha256
        return None

    def _named(self, weights: dict[str, torch.Tensor] | None) -> dict[str, torch.Tensor]:
        if weights is not None:
            return weights
        return {n: p.detach() for n, p in trainable(self.ctx.policy, self.ctx.adapter).items()}

    def _probe_of(self, weights: dict[str, torch.Tensor]) -> np.ndarray:
        params = trainable(self.ctx.policy, self.ctx.adapter)
        saved = {n: p.detach().clone() for n, p in params.items()}
        with torch.no_grad():
            for n, p in params.items():
                p.copy_(weights[n])
            try:
                return probe_logprobs(self.ctx.policy, self.ctx.adapter, self.probe)
            finally:
                for n, p in params.items():
                    p.copy_(saved[n])

    def retire(self, step: int) -> None:
        """Forget the versions no pending unit names; keep ``k + 2`` on disk."""
        needed = {u.version for units in self.pending.values() for _, u, _ in units} | {step}
        for v in [v for v in self.published if v not in needed and v < step]:
            del self.published[v]
        self.dir.retire(step - self.k - 1)

    # ---- dispatch ------------------------------------------------------------------------------
    def admit(self, version: int) -> None:
        """Dispatch the units of every step the bound admits at ``version`` not dispatched yet."""
        last = min(self.bound.last_admitted_step(version), self.ctx.algo.steps - 1)
        for t in range(self.dispatched_upto + 1, last + 1):
            used = self.restored_version(t, version)
            self.dispatch(t, used)
            self.dispatched_upto = t

    def restored_version(self, step: int, version: int) -> int:
        """The version step ``step`` samples with: a resumed run's pending batches keep theirs."""
        if step in self.restored:
            v = max(0, step - self.k)
            self.publish(v, self.restored.pop(step))
            return v
        return version

    def dispatch(self, step: int, version: int) -> None:
        pub = self.published[version]
        seeds = self.ctx.task_seeds(step)
        units = []
        for c, (first, chunk) in enumerate(unit_seeds(seeds, self.chunks)):
            sample_seed = self.ctx.step_seed(step, "sample") if self.chunks == 1 else self.ctx.step_seed(step, "sample", c)
            unit = Unit(self.ctx.stage_index, step, c, first, tuple(chunk), sample_seed, version, [pub.ref], str(self.dir.root))
            w, ref = self.send(unit, c)
            units.append((w, unit, ref))
        self.pending[step] = units

    def send(self, unit: Unit, preferred: int) -> tuple[int, Any]:
        """``(worker, ref)`` of ``unit`` sent to ``preferred`` or the next live worker;
        ``(-1, None)`` when none is left (the job's process samples it when the step is taken)."""
        if len(self.pool.dead) == len(self.pool.actors):
            return -1, None
        w = self.pool.live_worker(preferred)
        return w, self.pool.submit(w, unit)

    # ---- gathering -----------------------------------------------------------------------------
    def gather(self, step: int) -> list[UnitResult]:
        """Step ``step``'s unit results in chunk order: dead workers' units sent again, every sync
        report checked, too-stale units dropped and sampled again (``drop``)."""
        import ray

        units = self.pending.pop(step)
        results: dict[int, UnitResult] = {}
        reissued = dropped = 0
        todo = list(units)
        while todo:
            w, unit, ref = todo.pop(0)
            try:
                res: UnitResult = ray.get(ref) if ref is not None else self.sample_here(unit)
            except ray.exceptions.RayTaskError as e:
                cause = e.as_instanceof_cause()
                if isinstance(cause, RolloutError | WeightSyncError):
                    raise cause from None
                raise
            except (ray.exceptions.RayActorError, ray.exceptions.ActorDiedError) as e:
                if self._gave_up(w):
                    self.pool.dead.add(w)
                reissued += len(unit.task_seeds)
                if len(self.pool.dead) == len(self.pool.actors):
                    self.ctx.log(f"every rollout worker is gone (the last, {self.pool.names[w]}, during step {step}); the job's process samples their groups")
                    res = self.sample_here(unit)
                else:
                    w2, ref2 = self.send(unit, w)
                    self.ctx.log(f"rollout worker {self.pool.names[w]} died during step {step} ({type(e).__name__}); its {len(unit.task_seeds)} groups go to {self.pool.names[w2]}")
                    todo.append((w2, unit, ref2))
                    continue
            for note in res.notes:
                self.ctx.log(note)
            self.check_sync(res)
            if self.bound.stale([res.version], step):
                if self.ex.staleness_strategy == "wait":
                    raise WeightSyncError(
                        f"rollout worker {res.worker} sampled step {step} with weights v{res.version}, more than "
                        f"rollout.max_staleness={self.k} versions behind the learner's v{step} (staleness_strategy: wait)"
                    )
                dropped += len(unit.task_seeds)
                fresh = replace(unit, version=step, record=[self.published[step].ref])
                w2, ref2 = self.send(fresh, max(w, 0))
                todo.append((w2, fresh, ref2))
                continue
            self.busy[res.worker] += res.busy_s
            results[unit.chunk] = res
        self.step_metrics["rollout/reissued_groups"] = float(reissued)
        self.step_metrics["staleness/dropped_groups"] = float(dropped)
        return [results[c] for c in sorted(results)]

    def sample_here(self, unit: Unit) -> UnitResult:
        """Sample ``unit`` in the job's own process (no rollout worker left): what a worker holding
        the unit's weights would sample -- with the learner's current weights, which are the
        unit's unless it was sampled ahead (``max_staleness > 0``: then it is checked as stale)."""
        t0 = time.perf_counter()
        ctx = self.ctx
        result = sample_unit(unit, ctx.policy, ctx.require_env(), ctx.renderer, ctx.adapter, ctx.rollout_cfg)
        version = max(self.published)
        sync = SyncReport("job", version, self.published[version].record.manifest.sha256, None)
        stamp_version(result, version, "job")
        return UnitResult(unit.step, unit.chunk, version, result, sync, "job", time.perf_counter() - t0)

    def _gave_up(self, worker: int) -> bool:
        """Whether ``worker`` stays dead: Ray did not bring it back within
        ``execution.worker_restart_timeout_s`` (its restarts are used up, or its node is gone)."""
        import ray

        if worker in self.pool.dead:
            return True
        deadline = time.monotonic() + self.ex.worker_restart_timeout_s
        while time.monotonic() < deadline:
            try:
                ray.get(self.pool.actors[worker].ready.remote(), timeout=max(1.0, deadline - time.monotonic()))
                return False
            except (ray.exceptions.RayActorError, ray.exceptions.ActorDiedError, ray.exceptions.GetTimeoutError):
                time.sleep(0.5)  # still restarting: calls fail until it is alive again
        return True

    def check_sync(self, res: UnitResult) -> None:
        """The worker holds the weights of the version it reports, bit for bit, and its probe
        logprobs agree with the learner's (see the module docstring)."""
        sync = res.sync
        pub = self.published.get(sync.version)
        if pub is None:
            return  # a version retired meanwhile (cannot be checked any more)
        self.verify_report(sync, pub)

    def verify_report(self, sync: SyncReport, pub: Published) -> None:
        """The sync check (:func:`tinker_core.engines.verify_sync`) of a worker's report: the digest,
        then (recording the gap) the probe."""
        who = f"rollout worker {sync.worker}"
        verify_sync(who, sync.version, digest=sync.digest, sha256=pub.record.manifest.sha256)
        if sync.probe_logprobs is not None:
            gap = probe_gap(sync.probe_logprobs, pub.probe)
            self.step_metrics["sync/probe_gap_max"] = max(self.step_metrics.get("sync/probe_gap_max", 0.0), gap)
            verify_sync(who, sync.version, digest=None, sha256=None, probe=sync.probe_logprobs, learner_probe=pub.probe,
                        tolerance=self.ex.sync_tolerance)

    def self_test(self, version: int) -> None:
        """Scramble worker 0's weights and check that the sync check fails on it; then reload."""
        import ray

        pub = self.published[version]
        unit = Unit(self.ctx.stage_index, -1, 0, 0, (), 0, version, [pub.ref], str(self.dir.root))
        actor = self.pool.actors[self.pool.live_worker(0)]
        self.verify_report(ray.get(actor.load_and_report.remote(unit)), pub)  # the real weights pass
        scrambled: SyncReport = ray.get(actor.scramble.remote(SELF_TEST_SEED))
        scrambled.version = version
        try:
            self.verify_report(scrambled, pub)
        except WeightSyncError as e:
            self.ctx.log(f"weight sync self-test: a scrambled {scrambled.worker} is caught ({e})")
        else:
            raise WeightSyncError(f"weight sync self-test: {scrambled.worker}'s scrambled weights passed the check; the check proves nothing")
        self.verify_report(ray.get(actor.load_and_report.remote(unit)), pub)  # and the real weights are back
        self.self_tested = True

    # ---- results -------------------------------------------------------------------------------
    def merge(self, results: list[UnitResult], seconds: float) -> RolloutResult:
        """The units' episodes as one result, groups numbered across the step."""
        episodes = []
        errors: Counter[str] = Counter()
        new_tokens = 0
        for res in results:
            offset = self._first_group(res)
            for e in res.result.episodes:
                if e.trajectory is not None:
                    e.trajectory.group_id += offset
                episodes.append(dataclasses.replace(e, group=e.group + offset))
            errors.update(res.result.errors)
            new_tokens += res.result.new_tokens
        return RolloutResult(episodes, errors, new_tokens, seconds)

    def _first_group(self, res: UnitResult) -> int:
        parts = np.array_split(np.arange(self.ctx.rollout_cfg.prompts_per_step), self.chunks)
        return int(parts[res.chunk][0])

    def worker_metrics(self, results: list[UnitResult]) -> dict[str, float]:
        """``time/idle_frac/<worker>`` (the part of the last step's wall time each worker did not
        sample or load weights), their mean as ``time/rollout_idle_frac``, and ``sync/workers``
        (the live workers)."""
        now = time.perf_counter()
        wall = max(now - self.last_take, 1e-9)
        self.last_take = now
        out = {}
        for name in self.pool.names:
            out[f"time/idle_frac/{name}"] = max(0.0, 1.0 - self.busy.pop(name, 0.0) / wall)
        out["time/rollout_idle_frac"] = float(np.mean(list(out.values()))) if out else 0.0
        out["sync/workers"] = float(len(self.pool.names) - len(self.pool.dead))
        return out

    # ---- checkpoints ---------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        """The weights of every batch dispatched but not trained on yet, by step (as the
        in-process sample-ahead keeps them)."""
        out: dict[int, dict[str, torch.Tensor]] = {}
        for step, units in self.pending.items():
            v = units[0][1].version
            out[int(step)] = {k: t.clone() for k, t in _tensors(self.published[v].record).items()}
        return {"ahead_weights": out}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Sample the pending batches again with the weights they were first sampled with."""
        self.restored = {int(s): w for s, w in state.get("ahead_weights", {}).items()}


def _tensors(record: WeightRecord) -> dict[str, torch.Tensor]:
    from tinker_algos.distributed.weights import unpack

    return unpack(record)
