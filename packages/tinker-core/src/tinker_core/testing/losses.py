"""Conformance checks of losses: :func:`check_loss` (needs torch, imported on call).

A loss is ``loss_fn(inputs: LossInputs, **config) -> LossOutputs`` (:mod:`tinker_core.contracts`).
The trainer aggregates ``loss_B_T`` with the job's aggregation mode, always weighted by
``mask_B_T``; the checks below stand in for it with ``(loss_B_T * mask_B_T).sum()``.

Checks (names as in :class:`ConformanceError`):

* ``call``: it accepts the inputs its kind gets (below) and returns.
* ``output``: a :class:`~tinker_core.contracts.LossOutputs` whose ``loss_B_T`` is a float torch
  tensor of shape ``[B, T]`` (one value per token; sequence-level losses such as DPO spread or
  place their value on the response tokens: shape ``[B]`` is *not* accepted), finite
  everywhere, and whose ``metrics`` map str to finite real numbers (``float``, not tensors).
* ``differentiable``: the masked sum has a gradient w.r.t. the trained tensor
  (``logprobs_B_T``; ``values_B_T`` for ``value`` losses), finite and not zero everywhere on
  the mask.
* ``mask-gradient``: that gradient is exactly 0 wherever ``mask_B_T`` is 0.
* ``off-mask``: changing any input at masked positions leaves the loss on the mask unchanged.
* ``purity``: the inputs are not modified. ``determinism``: equal inputs, identical loss.
* ``preference-order`` (``preference`` losses): with rows ``2k`` (chosen) and ``2k + 1``
  (rejected) and a policy that already prefers each chosen response, the loss is lower than
  with every pair swapped.

Inputs by kind (float32, ``B = 4``, ``T = 8``, ragged prompts and responses;
``sampling_logprobs_B_T`` is 0 where no token was sampled, as rollouts store it):

========== ===================================================================================
policy     logprobs (trained), mask, sampling_logprobs, advantages (0 off the mask)
preference logprobs (trained), mask, ref_logprobs; rows 2k / 2k + 1 chosen / rejected, same prompt
value      logprobs, mask, values (trained), old_values, returns
kl         logprobs (trained), mask, ref_logprobs, sampling_logprobs
supervised logprobs (trained), mask, weights (0 off the mask)
========== ===================================================================================
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from types import ModuleType
from typing import Any

from tinker_core.contracts import LOSS_KINDS, Loss, LossInputs, LossOutputs
from tinker_core.plugin_entries import LossEntry
from tinker_core.testing._common import (
    Reporter,
    TorchNotInstalledError,
    check_metrics,
    resolve_callable,
    short,
)

__all__ = ["check_loss", "import_torch"]

_FIELDS = tuple(f.name for f in dataclasses.fields(LossInputs))
_NEEDS: dict[str, tuple[str, ...]] = {
    "policy": ("sampling_logprobs_B_T", "advantages_B_T"),
    "preference": ("ref_logprobs_B_T",),
    "value": ("values_B_T", "old_values_B_T", "returns_B_T"),
    "kl": ("ref_logprobs_B_T", "sampling_logprobs_B_T"),
    "supervised": ("weights_B_T",),
}

# fmt: off
_MASK = [
    [0, 0, 1, 1, 1, 1, 0, 0],
    [0, 0, 1, 1, 1, 0, 0, 0],
    [0, 0, 0, 1, 0, 1, 1, 1],  # multi-turn: an env observation masked in the middle
    [0, 0, 0, 1, 1, 0, 0, 0],
]
_MASK_PREFERENCE = [  # rows 2k and 2k + 1 answer the same prompt
    [0, 0, 1, 1, 1, 1, 0, 0],
    [0, 0, 1, 1, 1, 0, 0, 0],
    [0, 0, 0, 1, 1, 1, 1, 1],
    [0, 0, 0, 1, 1, 0, 0, 0],
]
_MASK_PAIRED = [  # chosen and rejected of equal length: swapping them keeps the mask
    [0, 0, 1, 1, 1, 1, 0, 0],
    [0, 0, 1, 1, 1, 1, 0, 0],
    [0, 0, 0, 1, 1, 1, 1, 1],
    [0, 0, 0, 1, 1, 1, 1, 1],
]
# fmt: on


def import_torch(plugin: str) -> ModuleType:
    """Import torch, or raise :class:`TorchNotInstalledError` saying how to get it."""
    try:
        import torch
    except ImportError as e:
        raise TorchNotInstalledError(
            f"this check needs torch, which is not installed ({e})", plugin=plugin, check="torch",
            fix="install tinker-algos (pip install tinker-algos), which brings torch, or pip install torch",
        ) from e
    return torch


def _trained_field(kind: str) -> str:
    return "values_B_T" if kind == "value" else "logprobs_B_T"


def _make_inputs(torch: ModuleType, kind: str, *, paired: bool = False, preferred: bool = True) -> LossInputs:
    """Fresh inputs for ``kind``; the trained tensor is a leaf that requires grad."""
    g = torch.Generator().manual_seed(1234)
    rows = _MASK_PAIRED if paired else _MASK_PREFERENCE if kind == "preference" else _MASK
    mask = torch.tensor(rows, dtype=torch.float32)
    B, T = mask.shape

    def rand(lo: float, hi: float) -> Any:
        return lo + (hi - lo) * torch.rand((B, T), generator=g, dtype=torch.float32)

    ref = rand(-3.0, -0.1)
    logp = ref + rand(-0.3, 0.3)
    if paired:  # implicit reward sum(logp - ref) = +0.5 on chosen rows, -0.5 on rejected rows
        sign = torch.tensor([1.0, -1.0] * (B // 2))
        if not preferred:
            sign = -sign
        n = mask.sum(dim=1, keepdim=True)
        logp = torch.where(mask > 0, ref + (0.5 * sign[:, None]) / n, logp)
    sampling = (logp + rand(-0.1, 0.1)) * mask  # 0 where nothing was sampled
    fields: dict[str, Any] = {
        "logprobs_B_T": logp,
        "mask_B_T": mask,
        "sampling_logprobs_B_T": sampling,
        "advantages_B_T": torch.randn((B, T), generator=g) * mask,
        "ref_logprobs_B_T": ref,
        "weights_B_T": rand(0.5, 1.5) * mask,
        "values_B_T": torch.randn((B, T), generator=g),
        "returns_B_T": torch.randn((B, T), generator=g),
    }
    fields["old_values_B_T"] = fields["values_B_T"] + 0.1 * torch.randn((B, T), generator=g)
    keep = {"logprobs_B_T", "mask_B_T", *_NEEDS[kind]}
    chosen = {k: (v.clone() if k in keep else None) for k, v in fields.items()}
    trained = _trained_field(kind)
    leaf = fields[trained].detach().clone().requires_grad_(True)
    chosen[trained] = leaf
    return LossInputs(**chosen)


def _tensors(inputs: LossInputs) -> dict[str, Any]:
    return {f: getattr(inputs, f) for f in _FIELDS if getattr(inputs, f) is not None}


def _call(rep: Reporter, torch: ModuleType, fn: Loss, inputs: LossInputs,
          config: Mapping[str, Any], case: str) -> Any:
    with rep.guard("call", f"on {case}", "accept LossInputs and **config; see tinker_core.contracts"):
        out = fn(inputs, **config)
    if not isinstance(out, LossOutputs):
        rep.fail("output", f"on {case}: returned {type(out).__name__}, not LossOutputs",
                 "return tinker_core.contracts.LossOutputs(loss_B_T=..., metrics={...})")
    loss = out.loss_B_T
    shape = tuple(inputs.mask_B_T.shape)
    if not isinstance(loss, torch.Tensor):
        rep.fail("output", f"on {case}: loss_B_T is {type(loss).__name__}, not a torch.Tensor",
                 "compute the loss with torch ops on the input tensors")
    if tuple(loss.shape) != shape:
        rep.fail("output", f"on {case}: loss_B_T has shape {tuple(loss.shape)}, expected [B, T] = {shape}",
                 "return one loss value per token; the trainer aggregates with the mask (a "
                 "sequence-level loss puts its value on the sequence's response tokens)")
    if not loss.dtype.is_floating_point:
        rep.fail("output", f"on {case}: loss_B_T has dtype {loss.dtype}", "return a float tensor")
    bad = ~torch.isfinite(loss.detach())
    if bool(bad.any()):
        b, t = (int(i) for i in bad.nonzero()[0])
        rep.fail("output", f"on {case}: loss_B_T is {float(loss.detach()[b, t])} at [{b}, {t}] "
                 f"(mask {float(inputs.mask_B_T[b, t])}); {int(bad.sum())} non-finite value(s)",
                 "keep the loss finite everywhere, also off the mask: clamp log-ratios before "
                 "exp() and use torch.where rather than multiplying inf by 0")
    check_metrics(rep, out.metrics, case, "float(x.detach()) (not a tensor)")
    return out


def check_loss(
    loss: str | Callable[..., Any],
    *,
    kind: str | None = None,
    config: Mapping[str, Any] | None = None,
) -> None:
    """Check a loss against the :mod:`tinker_core.contracts` contract; needs torch.

    Args:
        loss: a registered loss name (:func:`tinker_core.registry.get_loss`) or the callable itself.
        kind: ``policy``, ``preference``, ``value``, ``kl`` or ``supervised``; None takes it
            from the registry entry (names) or a ``kind`` attribute of the callable, else
            ``policy``. It decides which inputs are filled in (see the module docstring).
        config: keyword arguments passed to every call (e.g. ``{"beta": 0.1}``).

    Raises:
        TorchNotInstalledError: torch is missing (also an ImportError).
        ConformanceError: naming the loss, the failed check and the fix.
    """
    fn, label, entry = resolve_callable(loss, "losses")
    torch = import_torch(label)
    if kind is None:
        kind = entry.loss_kind if isinstance(entry, LossEntry) else str(getattr(fn, "kind", "policy"))
    if kind not in LOSS_KINDS:
        raise ValueError(f"check_loss: kind must be one of {', '.join(LOSS_KINDS)}, got {kind!r}")
    config = dict(config or {})
    rep = Reporter(f"{label} [{kind}]")
    trained = _trained_field(kind)

    inputs = _make_inputs(torch, kind)
    before = {k: v.detach().clone() for k, v in _tensors(inputs).items()}
    out = _call(rep, torch, fn, inputs, config, f"{kind} inputs")
    for key, value in _tensors(inputs).items():
        if not torch.equal(before[key], value.detach()):
            rep.fail("purity", f"the loss modified inputs.{key} in place",
                     "treat the inputs as read-only (no in-place ops such as mul_ or x[...] = v)")

    _check_gradient(rep, torch, inputs, out, trained)
    _check_determinism(rep, torch, fn, kind, config, out)
    _check_off_mask(rep, torch, fn, kind, config, inputs.mask_B_T, out)
    if kind == "preference":
        _check_preference_order(rep, torch, fn, config)


def _check_gradient(rep: Reporter, torch: ModuleType, inputs: LossInputs, out: LossOutputs, trained: str) -> None:
    """The gradient w.r.t. the trained tensor, through the trainer's masked aggregation: it exists,
    is finite, is zero off the mask and not zero on it."""
    mask = inputs.mask_B_T
    if not out.loss_B_T.requires_grad:
        rep.fail("differentiable", f"loss_B_T does not require grad: it is not a function of inputs.{trained}",
                 f"compute it from inputs.{trained} with torch ops (no .detach(), .item() or numpy)")
    with rep.guard("differentiable", "backward() of (loss_B_T * mask_B_T).sum()"):
        (out.loss_B_T * mask).sum().backward()
    grad = getattr(inputs, trained).grad
    if grad is None:
        rep.fail("differentiable", f"no gradient reached inputs.{trained}",
                 f"compute the loss from inputs.{trained} with torch ops")
    if not bool(torch.isfinite(grad).all()):
        rep.fail("differentiable", f"the gradient w.r.t. inputs.{trained} is not finite: {short(grad.tolist(), 200)}",
                 "avoid inf/NaN in the backward pass (clamp log-ratios; torch.where, not inf * 0)")
    off = (mask == 0) & (grad != 0)
    if bool(off.any()):
        b, t = (int(i) for i in off.nonzero()[0])
        rep.fail("mask-gradient", f"the gradient w.r.t. inputs.{trained} is {float(grad[b, t])} at "
                 f"[{b}, {t}] where mask_B_T is 0 ({int(off.sum())} such place(s)): masked tokens "
                 "(prompt, env observations, padding) leak into the loss",
                 "mask before reducing over tokens (e.g. (logprobs * mask).sum(-1) for sequence "
                 "log-probabilities)")
    if not bool((grad[mask > 0] != 0).any()):
        rep.fail("differentiable", f"the gradient w.r.t. inputs.{trained} is zero on every response token",
                 f"the loss must depend on inputs.{trained} where mask_B_T is 1")


def _check_determinism(rep: Reporter, torch: ModuleType, fn: Loss, kind: str, config: dict[str, Any], out: Any) -> None:
    """Two calls on equal inputs give the same loss."""
    out_again = _call(rep, torch, fn, _make_inputs(torch, kind), config, f"the same {kind} inputs again")
    if not torch.equal(out.loss_B_T.detach(), out_again.loss_B_T.detach()):
        rep.fail("determinism", "two calls on equal inputs gave different loss_B_T",
                 "do not use unseeded randomness or state kept between calls")


def _check_off_mask(rep: Reporter, torch: ModuleType, fn: Loss, kind: str, config: dict[str, Any], mask: Any, out: Any) -> None:
    """Inputs changed where the mask is 0 leave the loss on the mask unchanged."""
    moved = _make_inputs(torch, kind)
    for key, value in _tensors(moved).items():
        if key != "mask_B_T":
            with torch.no_grad():
                shifted = torch.where(mask > 0, value, value + 0.37)
            setattr(moved, key, shifted.detach().requires_grad_(value.requires_grad))
    out_moved = _call(rep, torch, fn, moved, config, f"{kind} inputs changed off the mask")
    a = (out.loss_B_T * mask).detach()
    b_ = (out_moved.loss_B_T * mask).detach()
    if not torch.allclose(a, b_, rtol=1e-5, atol=1e-6):
        i, j = _argmax2(torch, (a - b_).abs())
        rep.fail("off-mask", f"changing the inputs where mask_B_T is 0 changed the loss on the mask "
                 f"(at [{i}, {j}]: {float(a[i, j])} vs {float(b_[i, j])})",
                 "mask every input before reducing over tokens")


def _check_preference_order(rep: Reporter, torch: ModuleType, fn: Loss, config: dict[str, Any]) -> None:
    """A policy preferring every chosen row gets a lower loss than with the pairs swapped."""
    totals = []
    for preferred in (True, False):
        inp = _make_inputs(torch, "preference", paired=True, preferred=preferred)
        o = _call(rep, torch, fn, inp, config, "paired preference inputs")
        totals.append(float((o.loss_B_T.detach() * inp.mask_B_T).sum()))
    if not totals[0] < totals[1]:
        rep.fail("preference-order",
                 f"the policy prefers every chosen row (2k) over its rejected row (2k + 1), "
                 f"yet the loss ({totals[0]:.6g}) is not lower than with the pairs swapped "
                 f"({totals[1]:.6g})",
                 "read rows 2k and 2k + 1 as (chosen, rejected) of one prompt, e.g. "
                 "seq_B[0::2] and seq_B[1::2], not the first and second half of the batch")


def _argmax2(torch: ModuleType, x: Any) -> tuple[int, int]:
    flat = int(torch.argmax(x))
    return flat // x.shape[1], flat % x.shape[1]
