"""tinker-env-echo: a deterministic fake plugin for OpenTinker.

The smallest complete plugin: three environments (single-turn, multi-turn and two-player)
registered through the ``opentinker`` entry point. The core's tests discover it for real.
"""

from tinker_core import register_package
from tinker_env_echo.envs import CallResponseEnv, CountdownEnv, EchoEnv

__all__ = ["CallResponseEnv", "CountdownEnv", "EchoEnv"]
__version__ = "0.1.0"

register_package(__name__)  # gymnasium.make("echo/echo-v0") works after `import tinker_env_echo`
