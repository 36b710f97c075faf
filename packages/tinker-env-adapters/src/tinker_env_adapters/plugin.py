"""The ``opentinker`` entry point of tinker-env-adapters.

Each ecosystem's envs are registered only when its package is installed (found without
importing it, so discovery stays cheap): ``reasoning_gym/<task>-v0`` with reasoning-gym,
``textarena/<game>-v0`` with TextArena, ``skyrl/<name>-v0`` with SkyRL-gym, ``openenv/env-v0``
and ``openenv/remote-v0`` with OpenEnv (openenv-core), ``verifiers/env-v0`` with verifiers (an
agent program: ``EnvSpec.agent_program``), and ``gym/<id>``
for gymnasium's registry (gymnasium is always there: tinker-core needs it).
"""

from __future__ import annotations

from functools import partial

from tinker_core import EnvRegister, hookimpl
from tinker_env_adapters._common import installed


@hookimpl
def opentinker_register_envs(register: EnvRegister) -> None:
    """Register the envs of every installed ecosystem (see the module docstring)."""
    if installed("reasoning_gym"):
        from tinker_env_adapters.reasoning_gym_env import ReasoningGymEnv, reasoning_gym_spec
        from tinker_env_adapters.reasoning_gym_tasks import REASONING_GYM_TASKS

        for task in REASONING_GYM_TASKS:
            register(reasoning_gym_spec(task), partial(ReasoningGymEnv, task))
    if installed("textarena"):
        from tinker_env_adapters.textarena_env import TextArenaGame, textarena_spec
        from tinker_env_adapters.textarena_games import TEXTARENA_GAMES

        for game in TEXTARENA_GAMES:
            register(textarena_spec(game), TextArenaGame(game))
    if installed("skyrl_gym"):
        from tinker_env_adapters.skyrl_env import SKYRL_ENVS, SkyRLGymEnv, skyrl_spec

        for name in SKYRL_ENVS:
            register(skyrl_spec(name), partial(SkyRLGymEnv, name))
    if installed("openenv"):
        from tinker_env_adapters.openenv_env import OpenEnvEnv, OpenEnvRemoteEnv, openenv_spec

        register(openenv_spec("env"), OpenEnvEnv)
        register(openenv_spec("remote"), OpenEnvRemoteEnv)
    if installed("verifiers"):
        from tinker_env_adapters.verifiers_env import VerifiersEnv, verifiers_spec

        register(verifiers_spec(), VerifiersEnv)
    from tinker_env_adapters.gymnasium_env import GymTextEnv, gymnasium_envs, gymnasium_spec

    for ot_id, gym_id, max_steps in gymnasium_envs():
        spec = gymnasium_spec(ot_id, gym_id, max_steps)
        register(spec, partial(GymTextEnv, gym_id, spec))

