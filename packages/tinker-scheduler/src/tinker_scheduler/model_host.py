"""Model hosts: one base model in one process, shared by many training sessions.

A :class:`ModelHost` loads one base model (a :class:`tinker_algos.models.PolicyModel`) and serves
any number of *sessions*. A LoRA session is a named adapter on the shared base model with its own
:class:`tinker_algos.trainer.Trainer` (optimizer state, step counter); a full fine-tuning session
owns the whole model, so a host built with ``full=True`` serves exactly one session.

Execution model:

* Every request names its session and goes into that session's FIFO queue; requests of one
  session run in the order they were queued.
* One executor thread serves the queues **round-robin**: it takes the oldest request of the
  next session that has work, so a busy session cannot starve another (each waits for at most
  one request of every other session).
* **Isolation**: each session has its own torch RNG state. Before a request the host installs
  that state as the global torch CPU RNG and saves it back after, so dropout, unseeded sampling
  and adapter initialisation draw from the session's own stream. Together with the per-adapter
  trainers this makes a session's results (losses, samples, weights) bit-identical to running
  it alone on the host (tested on CPU).

**Jobs.** A whole LoRA job (``tinker_algos.train``) can run on the host too
(:meth:`ModelHost.run_job`, used by the scheduler to route JobService jobs onto shared hosts).
The job runs in a thread of the host and trains its own adapter on the host's model; every unit
of its work -- set-up, each training step with its evaluation and checkpoint -- is a *turn*: a
function queued in the same round-robin as session requests and run on the executor thread (so
all torch work of the host happens on one thread). During a turn the job's own python, numpy and
torch random states and its adapter are installed, so its metrics equal those of the job run
alone with the same seed (tested). A job's turn is a whole step, a session's a request.

Requests are plain Python values (numpy arrays, dicts, strings): :meth:`ModelHost.call` returns
``("ok", result)`` or ``("error", code, message)`` where ``code`` is a gRPC status code name, so
the caller (:mod:`tinker_scheduler.training_service`) maps errors without unpickling exceptions.

The class is used directly (in-process, ``host_backend="local"``) or as a Ray actor
(``ray.remote(ModelHost)`` with ``max_concurrency > 1``: the actor's threads block in
:meth:`call` while the executor thread works). Imported by Ray workers: torch is imported lazily.
"""

from __future__ import annotations

import contextlib
import logging
import math
import threading
from collections import OrderedDict, deque
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

import numpy as np

logger = logging.getLogger("tinker_scheduler.model_host")

#: Tinker's default PPO/CISPO clip thresholds on the ratio (``eps = 1 - low``, ``high - 1``).
TINKER_CLIP_LOW = 0.8
TINKER_CLIP_HIGH = 1.2
#: Tinker's AdamParams defaults (used where a field is 0).
ADAM_DEFAULTS = {"beta1": 0.9, "beta2": 0.95, "eps": 1e-12}
#: Finished jobs whose last reports a host keeps until the scheduler drains them.
FINISHED_JOBS_KEPT = 256
STOP_REASONS = {"length": "length", "eos": "stop_token", "stop_id": "stop_token", "stop_string": "stop_string"}


class HostError(Exception):
    """A request that fails with a gRPC status ``code`` (a ``grpc.StatusCode`` name)."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code


def invalid(message: str) -> HostError:
    return HostError("INVALID_ARGUMENT", message)


@dataclass
class SessionSpec:
    """What a session trains: ``lora_rank == 0`` means full fine-tuning."""

    session_id: str
    lora_rank: int = 8
    lora_alpha: float = 0.0
    lora_dropout: float = 0.0
    lora_target_modules: list[str] = field(default_factory=list)
    seed: int = 0

    @property
    def adapter(self) -> str | None:
        return adapter_name(self.session_id) if self.lora_rank > 0 else None


def adapter_name(session_id: str) -> str:
    """The peft adapter name of a session (valid adapter names: letters, digits, ``_``, ``-``)."""
    return "s-" + "".join(c if c.isalnum() or c in "_-" else "_" for c in session_id)


def derive_seed(*parts: int) -> int:
    """A 63-bit seed from integers (stable across processes; no Python ``hash``)."""
    import hashlib

    digest = hashlib.sha256(",".join(str(int(p)) for p in parts).encode()).digest()
    return int.from_bytes(digest[:8], "little") & ((1 << 63) - 1)


class JobAborted(Exception):
    """Raised in a job's thread at its next turn after :meth:`ModelHost.abort_job`."""


