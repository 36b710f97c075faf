"""Conformance checks of optimizers: :func:`check_optimizer` (needs torch, imported on call).

An optimizer plugin is ``factory(params, **config) -> torch.optim.Optimizer``; ``params`` is
an iterable of tensors (often a generator such as ``model.parameters()``) or of parameter-group
dicts, and ``config`` carries ``lr``, ``weight_decay`` and the optimizer's own keys. The trainer
calls ``zero_grad()``, ``backward()`` and ``step()`` (no closure).

Checks (names as in :class:`ConformanceError`):

* ``call`` / ``type``: the factory accepts a generator of parameters and returns a
  ``torch.optim.Optimizer``.
* ``lr``: ``param_groups[0]["lr"]`` equals the ``lr`` passed in ``config``.
* ``param-groups``: parameter-group dicts are accepted and a group's own ``lr`` is kept.
* ``descent``: a few steps on a small convex quadratic lower the loss.
* ``zero-grad``: with ``weight_decay=0``, a step from a fresh state with all-zero gradients,
  or with no gradients (``grad is None``), leaves the parameters unchanged.
* ``state-dict``: stopping after some steps, saving ``state_dict()`` through
  ``torch.save`` / ``torch.load(weights_only=True)`` (as a checkpoint does), loading it into a
  fresh optimizer over a copy of the parameters and continuing gives bit-identical parameters
  to never stopping.
"""

from __future__ import annotations

import io
import math
from collections.abc import Callable, Mapping
from types import ModuleType
from typing import Any

from tinker_core.contracts import OptimizerFactory
from tinker_core.testing._common import Reporter, resolve_callable, short
from tinker_core.testing.losses import import_torch

__all__ = ["check_optimizer"]

_STEPS = 12
_LR = 0.05
_LR_PROBE = 0.0123


class _Quadratic:
    """f(w, b) = 0.5 * sum(a_w (w - c_w)^2) + 0.5 * sum(a_b (b - c_b)^2), minimum at c."""

    def __init__(self, torch: ModuleType) -> None:
        g = torch.Generator().manual_seed(7)
        self.torch = torch
        self.shapes = [(3, 4), (5,)]
        self.a = [0.5 + 1.5 * torch.rand(s, generator=g) for s in self.shapes]
        self.c = [torch.sign(torch.randn(s, generator=g)) * (0.5 + torch.rand(s, generator=g)) for s in self.shapes]
        self.init = [0.1 * torch.randn(s, generator=g) for s in self.shapes]

    def params(self, values: list[Any] | None = None) -> list[Any]:
        return [v.clone().requires_grad_(True) for v in (values or self.init)]

    def loss(self, params: list[Any]) -> Any:
        return sum(0.5 * (a * (p - c) ** 2).sum() for a, c, p in zip(self.a, self.c, params, strict=True))


def _build(rep: Reporter, torch: ModuleType, factory: OptimizerFactory, params: Any, config: Mapping[str, Any],
           what: str) -> Any:
    with rep.guard("call", f"factory({what}, **{dict(config)})",
                   "accept factory(params, **config): params is an iterable of tensors or "
                   "parameter-group dicts, often a generator (iterate it once: params = "
                   "list(params)); config has lr, weight_decay and your own keys"):
        opt = factory(params, **config)
    if not isinstance(opt, torch.optim.Optimizer):
        rep.fail("type", f"factory returned {type(opt).__name__}, not a torch.optim.Optimizer",
                 "return a torch.optim.Optimizer (subclass it for a custom update rule)")
    return opt


def _train(rep: Reporter, q: _Quadratic, opt: Any, params: list[Any], steps: int) -> list[float]:
    losses = []
    for i in range(steps):
        opt.zero_grad()
        loss = q.loss(params)
        losses.append(float(loss.detach()))
        loss.backward()
        with rep.guard("call", f"optimizer.step() (step {i})",
                       "step() must work without a closure; the trainer calls it that way"):
            opt.step()
    losses.append(float(q.loss(params).detach()))
    return losses


def check_optimizer(
    factory: str | Callable[..., Any],
    *,
    config: Mapping[str, Any] | None = None,
) -> None:
    """Check an optimizer factory against the contract of ``opentinker_register_optimizers``.

    Args:
        factory: a registered optimizer name (:func:`tinker_core.registry.get_optimizer`) or the
            factory itself.
        config: keyword arguments for every call, merged over ``{"lr": 0.05,
            "weight_decay": 0.0}``; the ``lr`` and ``zero-grad`` checks set their own ``lr`` /
            ``weight_decay=0``.

    Raises:
        TorchNotInstalledError: torch is missing (also an ImportError).
        ConformanceError: naming the optimizer, the failed check and the fix.
    """
    fn, label, _ = resolve_callable(factory, "optimizers")
    torch = import_torch(label)
    rep = Reporter(label)
    base = {"lr": _LR, "weight_decay": 0.0, **dict(config or {})}
    q = _Quadratic(torch)

    _check_lr(rep, torch, fn, q, base)
    _check_param_groups(rep, torch, fn, q, base)
    _check_descent(rep, torch, fn, q, base)
    _check_zero_grad(rep, torch, fn, q, base)
    _check_state_dict(rep, torch, fn, q, base)


