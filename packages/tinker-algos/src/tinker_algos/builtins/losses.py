"""Built-in losses: ``loss(inputs: LossInputs, **config) -> LossOutputs`` on torch tensors.

Each loss returns a per-token ``loss_B_T`` that the trainer reduces with the job's aggregation
mode (:func:`tinker_algos.training.gradient_pass.aggregate`). ``loss_B_T`` is exactly 0 wherever
``mask_B_T`` is 0, and masked positions are *selected out* before any arithmetic, so the
gradient with respect to ``logprobs_B_T`` (and ``values_B_T``) there is exactly 0 even when the
padding holds ``-inf``. Metrics are floats averaged over the trained tokens.

Notation: ``lp = logprobs_B_T`` (current policy, differentiable), ``lp_old =
sampling_logprobs_B_T`` (the sampler's), ``A = advantages_B_T``, ``m = mask_B_T``,
``sg`` = stop-gradient.

Policy losses (kind ``"policy"``):

* ``importance_sampling`` (Tinker's name): ``rho = exp(lp - lp_old)``, ``l = -rho * A``
  (no clipping, no clamping: Tinker's semantics).
* ``ppo``: ``rho = exp(clamp(lp - lp_old, -20, 20))``;
  ``L_clip = max(-A * rho, -A * clip(rho, 1 - eps_low, 1 + eps_high))``; with dual clip
  ``c`` (default 3, ``dual_clip=None`` turns it off) ``l = min(L_clip, -c * A)`` where
  ``A < 0``, else ``l = L_clip``. Metrics: ``clipfrac`` (share of tokens where the clipped term
  is active), ``dual_clipfrac``, ``approx_kl = mean(rho - 1 - log rho)`` (the k3 estimate of
  KL(pi_old || pi) on the sampled tokens).
* ``cispo`` (MiniMax-M1): ``l = -sg(clip(rho, 1 - eps_low, 1 + eps_high)) * A * lp``; the
  default ``eps_low = 1`` leaves the weight without a lower bound. Metrics: ``clipfrac``,
  ``approx_kl``.
* ``dro`` (Tinker's name): ``l = -(lp * A - beta / 2 * (lp - lp_old)^2)``, ``beta = 0.05`` by
  default. Metric: ``sq_log_ratio`` (mean ``(lp - lp_old)^2``).
* ``gspo`` (GSPO-token, Zheng et al. 2025, as Tinker defines it): the sequence log-ratio
  ``r_b = mean_{t in M_b} (sg(lp) - lp_old)`` over the ratio tokens ``M_b`` of row ``b``
  (``weights_B_T != 0`` within the mask; the whole mask when ``weights_B_T`` is None); every
  token's ratio ``s_t = exp(r_b + lp - sg(lp))`` carries the sequence ratio's value and its own
  log-probability's gradient; ``l = max(-A * s_t, -A * clip(s_t, 1 - eps_low, 1 + eps_high))``.
  Metrics: ``clipfrac``, ``seq_ratio_mean`` (mean ``exp(r_b)`` over rows with ratio tokens).
* ``stable_reinforce`` (OpenTinker's definition; Tinker has not published its objective):
  REINFORCE weighted by the stop-gradient importance ratio against the sampler's logprobs, with
  tokens whose ratio leaves ``[ratio_low, ratio_high]`` dropped (masked importance sampling), plus
  an optional k3 penalty on KL(sampler || policy): ``w = sg(rho) * [ratio_low <= rho <= ratio_high]``,
  ``l = -w * A * lp + kl_coeff * (rho - 1 - log rho)``; defaults ``ratio_low = 0.5``,
  ``ratio_high = 2``, ``kl_coeff = 0``. Inside the band its gradient is that of
  ``importance_sampling``. Metrics: ``maskfrac`` (share of tokens dropped), ``approx_kl``.

Supervised (kind ``"supervised"``): ``cross_entropy``: ``l = -w * lp`` with ``w =
weights_B_T`` (default ``m``). Metric: ``nll``.

Value (kind ``"value"``, reads ``values_B_T`` and ignores ``logprobs_B_T``): ``value``:
``l = 0.5 * max((V - R)^2, (clip(V, V_old - eps, V_old + eps) - R)^2)`` with ``V =
values_B_T`` (differentiable), ``V_old = old_values_B_T``, ``R = returns_B_T``;
``clip_eps=None`` gives ``0.5 * (V - R)^2``. Metrics: ``clipfrac``, ``mse``.

KL (kind ``"kl"``): ``k1``, ``k2``, ``k3``: ``l = k(lp, ref_logprobs_B_T)`` (see
:mod:`tinker_algos.builtins.kl`). Metric: ``kl``.

Preference losses (kind ``"preference"``): rows ``2k`` and ``2k + 1`` are the chosen and the
rejected response to prompt ``k``; each row needs at least one trained token.
``Delta_k = sum_t m (lp - lp_ref)[2k] - sum_t m (lp - lp_ref)[2k + 1]``.

* ``dpo``: ``L_k = -log sigmoid(beta * Delta_k)``; with ``label_smoothing = eps``:
  ``L_k = -(1 - eps) log sigmoid(beta * Delta_k) - eps log sigmoid(-beta * Delta_k)``.
* ``cdpo``: the same with ``label_smoothing`` defaulting to 0.1.
* ``ipo``: ``L_k = (Delta_k - 1 / (2 beta))^2``.

How a pair loss becomes a per-token loss: **every trained token of both rows of pair k
carries ``L_k``**. Hence

* ``seq-mean-token-mean`` (the recommended mode for preference losses) gives exactly
  ``mean_k L_k`` and its gradient is the gradient of ``mean_k L_k``;
* ``token-mean`` gives ``sum_k n_k L_k / sum_k n_k`` with ``n_k`` the trained tokens of pair
  ``k`` (equal to ``mean_k L_k`` when every pair has the same number of tokens);
* the ``seq-mean-token-sum`` modes scale each pair by its length: avoid them for preference
  losses.

The exact ``mean_k L_k`` is always reported as the ``loss`` metric, alongside the keys of
:func:`preference_metrics`: ``accuracy`` (share of pairs with ``Delta > 0``), ``reward_margin``
(mean ``beta * Delta``), ``chosen_reward`` and ``rejected_reward``.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import torch
import torch.nn.functional as F

from tinker_algos.builtins import kl as _kl
from tinker_algos.builtins.estimators import strict_config
from tinker_core.contracts import LossInputs, LossOutputs

LOG_RATIO_CLAMP = 20.0


# ---- helpers ------------------------------------------------------------------------------


def _mask(inputs: LossInputs, name: str) -> tuple[torch.Tensor, torch.Tensor]:
    """``(lp_B_T, on_B_T)`` with ``lp`` zeroed (selected out) off the mask."""
    lp = inputs.logprobs_B_T
    if not isinstance(lp, torch.Tensor):
        raise TypeError(
            f"loss {name!r}: inputs.logprobs_B_T must be a torch.Tensor, got {type(lp).__name__}"
        )
    if lp.ndim != 2:
        raise ValueError(
            f"loss {name!r}: inputs.logprobs_B_T must be 2-D [B, T], got shape {tuple(lp.shape)}"
        )
    if inputs.mask_B_T is None:
        raise ValueError(f"loss {name!r} needs inputs.mask_B_T (1 on trained tokens)")
    on = torch.as_tensor(inputs.mask_B_T, device=lp.device) != 0
    if on.shape != lp.shape:
        raise ValueError(
            f"loss {name!r}: inputs.mask_B_T has shape {tuple(on.shape)}, logprobs_B_T has {tuple(lp.shape)}"
        )
    return torch.where(on, lp, torch.zeros((), dtype=lp.dtype, device=lp.device)), on


def _field(
    inputs: LossInputs, field: str, name: str, on: torch.Tensor, like: torch.Tensor, why: str
) -> torch.Tensor:
    """A required constant input as a tensor like ``like``, zeroed off the mask."""
    value = getattr(inputs, field)
    if value is None:
        raise ValueError(f"loss {name!r} needs inputs.{field} ({why})")
    t = torch.as_tensor(value, dtype=like.dtype, device=like.device)
    if t.shape != on.shape:
        raise ValueError(
            f"loss {name!r}: inputs.{field} has shape {tuple(t.shape)}, expected {tuple(on.shape)}"
        )
    return torch.where(on, t, torch.zeros((), dtype=t.dtype, device=t.device))


def _select(on: torch.Tensor, loss_B_T: torch.Tensor) -> torch.Tensor:
    return torch.where(on, loss_B_T, torch.zeros((), dtype=loss_B_T.dtype, device=loss_B_T.device))


@torch.no_grad()
def _masked_mean(x_B_T: torch.Tensor, on: torch.Tensor) -> float:
    n = int(on.sum())
    if n == 0:
        return 0.0
    return float(torch.where(on, x_B_T.detach().to(torch.float64), 0.0).sum() / n)


def _check_eps(name: str, eps_low: float, eps_high: float) -> None:
    if not 0.0 <= eps_low <= 1.0:
        raise ValueError(f"loss {name!r}: eps_low must be in [0, 1], got {eps_low}")
    if eps_high < 0.0:
        raise ValueError(f"loss {name!r}: eps_high must be >= 0, got {eps_high}")


# ---- policy losses ------------------------------------------------------------------------


@strict_config("loss")
def importance_sampling(inputs: LossInputs) -> LossOutputs:
    """Tinker's importance-sampling policy gradient: ``l = -exp(lp - lp_old) * A``."""
    lp, on = _mask(inputs, "importance_sampling")
    old = _field(
        inputs, "sampling_logprobs_B_T", "importance_sampling", on, lp, "the sampler's logprobs"
    )
    adv = _field(
        inputs, "advantages_B_T", "importance_sampling", on, lp, "from an advantage estimator"
    )
    log_ratio = lp - old
    rho = torch.exp(log_ratio)
    loss = _select(on, -rho * adv)
    metrics = {
        "ratio_mean": _masked_mean(rho, on),
        "approx_kl": _masked_mean(torch.expm1(log_ratio) - log_ratio, on),
    }
    return LossOutputs(loss, metrics)


