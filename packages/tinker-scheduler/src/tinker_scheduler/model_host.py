"""Model hosts: one base model in one process, shared by many training sessions and LoRA jobs.

A :class:`ModelHost` loads one base model (a :class:`tinker_algos.model.models.PolicyModel`) and serves
any number of *sessions*. A LoRA session is a named adapter on the shared base model with its own
:class:`tinker_algos.training.trainer.Trainer` (optimizer state, step counter); a full fine-tuning session
owns the whole model, so a host built with ``full=True`` serves exactly one session.

* Every request names its session and runs on the host's
  :class:`~tinker_scheduler.host_executor.TurnExecutor`: in order within a session,
  round-robin between sessions (and jobs). A request may carry its client's deadline and a
  token: one whose deadline passes, or that is cancelled (:meth:`ModelHost.cancel`), before its
  turn is dropped unrun. Sequences longer than the model's context length are refused before
  they are queued (:func:`tinker_algos.tinker_ops.check_data` and friends).
* **Isolation**: each session has its own torch RNG state. Before a request the host installs
  that state as the global torch CPU RNG and saves it back after, so dropout, unseeded sampling
  and adapter initialisation draw from the session's own stream. Together with the per-adapter
  trainers this makes a session's results (losses, samples, weights) bit-identical to running
  it alone on the host (tested on CPU).
* The requests are Tinker's operations; their translation onto tinker_algos (data alignment,
  loss keys, Adam and sampling defaults, stop reasons) is :mod:`tinker_algos.tinker_ops`.

**Jobs.** A whole LoRA job (``tinker_algos.train``) can run on the host too (:meth:`run_job`,
see :mod:`tinker_scheduler.hosted_jobs`). Requests are the typed operations of
:mod:`tinker_scheduler.host_ops` (plain, picklable values): :meth:`ModelHost.call` answers the
request's response type or raises :class:`~tinker_scheduler.errors.StatusError` -- the only
exception type that leaves a host (any other becomes one with its status code first, see
:func:`~tinker_scheduler.errors.classify`). On the host a session's model is a *slot*
(``_Slot``: its adapter or the full model, trainer and RNG). The class is used directly (in-process,
``host_backend="local"``) or as a Ray actor (``ray.remote(ModelHost)`` with ``max_concurrency >
1``: the actor's threads block in :meth:`call` while the executor thread works). Imported by Ray
workers: torch is imported lazily.
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar, cast

import numpy as np

from tinker_algos import tinker_ops
from tinker_core.seeding import derive_seed
from tinker_scheduler import host_ops as ops
from tinker_scheduler.errors import StatusError, classify, invalid
from tinker_scheduler.host_executor import TurnExecutor
from tinker_scheduler.host_ops import SessionSpec, adapter_name
from tinker_scheduler.hosted_jobs import HostedJob, HostedJobs, job_adapter_name

if TYPE_CHECKING:
    import torch

    from tinker_algos.model.models import PolicyModel
    from tinker_algos.training.trainer import Trainer

__all__ = ["ModelHost", "SessionSpec", "adapter_name", "job_adapter_name"]

R = TypeVar("R")

#: Seeds a session derives from its ``seed`` are this wide.
SEED_BITS = 63


@dataclass
class _Slot:
    """A training session's place on the host: its adapter (or the full model), trainer and RNG."""

    spec: SessionSpec
    trainer: Trainer
    rng_state: torch.Tensor  # the session's torch CPU RNG (a ByteTensor)
    sample_calls: int = 0
    sampler_adapters: dict[str, str] = field(default_factory=dict)  # sampler path -> adapter


