"""OpenTinker envs in gymnasium's registry, so ``gymnasium.make("math/arithmetic-v0")`` builds them.

gymnasium (1.x) discovers no plugins: it knows an env id once something has registered it. Two
things do here, both building the env with the factory the plugin registered, exactly as
:func:`tinker_core.make_env` does (keyword arguments passed through):

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

import contextlib
import inspect
from collections.abc import Callable, Iterable, Iterator
from functools import partial
from importlib import metadata
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from tinker_core.env import EnvSpec

def _takes_render_mode(factory: Callable[..., Any]) -> bool:
    try:
        return "render_mode" in inspect.signature(factory).parameters
    except (TypeError, ValueError):  # a builtin or C callable without a signature
        return False


def build_env(factory: Callable[..., Any], spec: EnvSpec, render_mode: str | None = None, **kwargs: Any) -> Any:
    """``factory(**kwargs)``, the env carrying its ``env_spec`` (how every OpenTinker env is built).

    ``render_mode`` (what ``gymnasium.make(id, render_mode="ansi")`` and gymnasium's
    ``check_env`` pass) goes to a factory that takes it; otherwise it is checked against the
    env's ``metadata["render_modes"]`` and set on the env, gymnasium's ``render_mode`` attribute.
    """
    if render_mode is not None and _takes_render_mode(factory):
        env = factory(render_mode=render_mode, **kwargs)
    else:
        env = factory(**kwargs)
        if render_mode is not None:
            modes = list(getattr(env, "metadata", {}).get("render_modes", []))
            if render_mode not in modes:
                env.close()
                raise ValueError(f"env {spec.id!r} has no render_mode {render_mode!r}; its render_modes are {modes}")
            env.render_mode = render_mode
    if getattr(env, "env_spec", None) is None:
        env.env_spec = spec
    return env


def register_specs(envs: Iterable[tuple[EnvSpec, Callable[..., Any]]]) -> list[str]:
    """Register each single-agent ``(spec, factory)`` of ``envs`` with gymnasium (unless its id
    is there already); the ids added. ``gymnasium.make(id, **kwargs)`` then calls
    :func:`build_env` with the factory.

    Multi-agent envs (a spec with ``roles``) are not gymnasium envs and are left out, as is an
    id gymnasium's id syntax does not accept (a ``.`` in the namespace).
    """
    import gymnasium
    from gymnasium.error import Error

    added = []
    for spec, factory in envs:
        if spec.roles or spec.id in gymnasium.registry:
            continue
        try:
            gymnasium.register(spec.id, entry_point=partial(build_env, factory, spec))
        except Error:
            continue
        added.append(spec.id)
    return added


_discovering = 0


@contextlib.contextmanager
def plugin_discovery() -> Iterator[None]:
    """Held by OpenTinker's registry while it discovers plugins: it registers every env with
    gymnasium itself afterwards, so :func:`register_package` (run as discovery imports each env
    package) does nothing meanwhile."""
    global _discovering
    _discovering += 1
    try:
        yield
    finally:
        _discovering -= 1


def register_package(package: str) -> list[str]:
    """Register with gymnasium the envs of the ``opentinker`` entry points in ``package``; the ids added.

    Called by an env package's ``__init__``: it calls the package's ``opentinker_register_envs``
    hook with a callback that only notes each spec and factory (the hook imports the env
    modules, as plugin discovery does when it calls the hook).
    """
    from tinker_core.hookspecs import ENTRY_POINT_GROUP

    if _discovering:
        return []
    envs: list[tuple[EnvSpec, Callable[..., Any]]] = []

    def collect(spec: EnvSpec, factory: Callable[..., Any]) -> None:
        envs.append((spec, factory))

    for ep in metadata.entry_points(group=ENTRY_POINT_GROUP):
        if ep.module == package or ep.module.startswith(package + "."):
            hook = getattr(ep.load(), "opentinker_register_envs", None)
            if hook is not None:
                hook(register=collect)
    return register_specs(envs)