@strict_config("loss")
def ppo(
    inputs: LossInputs,
    *,
    eps_low: float = 0.2,
    eps_high: float | None = None,
    dual_clip: float | None = 3.0,
) -> LossOutputs:
    """PPO clipped surrogate with asymmetric clip range and optional dual clip (c = 3)."""
    eps_high = eps_low if eps_high is None else eps_high
    _check_eps("ppo", eps_low, eps_high)
    if dual_clip is not None and dual_clip <= 1.0:
        raise ValueError(
            f"loss 'ppo': dual_clip must be > 1 (or None to turn it off), got {dual_clip}"
        )
    lp, on = _mask(inputs, "ppo")
    old = _field(inputs, "sampling_logprobs_B_T", "ppo", on, lp, "the sampler's logprobs")
    adv = _field(inputs, "advantages_B_T", "ppo", on, lp, "from an advantage estimator")
    log_ratio = torch.clamp(lp - old, -LOG_RATIO_CLAMP, LOG_RATIO_CLAMP)
    rho = torch.exp(log_ratio)
    unclipped = -adv * rho
    clipped = -adv * torch.clamp(rho, 1.0 - eps_low, 1.0 + eps_high)
    loss = torch.maximum(unclipped, clipped)
    dual_active = torch.zeros_like(on)
    if dual_clip is not None:
        bound = -dual_clip * adv
        dual_active = (adv < 0) & (loss > bound)
        loss = torch.where(adv < 0, torch.minimum(loss, bound), loss)
    metrics = {
        "clipfrac": _masked_mean((clipped > unclipped).to(lp.dtype), on),
        "dual_clipfrac": _masked_mean(dual_active.to(lp.dtype), on),
        "approx_kl": _masked_mean(torch.expm1(log_ratio) - log_ratio, on),
        "ratio_mean": _masked_mean(rho, on),
    }
    return LossOutputs(_select(on, loss), metrics)