def job_adapter_name(job_id: str) -> str:
    """The peft adapter name of a job on a shared host."""
    return "j-" + "".join(c if c.isalnum() or c in "_-" else "_" for c in job_id)


class HostedJob:
    """What a job on a host receives as ``shared`` (``tinker_algos.training.SharedModel``)."""

    def __init__(self, host: ModelHost, job_id: str) -> None:
        self.host = host
        self.job_id = job_id
        self.sid = f"job:{job_id}"
        self.adapter = job_adapter_name(job_id)
        self.policy = host.policy
        self.rng: Any = None  # the job's RNG states between turns (None: not started)
        self.aborted = False
        self.worker: Any = None  # its tinker_scheduler.worker.JobWorker (reports, stop flag)

    def run(self, fn: Callable[[], Any]) -> Any:
        """Run ``fn()`` on the host's executor thread at this job's turn (``SharedModel.run``)."""
        return self.host._job_call(self, fn)


@dataclass
class _Session:
    spec: SessionSpec
    trainer: Any
    rng_state: Any  # torch.ByteTensor: the session's torch CPU RNG
    sample_calls: int = 0
    sampler_adapters: dict[str, str] = field(default_factory=dict)  # sampler path -> adapter
    queue: deque[tuple[Callable[[], Any], Future[Any]]] = field(default_factory=deque)


