"""Model hosts: one base model in one process, shared by many training sessions and LoRA jobs.

A :class:`ModelHost` loads one base model (a :class:`tinker_algos.models.PolicyModel`) and serves
any number of *sessions*. A LoRA session is a named adapter on the shared base model with its own
:class:`tinker_algos.trainer.Trainer` (optimizer state, step counter); a full fine-tuning session
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
see :mod:`tinker_scheduler.hosted_jobs`). Requests are plain Python values (numpy arrays, dicts,
strings): :meth:`ModelHost.call` returns ``("ok", result)`` or ``("error", code, message)`` where
``code`` is a gRPC status code name, so the caller (:mod:`tinker_scheduler.host_pool`) maps
errors without unpickling exceptions. The class is used directly (in-process,
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
from typing import Any

import numpy as np

from tinker_algos import tinker_ops
from tinker_core.seeding import derive_seed
from tinker_scheduler.errors import StatusError, classify, invalid
from tinker_scheduler.host_executor import TurnExecutor
from tinker_scheduler.hosted_jobs import HostedJob, HostedJobs, job_adapter_name

__all__ = ["ModelHost", "SessionSpec", "adapter_name", "job_adapter_name"]

#: Seeds a session derives from its ``seed`` are this wide.
SEED_BITS = 63


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


@dataclass
class _Session:
    spec: SessionSpec
    trainer: Any
    rng_state: Any  # torch.ByteTensor: the session's torch CPU RNG
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

        from tinker_algos.device import DeviceError
        from tinker_algos.models import ModelLoadError, PolicyModel

        if num_threads:
            torch.set_num_threads(int(num_threads))
        self.base_model = base_model
        self.full = full
        self.load_error: DeviceError | ModelLoadError | None = None  # told each session and job
        self.policy: Any = None
        try:
            self.policy = PolicyModel.load(base_model, device=device, precision=precision, revision=revision, tokenizer=tokenizer)
        except (DeviceError, ModelLoadError) as e:
            self.load_error = e
        #: The longest sequence the model takes (None: its config does not say).
        self.context_length = tinker_ops.context_length(self.policy.base_model.config) if self.policy is not None else None
        self.executor = TurnExecutor()
        self.jobs = HostedJobs(self.policy, self.executor, self._describe)
        self._sessions: dict[str, _Session] = {}
        self._lock = threading.Lock()

    @property
    def served(self) -> list[str]:
        """Session ids (``job:<id>`` for jobs) in execution order (for tests / debugging)."""
        return self.executor.served

    # ---- sessions ---------------------------------------------------------------------------
    def add_session(self, spec: SessionSpec | Mapping[str, Any]) -> tuple[Any, ...]:
        """Create a session's adapter (or claim the full model) and trainer; returns its info."""
        if self.load_error is not None:
            return ("error", "INVALID_ARGUMENT", str(self.load_error))
        if not isinstance(spec, SessionSpec):
            spec = SessionSpec(**dict(spec))
        return _guard(lambda: self._add_session(spec))

    def _add_session(self, spec: SessionSpec) -> dict[str, Any]:
        import torch

        from tinker_algos.models import LoraSpec
        from tinker_algos.trainer import Trainer, TrainerConfig

        with self._lock:
            if spec.session_id in self._sessions:
                raise StatusError("ALREADY_EXISTS", f"session {spec.session_id!r} is already on this host")
            if self.full and self._sessions:
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
        session = _Session(spec=spec, trainer=trainer, rng_state=generator.get_state())
        with self._lock:
            self._sessions[spec.session_id] = session
            self.executor.open(spec.session_id)
        return self._info(session)

    def remove_session(self, session_id: str) -> tuple[Any, ...]:
        """Drop a session: its queued requests fail, its adapter(s) are unloaded. Idempotent."""

        def remove() -> bool:
            with self._lock:
                session = self._sessions.pop(session_id, None)
            if session is None:
                return False
            self.executor.discard(session_id, StatusError("NOT_FOUND", f"session {session_id!r} was closed"))
            with self.executor.serialized():
                for name in [session.spec.adapter, *session.sampler_adapters.values()]:
                    if name is not None and name in self.policy.adapter_names:
                        self.policy.remove_adapter(name)
            return True

        return _guard(remove)

    def session_ids(self) -> list[str]:
        with self._lock:
            return list(self._sessions)

    def close(self) -> None:
        self.executor.close()

    def pid(self) -> int:
        return os.getpid()  # the host's process (benchmarks read its memory)

    def call(
        self, session_id: str, op: str, kwargs: Mapping[str, Any] | None = None, deadline: float | None = None,
        token: str = "",
    ) -> tuple[Any, ...]:
        """Run ``op`` for a session after its earlier requests; fair between sessions.

        ``deadline`` (seconds since the epoch) and ``token`` (for :meth:`cancel`): see
        :meth:`TurnExecutor.call`. Returns ``("ok", result)`` or ``("error", code, message)``.
        """
        method = getattr(self, f"_op_{op}", None)
        if method is None:
            return ("error", "UNIMPLEMENTED", f"model host has no operation {op!r}")
        with self._lock:
            session = self._sessions.get(session_id)
        if session is None:
            return ("error", "NOT_FOUND", f"session {session_id!r} is not on this host")
        args = dict(kwargs or {})

        def run() -> Any:
            check = getattr(self, f"_check_{op}", None)
            if check is not None:  # bounds before the request takes a turn
                check(**args)
            return self.executor.call(session_id, lambda: method(session, **args), deadline=deadline, token=token)

        return _guard(run)

    def cancel(self, token: str) -> bool:
        """Drop the waiting request sent with ``token`` (its caller went away); False if it started."""
        return self.executor.cancel(token)

    # ---- jobs (see tinker_scheduler.hosted_jobs) ---------------------------------------------
    def run_job(self, job_id: str, runner: str, config: Any, run_dir: str) -> dict[str, Any]:
        """Run a LoRA job on this host's model until it ends; never raises.

        Calls ``runner(config, run_dir=..., callbacks=..., shared=HostedJob)`` in this thread
        (a runner with ``tinker_algos.train``'s signature), reporting through a
        :class:`tinker_scheduler.worker.JobWorker` (:meth:`drain_job`, :meth:`stop_job`).
        When the job ends its adapter is unloaded from the model.
        """
        if self.load_error is not None:
            e = self.load_error  # a DeviceError names the job config's field, model.device
            detail = e.in_config() if hasattr(e, "in_config") else str(e)
            return {"status": "failed", "error": f"{type(e).__name__}: {detail}", "config_error": False}
        return self.jobs.run(job_id, runner, config, run_dir)

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
                f"{others} other job(s) and {len(self._sessions)} session(s) on it)")

    # ---- operations (run on the executor thread) ---------------------------------------------
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
            "context_length": self.context_length,
        }

    def _op_info(self, session: _Session) -> dict[str, Any]:
        return self._info(session)

    # the context length, checked before a request takes a turn (the service checks its limits too)
    def _check_forward_backward(self, data: Sequence[Mapping[str, Any]], **_: Any) -> None:
        tinker_ops.check_data(_lengths(data), self.context_length)

    _check_forward = _check_forward_backward

    def _check_sample(self, prompts: Sequence[Sequence[int]], params: Mapping[str, Any], num_samples: int, **_: Any) -> None:
        tinker_ops.check_sample([len(p) for p in prompts], int(params.get("max_tokens", 0)), num_samples, self.context_length)

    def _check_compute_logprobs(self, sequences: Sequence[Sequence[int]]) -> None:
        tinker_ops.check_sequences([len(s) for s in sequences], self.context_length)

    def _op_forward_backward(
        self, session: _Session, data: Sequence[Mapping[str, Any]], loss_fn: str, loss_config: Mapping[str, float]
    ) -> dict[str, Any]:
        from tinker_algos.trainer import TOKEN_SUM

        cfg = tinker_ops.loss_config(loss_fn, loss_config)
        batch, extra = tinker_ops.datum_batch(data, loss_fn, self.policy.pad_token_id)
        with self._session_rng(session):
            try:
                # the logprobs of the gradient pass itself: no second forward
                metrics, logprobs_B_T = session.trainer.forward_backward(
                    batch, loss_fn, agg=TOKEN_SUM, return_logprobs=True, **extra, **cfg
                )
            except (TypeError, ValueError) as e:
                raise invalid(f"loss {loss_fn!r}: {e}") from None
        out = {k: float(v) for k, v in metrics.items()}
        out["loss:sum"] = out["loss"]
        return {"logprobs": tinker_ops.per_datum_logprobs(logprobs_B_T, _lengths(data)), "metrics": out}

    def _op_forward(
        self, session: _Session, data: Sequence[Mapping[str, Any]], loss_fn: str, loss_config: Mapping[str, float]
    ) -> dict[str, Any]:
        batch, extra = tinker_ops.datum_batch(data, loss_fn or None, self.policy.pad_token_id)
        with self._session_rng(session):
            logprobs_B_T = session.trainer.forward(batch)
        metrics: dict[str, float] = {}
        if loss_fn:
            cfg = tinker_ops.loss_config(loss_fn, loss_config)
            metrics = tinker_ops.evaluate_loss(logprobs_B_T, batch, extra, loss_fn, cfg)
        return {"logprobs": tinker_ops.per_datum_logprobs(logprobs_B_T, _lengths(data)), "metrics": metrics}

    def _op_optim_step(self, session: _Session, adam: Mapping[str, float]) -> dict[str, Any]:
        trainer = session.trainer
        step_args, max_grad_norm = tinker_ops.adam_step_args(adam)
        if trainer.pending_calls == 0:
            raise StatusError(
                "FAILED_PRECONDITION",
                "OptimStep: no gradients accumulated since the last step; call ForwardBackward first",
            )
        trainer.config.max_grad_norm = max_grad_norm
        with self._session_rng(session):
            metrics = trainer.optim_step(**step_args)
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
                raise StatusError("NOT_FOUND", f"sampler_path: {sampler_path} holds no saved adapter; pass a path SaveWeightsForSampler returned")
            name = f"{session.spec.adapter}-w{len(session.sampler_adapters)}"
            active = self.policy.active_adapter
            self.policy.load_adapter(name, adapter_dir)
            if active is not None:
                self.policy.set_adapter(active)
            session.sampler_adapters[sampler_path] = name
        return name

    def _op_sample(
        self, session: _Session, prompts: Sequence[Sequence[int]], params: Mapping[str, Any],
        num_samples: int, sampler_path: str = "", base: bool = False,
    ) -> list[list[dict[str, Any]]]:
        from tinker_algos.sampler import sample

        if not prompts:
            raise invalid("prompts: is empty; send at least one prompt")
        for i, p in enumerate(prompts):
            if len(p) == 0:
                raise invalid(f"prompts[{i}]: has no tokens")
        sp = tinker_ops.sampling_params(params, num_samples)
        adapter = None if base else self._sampling_adapter(session, sampler_path)  # base: every adapter off
        session.sample_calls += 1
        if sp.seed is None:  # the session's own stream: independent of other sessions
            sp.seed = derive_seed(session.spec.seed, 3, session.sample_calls, bits=SEED_BITS)
        with self._session_rng(session):
            try:
                with self.policy.adapters_disabled() if base else contextlib.nullcontext():
                    out = sample(self.policy, [list(map(int, p)) for p in prompts], sp, adapter=adapter)
            except ValueError as e:
                raise invalid(str(e)) from None
            if session.spec.adapter is not None:
                self.policy.set_adapter(session.spec.adapter)
        return tinker_ops.sampled_sequences(out)

    def _op_score(
        self, session: _Session, sequences: Sequence[Sequence[int]], topk: int = 0, sampler_path: str = "",
        base: bool = False,
    ) -> list[dict[str, np.ndarray]]:
        """Logprobs and top-k tokens per position of whole sequences (``tinker_ops.score_tokens``)."""
        adapter = None if base else self._sampling_adapter(session, sampler_path)
        return tinker_ops.score_tokens(self.policy, sequences, topk, adapter=adapter, base=base)

    def _op_compute_logprobs(self, session: _Session, sequences: Sequence[Sequence[int]]) -> list[list[float]]:
        batch = tinker_ops.sequence_batch(sequences, self.policy.pad_token_id)
        with self._session_rng(session):
            lp = session.trainer.forward(batch)
        return tinker_ops.sequence_logprobs(lp, sequences)

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
            return tinker_ops.tokenizer_files(self.policy.tokenizer)
        if path:
            from safetensors.numpy import load_file

            files = sorted(Path(path).rglob("*.safetensors"))
            if not files:
                raise StatusError("NOT_FOUND", f"path: {path} holds no weights; pass a path SaveState or SaveWeightsForSampler returned")
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


def _lengths(data: Sequence[Mapping[str, Any]]) -> list[int]:
    return [len(d.get("tokens", ())) for d in data]


def _guard(fn: Callable[[], Any]) -> tuple[Any, ...]:
    """``("ok", fn())``, or ``("error", code, message)`` for what it raised."""
    try:
        return ("ok", fn())
    except Exception as e:  # noqa: BLE001 - reported to the caller
        return ("error", *classify(e))
