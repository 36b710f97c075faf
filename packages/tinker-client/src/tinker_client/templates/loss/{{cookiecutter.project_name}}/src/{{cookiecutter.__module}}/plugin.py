"""The ``opentinker`` entry point of {{ cookiecutter.project_name }}.

``pyproject.toml`` names this module under ``[project.entry-points.opentinker]``. OpenTinker
imports it the first time it reads a registry and calls the hook below with a ``register``
callback. It must stay light: listing plugins must not import torch, so the registered function
imports :mod:`{{ cookiecutter.__module }}.loss` (and torch) only when it is first called.
"""

from __future__ import annotations

from typing import Any

from tinker_core import LossKind, LossRegister, hookimpl

NAME = "{{ cookiecutter.__registered_name }}"
KIND: LossKind = "{{ cookiecutter.loss_kind }}"
{%- if cookiecutter.loss_kind == "policy" %}
DESCRIPTION = "REINFORCE with a capped importance weight: -sg(min(rho, cap)) * A * logp"
{%- else %}
DESCRIPTION = "focal negative log-likelihood: -w * (1 - p)^gamma * logp"
{%- endif %}


def compute_loss(inputs: Any, **config: Any) -> Any:
    """``loss_fn(inputs: LossInputs, **config) -> LossOutputs``; see :func:`{{ cookiecutter.__module }}.loss.loss`."""
    from .loss import loss

    return loss(inputs, **config)


@hookimpl
def opentinker_register_losses(register: LossRegister) -> None:
    """Register the {{ cookiecutter.loss_kind }} loss ``{{ cookiecutter.__registered_name }}``."""
    register(NAME, compute_loss, kind=KIND, description=DESCRIPTION)
