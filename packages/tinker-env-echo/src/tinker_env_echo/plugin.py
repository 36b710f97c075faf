"""The entry point: registers the three envs through ``opentinker_register_envs``."""

from __future__ import annotations

from tinker_core import EnvRegister, hookimpl


@hookimpl
def opentinker_register_envs(register: EnvRegister) -> None:
    from tinker_env_echo.envs import (
        CALL_RESPONSE_SPEC,
        COUNTDOWN_SPEC,
        ECHO_SPEC,
        CallResponseEnv,
        CountdownEnv,
        EchoEnv,
    )

    register(ECHO_SPEC, EchoEnv)
    register(COUNTDOWN_SPEC, CountdownEnv)
    register(CALL_RESPONSE_SPEC, CallResponseEnv)
