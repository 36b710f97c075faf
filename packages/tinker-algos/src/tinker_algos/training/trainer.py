"""The trainer primitives, in Tinker's vocabulary: ``forward``, ``forward_backward``, ``optim_step``.

A :class:`Trainer` owns one policy (a :class:`~tinker_algos.model.models.PolicyModel`, optionally one
named LoRA adapter on it), an optimizer resolved by name from the plugin registry and an LR
schedule. Several trainers can share one ``PolicyModel``, one per adapter; each activates its
adapter before every call.

Semantics:

* ``forward(batch)`` -> ``logprobs_B_T`` (numpy, no grad): ``logprobs_B_T[:, t]`` is the logprob
  of token ``t`` given tokens ``< t``; position 0 and padding get 0 (the alignment of
  :mod:`tinker_core.contracts`).
* ``forward_backward(batch, loss, agg=...)`` computes the named loss (``tinker_core.registry.get_loss``),
  reduces ``loss_B_T`` with ``agg`` over ``loss_mask_B_T`` and *adds* the gradient of
  ``loss_scale * aggregated`` to the parameters' ``.grad``. Gradients accumulate over calls until
  ``optim_step``. To average over ``k`` calls pass ``loss_scale=1/k``; ``agg="token-sum"``
  (``sum(l * m)``, a trainer-level mode beside :data:`tinker_core.contracts.AGGREGATION_MODES`) makes
  calls on parts of a batch add up exactly to one call on the whole.
  With ``return_logprobs=True`` it returns ``(metrics, logprobs_B_T)``: the detached logprobs
  of the forward pass it ran for the gradient (no second forward), aligned like ``forward``'s.
* ``optim_step(lr=None)`` clips gradients (``max_grad_norm``), applies one optimizer update at the
  scheduled LR (or ``lr``) and clears the gradients. If any loss since the last step was NaN/inf,
  or the gradient norm is, the update is **skipped** (weights and optimizer state untouched,
  gradients cleared) and counted in ``skipped_steps``.
* Under ``fp16-mixed`` a ``torch.amp.GradScaler`` multiplies each loss by the current scale
  before backward; ``optim_step`` unscales the gradients first (``grad_norm`` is the true norm),
  skips an update whose gradients overflowed (counted in ``skipped_steps``) and lets the scaler
  halve its scale then (double it after 2000 clean steps). Its state is in ``state_dict``.
* ``step`` counts applied updates; the LR schedule follows it (skipped steps do not advance it).

Metrics are flat dicts of floats. ``forward_backward``: ``loss`` (the aggregated loss, before
``loss_scale``), ``num_tokens``, ``num_sequences``, ``nonfinite`` (1.0 when the loss was NaN/inf)
and the loss function's own metrics as ``<loss name>/<key>``. ``optim_step``: ``lr``,
``grad_norm`` (before clipping), ``skipped`` (1.0 or 0.0), ``skipped_steps``, ``step`` and, under
``fp16-mixed``, ``grad_scale`` (the loss scale the next step will use).
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, overload

import numpy as np
import torch

from tinker_algos.builtins.optimizers import build_optimizer
from tinker_algos.model.activation_checkpointing import set_activation_checkpointing
from tinker_algos.model.models import LoraSpec, PolicyModel, to_tensor
from tinker_algos.records.recording import traced
from tinker_algos.training import checkpoint
from tinker_algos.training.gradient_pass import TOKEN_SUM, GradientPass, trained_tokens
from tinker_algos.training.shared_prefix import batch_logprobs
from tinker_algos.training.trainer_config import (  # re-exported: their home was this module
    SCHEDULES,
    TrainerConfig,
    lr_multiplier,
)

if TYPE_CHECKING:
    from numpy.typing import ArrayLike

    from tinker_core.contracts import Batch

__all__ = ["SCHEDULES", "TOKEN_SUM", "Trainer", "TrainerConfig", "aggregation_modes", "lr_multiplier", "restore_trainer"]


def aggregation_modes() -> tuple[str, ...]:
    """Every ``agg`` the trainer accepts: tinker-core's modes plus ``token-sum``."""
    from tinker_core.contracts import AGGREGATION_MODES

    return (*AGGREGATION_MODES, TOKEN_SUM)


