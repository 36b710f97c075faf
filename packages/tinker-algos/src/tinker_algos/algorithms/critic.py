"""The PPO critic: per-token values ``V(s_t)`` from a linear value head on a transformer body.

Two layouts (``algorithm.params.critic``):

* ``"head"`` (default) -- a linear head on the **policy's own** last hidden state (after the
  final norm). The value loss back-propagates through the policy's trainable weights (the whole
  model, or the LoRA adapter) scaled by ``vf_coef``, as in a shared actor-critic network; the
  trainer's ``optim_step`` applies that part. The head has its own optimizer.
* ``"separate"`` -- a second copy of the policy's body, taken when the stage starts (LoRA
  adapters merged in), plus a head; the value loss trains only this copy, with its own
  optimizer. The policy never sees the value gradient. Costs one more model in memory.

Alignment. ``values_B_T[:, t]`` is the value of the state in which token ``t`` is chosen, i.e.
of the tokens ``< t``: the head reads the hidden state at position ``t - 1``. This is the
alignment of ``logprobs_B_T`` (:mod:`tinker_core.contracts`), so GAE's ``V_t`` and ``V_{t+1}`` sit
on the tokens whose choice they value; ``V`` after the last response token is the terminal 0.
Position 0 and padding get 0. In multi-turn rollouts the value of a policy token that follows
an environment observation has seen that observation.

Everything the critic learns (head, separate body, optimizer state, update count) goes through
:meth:`Critic.state_dict` / :meth:`Critic.load_state_dict`, so a resumed run is exact.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Mapping
from typing import Any, get_args

import numpy as np
import torch

from tinker_algos.builtins.optimizers import build_optimizer
from tinker_algos.model.head_logprobs import base_of
from tinker_algos.model.models import PolicyModel, position_ids_from_mask, to_tensor
from tinker_algos.training.gradient_pass import aggregate
from tinker_core.config import PPOParams
from tinker_core.contracts import Batch

CRITIC_MODES: tuple[str, ...] = get_args(PPOParams.model_fields["critic"].annotation)
"""``head`` and ``separate``: the values of ``algorithm.params.critic`` (:class:`tinker_core.config.PPOParams`)."""


def decoder_of(model: Any) -> torch.nn.Module:
    """The transformer body of a causal LM (its output is the post-norm last hidden state).

    Works for plain transformers models and peft-wrapped ones (LoRA layers stay active).
    """
    base = base_of(model)
    prefix = getattr(base, "base_model_prefix", "model")
    body = getattr(base, prefix, None)
    if not isinstance(body, torch.nn.Module):
        raise ValueError(
            f"cannot find the transformer body of {type(base).__name__} (attribute {prefix!r}); "
            "the critic needs a Hugging Face causal LM with a base_model_prefix"
        )
    return body


class ValueHead(torch.nn.Module):
    """``V = w . h + b``, zero-initialised so that every value starts at 0 (no RNG draw)."""

    def __init__(self, hidden_size: int) -> None:
        super().__init__()
        self.linear = torch.nn.Linear(hidden_size, 1)
        torch.nn.init.zeros_(self.linear.weight)
        torch.nn.init.zeros_(self.linear.bias)

    def forward(self, hidden_B_T_H: torch.Tensor) -> torch.Tensor:
        return self.linear(hidden_B_T_H.float()).squeeze(-1)


def align_values(next_values_B_T: torch.Tensor, attention_mask_B_T: torch.Tensor) -> torch.Tensor:
    """Shift head outputs so ``out[:, t]`` is the value read at position ``t - 1`` (see module doc).

    ``next_values_B_T[:, t]`` is the head's output on the hidden state at position ``t``; the
    result is 0 at position 0 and wherever the token or the one before it is padding.
    """
    m = attention_mask_B_T.to(next_values_B_T.dtype)
    m_prev = torch.cat([torch.zeros_like(m[:, :1]), m[:, :-1]], dim=1)
    shifted = torch.cat([torch.zeros_like(next_values_B_T[:, :1]), next_values_B_T[:, :-1]], dim=1)
    return shifted * m * m_prev


def explained_variance(values_B_T: np.ndarray, returns_B_T: np.ndarray, mask_B_T: np.ndarray) -> float:
    """``1 - Var(returns - values) / Var(returns)`` over the trained tokens (0.0 when Var is 0).

    1 is a perfect critic, 0 no better than a constant, negative worse than a constant.
    """
    m = np.asarray(mask_B_T) > 0
    y = np.asarray(returns_B_T, dtype=np.float64)[m]
    if y.size == 0:
        return 0.0
    var_y = float(y.var())
    if var_y == 0.0:
        return 0.0
    residual = y - np.asarray(values_B_T, dtype=np.float64)[m]
    return 1.0 - float(residual.var()) / var_y


class Critic:
    """A value head (on the policy, or on its own copy of the body) and the head's optimizer.

    Args:
        policy: the policy being trained (its body is shared in ``"head"`` mode, copied in
            ``"separate"`` mode -- at construction time, so build the critic once the stage's
            starting weights are in place).
        mode: ``"head"`` or ``"separate"`` (see the module docstring).
        optimizer: a registered optimizer name; ``lr``, ``weight_decay``, ``optimizer_config``
            as for the policy's trainer.
        max_grad_norm: clip the critic's own gradient norm (None: no clipping).
        detach: in ``"head"`` mode, stop the value gradient at the hidden state (the head
            learns alone and the policy's weights see no value gradient).
    """

    def __init__(
        self,
        policy: PolicyModel,
        *,
        mode: str = "head",
        optimizer: str = "adamw",
        lr: float = 1e-3,
        weight_decay: float = 0.0,
        optimizer_config: Mapping[str, Any] | None = None,
        max_grad_norm: float | None = 1.0,
        detach: bool = False,
    ) -> None:

        if mode not in CRITIC_MODES:
            raise ValueError(f"critic mode must be one of {', '.join(CRITIC_MODES)}, got {mode!r}")
        self.policy = policy
        self.mode = mode
        self.detach = bool(detach)
        self.max_grad_norm = max_grad_norm
        self.body: torch.nn.Module | None = None
        if mode == "separate":
            self.body = self._copy_body(policy)
        hidden = int(policy.base_model.config.hidden_size)
        self.head = ValueHead(hidden).to(policy.device)
        own = list(self.head.parameters()) + (list(self.body.parameters()) if self.body is not None else [])
        self.params: list[torch.nn.Parameter] = own
        self.optimizer: torch.optim.Optimizer = build_optimizer(optimizer, own, lr=lr, weight_decay=weight_decay, config=optimizer_config)
        self.updates = 0
        self.skipped_updates = 0
        self._nonfinite = False

    @staticmethod
    def _copy_body(policy: PolicyModel) -> torch.nn.Module:
        model = copy.deepcopy(policy.model)
        if hasattr(model, "merge_and_unload"):  # LoRA: the starting policy = base + active adapter
            model = model.merge_and_unload()
        body = decoder_of(model)
        for p in body.parameters():
            p.requires_grad_(True)
        return body

    # ---- values -------------------------------------------------------------------------------
    def _body(self) -> torch.nn.Module:
        return self.body if self.body is not None else decoder_of(self.policy.module)

    def _values(self, tokens_B_T: torch.Tensor, attn_B_T: torch.Tensor) -> torch.Tensor:
        body = self._body()
        frozen = self.detach and self.body is None
        grad = torch.is_grad_enabled() and not frozen
        with torch.set_grad_enabled(grad), self.policy.spec.autocast():
            out = body(
                input_ids=tokens_B_T,
                attention_mask=attn_B_T.long(),
                position_ids=position_ids_from_mask(attn_B_T),
                use_cache=False,
            )
        return align_values(self.head(out.last_hidden_state), attn_B_T.float())

    def _tensors(self, batch: Batch) -> tuple[torch.Tensor, torch.Tensor]:
        dev = self.policy.device
        return (
            to_tensor(batch.tokens_B_T, dtype=torch.long, device=dev),
            to_tensor(batch.attention_mask_B_T, dtype=torch.float32, device=dev),
        )

    @torch.no_grad()
    def values(self, batch: Batch) -> np.ndarray:
        """``values_B_T`` (float32 numpy, no grad): ``V(s_t)`` on every real position ``t >= 1``."""
        tokens, attn = self._tensors(batch)
        body = self._body()
        was_training = body.training
        body.eval()
        try:
            v = self._values(tokens, attn)
        finally:
            body.train(was_training)
        return v.float().cpu().numpy()

    # ---- training -----------------------------------------------------------------------------
    def forward_backward(
        self,
        batch: Batch,
        returns_B_T: np.ndarray,
        old_values_B_T: np.ndarray,
        *,
        coef: float = 1.0,
        agg: str = "token-mean",
        clip_eps: float | None = 0.2,
    ) -> dict[str, float]:
        """Add the gradient of ``coef * aggregate(value loss)`` (the registered ``value`` loss).

        In ``"head"`` mode (not detached) part of it lands on the policy's trainable weights,
        which the policy trainer's next ``optim_step`` applies. Returns ``loss`` (before
        ``coef``), ``clipfrac``, ``mse`` and ``nonfinite``.
        """
        import tinker_core.registry
        from tinker_core.contracts import LossInputs

        loss_fn = tinker_core.registry.get_loss("value").obj
        tokens, attn = self._tensors(batch)
        dev = self.policy.device
        mask = to_tensor(batch.loss_mask_B_T, dtype=torch.float32, device=dev) * attn
        body = self._body()
        body.train()
        values = self._values(tokens, attn)
        out = loss_fn(
            LossInputs(
                logprobs_B_T=None,
                mask_B_T=mask,
                values_B_T=values,
                old_values_B_T=to_tensor(old_values_B_T, dtype=torch.float32, device=dev),
                returns_B_T=to_tensor(returns_B_T, dtype=torch.float32, device=dev),
            ),
            clip_eps=clip_eps,
        )
        loss = aggregate(out.loss_B_T, mask, agg)
        value = float(loss.detach())
        metrics = {"loss": value, "nonfinite": 0.0, **{k: float(v) for k, v in out.metrics.items()}}
        if not math.isfinite(value):
            self._nonfinite = True
            metrics["nonfinite"] = 1.0
            return metrics
        (loss * coef).backward()
        return metrics

    def optim_step(self, lr: float | None = None) -> dict[str, float]:
        """Clip and apply the critic's own gradients (head, separate body); clear them.

        A NaN/inf loss since the last step, or a non-finite gradient norm, skips the update.
        """
        grads = [p.grad for p in self.params if p.grad is not None]
        norm = torch.nn.utils.get_total_norm(grads, norm_type=2.0, error_if_nonfinite=False) if grads else None
        grad_norm = float(norm) if norm is not None else 0.0
        skip = self._nonfinite or not math.isfinite(grad_norm)
        if skip:
            self.skipped_updates += 1
        else:
            if self.max_grad_norm is not None and norm is not None:
                torch.nn.utils.clip_grads_with_norm_(self.params, self.max_grad_norm, norm)
            if lr is not None:
                for group in self.optimizer.param_groups:
                    group["lr"] = float(lr)
            self.optimizer.step()
            self.updates += 1
        self.zero_grad()
        return {"grad_norm": grad_norm, "skipped": 1.0 if skip else 0.0}

    def zero_grad(self) -> None:
        self.optimizer.zero_grad(set_to_none=True)
        for p in self.params:
            p.grad = None
        self._nonfinite = False

    # ---- state --------------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        state: dict[str, Any] = {
            "mode": self.mode,
            "head": self.head.state_dict(),
            "optimizer": self.optimizer.state_dict(),
            "updates": self.updates,
            "skipped_updates": self.skipped_updates,
        }
        if self.body is not None:
            state["body"] = self.body.state_dict()
        return state

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        if state.get("mode") != self.mode:
            raise ValueError(
                f"checkpointed critic is {state.get('mode')!r} but this run's is {self.mode!r}; "
                "resume with the same algorithm.params.critic"
            )
        self.head.load_state_dict(state["head"])
        if self.body is not None:
            self.body.load_state_dict(state["body"])
        self.optimizer.load_state_dict(state["optimizer"])
        self.updates = int(state["updates"])
        self.skipped_updates = int(state["skipped_updates"])
        self.zero_grad()