class ModelHost:
    """One base model and the sessions that train on it (see the module docstring).

    Args:
        base_model: ``"tiny"``, a local directory or a hub id (``PolicyModel.load``).
        device / precision / revision / tokenizer: passed to ``PolicyModel.load``.
        full: host one full fine-tuning session instead of LoRA adapters.
        num_threads: torch intra-op threads of this process (None: leave as is).
    """

    def __init__(
        self,
        base_model: str,
        *,
        device: str | None = None,
        precision: str | None = None,
        full: bool = False,
        num_threads: int | None = None,
        revision: str | None = None,
        tokenizer: str | None = None,
    ) -> None:
        import torch

        from tinker_algos.models import PolicyModel

        if num_threads:
            torch.set_num_threads(int(num_threads))
        self.base_model = base_model
        self.full = full
        self.policy = PolicyModel.load(base_model, device=device, precision=precision, revision=revision, tokenizer=tokenizer)
        self._sessions: dict[str, _Session] = {}
        self._jobs: dict[str, HostedJob] = {}
        self._finished: OrderedDict[str, Any] = OrderedDict()  # job id -> JobWorker not drained yet
        self._order: deque[str] = deque()  # round-robin order of session ids
        self._cv = threading.Condition()
        self._closed = False
        self.served: list[str] = []  # session ids in execution order (for tests / debugging)
        self._thread = threading.Thread(target=self._run, name="opentinker-model-host", daemon=True)
        self._thread.start()

    # ---- sessions ---------------------------------------------------------------------------
    def add_session(self, spec: SessionSpec | Mapping[str, Any]) -> tuple[Any, ...]:
        """Create a session's adapter (or claim the full model) and trainer; returns its info."""
        if not isinstance(spec, SessionSpec):
            spec = SessionSpec(**dict(spec))
        return self._guard(lambda: self._add_session(spec))

    def _add_session(self, spec: SessionSpec) -> dict[str, Any]:
        import torch

        from tinker_algos.models import LoraSpec
        from tinker_algos.trainer import Trainer, TrainerConfig

        with self._cv:
            if spec.session_id in self._sessions:
                raise HostError("ALREADY_EXISTS", f"session {spec.session_id!r} is already on this host")
            if self.full and self._sessions:
                raise HostError("FAILED_PRECONDITION", "a full fine-tuning host serves one session")
        if self.full != (spec.lora_rank == 0):
            raise invalid(
                f"lora_rank={spec.lora_rank} does not fit a {'full fine-tuning' if self.full else 'LoRA'} host"
            )
        config = TrainerConfig(optimizer="adamw", lr=1e-4, max_grad_norm=None)
        with self._serialized():
            if spec.lora_rank > 0:
                alpha = spec.lora_alpha if spec.lora_alpha > 0 else float(spec.lora_rank)
                lora = LoraSpec(
                    rank=int(spec.lora_rank),
                    alpha=alpha,  # type: ignore[arg-type]
                    dropout=float(spec.lora_dropout),
                    target_modules=list(spec.lora_target_modules) or "all-linear",
                )
                try:
                    lora.to_peft()
                except ValueError as e:
                    raise invalid(f"lora: {e}") from None
                trainer = Trainer(
                    self.policy, config, adapter=spec.adapter, lora=lora,
                    adapter_seed=derive_seed(spec.seed, 1),
                )
            else:
                trainer = Trainer(self.policy, config)
        generator = torch.Generator()
        generator.manual_seed(derive_seed(spec.seed, 2))
        session = _Session(spec=spec, trainer=trainer, rng_state=generator.get_state())
        with self._cv:
            self._sessions[spec.session_id] = session
        return self._info(session)

    def remove_session(self, session_id: str) -> tuple[Any, ...]:
        """Drop a session: its queued requests fail, its adapter(s) are unloaded. Idempotent."""

        def remove() -> bool:
            with self._cv:
                session = self._sessions.pop(session_id, None)
                if session is None:
                    return False
                with contextlib.suppress(ValueError):
                    self._order.remove(session_id)
                pending = list(session.queue)
                session.queue.clear()
            for _, fut in pending:
                fut.set_exception(HostError("NOT_FOUND", f"session {session_id!r} was closed"))
            with self._serialized():
                names = [session.spec.adapter, *session.sampler_adapters.values()]
                for name in names:
                    if name is not None and name in self.policy.adapter_names:
                        self.policy.remove_adapter(name)
            return True

        return self._guard(remove)

    def session_ids(self) -> list[str]:
        with self._cv:
            return list(self._sessions)

    def close(self) -> None:
        with self._cv:
            self._closed = True
            pending = [fut for session in self._sessions.values() for _, fut in session.queue]
            for session in self._sessions.values():
                session.queue.clear()
            self._cv.notify_all()
        for fut in pending:
            if not fut.done():
                fut.set_exception(HostError("UNAVAILABLE", "the model host is shutting down"))

    def pid(self) -> int:
        """The host's process id (benchmarks read its memory)."""
        import os

        return os.getpid()

    # ---- requests ---------------------------------------------------------------------------
    def call(self, session_id: str, op: str, kwargs: Mapping[str, Any] | None = None) -> tuple[Any, ...]:
        """Run ``op`` for a session after its earlier requests; fair between sessions.

        Returns ``("ok", result)`` or ``("error", code, message)``.
        """
        method = getattr(self, f"_op_{op}", None)
        if method is None:
            return ("error", "UNIMPLEMENTED", f"model host has no operation {op!r}")
        with self._cv:
            session = self._sessions.get(session_id)
            if session is None or session.trainer is None:  # (a job's queue is not a session)
                return ("error", "NOT_FOUND", f"session {session_id!r} is not on this host")
            fut = self._enqueue(session, lambda: method(session, **dict(kwargs or {})))
        try:
            return ("ok", fut.result())
        except HostError as e:
            return ("error", e.code, str(e))
        except Exception as e:  # noqa: BLE001 - reported to the caller
            return ("error", *_classify(e))

    def _enqueue(self, session: _Session, work: Callable[[], Any]) -> Future[Any]:
        """Queue ``work`` behind the session's earlier requests (caller holds ``self._cv``)."""
        fut: Future[Any] = Future()
        if self._closed:
            fut.set_exception(HostError("UNAVAILABLE", "the model host is shutting down"))
            return fut
        sid = session.spec.session_id
        if not session.queue and sid not in self._order:
            self._order.append(sid)
        session.queue.append((work, fut))
        self._cv.notify_all()
        return fut

    # ---- jobs -------------------------------------------------------------------------------
    def run_job(self, job_id: str, runner: str, config: Any, run_dir: str) -> dict[str, Any]:
        """Run a LoRA job on this host's model until it ends; never raises.

        Calls ``runner(config, run_dir=..., callbacks=..., shared=HostedJob)`` in this thread
        (a runner with ``tinker_algos.train``'s signature), reporting through a
        :class:`tinker_scheduler.worker.JobWorker` (:meth:`drain_job`, :meth:`stop_job`).
        When the job ends its adapter is unloaded from the model.
        """
        from tinker_scheduler.worker import JobWorker

        job = HostedJob(self, job_id)
        job.worker = JobWorker(job_id)
        with self._cv:
            if job_id in self._jobs or job.sid in self._sessions:
                return {"status": "failed", "error": f"job {job_id} is already running on this host", "config_error": False}
            self._jobs[job_id] = job
            self._sessions[job.sid] = _Session(spec=SessionSpec(session_id=job.sid), trainer=None, rng_state=None)
            others = len(self._jobs) - 1
        job.worker._push({"kind": "log", "source": "scheduler", "level": "INFO", "text": (
            f"on a shared model host for {self.base_model} (adapter {job.adapter}; "
            f"{others} other job(s) and {len(self._sessions) - len(self._jobs)} session(s) on it)")})
        try:
            return cast(dict[str, Any], job.worker.run(runner, config, run_dir, capture="thread", shared=job))
        finally:
            def unload() -> None:
                if job.adapter in self.policy.adapter_names:
                    self.policy.remove_adapter(job.adapter)

            try:
                self._job_call(job, unload, final=True)
            except Exception:  # noqa: BLE001 - the host is closing; nothing left to unload
                logger.debug("unloading the adapter of job %s", job_id, exc_info=True)
            with self._cv:
                self._jobs.pop(job_id, None)
                # its last reports wait for the scheduler's final drain_job
                self._finished[job_id] = job.worker
                while len(self._finished) > FINISHED_JOBS_KEPT:
                    self._finished.popitem(last=False)
                self._sessions.pop(job.sid, None)
                with contextlib.suppress(ValueError):
                    self._order.remove(job.sid)

    def drain_job(self, job_id: str, stored: int = 0) -> list[dict[str, Any]]:
        """The job's reports since the last drain (see ``JobWorker.drain``); [] once it is gone."""
        job = self._jobs.get(job_id)
        if job is not None:
            return cast(list[dict[str, Any]], job.worker.drain(stored))
        with self._cv:
            worker = self._finished.pop(job_id, None)  # the last drain of a finished job
        return cast(list[dict[str, Any]], worker.drain(stored)) if worker is not None else []

    def stop_job(self, job_id: str) -> None:
        """Ask the job to checkpoint and stop (``should_stop()`` becomes true)."""
        job = self._jobs.get(job_id)
        if job is not None:
            job.worker.stop()

    def abort_job(self, job_id: str) -> None:
        """Stop the job at its next turn without a checkpoint (a cancel that timed out)."""
        job = self._jobs.get(job_id)
        if job is not None:
            job.aborted = True

    def job_ids(self) -> list[str]:
        with self._cv:
            return list(self._jobs)

    def _job_call(self, job: HostedJob, fn: Callable[[], Any], *, final: bool = False) -> Any:
        """Run one unit of a job's work on the executor thread, fairly between jobs and sessions.

        All torch work of a host runs on that one thread: torch's OpenMP thread teams, one per
        calling thread, slow each other down when several threads take turns (measured: steps
        took twice as long at two threads).
        """
        from tinker_algos.checkpoint import get_rng_state, set_rng_state

        if job.aborted and not final:
            raise JobAborted(f"job {job.job_id} was aborted: it did not stop in time after a cancel")

        def work() -> Any:
            outer = get_rng_state()
            try:
                if job.rng is not None:
                    set_rng_state(job.rng)
                if job.adapter in self.policy.adapter_names:
                    self.policy.set_adapter(job.adapter)
                with job.worker.capture_here():  # what the work prints goes to the job's log
                    return fn()
            finally:
                job.rng = get_rng_state()
                set_rng_state(outer)

        with self._cv:
            session = self._sessions.get(job.sid)
            if session is None:
                raise HostError("NOT_FOUND", f"job {job.job_id} is not on this host")
            fut = self._enqueue(session, work)
        return fut.result()

    def _next(self) -> tuple[str, Callable[[], Any], Future[Any]] | None:
        with self._cv:
            while not self._closed:
                while self._order:
                    sid = self._order.popleft()
                    session = self._sessions.get(sid)
                    if session is None or not session.queue:
                        continue
                    work, fut = session.queue.popleft()
                    if session.queue:
                        self._order.append(sid)  # back of the line: round-robin
                    return sid, work, fut
                self._cv.wait()
        return None

    def _run(self) -> None:
        while True:
            item = self._next()
            if item is None:
                return
            sid, work, fut = item
            if not fut.set_running_or_notify_cancel():
                continue
            self.served.append(sid)
            try:
                with self._serialized():
                    fut.set_result(work())
            except BaseException as e:  # noqa: BLE001 - delivered to the caller
                fut.set_exception(e)

    #: One lock per *process*: the global torch RNG is process-wide, so requests of every host
    #: in this process (several hosts run in one process with ``host_backend="local"``) run one
    #: at a time while a session's RNG state is installed.
    _model_lock = threading.RLock()

    @contextlib.contextmanager
    def _serialized(self) -> Iterator[None]:
        with self._model_lock:
            yield

    def _guard(self, fn: Callable[[], Any]) -> tuple[Any, ...]:
        try:
            return ("ok", fn())
        except HostError as e:
            return ("error", e.code, str(e))
        except Exception as e:  # noqa: BLE001
            return ("error", *_classify(e))

    @contextlib.contextmanager
    def _session_rng(self, session: _Session) -> Iterator[None]:
        """Install the session's torch RNG as the global one for the request, then save it back."""
        import torch

        outer = torch.get_rng_state()
        torch.set_rng_state(session.rng_state)
        try:
            yield
        finally:
            session.rng_state = torch.get_rng_state()
            torch.set_rng_state(outer)

    # ---- operations (run on the executor thread) ---------------------------------------------
    def _info(self, session: _Session) -> dict[str, Any]:
        policy, spec = self.policy, session.spec
        base = policy.base_model
        lora = policy.lora_specs.get(spec.adapter) if spec.adapter else None
        return {
            "base_model": self.base_model,
            "lora_rank": spec.lora_rank,
            "lora_alpha": float(lora.alpha) if lora is not None else 0.0,
            "tokenizer_id": self.base_model,
            "vocab_size": int(base.get_input_embeddings().weight.shape[0]),
            "step": int(session.trainer.step),
            "model_type": str(getattr(base.config, "model_type", "")),
            "trainable_parameters": int(sum(p.numel() for p in session.trainer.params)),
        }

    def _op_info(self, session: _Session) -> dict[str, Any]:
        return self._info(session)

    def _batch(self, data: Sequence[Mapping[str, Any]], loss_fn: str | None) -> tuple[Any, dict[str, Any]]:
        """Wire data (Tinker alignment) -> a right-padded Batch over ``tokens + [last target]``."""
        from tinker_core.types import Batch

        if not data:
            raise invalid("data: is empty; send at least one Datum")
        rows: list[tuple[np.ndarray, ...]] = []
        for i, d in enumerate(data):
            tokens = np.asarray(d.get("tokens", ()), dtype=np.int64)
            targets = np.asarray(d.get("target_tokens", ()), dtype=np.int64)
            T = len(tokens)
            if T == 0:
                raise invalid(f"data[{i}].tokens: is empty")
            if len(targets) != T:
                raise invalid(
                    f"data[{i}].target_tokens: has {len(targets)} entries for {T} tokens; for "
                    "next-token training send tokens = seq[:-1] and target_tokens = seq[1:]"
                )
            if T > 1 and not np.array_equal(targets[:-1], tokens[1:]):
                bad = int(np.nonzero(targets[:-1] != tokens[1:])[0][0])
                raise invalid(
                    f"data[{i}].target_tokens[{bad}] = {targets[bad]} but tokens[{bad + 1}] = {tokens[bad + 1]}; "
                    "target_tokens must be tokens shifted left by one (seq[1:] for tokens = seq[:-1])"
                )

            weights = _per_position(d, i, T, "loss_weights", 1.0)
            advantages = _per_position(d, i, T, "advantages", 0.0)
            sampling = _per_position(d, i, T, "sampling_logprobs", 0.0)
            rows.append((np.concatenate([tokens, targets[-1:]]), weights, advantages, sampling))
        B, L = len(rows), max(len(r[0]) for r in rows)
        pad = self.policy.pad_token_id
        tokens_B_L = np.full((B, L), pad, dtype=np.int64)
        attn = np.zeros((B, L), dtype=np.float32)
        mask = np.zeros((B, L), dtype=np.float32)
        adv = np.zeros((B, L), dtype=np.float32)
        slp = np.zeros((B, L), dtype=np.float32)
        for b, (full, w, a, s) in enumerate(rows):
            n = len(full)
            tokens_B_L[b, :n] = full
            attn[b, :n] = 1.0
            mask[b, 1:n] = w  # position t of the datum predicts full[t + 1]
            adv[b, 1:n] = a
            slp[b, 1:n] = s
        batch = Batch(
            tokens_B_T=tokens_B_L, attention_mask_B_T=attn, loss_mask_B_T=mask,
            sampler_logprobs_B_T=slp, rewards_B=np.zeros(B, np.float32), group_ids_B=np.arange(B),
            advantages_B_T=adv,
        )
        extra: dict[str, Any] = {}
        if loss_fn == "cross_entropy":
            # l = -w * lp summed with the weights as the mask: weights_B_T = 1 avoids w**2
            extra["weights_B_T"] = (mask != 0).astype(np.float32)
        return batch, extra

    @staticmethod
    def _lengths(data: Sequence[Mapping[str, Any]]) -> list[int]:
        return [len(d.get("tokens", ())) for d in data]

    def _loss_config(self, loss_fn: str, config: Mapping[str, float]) -> dict[str, Any]:
        """Tinker's keys -> the registered loss's keys (see docs/reference/training-service.md)."""
        import tinker_core

        try:
            tinker_core.get_loss(loss_fn)
        except Exception as e:  # noqa: BLE001 - UnknownNameError names close matches
            raise invalid(f"loss_fn: {e}") from None
        cfg: dict[str, Any] = {k: float(v) for k, v in config.items()}
        if loss_fn in ("ppo", "cispo"):
            tinker_keys = {"clip_low_threshold", "clip_high_threshold"}
            if loss_fn == "ppo" and not ({"eps_low", "eps_high", "dual_clip"} & set(cfg)):
                low = cfg.pop("clip_low_threshold", TINKER_CLIP_LOW)
                high = cfg.pop("clip_high_threshold", TINKER_CLIP_HIGH)
                cfg.update(eps_low=1.0 - low, eps_high=high - 1.0, dual_clip=None)
            elif tinker_keys & set(cfg):
                if "clip_low_threshold" in cfg:
                    cfg["eps_low"] = 1.0 - cfg.pop("clip_low_threshold")
                if "clip_high_threshold" in cfg:
                    cfg["eps_high"] = cfg.pop("clip_high_threshold") - 1.0
            if loss_fn == "ppo" and cfg.get("dual_clip") == 0.0:
                cfg["dual_clip"] = None
        return cfg

    def _op_forward_backward(
        self, session: _Session, data: Sequence[Mapping[str, Any]], loss_fn: str, loss_config: Mapping[str, float]
    ) -> dict[str, Any]:
        from tinker_algos.trainer import TOKEN_SUM

        cfg = self._loss_config(loss_fn, loss_config)
        batch, extra = self._batch(data, loss_fn)
        with self._session_rng(session):
            try:
                # the logprobs of the gradient pass itself: no second forward
                metrics, logprobs_B_T = session.trainer.forward_backward(
                    batch, loss_fn, agg=TOKEN_SUM, return_logprobs=True, **extra, **cfg
                )
            except (TypeError, ValueError) as e:
                raise invalid(f"loss {loss_fn!r}: {e}") from None
        out = {f"{k}" if "/" in k else k: float(v) for k, v in metrics.items()}
        out["loss:sum"] = out["loss"]
        return {"logprobs": _per_datum(logprobs_B_T, self._lengths(data)), "metrics": out}

    def _op_forward(
        self, session: _Session, data: Sequence[Mapping[str, Any]], loss_fn: str, loss_config: Mapping[str, float]
    ) -> dict[str, Any]:
        import torch

        import tinker_core
        from tinker_core.algos import LossInputs

        batch, extra = self._batch(data, loss_fn or None)
        with self._session_rng(session):
            logprobs_B_T = session.trainer.forward(batch)
        metrics: dict[str, float] = {}
        if loss_fn:
            cfg = self._loss_config(loss_fn, loss_config)
            mask = torch.as_tensor(batch.loss_mask_B_T * batch.attention_mask_B_T)
            inputs = LossInputs(
                logprobs_B_T=torch.as_tensor(logprobs_B_T), mask_B_T=mask,
                sampling_logprobs_B_T=torch.as_tensor(batch.sampler_logprobs_B_T),
                advantages_B_T=torch.as_tensor(batch.advantages_B_T),
                **{k: torch.as_tensor(v) for k, v in extra.items()},
            )
            try:
                with torch.no_grad():
                    out = tinker_core.get_loss(loss_fn).obj(inputs, **cfg)
            except (TypeError, ValueError) as e:
                raise invalid(f"loss {loss_fn!r}: {e}") from None
            on = mask != 0
            total = float(torch.where(on, out.loss_B_T * mask, torch.zeros(())).sum())
            metrics = {"loss": total, "loss:sum": total, "num_tokens": float(mask.sum())}
            metrics.update({f"{loss_fn}/{k}": float(v) for k, v in (out.metrics or {}).items()})
        return {"logprobs": _per_datum(logprobs_B_T, self._lengths(data)), "metrics": metrics}

    def _op_optim_step(self, session: _Session, adam: Mapping[str, float]) -> dict[str, Any]:
        trainer = session.trainer
        lr = float(adam.get("learning_rate", 0.0))
        if not (lr > 0 and math.isfinite(lr)):
            raise invalid(f"adam.learning_rate: must be > 0 (got {lr})")
        if trainer.pending_calls == 0:
            raise HostError(
                "FAILED_PRECONDITION",
                "OptimStep: no gradients accumulated since the last step; call ForwardBackward first",
            )
        b1 = float(adam.get("beta1") or ADAM_DEFAULTS["beta1"])
        b2 = float(adam.get("beta2") or ADAM_DEFAULTS["beta2"])
        eps = float(adam.get("eps") or ADAM_DEFAULTS["eps"])
        wd = float(adam.get("weight_decay") or 0.0)
        clip = float(adam.get("grad_clip_norm") or 0.0)
        for name, value, ok in (("beta1", b1, 0 <= b1 < 1), ("beta2", b2, 0 <= b2 < 1), ("eps", eps, eps > 0),
                                ("weight_decay", wd, wd >= 0), ("grad_clip_norm", clip, clip >= 0)):
            if not ok:
                raise invalid(f"adam.{name}: {value} is out of range")
        trainer.config.max_grad_norm = clip if clip > 0 else None
        with self._session_rng(session):
            metrics = trainer.optim_step(lr=lr, betas=(b1, b2), eps=eps, weight_decay=wd)
        return {"step": int(trainer.step), "metrics": {f"optim/{k}": float(v) for k, v in metrics.items()}}

    def _sampling_adapter(self, session: _Session, sampler_path: str) -> str | None:
        if not sampler_path:
            return session.spec.adapter
        if session.spec.adapter is None:
            raise invalid("sampler_path: sampling from saved weights needs a LoRA session")
        name = session.sampler_adapters.get(sampler_path)
        if name is None:
            adapter_dir = Path(sampler_path) / "adapter"
            if not (adapter_dir / "adapter_config.json").exists():
                raise HostError("NOT_FOUND", f"sampler_path: {sampler_path} holds no saved adapter; pass a path SaveWeightsForSampler returned")
            name = f"{session.spec.adapter}-w{len(session.sampler_adapters)}"
            active = self.policy.active_adapter
            self.policy.load_adapter(name, adapter_dir)
            if active is not None:
                self.policy.set_adapter(active)
            session.sampler_adapters[sampler_path] = name
        return name

    def _op_sample(
        self, session: _Session, prompts: Sequence[Sequence[int]], params: Mapping[str, Any],
        num_samples: int, sampler_path: str = "",
    ) -> list[list[dict[str, Any]]]:
        from tinker_algos.sampler import SamplingParams, sample

        if not prompts:
            raise invalid("prompts: is empty; send at least one prompt")
        for i, p in enumerate(prompts):
            if len(p) == 0:
                raise invalid(f"prompts[{i}]: has no tokens")
        sp = SamplingParams(
            max_new_tokens=int(params.get("max_tokens", 0)),
            temperature=float(params.get("temperature", 1.0)),
            top_p=float(params.get("top_p", 1.0)),
            top_k=int(params.get("top_k", 0)),
            n=max(1, int(num_samples)),
            stop=list(params.get("stop", ())),
            stop_token_ids=list(params.get("stop_token_ids", ())),
            seed=params.get("seed"),
        )
        try:
            sp.validate()
        except (TypeError, ValueError) as e:
            raise invalid(f"sampling_params: {e}".replace("SamplingParams.max_new_tokens", "max_tokens")) from None
        adapter = self._sampling_adapter(session, sampler_path)
        session.sample_calls += 1
        if sp.seed is None:  # the session's own stream: independent of other sessions
            sp.seed = derive_seed(session.spec.seed, 3, session.sample_calls)
        with self._session_rng(session):
            try:
                out = sample(self.policy, [list(map(int, p)) for p in prompts], sp, adapter=adapter)
            except ValueError as e:
                raise invalid(str(e)) from None
            if session.spec.adapter is not None:
                self.policy.set_adapter(session.spec.adapter)
        return [
            [{"tokens": s.tokens, "logprobs": s.logprobs, "stop_reason": STOP_REASONS[s.stop_reason]} for s in row]
            for row in out
        ]

    def _op_compute_logprobs(self, session: _Session, sequences: Sequence[Sequence[int]]) -> list[list[float]]:
        from tinker_core.types import Batch

        if not sequences:
            raise invalid("sequences: is empty")
        B, L = len(sequences), max(len(s) for s in sequences)
        if L == 0:
            raise invalid("sequences: every sequence is empty")
        tokens = np.full((B, L), self.policy.pad_token_id, dtype=np.int64)
        attn = np.zeros((B, L), dtype=np.float32)
        for b, s in enumerate(sequences):
            tokens[b, : len(s)] = s
            attn[b, : len(s)] = 1
        batch = Batch(tokens, attn, attn.copy(), np.zeros_like(attn), np.zeros(B, np.float32), np.arange(B))
        with self._session_rng(session):
            lp = session.trainer.forward(batch)
        return [lp[b, 1 : len(s)].astype(np.float32).tolist() for b, s in enumerate(sequences)]

    def _op_save_state(self, session: _Session, path: str) -> dict[str, Any]:
        with self._session_rng(session):
            session.trainer.save_state(path, overwrite=True)
        return {"path": path}

    def _op_load_state(self, session: _Session, path: str, with_optimizer: bool) -> dict[str, Any]:
        import torch

        from tinker_algos.checkpoint import CheckpointError

        with self._session_rng(session):
            try:
                session.trainer.load_state(path, with_optimizer=with_optimizer)
            except (CheckpointError, FileNotFoundError) as e:
                raise invalid(f"path: {e}") from None
            if with_optimizer:  # load_state restored the checkpoint's RNG as the global one
                session.rng_state = torch.get_rng_state()
        return {"step": int(session.trainer.step)}

    def _op_save_weights_for_sampler(self, session: _Session, path: str) -> dict[str, Any]:
        from tinker_algos.checkpoint import save_adapter
        from tinker_algos.models import atomic_dir

        policy, adapter = self.policy, session.spec.adapter

        def write(tmp: Path) -> None:
            if adapter is None:
                policy.model.save_pretrained(tmp / "model")
                policy.tokenizer.save_pretrained(tmp / "model")
            else:
                save_adapter(policy, adapter, tmp / "adapter")

        atomic_dir(Path(path), write, overwrite=True)
        return {"path": path}

    def _op_get_weights(self, session: _Session, path: str, trainable_only: bool) -> dict[str, np.ndarray]:
        if path == "tokenizer":
            return tokenizer_files(self.policy)
        if path:
            from safetensors.numpy import load_file

            files = sorted(Path(path).rglob("*.safetensors"))
            if not files:
                raise HostError("NOT_FOUND", f"path: {path} holds no weights; pass a path SaveState or SaveWeightsForSampler returned")
            out: dict[str, np.ndarray] = {}
            for f in files:
                out.update(load_file(str(f)))
            return out
        import torch

        from tinker_algos.models import adapter_of

        if trainable_only:
            named = list(zip(session.trainer.param_names, session.trainer.params, strict=True))
        else:  # the base weights and this session's adapter -- never another session's
            own = session.spec.adapter
            named = [(n, p) for n, p in self.policy.module.state_dict().items() if adapter_of(n) in (None, own)]
        return {n: p.detach().to(torch.float32).cpu().numpy() for n, p in named}


