"""Built-in optimizers: ``factory(params, **config) -> torch.optim.Optimizer``.

Each factory takes the parameters (tensors or parameter groups) and keyword config only, and
rejects unknown keys with an error listing the allowed ones.

* ``adamw(params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.01, amsgrad=False, fused=False)``
  -> :class:`torch.optim.AdamW` (decoupled weight decay). ``fused: true`` asks for torch's fused
  kernel (one kernel for all parameters instead of about ten small ops per parameter tensor;
  floating-point parameters on a device type torch fuses for: CPU, CUDA ...): elementwise, so
  deterministic and independent of the thread count, but it rounds differently from the default
  path (to about 1e-5 per update), so a run's metrics differ from the unfused run of the same seed;
  it is off by default so the documented learning results reproduce. A checkpoint's optimizer
  state restores the kernel choice (``fused`` is in its param groups).
* ``sgd(params, lr=1e-3, momentum=0, dampening=0, weight_decay=0, nesterov=False)``
  -> :class:`torch.optim.SGD`; ``nesterov`` needs ``momentum > 0`` and ``dampening = 0``.
* ``lion(params, lr=1e-4, betas=(0.9, 0.99), weight_decay=0)`` -> :class:`Lion`.

**Lion** (Chen et al. 2023, "Symbolic Discovery of Optimization Algorithms"), per parameter
``theta`` with gradient ``g`` and momentum ``m`` (initially 0)::

    c     = beta1 * m + (1 - beta1) * g
    theta = theta - lr * (sign(c) + weight_decay * theta)     # decoupled weight decay
    m     = beta2 * m + (1 - beta2) * g

Lion's update has unit magnitude per coordinate, so its learning rate is typically 3-10x
smaller than AdamW's and its weight decay 3-10x larger.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import torch

from tinker_algos.builtins.estimators import strict_config

if TYPE_CHECKING:
    from torch.optim.optimizer import ParamsT


def _betas(name: str, betas: Iterable[float]) -> tuple[float, float]:
    try:
        b1, b2 = (float(b) for b in betas)
    except (TypeError, ValueError):
        raise ValueError(
            f"optimizer {name!r}: betas must be two numbers [beta1, beta2], got {betas!r}"
        ) from None
    for label, b in (("beta1", b1), ("beta2", b2)):
        if not 0.0 <= b < 1.0:
            raise ValueError(f"optimizer {name!r}: {label} must be in [0, 1), got {b}")
    return b1, b2


def _non_negative(name: str, key: str, value: float, *, strict: bool = False) -> float:
    value = float(value)
    if value < 0.0 or (strict and value == 0.0):
        raise ValueError(
            f"optimizer {name!r}: {key} must be {'> 0' if strict else '>= 0'}, got {value}"
        )
    return value


def _lr_and_decay(name: str, lr: float, weight_decay: float) -> tuple[float, float]:
    """The ``lr`` (> 0) and ``weight_decay`` (>= 0) that every optimizer takes, checked."""
    return _non_negative(name, "lr", lr, strict=True), _non_negative(name, "weight_decay", weight_decay)


class Lion(torch.optim.Optimizer):
    """Lion: sign of an interpolated momentum, with decoupled weight decay (see module docs)."""

    def __init__(
        self,
        params: ParamsT,
        lr: float = 1e-4,
        betas: tuple[float, float] = (0.9, 0.99),
        weight_decay: float = 0.0,
    ) -> None:
        lr, weight_decay = _lr_and_decay("lion", lr, weight_decay)
        super().__init__(params, {"lr": lr, "betas": _betas("lion", betas), "weight_decay": weight_decay})

    @torch.no_grad()
    def step(self, closure: Callable[[], float] | None = None) -> float | None:  # type: ignore[override]
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        for group in self.param_groups:
            lr = group["lr"]
            beta1, beta2 = group["betas"]
            wd = group["weight_decay"]
            for p in group["params"]:
                if p.grad is None:
                    continue
                if p.grad.is_sparse:
                    raise RuntimeError("Lion does not support sparse gradients")
                state = self.state[p]
                if "exp_avg" not in state:
                    state["exp_avg"] = torch.zeros_like(p, memory_format=torch.preserve_format)
                m = state["exp_avg"]
                update = (m * beta1).add_(p.grad, alpha=1.0 - beta1).sign_()
                if wd != 0.0:
                    p.mul_(1.0 - lr * wd)
                p.add_(update, alpha=-lr)
                m.mul_(beta2).add_(p.grad, alpha=1.0 - beta2)
        return loss


def fused_supported(params: ParamsT) -> bool:
    """Whether torch's fused AdamW kernel takes every parameter of ``params`` (tensors or
    parameter groups): floating point, on a device type torch has a fused kernel for."""
    try:
        from torch.utils._foreach_utils import _get_fused_kernels_supported_devices

        devices = set(_get_fused_kernels_supported_devices())
    except ImportError:  # an older/newer torch without the helper: keep the unfused default
        return False
    tensors = [t for g in params for t in (g["params"] if isinstance(g, Mapping) else [g])]
    return bool(tensors) and all(t.is_floating_point() and t.device.type in devices and not t.is_sparse for t in tensors)


@strict_config("optimizer")
def adamw(
    params: ParamsT,
    *,
    lr: float = 1e-3,
    betas: Sequence[float] = (0.9, 0.999),
    eps: float = 1e-8,
    weight_decay: float = 0.01,
    amsgrad: bool = False,
    fused: bool = False,
) -> torch.optim.Optimizer:
    """AdamW (torch.optim.AdamW) with decoupled weight decay; torch's fused kernel with ``fused``
    (where :func:`fused_supported`, else a ValueError naming the field)."""
    lr, weight_decay = _lr_and_decay("adamw", lr, weight_decay)
    params = [dict(g) if isinstance(g, Mapping) else g for g in params]
    if not isinstance(fused, bool):
        raise ValueError(f"optimizer config 'fused' must be true or false, got {fused!r}")
    if fused and not fused_supported(params):
        raise ValueError(
            "optimizer config 'fused: true': torch has no fused AdamW kernel for these parameters "
            "(they must be floating point on a device torch fuses for, e.g. CPU or CUDA); remove 'fused'"
        )
    return torch.optim.AdamW(
        params, lr=lr, betas=_betas("adamw", betas), eps=_non_negative("adamw", "eps", eps), weight_decay=weight_decay,
        amsgrad=bool(amsgrad), fused=True if fused else None,
    )


@strict_config("optimizer")
def sgd(
    params: ParamsT,
    *,
    lr: float = 1e-3,
    momentum: float = 0.0,
    dampening: float = 0.0,
    weight_decay: float = 0.0,
    nesterov: bool = False,
) -> torch.optim.Optimizer:
    """SGD (torch.optim.SGD) with optional (Nesterov) momentum."""
    momentum = _non_negative("sgd", "momentum", momentum)
    dampening = _non_negative("sgd", "dampening", dampening)
    if nesterov and (momentum == 0.0 or dampening != 0.0):
        raise ValueError(
            f"optimizer 'sgd': nesterov=True needs momentum > 0 and dampening = 0, "
            f"got momentum={momentum}, dampening={dampening}"
        )
    lr, weight_decay = _lr_and_decay("sgd", lr, weight_decay)
    return torch.optim.SGD(
        params, lr=lr, momentum=momentum, dampening=dampening, weight_decay=weight_decay, nesterov=bool(nesterov)
    )


@strict_config("optimizer")
def lion(
    params: ParamsT,
    *,
    lr: float = 1e-4,
    betas: Any = (0.9, 0.99),
    weight_decay: float = 0.0,
) -> torch.optim.Optimizer:
    """Lion (Chen et al. 2023): sign update with two betas and decoupled weight decay."""
    return Lion(params, lr=lr, betas=betas, weight_decay=weight_decay)


def build_optimizer(
    name: str, params: Iterable[torch.nn.Parameter], *, lr: float, weight_decay: float, config: Mapping[str, Any] | None = None
) -> torch.optim.Optimizer:
    """The registered optimizer ``name`` over ``params``: weight decay on the weights with two or
    more dims, none on biases and norm gains; ``config`` holds its other keys (``betas`` ...)."""
    import tinker_core.registry

    params = list(params)
    groups = [
        g
        for g in (
            {"params": [p for p in params if p.ndim >= 2], "weight_decay": weight_decay},
            {"params": [p for p in params if p.ndim < 2], "weight_decay": 0.0},
        )
        if g["params"]
    ]
    factory = tinker_core.registry.get_optimizer(name).obj
    return factory(groups, lr=lr, weight_decay=weight_decay, **dict(config or {}))


OPTIMIZERS: dict[str, Callable[..., torch.optim.Optimizer]] = {
    "adamw": adamw,
    "sgd": sgd,
    "lion": lion,
}
"""Name -> factory: what :mod:`tinker_algos.plugin` registers."""