class ModelHost:
    """One base model and the sessions and jobs that train on it (see the module docstring).

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

        from tinker_algos.model.device import DeviceError
        from tinker_algos.model.models import ModelLoadError, PolicyModel

        if num_threads:
            torch.set_num_threads(int(num_threads))
        self.base_model = base_model
        self.full = full
        self.load_error: DeviceError | ModelLoadError | None = None  # told each session and job
        self.policy: PolicyModel | None = None  # None: it did not load (load_error says why)
        #: What a client's ``AutoTokenizer.from_pretrained`` loads (``get_info``'s ``tokenizer_id``).
        self.tokenizer_id = base_model
        try:
            self.policy = PolicyModel.load(base_model, device=device, precision=precision, revision=revision, tokenizer=tokenizer)
        except (DeviceError, ModelLoadError) as e:
            self.load_error = e
        if self.policy is not None:
            with contextlib.suppress(ModelLoadError):  # e.g. a hub id cached at another revision: keep the name
                self.tokenizer_id = tinker_ops.tokenizer_id(tokenizer or base_model)
        #: The longest sequence the model takes (None: its config does not say).
        self.context_length = tinker_ops.context_length(self.policy.base_model.config) if self.policy is not None else None
        self.executor = TurnExecutor()
        self.jobs = HostedJobs(self.policy, self.executor, self._describe)
        self._slots: dict[str, _Slot] = {}  # session id -> its slot
        self._lock = threading.Lock()

    @property
    def served(self) -> list[str]:
        """Session ids (``job:<id>`` for jobs) in execution order (for tests / debugging)."""
        return self.executor.served

    # ---- sessions ---------------------------------------------------------------------------
    def add_session(self, spec: SessionSpec | Mapping[str, Any]) -> ops.ModelInfo:
        """Create a session's slot: its adapter (or the full model) and trainer; returns its info.
        Raises :class:`StatusError`."""
        if self.load_error is not None:
            raise StatusError("INVALID_ARGUMENT", str(self.load_error))
        if not isinstance(spec, SessionSpec):
            spec = SessionSpec(**dict(spec))
        return _guard(lambda: self._add_session(spec))

    def _add_session(self, spec: SessionSpec) -> ops.ModelInfo:
        import torch

        from tinker_algos.model.models import LoraSpec
        from tinker_algos.training.trainer import Trainer, TrainerConfig

        with self._lock:
            if spec.session_id in self._slots:
                raise StatusError("ALREADY_EXISTS", f"session {spec.session_id!r} is already on this host")
            if self.full and self._slots:
                raise StatusError("FAILED_PRECONDITION", "a full fine-tuning host serves one session")
        if self.full != (spec.lora_rank == 0):
            raise invalid(
                f"lora_rank={spec.lora_rank} does not fit a {'full fine-tuning' if self.full else 'LoRA'} host"
            )
        config = TrainerConfig(optimizer="adamw", lr=1e-4, max_grad_norm=None)
        with self.executor.serialized():
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
                    adapter_seed=derive_seed(spec.seed, 1, bits=SEED_BITS),
                )
            else:
                trainer = Trainer(self.policy, config)
        generator = torch.Generator()
        generator.manual_seed(derive_seed(spec.seed, 2, bits=SEED_BITS))
        slot = _Slot(spec=spec, trainer=trainer, rng_state=generator.get_state())
        with self._lock:
            self._slots[spec.session_id] = slot
            self.executor.open(spec.session_id, spec.tenant or None)
        return self._info(slot)

    def remove_session(self, session_id: str) -> bool:
        """Drop a session's slot: its queued requests fail, its adapter(s) are unloaded; False if
        it was not here (idempotent). Raises :class:`StatusError`."""

        def remove() -> bool:
            with self._lock:
                slot = self._slots.pop(session_id, None)
            if slot is None:
                return False
            self.executor.discard(session_id, StatusError("NOT_FOUND", f"session {session_id!r} was closed"))
            with self.executor.serialized():
                for name in [slot.spec.adapter, *slot.sampler_adapters.values()]:
                    if name is not None and name in self.policy.adapter_names:
                        self.policy.remove_adapter(name)
            return True

        return _guard(remove)

    def session_ids(self) -> list[str]:
        with self._lock:
            return list(self._slots)

    def close(self) -> None:
        self.executor.close()

    def pid(self) -> int:
        return os.getpid()  # the host's process (benchmarks read its memory)

    def call(
        self, session_id: str, request: ops.HostRequest[R], deadline: float | None = None, token: str = "",
    ) -> R:
        """Run ``request`` for a session after its earlier requests; fair between sessions.

        ``deadline`` (seconds since the epoch) and ``token`` (for :meth:`cancel`): see
        :meth:`TurnExecutor.call`. Answers the request's response type; raises :class:`StatusError`.
        """
        if not isinstance(request, ops.HostRequest):
            raise StatusError("UNIMPLEMENTED", f"model host has no operation {type(request).__name__}")
        with self._lock:
            slot = self._slots.get(session_id)
        if slot is None:
            raise StatusError("NOT_FOUND", f"session {session_id!r} is not on this host")

        def run() -> R:
            request.check(self.context_length)  # bounds before the request takes a turn
            return self.executor.call(session_id, lambda: self._run(slot, request), deadline=deadline, token=token)

        return _guard(run)

    def _run(self, slot: _Slot, request: ops.HostRequest[R]) -> R:
        """The handler of the request's type (on the executor thread)."""
        result: object
        match request:
            case ops.Info():
                result = self._info(slot)
            case ops.ForwardBackward():
                result = self._forward_backward(slot, request)
            case ops.Forward():
                result = self._forward(slot, request)
            case ops.OptimStep():
                result = self._optim_step(slot, request)
            case ops.Sample():
                result = self._sample(slot, request)
            case ops.Score():
                result = self._score(slot, request)
            case ops.ComputeLogprobs():
                result = self._compute_logprobs(slot, request)
            case ops.SaveState():
                result = self._save_state(slot, request)
            case ops.LoadState():
                result = self._load_state(slot, request)
            case ops.SaveWeightsForSampler():
                result = self._save_weights_for_sampler(slot, request)
            case ops.GetWeights():
                result = self._get_weights(slot, request)
            case _:
                raise StatusError("UNIMPLEMENTED", f"model host has no operation {type(request).__name__}")
        return cast(R, result)

    def cancel(self, token: str) -> bool:
        """Drop the waiting request sent with ``token`` (its caller went away); False if it started."""
        return self.executor.cancel(token)

    # ---- jobs (see tinker_scheduler.hosted_jobs) ---------------------------------------------
    def run_job(
        self, job_id: str, runner: str, config: Any, run_dir: str, allowed_imports: tuple[str, ...] | None = None,
    ) -> dict[str, Any]:
        """Run a LoRA job on this host's model until it ends; never raises.

        Calls ``runner(config, run_dir=..., callbacks=..., shared=HostedJob)`` in this thread
        (a runner with ``tinker_algos.train``'s signature), reporting through a
        :class:`tinker_scheduler.worker.JobWorker` (:meth:`drain_job`, :meth:`stop_job`), which
        enforces the import policy ``allowed_imports`` while it runs. When the job ends its
        adapter is unloaded from the model.
        """
        if self.load_error is not None:
            e = self.load_error  # a DeviceError names the job config's field, model.device
            detail = e.in_config() if hasattr(e, "in_config") else str(e)
            return {"status": "failed", "error": f"{type(e).__name__}: {detail}", "config_error": False}
        return self.jobs.run(job_id, runner, config, run_dir, allowed_imports)

    def drain_job(self, job_id: str, stored: int = 0) -> list[dict[str, Any]]:
        """The job's reports since the last drain (see ``JobWorker.drain``); [] once it is gone."""
        return self.jobs.drain(job_id, stored)

    def stop_job(self, job_id: str) -> None:
        """Ask the job to checkpoint and stop (``should_stop()`` becomes true)."""
        self.jobs.stop(job_id)

    def abort_job(self, job_id: str) -> None:
        """Stop the job at its next turn without a checkpoint (a cancel that timed out)."""
        self.jobs.abort(job_id)

    def job_ids(self) -> list[str]:
        return self.jobs.ids()

    def _describe(self, job: HostedJob, others: int) -> str:
        return (f"on a shared model host for {self.base_model} (adapter {job.adapter}; "
                f"{others} other job(s) and {len(self._slots)} session(s) on it)")

    # ---- operations (run on the executor thread) ---------------------------------------------
    @contextlib.contextmanager
    def _slot_rng(self, slot: _Slot) -> Iterator[None]:
        """Install the slot's torch RNG as the global one for the request, then save it back."""
        import torch

        outer = torch.get_rng_state()
        torch.set_rng_state(slot.rng_state)
        try:
            yield
        finally:
            slot.rng_state = torch.get_rng_state()
            torch.set_rng_state(outer)

    def _info(self, slot: _Slot) -> ops.ModelInfo:
        policy, spec = self.policy, slot.spec
        base = policy.base_model
        lora = policy.lora_specs.get(spec.adapter) if spec.adapter else None
        return ops.ModelInfo(
            base_model=self.base_model,
            lora_rank=spec.lora_rank,
            lora_alpha=float(lora.alpha) if lora is not None else 0.0,
            tokenizer_id=self.tokenizer_id,
            vocab_size=int(base.get_input_embeddings().weight.shape[0]),
            step=int(slot.trainer.step),
            model_type=str(getattr(base.config, "model_type", "")),
            trainable_parameters=int(sum(p.numel() for p in slot.trainer.params)),
            context_length=self.context_length,
        )

    def _forward_backward(self, slot: _Slot, r: ops.ForwardBackward) -> ops.ForwardResult:
        from tinker_algos.training.trainer import TOKEN_SUM

        cfg = tinker_ops.loss_config(r.loss_fn, r.loss_config)
        batch, extra = tinker_ops.datum_batch(r.data, r.loss_fn, self.policy.pad_token_id)
        with self._slot_rng(slot):
            try:
                # the logprobs of the gradient pass itself: no second forward
                metrics, logprobs_B_T = slot.trainer.forward_backward(
                    batch, r.loss_fn, agg=TOKEN_SUM, return_logprobs=True, **extra, **cfg
                )
            except (TypeError, ValueError) as e:
                raise invalid(f"loss {r.loss_fn!r}: {e}") from None
        out = {k: float(v) for k, v in metrics.items()}
        out["loss:sum"] = out["loss"]
        return ops.ForwardResult(tinker_ops.per_datum_logprobs(logprobs_B_T, _lengths(r.data)), out)

    def _forward(self, slot: _Slot, r: ops.Forward) -> ops.ForwardResult:
        batch, extra = tinker_ops.datum_batch(r.data, r.loss_fn or None, self.policy.pad_token_id)
        with self._slot_rng(slot):
            logprobs_B_T = slot.trainer.forward(batch)
        metrics: dict[str, float] = {}
        if r.loss_fn:
            cfg = tinker_ops.loss_config(r.loss_fn, r.loss_config)
            metrics = tinker_ops.evaluate_loss(logprobs_B_T, batch, extra, r.loss_fn, cfg)
        return ops.ForwardResult(tinker_ops.per_datum_logprobs(logprobs_B_T, _lengths(r.data)), metrics)

    def _optim_step(self, slot: _Slot, r: ops.OptimStep) -> ops.OptimStepResult:
        trainer = slot.trainer
        step_args, max_grad_norm = tinker_ops.adam_step_args(r.adam)
        if trainer.pending_calls == 0:
            raise StatusError(
                "FAILED_PRECONDITION",
                "OptimStep: no gradients accumulated since the last step; call ForwardBackward first",
            )
        trainer.config.max_grad_norm = max_grad_norm
        with self._slot_rng(slot):
            metrics = trainer.optim_step(**step_args)
        return ops.OptimStepResult(int(trainer.step), {f"optim/{k}": float(v) for k, v in metrics.items()})

    def _sampling_adapter(self, slot: _Slot, sampler_path: str) -> str | None:
        if not sampler_path:
            return slot.spec.adapter
        if slot.spec.adapter is None:
            raise invalid("sampler_path: sampling from saved weights needs a LoRA session")
        name = slot.sampler_adapters.get(sampler_path)
        if name is None:
            adapter_dir = Path(sampler_path) / "adapter"
            if not (adapter_dir / "adapter_config.json").exists():
                raise StatusError("NOT_FOUND", f"sampler_path: {sampler_path} holds no saved adapter; pass a path SaveWeightsForSampler returned")
            name = f"{slot.spec.adapter}-w{len(slot.sampler_adapters)}"
            active = self.policy.active_adapter
            self.policy.load_adapter(name, adapter_dir)
            if active is not None:
                self.policy.set_adapter(active)
            slot.sampler_adapters[sampler_path] = name
        return name

    def _sample(self, slot: _Slot, r: ops.Sample) -> list[list[ops.SampledSequence]]:
        from tinker_algos.sampling.sampler import sample

        if not r.prompts:
            raise invalid("prompts: is empty; send at least one prompt")
        for i, p in enumerate(r.prompts):
            if len(p) == 0:
                raise invalid(f"prompts[{i}]: has no tokens")
        sp = tinker_ops.sampling_params(r.params, r.num_samples)
        adapter = None if r.base else self._sampling_adapter(slot, r.sampler_path)  # base: every adapter off
        slot.sample_calls += 1
        if sp.seed is None:  # the session's own stream: independent of other sessions
            sp.seed = derive_seed(slot.spec.seed, 3, slot.sample_calls, bits=SEED_BITS)
        with self._slot_rng(slot):
            try:
                with self.policy.adapters_disabled() if r.base else contextlib.nullcontext():
                    out = sample(self.policy, [list(map(int, p)) for p in r.prompts], sp, adapter=adapter)
            except ValueError as e:
                raise invalid(str(e)) from None
            if slot.spec.adapter is not None:
                self.policy.set_adapter(slot.spec.adapter)
        return tinker_ops.sampled_sequences(out)

    def _score(self, slot: _Slot, r: ops.Score) -> list[dict[str, np.ndarray]]:
        adapter = None if r.base else self._sampling_adapter(slot, r.sampler_path)
        return tinker_ops.score_tokens(self.policy, r.sequences, r.topk, adapter=adapter, base=r.base)

    def _compute_logprobs(self, slot: _Slot, r: ops.ComputeLogprobs) -> list[list[float]]:
        batch = tinker_ops.sequence_batch(r.sequences, self.policy.pad_token_id)
        with self._slot_rng(slot):
            lp = slot.trainer.forward(batch)
        return tinker_ops.sequence_logprobs(lp, r.sequences)

    def _save_state(self, slot: _Slot, r: ops.SaveState) -> ops.Saved:
        with self._slot_rng(slot):
            slot.trainer.save_state(r.path, overwrite=True)
        return ops.Saved(r.path)

    def _load_state(self, slot: _Slot, r: ops.LoadState) -> ops.Loaded:
        import torch

        from tinker_algos.training.checkpoint import CheckpointError

        with self._slot_rng(slot):
            try:
                slot.trainer.load_state(r.path, with_optimizer=r.with_optimizer)
            except (CheckpointError, FileNotFoundError) as e:
                raise invalid(f"path: {e}") from None
            if r.with_optimizer:  # load_state restored the checkpoint's RNG as the global one
                slot.rng_state = torch.get_rng_state()
        return ops.Loaded(int(slot.trainer.step))

    def _save_weights_for_sampler(self, slot: _Slot, r: ops.SaveWeightsForSampler) -> ops.Saved:
        from tinker_algos.model.models import atomic_dir
        from tinker_algos.training.checkpoint import save_adapter

        policy, adapter = self.policy, slot.spec.adapter

        def write(tmp: Path) -> None:
            if adapter is None:
                policy.model.save_pretrained(tmp / "model")
                policy.tokenizer.save_pretrained(tmp / "model")
            else:
                save_adapter(policy, adapter, tmp / "adapter")

        atomic_dir(Path(r.path), write, overwrite=True)
        return ops.Saved(r.path)

    def _get_weights(self, slot: _Slot, r: ops.GetWeights) -> dict[str, np.ndarray]:
        if r.path == "tokenizer":
            return tinker_ops.tokenizer_files(self.policy.tokenizer)
        if r.path:
            from safetensors.numpy import load_file

            files = sorted(Path(r.path).rglob("*.safetensors"))
            if not files:
                raise StatusError("NOT_FOUND", f"path: {r.path} holds no weights; pass a path SaveState or SaveWeightsForSampler returned")
            out: dict[str, np.ndarray] = {}
            for f in files:
                out.update(load_file(str(f)))
            return out
        import torch

        from tinker_algos.model.models import adapter_of

        if r.trainable_only:
            named = list(zip(slot.trainer.param_names, slot.trainer.params, strict=True))
        else:  # the base weights and this session's adapter -- never another session's
            own = slot.spec.adapter
            named = [(n, p) for n, p in self.policy.module.state_dict().items() if adapter_of(n) in (None, own)]
        return {n: p.detach().to(torch.float32).cpu().numpy() for n, p in named}


def _lengths(data: Sequence[ops.Datum]) -> list[int]:
    return [len(d.get("tokens", ())) for d in data]


def _guard(fn: Callable[[], R]) -> R:
    """``fn()``; what it raised as a :class:`StatusError` (the only exception type that leaves a
    host, so a Ray caller gets its code without the host's other exception types)."""
    try:
        return fn()
    except StatusError:
        raise
    except Exception as e:  # noqa: BLE001 - reported to the caller with its status code
        raise StatusError(*classify(e)) from None
