"""OpenTinker envs in gymnasium's registry, so ``gymnasium.make("math/arithmetic-v0")`` builds them.

gymnasium (1.x) discovers no plugins: it knows an env id once something has registered it. Two
things do here, both with :func:`tinker_core.registry.make_env` as the entry point (so the env
is built exactly as a job builds it, keyword arguments passed through):

- loading OpenTinker's plugin registry (any ``make_env``, ``opentinker`` command or job)
  registers every installed single-agent env (multi-agent envs are not gymnasium envs);
- importing an env package registers that package's envs (:func:`register_package`, called by
  the package's ``__init__``), gymnasium's convention for third-party envs::

      import gymnasium as gym
      import tinker_env_math

      gym.register_envs(tinker_env_math)  # a no-op that keeps linters from dropping the import
      env = gym.make("math/arithmetic-v0", digits=2)

``gym.make("tinker_env_math:math/arithmetic-v0")`` imports the package by itself. An id
gymnasium already knows is left as it is.
"""

from __future__ import annotations

from collections.abc import Iterable
from importlib import metadata
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from tinker_core.env import EnvSpec

ENTRY_POINT = "tinker_core.registry:make_env"
"""What gymnasium calls to build an OpenTinker env: ``make_env(env_id=..., **kwargs)``."""


def register_specs(specs: Iterable[EnvSpec]) -> list[str]:
    """Register each single-agent env of ``specs`` with gymnasium (unless its id is there already); the ids added.

    Multi-agent envs (a spec with ``roles``) are not gymnasium envs and are left out, as is an
    id gymnasium's id syntax does not accept (a ``.`` in the namespace).
    """
    import gymnasium
    from gymnasium.error import Error

    added = []
    for spec in specs:
        if spec.roles or spec.id in gymnasium.registry:
            continue
        try:
            gymnasium.register(spec.id, entry_point=ENTRY_POINT, kwargs={"env_id": spec.id})
        except Error:
            continue
        added.append(spec.id)
    return added


def register_package(package: str) -> list[str]:
    """Register with gymnasium the envs of the ``opentinker`` entry points in ``package``; the ids added.

    Called by an env package's ``__init__``: it calls the package's ``opentinker_register_envs``
    hook with a callback that only notes each spec (the hook imports the env modules, as plugin
    discovery does when it calls the hook).
    """
    from tinker_core.hookspecs import ENTRY_POINT_GROUP

    specs: list[EnvSpec] = []

    def collect(spec: EnvSpec, factory: Any) -> None:
        specs.append(spec)

    for ep in metadata.entry_points(group=ENTRY_POINT_GROUP):
        if ep.module == package or ep.module.startswith(package + "."):
            hook = getattr(ep.load(), "opentinker_register_envs", None)
            if hook is not None:
                hook(register=collect)
    return register_specs(specs)
