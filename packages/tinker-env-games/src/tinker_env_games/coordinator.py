"""The multi-agent coordinator, now in tinker-core: :mod:`tinker_core.coordinator`.

Kept so ``from tinker_env_games.coordinator import play_episode`` goes on working; new code
imports from :mod:`tinker_core.coordinator`.
"""

from tinker_core.coordinator import *  # noqa: F403
from tinker_core.coordinator import __all__ as __all__