def _check_lr(rep: Reporter, torch: ModuleType, fn: OptimizerFactory, q: _Quadratic, base: dict[str, Any]) -> None:
    """The config's lr reaches param_groups; params may be a generator."""
    params = q.params()
    opt = _build(rep, torch, fn, (p for p in params), {**base, "lr": _LR_PROBE}, "a generator of tensors")
    lr = opt.param_groups[0].get("lr")
    if lr is None or not math.isclose(float(lr), _LR_PROBE, rel_tol=1e-6):
        rep.fail("lr", f"config lr={_LR_PROBE} but param_groups[0]['lr'] is {short(lr)}",
                 "pass lr through to the optimizer (param_groups[0]['lr'] is what schedulers change)")
    if sum(len(g["params"]) for g in opt.param_groups) != len(params):
        rep.fail("call", f"the optimizer holds {sum(len(g['params']) for g in opt.param_groups)} "
                 f"parameters, {len(params)} were passed (as a generator)",
                 "iterate params only once (it may be a generator): params = list(params)")


def _check_param_groups(rep: Reporter, torch: ModuleType, fn: OptimizerFactory, q: _Quadratic, base: dict[str, Any]) -> None:
    """Parameter groups keep their own lr; the others take the config's."""
    params = q.params()
    opt = _build(rep, torch, fn, [{"params": [params[0]], "lr": 0.01}, {"params": [params[1]]}], base,
                 "parameter groups")
    lrs = [g.get("lr") for g in opt.param_groups]
    if len(lrs) != 2 or not math.isclose(float(lrs[0]), 0.01) or not math.isclose(float(lrs[1]), base["lr"]):
        rep.fail("param-groups", f"groups [{{lr: 0.01}}, {{}}] with config lr={base['lr']} gave group "
                 f"lrs {short(lrs)}",
                 "pass params straight to torch.optim.Optimizer.__init__ with the config as defaults")


def _check_descent(rep: Reporter, torch: ModuleType, fn: OptimizerFactory, q: _Quadratic, base: dict[str, Any]) -> None:
    """Steps on a convex quadratic lower the loss."""
    params = q.params()
    opt = _build(rep, torch, fn, (p for p in params), base, "a generator of tensors")
    losses = _train(rep, q, opt, params, _STEPS)
    if not all(math.isfinite(x) for x in losses) or not losses[-1] < losses[0]:
        rep.fail("descent", f"{_STEPS} steps on a convex quadratic with lr={base['lr']} did not lower the "
                 f"loss: {losses[0]:.6g} -> {losses[-1]:.6g}",
                 "check the sign and scale of the update (or pass a config under which the "
                 "optimizer works)")


def _check_zero_grad(rep: Reporter, torch: ModuleType, fn: OptimizerFactory, q: _Quadratic, base: dict[str, Any]) -> None:
    """Zero (and missing) gradients change nothing from a fresh state."""
    zero_cfg = {**base, "weight_decay": 0.0}
    params = q.params()
    opt = _build(rep, torch, fn, (p for p in params), zero_cfg, "a generator of tensors")
    for p in params:
        p.grad = torch.zeros_like(p)
    with rep.guard("zero-grad", "step() with all-zero gradients"):
        opt.step()
    if not all(torch.equal(p.detach(), v) for p, v in zip(params, q.init, strict=True)):
        rep.fail("zero-grad", "with weight_decay=0, a first step with all-zero gradients moved the parameters",
                 "an update must vanish with the gradient (no weight decay or noise when weight_decay=0)")
    params = q.params()
    opt = _build(rep, torch, fn, (p for p in params), zero_cfg, "a generator of tensors")
    opt.zero_grad(set_to_none=True)
    with rep.guard("zero-grad", "step() with grad=None on every parameter",
                   "skip parameters whose .grad is None (frozen or unused ones)"):
        opt.step()
    if not all(torch.equal(p.detach(), v) for p, v in zip(params, q.init, strict=True)):
        rep.fail("zero-grad", "step() moved parameters whose .grad is None",
                 "skip parameters whose .grad is None (frozen or unused ones)")


def _check_state_dict(rep: Reporter, torch: ModuleType, fn: OptimizerFactory, q: _Quadratic, base: dict[str, Any]) -> None:
    """A state_dict round trip continues exactly as never stopping."""
    half = _STEPS // 2
    straight = q.params()
    _train(rep, q, _build(rep, torch, fn, (p for p in straight), base, "a generator"), straight, _STEPS)
    first = q.params()
    opt = _build(rep, torch, fn, (p for p in first), base, "a generator")
    _train(rep, q, opt, first, half)
    buffer = io.BytesIO()
    with rep.guard("state-dict", "torch.save(optimizer.state_dict())"):
        torch.save(opt.state_dict(), buffer)
    buffer.seek(0)
    with rep.guard("state-dict", "torch.load(..., weights_only=True) of the saved state_dict",
                   "keep optimizer state to tensors and plain Python values (no custom objects)"):
        state = torch.load(buffer, weights_only=True)
    resumed = q.params([p.detach() for p in first])
    opt2 = _build(rep, torch, fn, (p for p in resumed), base, "a generator")
    with rep.guard("state-dict", "load_state_dict() into a fresh optimizer"):
        opt2.load_state_dict(state)
    _train(rep, q, opt2, resumed, _STEPS - half)
    for i, (a, b) in enumerate(zip(straight, resumed, strict=True)):
        if not torch.equal(a.detach(), b.detach()):
            rep.fail("state-dict", f"after save/load of state_dict() at step {half}, parameter {i} differs "
                     f"from an uninterrupted run by up to {float((a - b).detach().abs().max()):.3g}",
                     "keep every piece of optimizer state (step counts, moments) in state_dict() "
                     "and restore it in load_state_dict()")

