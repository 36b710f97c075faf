"""The optimizer ``{{ cookiecutter.__registered_name }}``: a configured torch optimizer. THIS is the file to edit.

The optimizer here is minimal but correct, so the package works end to end from the start:
:class:`torch.optim.AdamW` that decays only the parameters with two or more dimensions (weight
matrices, embeddings) and never the one-dimensional ones (biases, normalisation weights),
the usual recipe for transformers::

    for each parameter group:  >= 2-D tensors -> a group with the job's weight_decay
                               1-D tensors    -> a group with weight_decay = 0
    AdamW(those groups, lr, betas, eps)

To make it yours, change :func:`build` (which torch optimizer, which defaults) and
:func:`split_decay_groups` (how parameters are grouped), then the tests in
``tests/test_optimizer.py``. Keep the contract that ``tinker_core.check_optimizer``
checks: it descends a convex quadratic, keeps each parameter group's ``lr``, leaves parameters
alone when their gradient is zero or None (with ``weight_decay=0``), and keeps all of its
state in ``state_dict()`` so a resumed run continues bit for bit.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import torch

__all__ = ["build", "split_decay_groups"]


def split_decay_groups(params: Iterable[Any], weight_decay: float) -> list[dict[str, Any]]:
    """Split tensors (or parameter groups) into decayed (>= 2-D) and undecayed (1-D) groups.

    A parameter group's own keys (``lr`` ...) are kept in both of its halves; its own
    ``weight_decay``, when it has one, applies to its >= 2-D half. Empty halves are dropped, so
    the grouping is the same every time (which ``load_state_dict`` relies on).
    """
    items = list(params)  # may be a generator: read it once
    groups = items if items and isinstance(items[0], dict) else [{"params": items}]
    out: list[dict[str, Any]] = []
    for group in groups:
        tensors = group["params"]
        tensors = [tensors] if isinstance(tensors, torch.Tensor) else list(tensors)
        options = {k: v for k, v in group.items() if k != "params"}
        decayed = [p for p in tensors if p.ndim >= 2]
        undecayed = [p for p in tensors if p.ndim < 2]
        if decayed:
            out.append({**options, "params": decayed, "weight_decay": options.get("weight_decay", weight_decay)})
        if undecayed:
            out.append({**options, "params": undecayed, "weight_decay": 0.0})
    return out


def build(
    params: Iterable[Any],
    *,
    lr: float = 1e-3,
    weight_decay: float = 0.01,
    betas: Any = (0.9, 0.999),
    eps: float = 1e-8,
) -> torch.optim.Optimizer:
    """The factory OpenTinker calls: ``build(params, lr=..., weight_decay=..., **optimizer.params)``.

    A job sets ``optimizer: {name: {{ cookiecutter.__registered_name }}, lr: 0.001, weight_decay: 0.1, params: {betas: [0.9, 0.95]}}``.
    """
    if not lr > 0.0:
        raise ValueError(f"optimizer {{ cookiecutter.__registered_name }}: lr must be > 0, got {lr}")
    if not weight_decay >= 0.0:
        raise ValueError(f"optimizer {{ cookiecutter.__registered_name }}: weight_decay must be >= 0, got {weight_decay}")
    beta1, beta2 = (float(b) for b in betas)
    return torch.optim.AdamW(
        split_decay_groups(params, weight_decay),
        lr=lr,
        betas=(beta1, beta2),
        eps=eps,
        weight_decay=weight_decay,
    )