class Trainer:
    """Policy + optional LoRA adapter + optimizer + LR schedule (see the module docstring).

    Args:
        policy: the model; with ``adapter`` set, only that adapter trains (the base is frozen),
            otherwise every weight trains.
        config: :class:`TrainerConfig`.
        adapter: the adapter's name. If the policy has no adapter of that name it is added with
            ``lora`` (default :class:`LoraSpec`) and ``adapter_seed``.
    """

    def __init__(self, policy: PolicyModel, config: TrainerConfig | None = None, *, adapter: str | None = None,
                 lora: LoraSpec | None = None, adapter_seed: int | None = None) -> None:
        self.policy = policy
        self.config = config or TrainerConfig()
        self.config.validate()
        self.adapter = adapter
        if adapter is not None and adapter not in policy.adapter_names:
            policy.add_adapter(adapter, lora, seed=adapter_seed)
        elif adapter is None and lora is not None:
            raise ValueError("Trainer got lora= without adapter=; name the adapter to create")
        self._activate()
        # as this trainer's config says, also off: a stage's trainer does not inherit an earlier stage's
        set_activation_checkpointing(policy.module, self.config.activation_checkpointing)
        named = policy.trainable_parameters(adapter)
        for _, p in named:
            p.requires_grad_(True)
        self.params: list[torch.nn.Parameter] = [p for _, p in named]
        self.param_names: list[str] = [n for n, _ in named]
        self.optimizer: torch.optim.Optimizer = build_optimizer(
            self.config.optimizer, self.params, lr=self.config.lr, weight_decay=self.config.weight_decay, config=self.config.optimizer_config
        )
        self.step = 0
        self.skipped_steps = 0
        #: fp16-mixed only: dynamic loss scaling (None in every other precision)
        self.scaler: torch.amp.GradScaler | None = (
            torch.amp.GradScaler(policy.device.type) if policy.spec.needs_grad_scaler else None
        )
        self._pending_calls = 0
        self._nonfinite_pending = False
        #: set by a data-parallel learner group: ``optim_step`` first sums the gradients over it
        #: (``torch.distributed``'s default group), so every learner applies the same update
        self.data_parallel = False
        self._losses: dict[str, tuple[Any, bool]] = {}  # loss name -> (its function, pairs rows), looked up once

    # ---- helpers ----------------------------------------------------------------------------
    @property
    def device(self) -> torch.device:
        return self.policy.device

    def _activate(self) -> None:
        if self.adapter is not None:
            self.policy.set_adapter(self.adapter)
        elif self.policy.is_peft:
            raise ValueError(
                "this Trainer fine-tunes the full model, but LoRA adapters were added to the policy "
                "since; use a separate PolicyModel for full fine-tuning"
            )

    def _tensors(self, batch: Batch) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        tokens = np.asarray(batch.tokens_B_T)
        if tokens.ndim != 2 or tokens.shape[0] == 0 or tokens.shape[1] == 0:
            raise ValueError(f"batch.tokens_B_T must be a non-empty [B, T] array, got shape {tokens.shape}")
        vocab = self.policy.model.get_input_embeddings().weight.shape[0]
        if tokens.min() < 0 or tokens.max() >= vocab:
            raise ValueError(
                f"batch.tokens_B_T holds ids outside [0, {vocab}) (min {tokens.min()}, max {tokens.max()}); "
                "was it tokenized with this model's tokenizer?"
            )
        dev = self.device
        t = to_tensor(tokens, dtype=torch.long, device=dev)
        attn = to_tensor(batch.attention_mask_B_T, dtype=torch.float32, device=dev)
        mask = to_tensor(batch.loss_mask_B_T, dtype=torch.float32, device=dev) * attn
        return t, attn, mask

    # ---- primitives -------------------------------------------------------------------------
    @torch.no_grad()
    @traced("logprobs")
    def forward(self, batch: Batch, *, temperature: float = 1.0, reference: bool = False) -> np.ndarray:
        """Logprobs ``[B, T]`` (float32 numpy) of the batch's tokens under the current policy.

        ``temperature`` divides the logits first; ``reference=True`` scores with every adapter
        disabled (the base model: a LoRA run's reference policy).
        """
        self._activate()
        tokens, attn, mask = self._tensors(batch)
        module = self.policy.module
        was_training = module.training
        module.eval()
        try:
            with self.policy.adapters_disabled() if reference else contextlib.nullcontext():
                lp = batch_logprobs(
                    module, tokens, attn, mask, temperature=temperature, spec=self.policy.spec, share=self.config.share_prefix,
                    chunked=self.config.chunked_logprobs, checkpointing=self.config.activation_checkpointing,
                )
        finally:
            module.train(was_training)
        return lp.float().cpu().numpy()

    @overload
    def forward_backward(
        self, batch: Batch, loss: str = ..., *, return_logprobs: Literal[False] = ..., **kwargs: Any
    ) -> dict[str, float]: ...

    @overload
    def forward_backward(
        self, batch: Batch, loss: str = ..., *, return_logprobs: Literal[True], **kwargs: Any
    ) -> tuple[dict[str, float], np.ndarray]: ...

    @traced("forward_backward")
    def forward_backward(
        self,
        batch: Batch,
        loss: str = "cross_entropy",
        *,
        agg: str = "token-mean",
        loss_scale: float = 1.0,
        advantages_B_T: ArrayLike | None = None,
        ref_logprobs_B_T: ArrayLike | None = None,
        weights_B_T: ArrayLike | None = None,
        values_B_T: ArrayLike | None = None,
        old_values_B_T: ArrayLike | None = None,
        returns_B_T: ArrayLike | None = None,
        return_logprobs: bool = False,
        temperature: float = 1.0,
        batch_totals: tuple[float, float] | None = None,
        **loss_config: Any,
    ) -> dict[str, float] | tuple[dict[str, float], np.ndarray]:
        """Add the gradient of ``loss_scale * aggregate(loss(batch))`` to the parameters.

        Args:
            batch: a right-padded :class:`tinker_core.contracts.Batch`; trained tokens are
                ``loss_mask_B_T * attention_mask_B_T``; ``sampler_logprobs_B_T`` become the
                loss's ``sampling_logprobs_B_T``.
            loss: a registered loss name (``tinker_core.registry.get_loss``).
            agg: one of :func:`aggregation_modes`.
            loss_scale: multiplies the aggregated loss before backward (``1/k`` for ``k`` calls).
            advantages_B_T: defaults to ``batch.advantages_B_T``.
            ref_logprobs_B_T, weights_B_T, values_B_T, old_values_B_T, returns_B_T: passed to
                the loss as :class:`tinker_core.contracts.LossInputs` fields.
            return_logprobs: also hand back the logprobs of the forward pass this call runs
                anyway (what a caller would otherwise get from a second ``forward(batch)``).
            temperature: divides the logits before the log-softmax (the policy the loss sees is
                the one the sampler drew from at that temperature; GRPO passes the rollout's).
            batch_totals: ``(trained tokens, rows)`` of the whole batch when ``batch`` is one
                data-parallel learner's share of it (weighted into the whole batch's loss).
            **loss_config: the loss's own keys (``eps_low``, ``beta`` ...).

        Returns:
            The metrics dict (see the module docstring); with ``return_logprobs=True`` the pair
            ``(metrics, logprobs_B_T)``, ``logprobs_B_T`` a detached float32 ``[B, T]`` numpy
            array aligned exactly like :meth:`forward`'s output (position 0 and padding 0),
            gathered over the micro-batches. They come from the training-mode pass, so they
            equal ``forward(batch)`` (up to float rounding) unless dropout is active (a LoRA
            ``dropout > 0``). Rows that the gradient pass skips (micro-batches with no trained
            token, or those after a NaN/inf loss) are scored under ``no_grad`` so that every row
            is filled.
        """
        loss_fn, pairs_rows = self._loss(loss, agg)
        self._activate()
        tokens, attn, mask = self._tensors(batch)
        B, T = tokens.shape
        consts = self._loss_constants((B, T), {
            "sampling_logprobs_B_T": batch.sampler_logprobs_B_T,
            "advantages_B_T": batch.advantages_B_T if advantages_B_T is None else advantages_B_T,
            "ref_logprobs_B_T": ref_logprobs_B_T,
            "weights_B_T": weights_B_T,
            "values_B_T": values_B_T,
            "old_values_B_T": old_values_B_T,
            "returns_B_T": returns_B_T,
        })
        mb = self._micro_batch_size(B, loss, pairs_rows=pairs_rows)
        gradient_pass = GradientPass(
            loss=loss, loss_fn=loss_fn, loss_config=loss_config, agg=agg, loss_scale=loss_scale,
            tokens=tokens, attn=attn, mask=mask, consts=consts, spec=self.policy.spec, temperature=temperature,
            share_prefix=self.config.share_prefix, chunked_logprobs=self.config.chunked_logprobs,
            checkpointing=self.config.activation_checkpointing,
            total_tokens=batch_totals[0] if batch_totals else trained_tokens(mask), total_rows=batch_totals[1] if batch_totals else float((mask.sum(-1) > 0).sum()),
            logprobs_B_T=np.zeros((B, T), dtype=np.float32) if return_logprobs else None,
            scaler=self.scaler,
        )
        module = self.policy.module
        module.train()
        gradient_pass.run(module, mb)
        if gradient_pass.nonfinite:
            self._nonfinite_pending = True
        self._pending_calls += 1
        if gradient_pass.logprobs_B_T is not None:
            return gradient_pass.metrics(), gradient_pass.logprobs_B_T
        return gradient_pass.metrics()

    def _loss(self, loss: str, agg: str) -> tuple[Any, bool]:
        """``loss``'s function and whether it pairs rows, looked up once per trainer (after checking
        ``agg`` is an aggregation mode)."""
        if agg not in aggregation_modes():
            raise ValueError(f"unknown aggregation {agg!r}; choose one of {', '.join(aggregation_modes())}")
        if loss not in self._losses:
            self._losses[loss] = _loss_entry(loss)
        return self._losses[loss]

    def _micro_batch_size(self, B: int, loss: str, *, pairs_rows: bool) -> int:
        """Rows per gradient pass: ``micro_batch_size`` (all ``B`` when unset), even for a
        preference loss (it pairs rows ``2k, 2k+1``)."""
        mb = self.config.micro_batch_size or B
        if pairs_rows and mb < B and mb % 2:
            raise ValueError(
                f"loss {loss!r} pairs rows (2k, 2k+1); TrainerConfig.micro_batch_size must be even, got {mb}"
            )
        return mb

    def _loss_constants(
        self, shape: tuple[int, int], consts: Mapping[str, ArrayLike | None]
    ) -> dict[str, torch.Tensor | None]:
        """The loss's per-token inputs besides the logprobs as float32 tensors on the device,
        each checked to be ``[B, T]`` like the batch (None stays None)."""
        consts_t: dict[str, torch.Tensor | None] = {}
        for name, value in consts.items():
            if value is None:
                consts_t[name] = None
                continue
            t = to_tensor(value, dtype=torch.float32, device=self.device)
            if tuple(t.shape) != shape:
                raise ValueError(f"forward_backward: {name} has shape {tuple(t.shape)}, the batch is {shape}")
            consts_t[name] = t
        return consts_t

    def current_lr(self) -> float:
        """The scheduled LR of the next update."""
        c = self.config
        return c.lr * lr_multiplier(
            self.step, schedule=c.schedule, warmup_steps=c.warmup_steps,
            total_steps=c.total_steps, min_lr_ratio=c.min_lr_ratio,
        )

    @property
    def pending_calls(self) -> int:
        """``forward_backward`` calls whose gradients wait for the next ``optim_step``."""
        return self._pending_calls

    @traced("optim_step")
    def optim_step(self, lr: float | None = None, **param_overrides: Any) -> dict[str, float]:
        """Apply the accumulated gradients (see module docstring); clears them either way.

        Args:
            lr: use this LR for this update instead of the scheduled one.
            **param_overrides: optimizer param-group keys to set before the update (and keep),
                e.g. ``betas=(0.9, 0.95)``, ``weight_decay=0.1`` (on the decayed group only).
        """
        if self._pending_calls == 0 and not self.data_parallel:
            raise ValueError("optim_step called with no gradients accumulated; call forward_backward first")
        if self.data_parallel:
            self._sum_gradients_over_learners()
        grads = [p.grad for p in self.params if p.grad is not None]
        # fp16-mixed: divide the gradients by the loss scale (it records overflow for update());
        # after a NaN/inf loss no gradient of it exists and the scale stays as it is
        unscaled = self.scaler is not None and bool(grads) and not self._nonfinite_pending
        if unscaled:
            self.scaler.unscale_(self.optimizer)
        if grads:
            norm = torch.nn.utils.get_total_norm(grads, norm_type=2.0, error_if_nonfinite=False)
            grad_norm = float(norm)
        else:
            norm, grad_norm = None, 0.0
        lr_now = float(lr) if lr is not None else self.current_lr()
        skip = self._nonfinite_pending or not math.isfinite(grad_norm)
        if skip:
            self.skipped_steps += 1
        else:
            if self.config.max_grad_norm is not None and norm is not None:
                torch.nn.utils.clip_grads_with_norm_(self.params, self.config.max_grad_norm, norm)
            for i, group in enumerate(self.optimizer.param_groups):
                group["lr"] = lr_now
                for k, v in param_overrides.items():
                    if k not in group:
                        raise ValueError(
                            f"optim_step: {k!r} is not a setting of optimizer {self.config.optimizer!r}; "
                            f"settings are {sorted(x for x in group if x != 'params')}"
                        )
                    if k == "weight_decay" and i > 0:
                        continue  # the no-decay group keeps 0
                    group[k] = v
            if unscaled:
                self.scaler.step(self.optimizer)  # no overflow was found: this is optimizer.step()
            else:
                self.optimizer.step()
            self.step += 1
        if unscaled:
            self.scaler.update()  # halves the scale after an overflow, grows it after clean steps
        self.zero_grad()
        metrics = {
            "lr": lr_now,
            "grad_norm": grad_norm,
            "skipped": 1.0 if skip else 0.0,
            "skipped_steps": float(self.skipped_steps),
            "step": float(self.step),
        }
        if self.scaler is not None:
            metrics["grad_scale"] = float(self.scaler.get_scale())
        return metrics

    def _sum_gradients_over_learners(self) -> None:
        """Sum every learner's gradients (one flat all-reduce), so each holds the whole batch's.

        A parameter keeps ``grad = None`` only when it has none on every learner (as one learner
        with the whole batch would have it: AdamW skips such parameters), and a NaN/inf loss on
        any learner skips the update on all of them.
        """
        import torch.distributed as dist

        has_B = torch.tensor([float(p.grad is not None) for p in self.params] + [float(self._nonfinite_pending)], device=self.device)
        dist.all_reduce(has_B, op=dist.ReduceOp.MAX)
        self._nonfinite_pending = bool(has_B[-1] > 0)
        with_grad = [p for p, h in zip(self.params, has_B[:-1].tolist(), strict=True) if h > 0]
        if not with_grad:
            return
        flat = torch.cat([(p.grad if p.grad is not None else torch.zeros_like(p)).reshape(-1) for p in with_grad])
        dist.all_reduce(flat, op=dist.ReduceOp.SUM)
        offset = 0
        for p in with_grad:
            n = p.numel()
            p.grad = flat[offset : offset + n].view_as(p).clone()
            offset += n

    def zero_grad(self) -> None:
        """Drop accumulated gradients (and a pending NaN flag)."""
        self.optimizer.zero_grad(set_to_none=True)
        for p in self.params:
            p.grad = None
        self._pending_calls = 0
        self._nonfinite_pending = False

    # ---- state ------------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        """Optimizer state plus counters (weights are saved by :mod:`tinker_algos.training.checkpoint`)."""
        state: dict[str, Any] = {
            "optimizer": self.optimizer.state_dict(),
            "step": self.step,
            "skipped_steps": self.skipped_steps,
        }
        if self.scaler is not None:
            state["grad_scaler"] = self.scaler.state_dict()
        return state

    def load_state_dict(self, state: Mapping[str, Any], *, with_optimizer: bool = True) -> None:
        if with_optimizer:
            self.optimizer.load_state_dict(state["optimizer"])
            self.step = int(state["step"])
            self.skipped_steps = int(state["skipped_steps"])
            # a checkpoint from another precision has no scaler state: the scaler starts fresh
            if self.scaler is not None and state.get("grad_scaler"):
                self.scaler.load_state_dict(state["grad_scaler"])
        self.zero_grad()

    def save_state(self, path: str | Path, *, data_cursor: Mapping[str, Any] | None = None, overwrite: bool = False) -> Path:
        """Write a checkpoint; see :func:`tinker_algos.training.checkpoint.save_state`."""
        return checkpoint.save_state(path, self, data_cursor=data_cursor, overwrite=overwrite)

    def load_state(self, path: str | Path, *, with_optimizer: bool = True) -> dict[str, Any]:
        """Restore a checkpoint; returns its manifest. See :func:`tinker_algos.training.checkpoint.load_state`."""
        return checkpoint.load_state(path, self, with_optimizer=with_optimizer)