def tokenizer_files(policy: Any) -> dict[str, np.ndarray]:
    """The tokenizer's saved files (``tokenizer.json`` ...) as uint8 arrays, by file name."""
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        policy.tokenizer.save_pretrained(tmp)
        return {
            f.name: np.frombuffer(f.read_bytes(), dtype=np.uint8).copy()
            for f in sorted(Path(tmp).iterdir()) if f.is_file()
        }


def _per_position(d: Mapping[str, Any], i: int, T: int, name: str, default: float) -> np.ndarray:
    """Datum ``i``'s per-position field ``name`` (length ``T``), or ``default`` everywhere if absent."""
    value = np.asarray(d.get(name, ()), dtype=np.float32)
    if value.size == 0:
        return np.full(T, default, dtype=np.float32)
    if value.shape != (T,):
        raise invalid(f"data[{i}].{name}: has {value.size} entries for {T} tokens; send one per token or none")
    return value


def _per_datum(logprobs_B_T: np.ndarray, lengths: Sequence[int]) -> list[list[float]]:
    """Logprobs in the Tinker alignment: datum i position t = log p(target t), length T_i."""
    return [logprobs_B_T[b, 1 : n + 1].astype(np.float32).tolist() for b, n in enumerate(lengths)]


def _classify(error: Exception) -> tuple[str, str]:
    from tinker_core.errors import OpenTinkerError

    if isinstance(error, ValueError | TypeError | KeyError | OpenTinkerError):
        return "INVALID_ARGUMENT", str(error)
    logger.exception("model host request failed", exc_info=error)
    return "INTERNAL", f"{type(error).__name__}: {error}"
