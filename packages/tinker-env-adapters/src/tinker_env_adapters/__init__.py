"""tinker-env-adapters: environments of other ecosystems as OpenTinker envs.

One optional extra per ecosystem; each registers its env ids through the ordinary plugin hook
(:mod:`tinker_env_adapters.plugin`), buildable once its package is installed (until then marked
unavailable with the install line, ``EnvSpec.metadata["unavailable"]``):

- ``[reasoning-gym]``: ``reasoning_gym/<task>-v0``, every reasoning-gym task, single-turn
  (:class:`ReasoningGymEnv`);
- ``[textarena]``: ``textarena/<game>-v0``, TextArena's two-player games that run offline, as
  multi-agent envs (:class:`TextArenaEnv`);
- ``[gymnasium]``: ``gym/<id>``, gymnasium's envs with text or discrete spaces over text
  (:class:`GymTextEnv`);
- ``[skyrl-gym]``: ``skyrl/<name>-v0``, SkyRL-gym's envs over chat messages, one per dataset
  row the user gives (:class:`SkyRLGymEnv`);
- ``[openenv]``: ``openenv/env-v0``, an OpenEnv ``Environment`` class run in process
  (:class:`OpenEnvEnv`), and ``openenv/remote-v0``, a running OpenEnv server
  (:class:`OpenEnvRemoteEnv`);
- ``[verifiers]``: ``verifiers/env-v0``, a verifiers environment (``load_environment``) played
  as an agent program through the rollout proxy, rewarded by its rubric (:class:`VerifiersEnv`).

What cannot map raises :class:`AdapterError` naming the env and the missing piece. Names below
load on first use, so plugin discovery stays cheap. See docs/guides/env-adapters.md.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from tinker_core import lazy_package

__version__ = "0.1.0"

if TYPE_CHECKING:  # pragma: no cover - the public names, listed once (lazy_package reads them too)
    from tinker_env_adapters._common import AdapterError as AdapterError
    from tinker_env_adapters.gymnasium_env import GymTextEnv as GymTextEnv
    from tinker_env_adapters.openenv_env import OpenEnvEnv as OpenEnvEnv
    from tinker_env_adapters.openenv_env import OpenEnvRemoteEnv as OpenEnvRemoteEnv
    from tinker_env_adapters.reasoning_gym_env import TEST_SEED_OFFSET as TEST_SEED_OFFSET
    from tinker_env_adapters.reasoning_gym_env import ReasoningGymEnv as ReasoningGymEnv
    from tinker_env_adapters.reasoning_gym_tasks import REASONING_GYM_TASKS as REASONING_GYM_TASKS
    from tinker_env_adapters.skyrl_env import SKYRL_ENVS as SKYRL_ENVS
    from tinker_env_adapters.skyrl_env import SkyRLGymEnv as SkyRLGymEnv
    from tinker_env_adapters.textarena_env import RandomMoveAgent as RandomMoveAgent
    from tinker_env_adapters.textarena_env import TextArenaEnv as TextArenaEnv
    from tinker_env_adapters.textarena_env import TextArenaGame as TextArenaGame
    from tinker_env_adapters.textarena_games import TEXTARENA_GAMES as TEXTARENA_GAMES
    from tinker_env_adapters.verifiers_env import VerifiersEnv as VerifiersEnv

__getattr__, __dir__, __all__ = lazy_package(__name__, "__version__")