@strict_config("loss")
def cispo(inputs: LossInputs, *, eps_low: float = 1.0, eps_high: float = 0.28) -> LossOutputs:
    """CISPO: REINFORCE weighted by the clipped, stop-gradient importance ratio."""
    _check_eps("cispo", eps_low, eps_high)
    lp, on = _mask(inputs, "cispo")
    old = _field(inputs, "sampling_logprobs_B_T", "cispo", on, lp, "the sampler's logprobs")
    adv = _field(inputs, "advantages_B_T", "cispo", on, lp, "from an advantage estimator")
    log_ratio = torch.clamp(lp - old, -LOG_RATIO_CLAMP, LOG_RATIO_CLAMP).detach()
    rho = torch.exp(log_ratio)
    weight = torch.clamp(rho, 1.0 - eps_low, 1.0 + eps_high)
    loss = _select(on, -weight * adv * lp)
    metrics = {
        "clipfrac": _masked_mean((weight != rho).to(lp.dtype), on),
        "approx_kl": _masked_mean(torch.expm1(log_ratio) - log_ratio, on),
    }
    return LossOutputs(loss, metrics)


@strict_config("loss")
def dro(inputs: LossInputs, *, beta: float = 0.05) -> LossOutputs:
    """Tinker's DRO: ``l = -(lp * A - beta / 2 * (lp - lp_old)^2)`` (a quadratic penalty, no ratio)."""
    if beta < 0:
        raise ValueError(f"loss 'dro': beta must be >= 0, got {beta}")
    lp, on = _mask(inputs, "dro")
    old = _field(inputs, "sampling_logprobs_B_T", "dro", on, lp, "the sampler's logprobs")
    adv = _field(inputs, "advantages_B_T", "dro", on, lp, "from an advantage estimator")
    delta = lp - old
    loss = _select(on, -(lp * adv - 0.5 * beta * delta**2))
    return LossOutputs(loss, {"sq_log_ratio": _masked_mean(delta**2, on)})


