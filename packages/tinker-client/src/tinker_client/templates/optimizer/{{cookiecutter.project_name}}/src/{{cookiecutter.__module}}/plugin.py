"""The ``opentinker`` entry point of {{ cookiecutter.project_name }}.

``pyproject.toml`` names this module under ``[project.entry-points.opentinker]``. OpenTinker
imports it the first time it reads a registry and calls the hook below with a ``register``
callback. It must stay light: listing plugins must not import torch, so the registered factory
imports :mod:`{{ cookiecutter.__module }}.optimizer` (and torch) only when it is first called.
"""

from __future__ import annotations

from typing import Any

from tinker_core import OptimizerRegister, hookimpl

NAME = "{{ cookiecutter.__registered_name }}"
{%- if cookiecutter.implementation == "from-scratch" %}
DESCRIPTION = "SGD with heavy-ball momentum and decoupled weight decay: lr, momentum, weight_decay"
{%- else %}
DESCRIPTION = "AdamW without weight decay on 1-D parameters: lr, betas, eps, weight_decay"
{%- endif %}


def make_optimizer(params: Any, **config: Any) -> Any:
    """``factory(params, **config) -> torch.optim.Optimizer``; see :func:`{{ cookiecutter.__module }}.optimizer.build`."""
    from .optimizer import build

    return build(params, **config)


@hookimpl
def opentinker_register_optimizers(register: OptimizerRegister) -> None:
    """Register the optimizer ``{{ cookiecutter.__registered_name }}``."""
    register(NAME, make_optimizer, description=DESCRIPTION)
