"""The ``opentinker`` entry point of tinker-env-adapters.

Each ecosystem's envs are registered whether or not its package is installed (found without
importing it, so discovery stays cheap); without it they are marked unavailable with the
install line (``opentinker plugins`` shows it; building one raises the same): ``reasoning_gym/<task>-v0`` with reasoning-gym,
``textarena/<game>-v0`` with TextArena, ``skyrl/<name>-v0`` with SkyRL-gym, ``openenv/env-v0``
and ``openenv/remote-v0`` with OpenEnv (openenv-core), ``verifiers/env-v0`` with verifiers (an
agent program: ``EnvSpec.agent_program``), and ``gym/<id>``
for gymnasium's registry (gymnasium is always there: tinker-core needs it; its envs without a
text form, continuous ``Box`` spaces, are marked unavailable with that reason).
"""

from __future__ import annotations

from dataclasses import replace
from functools import partial

from tinker_core import UNAVAILABLE, EnvRegister, EnvSpec, hookimpl
from tinker_env_adapters._common import installed


def _marked(spec: EnvSpec, reason: str | None) -> EnvSpec:
    """``spec`` with ``metadata["unavailable"] = reason`` when there is one (see
    :data:`tinker_core.UNAVAILABLE`): ``opentinker plugins`` lists the id as not buildable here."""
    return spec if reason is None else replace(spec, metadata={**spec.metadata, UNAVAILABLE: reason})


def _missing(module: str, extra: str) -> str | None:
    """Why an ecosystem's envs cannot build here (its package is missing), or None when it is installed."""
    if installed(module):
        return None
    return f"needs the Python package {module!r}: pip install 'tinker-env-adapters[{extra}]'"


@hookimpl
def opentinker_register_envs(register: EnvRegister) -> None:
    """Register every ecosystem's envs (see the module docstring); those of an ecosystem whose
    package is missing, and gymnasium envs without a text form, marked unavailable."""
    from tinker_env_adapters import (
        openenv_env,
        reasoning_gym_env,
        skyrl_env,
        textarena_env,
        verifiers_env,
    )
    from tinker_env_adapters.reasoning_gym_tasks import REASONING_GYM_TASKS
    from tinker_env_adapters.textarena_games import TEXTARENA_GAMES

    why = _missing("reasoning_gym", reasoning_gym_env.EXTRA)
    for task in REASONING_GYM_TASKS:
        register(_marked(reasoning_gym_env.reasoning_gym_spec(task), why), partial(reasoning_gym_env.ReasoningGymEnv, task))
    why = _missing("textarena", textarena_env.EXTRA)
    for game in TEXTARENA_GAMES:
        register(_marked(textarena_env.textarena_spec(game), why), textarena_env.TextArenaGame(game))
    why = _missing("skyrl_gym", skyrl_env.EXTRA)
    for name in skyrl_env.SKYRL_ENVS:
        register(_marked(skyrl_env.skyrl_spec(name), why), partial(skyrl_env.SkyRLGymEnv, name))
    why = _missing("openenv", openenv_env.EXTRA)
    register(_marked(openenv_env.openenv_spec("env"), why), openenv_env.OpenEnvEnv)
    register(_marked(openenv_env.openenv_spec("remote"), why), openenv_env.OpenEnvRemoteEnv)
    register(_marked(verifiers_env.verifiers_spec(), _missing("verifiers", verifiers_env.EXTRA)), verifiers_env.VerifiersEnv)
    from tinker_env_adapters.gymnasium_env import GymTextEnv, gymnasium_envs, gymnasium_spec

    for ot_id, gym_id, max_steps, why in gymnasium_envs():
        spec = _marked(gymnasium_spec(ot_id, gym_id, max_steps), why)
        register(spec, partial(GymTextEnv, gym_id, spec))