# ---- supervised, value, KL ----------------------------------------------------------------


@strict_config("loss")
def cross_entropy(inputs: LossInputs) -> LossOutputs:
    """Weighted negative log-likelihood ``l = -w * lp`` (``w`` defaults to the mask)."""
    lp, on = _mask(inputs, "cross_entropy")
    if inputs.weights_B_T is None:
        weights = on.to(lp.dtype)
    else:
        weights = _field(inputs, "weights_B_T", "cross_entropy", on, lp, "per-token weights")
    loss = _select(on, -weights * lp)
    return LossOutputs(loss, {"nll": _masked_mean(-lp, on)})


@strict_config("loss")
def value(inputs: LossInputs, *, clip_eps: float | None = 0.2) -> LossOutputs:
    """Clipped value loss ``0.5 * max((V - R)^2, (clip(V, V_old +- eps) - R)^2)``."""
    v_raw = inputs.values_B_T
    if not isinstance(v_raw, torch.Tensor) or v_raw.ndim != 2:
        raise ValueError(
            "loss 'value' needs inputs.values_B_T as a 2-D torch.Tensor [B, T] (the value head's output)"
        )
    if inputs.mask_B_T is None:
        raise ValueError("loss 'value' needs inputs.mask_B_T (1 on trained tokens)")
    on = torch.as_tensor(inputs.mask_B_T, device=v_raw.device) != 0
    if v_raw.shape != on.shape:
        raise ValueError(
            f"loss 'value': inputs.values_B_T has shape {tuple(v_raw.shape)}, mask_B_T has {tuple(on.shape)}"
        )
    v = torch.where(on, v_raw, torch.zeros((), dtype=v_raw.dtype, device=v_raw.device))
    ret = _field(inputs, "returns_B_T", "value", on, v, "the advantage estimator's returns")
    loss = (v - ret) ** 2
    clipfrac = 0.0
    if clip_eps is not None:
        if clip_eps < 0:
            raise ValueError(
                f"loss 'value': clip_eps must be >= 0 (or None for no clipping), got {clip_eps}"
            )
        old = _field(
            inputs,
            "old_values_B_T",
            "value",
            on,
            v,
            "the values at sampling time; or pass clip_eps=None for an unclipped value loss",
        )
        clipped = (old + torch.clamp(v - old, -clip_eps, clip_eps) - ret) ** 2
        clipfrac = _masked_mean((clipped > loss).to(v.dtype), on)
        loss = torch.maximum(loss, clipped)
    loss = _select(on, 0.5 * loss)
    return LossOutputs(loss, {"clipfrac": clipfrac, "mse": _masked_mean((v - ret) ** 2, on)})


