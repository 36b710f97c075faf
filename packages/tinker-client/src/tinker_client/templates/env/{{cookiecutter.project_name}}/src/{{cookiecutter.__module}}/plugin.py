"""The ``opentinker`` entry point of {{ cookiecutter.project_name }}.

``pyproject.toml`` names this module under ``[project.entry-points.opentinker]``. OpenTinker
imports it the first time it reads a registry and calls the hook below with a ``register``
callback. The env module is imported inside the hook, so listing plugins stays cheap.
"""

from __future__ import annotations

from tinker_core import EnvRegister, hookimpl


@hookimpl
def opentinker_register_envs(register: EnvRegister) -> None:
{%- if cookiecutter.env_type == "multi-agent" %}
    """Register ``{{ cookiecutter.__env_id }}`` (the game) and ``{{ cookiecutter.__solo_env_id }}`` (one role vs a bot)."""
    from .env import SOLO_SPEC, SPEC, {{ cookiecutter.__class }}Game, {{ cookiecutter.__class }}SoloEnv

    register(SPEC, {{ cookiecutter.__class }}Game)
    register(SOLO_SPEC, {{ cookiecutter.__class }}SoloEnv)
{%- else %}
    """Register ``{{ cookiecutter.__env_id }}``."""
    from .env import SPEC, {{ cookiecutter.__class }}Env

    register(SPEC, {{ cookiecutter.__class }}Env)
{%- endif %}
