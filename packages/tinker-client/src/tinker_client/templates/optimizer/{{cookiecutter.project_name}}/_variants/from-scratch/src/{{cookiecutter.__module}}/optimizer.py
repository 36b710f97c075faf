"""The optimizer ``{{ cookiecutter.__registered_name }}``: a new update rule. THIS is the file to edit.

The optimizer here is minimal but correct, so the package works end to end from the start:
SGD with heavy-ball momentum and decoupled weight decay, written out as a
:class:`torch.optim.Optimizer` so that the update rule is yours to change. For each parameter
``p`` with gradient ``g`` and a momentum buffer ``b`` (0 at first)::

    b = momentum * b + g
    p = p - lr * weight_decay * p        (decoupled weight decay, as in AdamW)
    p = p - lr * b

To make it yours, change :meth:`{{ cookiecutter.__class }}Optimizer.step` (and the defaults the
constructor keeps per parameter group), then the hand-worked steps in
``tests/test_optimizer.py``. Keep the contract that ``tinker_core.check_optimizer``
checks: it descends a convex quadratic, keeps each parameter group's ``lr``, leaves parameters
alone when their gradient is zero or None (with ``weight_decay=0``), and keeps all of its
state in ``state_dict()`` so a resumed run continues bit for bit.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

import torch

__all__ = ["{{ cookiecutter.__class }}Optimizer", "build"]


class {{ cookiecutter.__class }}Optimizer(torch.optim.Optimizer):
    """SGD with heavy-ball momentum and decoupled weight decay (see the module docstring).

    Args:
        params: tensors or parameter-group dicts (a group's own keys override the defaults).
        lr: the learning rate (> 0).
        momentum: the momentum coefficient, in ``[0, 1)``.
        weight_decay: the decoupled weight decay (>= 0).
    """

    def __init__(
        self, params: Iterable[Any], lr: float = 1e-3, momentum: float = 0.9, weight_decay: float = 0.0
    ) -> None:
        if not lr > 0.0:
            raise ValueError(f"optimizer {{ cookiecutter.__registered_name }}: lr must be > 0, got {lr}")
        if not 0.0 <= momentum < 1.0:
            raise ValueError(f"optimizer {{ cookiecutter.__registered_name }}: momentum must be in [0, 1), got {momentum}")
        if not weight_decay >= 0.0:
            raise ValueError(f"optimizer {{ cookiecutter.__registered_name }}: weight_decay must be >= 0, got {weight_decay}")
        super().__init__(params, {"lr": lr, "momentum": momentum, "weight_decay": weight_decay})

    @torch.no_grad()
    def step(self, closure: Callable[[], float] | None = None) -> float | None:  # type: ignore[override]
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        for group in self.param_groups:
            lr, momentum, weight_decay = group["lr"], group["momentum"], group["weight_decay"]
            for p in group["params"]:
                if p.grad is None:  # frozen or unused parameter
                    continue
                if p.grad.is_sparse:
                    raise RuntimeError("optimizer {{ cookiecutter.__registered_name }} does not support sparse gradients")
                state = self.state[p]
                if "momentum_buffer" not in state:
                    state["momentum_buffer"] = torch.zeros_like(p, memory_format=torch.preserve_format)
                buf = state["momentum_buffer"]
                buf.mul_(momentum).add_(p.grad)
                if weight_decay != 0.0:
                    p.mul_(1.0 - lr * weight_decay)
                p.add_(buf, alpha=-lr)
        return loss


def build(
    params: Iterable[Any], *, lr: float = 1e-3, momentum: float = 0.9, weight_decay: float = 0.0
) -> torch.optim.Optimizer:
    """The factory OpenTinker calls: ``build(params, lr=..., weight_decay=..., **optimizer.params)``.

    A job sets ``optimizer: {name: {{ cookiecutter.__registered_name }}, lr: 0.01, params: {momentum: 0.9}}``.
    """
    return {{ cookiecutter.__class }}Optimizer(params, lr=lr, momentum=momentum, weight_decay=weight_decay)