def _kl_loss(estimator: str) -> Callable[..., LossOutputs]:
    kl_fn = _kl.KL_ESTIMATORS[estimator]

    def loss_fn(inputs: LossInputs) -> LossOutputs:
        lp, on = _mask(inputs, estimator)
        ref = _field(
            inputs, "ref_logprobs_B_T", estimator, on, lp, "the reference policy's logprobs"
        )
        per_token = kl_fn(lp, ref)
        return LossOutputs(_select(on, per_token), {"kl": _masked_mean(per_token, on)})

    loss_fn.__name__ = loss_fn.__qualname__ = estimator
    loss_fn.__doc__ = f"KL penalty to the reference policy with the {estimator} estimator: l = {estimator}(lp, lp_ref)."
    return strict_config("loss")(loss_fn)


k1 = _kl_loss("k1")
k2 = _kl_loss("k2")
k3 = _kl_loss("k3")


# ---- preference losses --------------------------------------------------------------------


def _pair_logratios(
    inputs: LossInputs, name: str
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """``(chosen_P, rejected_P, on_B_T, lp_B_T)``: summed ``lp - lp_ref`` of each pair's rows."""
    lp, on = _mask(inputs, name)
    ref = _field(inputs, "ref_logprobs_B_T", name, on, lp, "the reference policy's logprobs")
    B = lp.shape[0]
    if B % 2:
        raise ValueError(
            f"loss {name!r} needs an even number of rows (chosen, rejected interleaved), got {B}"
        )
    empty = torch.nonzero(on.sum(-1) == 0).flatten().tolist()
    if empty:
        raise ValueError(
            f"loss {name!r}: row(s) {empty} have no trained token; every response needs one"
        )
    seq_B = (lp - ref).sum(-1)
    return seq_B[0::2], seq_B[1::2], on, lp


def _spread(pair_loss_P: torch.Tensor, on: torch.Tensor) -> torch.Tensor:
    """Every trained token of both rows of pair k carries ``pair_loss_P[k]``."""
    per_row_B = pair_loss_P.repeat_interleave(2)
    return _select(on, per_row_B[:, None].expand_as(on))


def preference_metrics(chosen_P: torch.Tensor | np.ndarray, rejected_P: torch.Tensor | np.ndarray, beta: float) -> dict[str, float]:
    """Implicit-reward statistics of pairs whose summed log-ratios ``log pi - log pi_ref`` are
    ``chosen_P`` and ``rejected_P`` (numpy or torch); a response's implicit reward is ``beta``
    times its log-ratio.

    ``accuracy``: share of pairs whose chosen response has the higher reward; ``reward_margin``:
    mean reward of chosen minus rejected; ``chosen_reward``, ``rejected_reward``: mean rewards.
    """
    chosen, rejected = (
        x.detach().double().cpu().numpy() if isinstance(x, torch.Tensor) else np.asarray(x, dtype=np.float64)
        for x in (chosen_P, rejected_P)
    )
    delta_P = chosen - rejected
    return {
        "accuracy": float((delta_P > 0).mean()),
        "reward_margin": float(beta * delta_P.mean()),
        "chosen_reward": float(beta * chosen.mean()),
        "rejected_reward": float(beta * rejected.mean()),
    }


def _preference_outputs(pair_loss_P: torch.Tensor, chosen_P: torch.Tensor, rejected_P: torch.Tensor, on: torch.Tensor, beta: float) -> LossOutputs:
    metrics = {"loss": float(pair_loss_P.detach().mean()), **preference_metrics(chosen_P, rejected_P, beta)}
    return LossOutputs(_spread(pair_loss_P, on), metrics)


def _dpo(inputs: LossInputs, name: str, beta: float, label_smoothing: float) -> LossOutputs:
    if beta <= 0:
        raise ValueError(f"loss {name!r}: beta must be > 0, got {beta}")
    if not 0.0 <= label_smoothing < 0.5:
        raise ValueError(
            f"loss {name!r}: label_smoothing must be in [0, 0.5), got {label_smoothing}"
        )
    chosen_P, rejected_P, on, _ = _pair_logratios(inputs, name)
    z_P = beta * (chosen_P - rejected_P)
    pair_loss_P = -(1.0 - label_smoothing) * F.logsigmoid(z_P) - label_smoothing * F.logsigmoid(
        -z_P
    )
    return _preference_outputs(pair_loss_P, chosen_P, rejected_P, on, beta)


@strict_config("loss")
def dpo(inputs: LossInputs, *, beta: float = 0.1, label_smoothing: float = 0.0) -> LossOutputs:
    """DPO: ``-log sigmoid(beta * Delta)`` per pair (label smoothing optional)."""
    return _dpo(inputs, "dpo", beta, label_smoothing)


@strict_config("loss")
def cdpo(inputs: LossInputs, *, beta: float = 0.1, label_smoothing: float = 0.1) -> LossOutputs:
    """Conservative DPO: DPO with label smoothing ``eps`` (default 0.1)."""
    return _dpo(inputs, "cdpo", beta, label_smoothing)


@strict_config("loss")
def ipo(inputs: LossInputs, *, beta: float = 0.1) -> LossOutputs:
    """IPO: ``(Delta - 1 / (2 beta))^2`` per pair."""
    if beta <= 0:
        raise ValueError(f"loss 'ipo': beta must be > 0, got {beta}")
    chosen_P, rejected_P, on, _ = _pair_logratios(inputs, "ipo")
    pair_loss_P = (chosen_P - rejected_P - 1.0 / (2.0 * beta)) ** 2
    return _preference_outputs(pair_loss_P, chosen_P, rejected_P, on, beta)


LOSSES: dict[str, tuple[Callable[..., LossOutputs], str]] = {
    "cross_entropy": (cross_entropy, "supervised"),
    "importance_sampling": (importance_sampling, "policy"),
    "ppo": (ppo, "policy"),
    "cispo": (cispo, "policy"),
    "dro": (dro, "policy"),
    "dpo": (dpo, "preference"),
    "cdpo": (cdpo, "preference"),
    "ipo": (ipo, "preference"),
    "value": (value, "value"),
    "k1": (k1, "kl"),
    "k2": (k2, "kl"),
    "k3": (k3, "kl"),
}
"""Name -> (loss, kind): what :mod:`tinker_algos.plugin` registers."""


# ---- GSPO and StableReinforce (Tinker's names; appended) ------------------------------------


@strict_config("loss")
def gspo(inputs: LossInputs, *, eps_low: float = 0.2, eps_high: float | None = None) -> LossOutputs:
    """GSPO-token: PPO's clip on the sequence-level ratio (geometric mean of the token ratios over
    the ratio tokens, ``weights_B_T != 0``; default the whole mask), each token with its own gradient."""
    eps_high = eps_low if eps_high is None else eps_high
    _check_eps("gspo", eps_low, eps_high)
    lp, on = _mask(inputs, "gspo")
    old = _field(inputs, "sampling_logprobs_B_T", "gspo", on, lp, "the sampler's logprobs")
    adv = _field(inputs, "advantages_B_T", "gspo", on, lp, "from an advantage estimator")
    if inputs.weights_B_T is None:
        in_ratio = on
    else:
        in_ratio = _field(inputs, "weights_B_T", "gspo", on, lp, "the sequence ratio mask") != 0
    n_B = in_ratio.sum(-1)
    token_log_ratio = torch.where(in_ratio, lp.detach() - old, torch.zeros((), dtype=lp.dtype, device=lp.device))
    seq_log_ratio_B = torch.clamp(token_log_ratio.sum(-1) / n_B.clamp(min=1), -LOG_RATIO_CLAMP, LOG_RATIO_CLAMP)
    ratio = torch.exp(seq_log_ratio_B[:, None] + lp - lp.detach())
    unclipped = -adv * ratio
    clipped = -adv * torch.clamp(ratio, 1.0 - eps_low, 1.0 + eps_high)
    loss = _select(on, torch.maximum(unclipped, clipped))
    rows = n_B > 0
    seq_ratio_mean = float(torch.exp(seq_log_ratio_B[rows].detach()).double().mean()) if bool(rows.any()) else 0.0
    metrics = {"clipfrac": _masked_mean((clipped > unclipped).to(lp.dtype), on), "seq_ratio_mean": seq_ratio_mean}
    return LossOutputs(loss, metrics)


@strict_config("loss")
def stable_reinforce(
    inputs: LossInputs, *, ratio_low: float = 0.5, ratio_high: float = 2.0, kl_coeff: float = 0.0
) -> LossOutputs:
    """REINFORCE with masked importance sampling against the sampler's logprobs and an optional
    k3 KL(sampler || policy) penalty: ``l = -sg(rho) [low <= rho <= high] A lp + kl_coeff k3``."""
    if not 0.0 <= ratio_low <= 1.0 <= ratio_high:
        raise ValueError(
            f"loss 'stable_reinforce': need 0 <= ratio_low <= 1 <= ratio_high, got {ratio_low}, {ratio_high}"
        )
    if kl_coeff < 0:
        raise ValueError(f"loss 'stable_reinforce': kl_coeff must be >= 0, got {kl_coeff}")
    lp, on = _mask(inputs, "stable_reinforce")
    old = _field(inputs, "sampling_logprobs_B_T", "stable_reinforce", on, lp, "the sampler's logprobs")
    adv = _field(inputs, "advantages_B_T", "stable_reinforce", on, lp, "from an advantage estimator")
    log_ratio = torch.clamp(lp - old, -LOG_RATIO_CLAMP, LOG_RATIO_CLAMP)
    rho = torch.exp(log_ratio)
    kept = (rho.detach() >= ratio_low) & (rho.detach() <= ratio_high)
    weight = torch.where(kept, rho.detach(), torch.zeros((), dtype=lp.dtype, device=lp.device))
    k3 = torch.expm1(log_ratio) - log_ratio
    loss = _select(on, -weight * adv * lp + kl_coeff * k3)
    metrics = {"maskfrac": _masked_mean((~kept).to(lp.dtype), on), "approx_kl": _masked_mean(k3, on)}
    return LossOutputs(loss, metrics)


LOSSES["gspo"] = (gspo, "policy")
LOSSES["stable_reinforce"] = (stable_reinforce, "policy")
