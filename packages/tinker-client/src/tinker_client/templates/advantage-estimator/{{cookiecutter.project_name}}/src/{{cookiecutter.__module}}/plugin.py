"""The ``opentinker`` entry point of {{ cookiecutter.project_name }}.

``pyproject.toml`` names this module under ``[project.entry-points.opentinker]``. OpenTinker
imports it the first time it reads a registry and calls the hook below with a ``register``
callback. The estimator module is imported inside the hook, so importing this one is cheap.
"""

from __future__ import annotations

from tinker_core import EstimatorRegister, hookimpl


@hookimpl
def opentinker_register_advantage_estimators(register: EstimatorRegister) -> None:
    """Register the advantage estimator ``{{ cookiecutter.__registered_name }}``."""
    from .estimator import DESCRIPTION, NAME, NEEDS_CRITIC, estimate

    register(NAME, estimate, needs_critic=NEEDS_CRITIC, description=DESCRIPTION)