def _loss_entry(loss: str) -> tuple[Any, bool]:
    """The function of the registered loss ``loss`` (a plugin's deferred import resolved) and
    whether it pairs rows (``kind: preference``)."""
    import tinker_core.registry
    from tinker_algos.builtins import Deferred

    entry = tinker_core.registry.get_loss(loss)
    fn = entry.obj.resolve() if isinstance(entry.obj, Deferred) else entry.obj
    return fn, entry.loss_kind == "preference"


def restore_trainer(path: str | Path, *, policy: PolicyModel | None = None, device: str | None = None) -> tuple[Trainer, dict[str, Any]]:
    """Rebuild a trainer from a checkpoint alone (e.g. in a restarted worker).

    Loads the base model named in the manifest (or uses ``policy``), re-creates the adapter with
    the saved LoRA settings and the trainer with the saved config, then
    :func:`~tinker_algos.training.checkpoint.load_state`. Returns ``(trainer, manifest)``.
    """
    manifest = checkpoint.read_manifest(path)
    if policy is None:
        policy = PolicyModel.load(manifest["base_model"], device=device)
    config = TrainerConfig.from_dict(manifest["trainer_config"])
    adapter = manifest.get("adapter_name")
    lora = LoraSpec.from_dict(manifest["adapter_config"]) if manifest.get("adapter_config") else None
    trainer = Trainer(policy, config, adapter=adapter, lora=lora)
    checkpoint.load_state(path, trainer, with_optimizer=True)
    return trainer, manifest
