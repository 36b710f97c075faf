"""Plugin discovery and the registries of envs, estimators, losses and optimizers.

Discovery is lazy: nothing is imported until a registry is first read. Plugins come from entry
points in the group ``opentinker``; ``OPENTINKER_LOAD_PLUGINS`` (comma-separated distribution
names) limits which load, ``OPENTINKER_DISABLE_PLUGIN_AUTOLOAD`` turns entry-point loading off
(then only ``OPENTINKER_LOAD_PLUGINS`` and plugins added with :func:`register_plugin` load).
Set ``OPENTINKER_DEBUG_PLUGINS=1`` to print each hook call on stderr.

A plugin whose entry point fails to import is skipped: one warning (logger
``tinker_core.registry``) names it, its distribution and the error, and :func:`list_plugins`
reports it with ``error`` set, so ``opentinker plugins`` still works and every other plugin
loads. Once loaded, every env is registered with gymnasium too
(:mod:`tinker_core.gymnasium_envs`), so ``gymnasium.make(env_id)`` builds it.
"""

from __future__ import annotations

import functools
import logging
import os
import re
import sys
import threading
from collections.abc import Callable, Iterator
from importlib import metadata
from typing import TYPE_CHECKING, Any

import pluggy

from tinker_core import hookspecs
from tinker_core.env import EnvSpec
from tinker_core.errors import PluginError, UnknownNameError
from tinker_core.gymnasium_envs import build_env, plugin_discovery, register_specs
from tinker_core.plugin_entries import (
    REGISTRARS,
    Entry,
    EnvEntry,
    EstimatorEntry,
    LossEntry,
    PluginInfo,
    Registry,
)

if TYPE_CHECKING:
    from tinker_core.contracts import OptimizerFactory

LOCAL_DIST = "<local>"
log = logging.getLogger(__name__)


def normalize_dist_name(name: str) -> str:
    """PEP 503 normalisation: ``Tinker_Env.Math`` -> ``tinker-env-math``."""
    return re.sub(r"[-_.]+", "-", name).lower()


def _truthy(value: str | None) -> bool:
    return (value or "").strip().lower() not in ("", "0", "false", "no", "off")


KINDS = tuple(REGISTRARS)


class PluginSystem:
    """The pluggy manager plus the registries, filled on first access."""

    def __init__(self) -> None:
        self.pm = pluggy.PluginManager(hookspecs.PROJECT_NAME)
        self.pm.add_hookspecs(hookspecs)
        self._extra: list[tuple[object, str]] = []
        self._lock = threading.RLock()
        self._loaded = False
        self._dists: dict[int, tuple[str, str | None]] = {}
        self.plugins: list[PluginInfo] = []
        self.envs: Registry[EnvEntry] = Registry("envs", "env")
        self.advantage_estimators: Registry[EstimatorEntry] = Registry("advantage_estimators", "advantage estimator")
        self.losses: Registry[LossEntry] = Registry("losses", "loss")
        self.optimizers: Registry[Entry[OptimizerFactory]] = Registry("optimizers", "optimizer")
        self.rollout_proxies: Registry[Entry[Callable[..., Any]]] = Registry("rollout_proxies", "rollout proxy")
        self.rollout_engines: Registry[Entry[Callable[..., Any]]] = Registry("rollout_engines", "rollout engine")
        self.http_fronts: Registry[Entry[Callable[..., Any]]] = Registry("http_fronts", "HTTP front")
        self.job_clients: Registry[Entry[Callable[..., Any]]] = Registry("job_clients", "job client")
        self.doctor_checks: Registry[Entry[Callable[[], Any]]] = Registry("doctor_checks", "doctor check")
        self._debug = _truthy(os.environ.get("OPENTINKER_DEBUG_PLUGINS"))

    # ---- loading -------------------------------------------------------------------------
    def register_plugin(self, plugin: object, name: str | None = None, distribution: str = LOCAL_DIST) -> None:
        """Add an in-process plugin (a module or object with hookimpls), e.g. in tests."""
        with self._lock:
            self._extra.append((plugin, distribution))
            if self._loaded:
                self._register(plugin, name, distribution, None)
                self._collect([plugin])
                self._register_with_gymnasium()

    @property
    def is_loaded(self) -> bool:
        """Whether discovery has run (the registries are filled)."""
        return self._loaded

    def ensure_loaded(self) -> None:
        if self._loaded:
            return
        with self._lock:
            if self._loaded:
                return
            with plugin_discovery():
                self._load()
            self._loaded = True
            self._register_with_gymnasium()

    def _register_with_gymnasium(self) -> None:
        register_specs((entry.spec, entry.obj) for entry in self.envs.entries())

    def _load(self) -> None:
        loaded: list[object] = []
        for plugin, dist, version, name in self._entry_point_plugins():
            self._register(plugin, name, dist, version)
            loaded.append(plugin)
        for plugin, dist in self._extra:
            self._register(plugin, None, dist, None)
            loaded.append(plugin)
        try:
            self.pm.check_pending()
        except pluggy.PluginValidationError as e:
            raise PluginError(
                f"plugin {self._dist_of(e.plugin)[0]!r} implements a hook that does not "
                f"exist: {e}; hook names are {', '.join(hookspecs.HOOK_NAMES)}"
            ) from e
        self._collect(loaded)

    @property
    def failures(self) -> list[PluginInfo]:
        """The plugins whose entry point failed to import (each with its ``error``)."""
        return [p for p in self.plugins if p.error is not None]

    def _entry_point_plugins(self) -> Iterator[tuple[object, str, str | None, str]]:
        allow_raw = os.environ.get("OPENTINKER_LOAD_PLUGINS")
        allow = (
            {normalize_dist_name(x) for x in allow_raw.split(",") if x.strip()}
            if allow_raw is not None
            else None
        )
        if allow is None and _truthy(os.environ.get("OPENTINKER_DISABLE_PLUGIN_AUTOLOAD")):
            return
        seen: set[str] = set()
        for ep in metadata.entry_points(group=hookspecs.ENTRY_POINT_GROUP):
            dist = normalize_dist_name(ep.dist.name) if ep.dist else "<unknown>"
            if allow is not None and dist not in allow:
                continue
            seen.add(dist)
            version = ep.dist.version if ep.dist else None
            try:
                plugin = ep.load()
            except Exception as e:  # a broken plugin is skipped: reported, never fatal for the others
                error = f"{type(e).__name__}: {e}".strip()
                self.plugins.append(PluginInfo(name=ep.name, distribution=dist, version=version, error=error))
                log.warning(
                    "warning: skipping plugin %r (%s) of distribution %r, which failed to import: %s; "
                    "fix or uninstall it ('opentinker plugins' lists it)", ep.name, ep.value, dist, error,
                )
                continue
            yield plugin, dist, version, ep.name
        if allow:
            missing = sorted(allow - seen)
            if missing:
                raise PluginError(
                    f"OPENTINKER_LOAD_PLUGINS names {', '.join(missing)}, but no installed "
                    "distribution of that name has an 'opentinker' entry point"
                )

    def _register(self, plugin: object, name: str | None, dist: str, version: str | None) -> None:
        if self.pm.is_registered(plugin):
            return
        try:
            self.pm.register(plugin, name=None if name is None else f"{dist}:{name}")
        except pluggy.PluginValidationError as e:
            raise PluginError(f"plugin from distribution {dist!r} is invalid: {e}") from e
        self._dists[id(plugin)] = (dist, version)
        self._info_for(self.pm.get_name(plugin) or "", dist, version)  # listed even if it registers nothing

    def _dist_of(self, plugin: object) -> tuple[str, str | None]:
        return self._dists.get(id(plugin), (LOCAL_DIST, None))

    def _collect(self, plugins: list[object]) -> None:
        """Call each plugin's register hooks with a callback that knows the distribution."""
        wanted = {id(p) for p in plugins}
        for kind, make_register in REGISTRARS.items():
            hook_name = f"opentinker_register_{kind}"
            hook = getattr(self.pm.hook, hook_name)
            for impl in hook.get_hookimpls():  # registration order: the first one wins a name
                if id(impl.plugin) not in wanted:
                    continue
                dist, version = self._dist_of(impl.plugin)
                info = self._info_for(impl.plugin_name, dist, version)
                register = make_register(getattr(self, kind), dist, version, info)
                if self._debug:
                    sys.stderr.write(f"opentinker: calling {hook_name} of {dist}\n")
                kwargs = {"register": register} if "register" in impl.argnames else {}
                try:
                    impl.function(**kwargs)
                except (PluginError, UnknownNameError):
                    raise
                except Exception as e:
                    raise PluginError(
                        f"{hook_name} of distribution {dist!r} failed: {type(e).__name__}: {e}"
                    ) from e

    def _info_for(self, plugin_name: str, dist: str, version: str | None) -> PluginInfo:
        name = plugin_name.split(":", 1)[1] if ":" in plugin_name else plugin_name
        for info in self.plugins:
            if info.distribution == dist and info.name == name:
                return info
        info = PluginInfo(name=name, distribution=dist, version=version)
        self.plugins.append(info)
        return info


_system: PluginSystem | None = None
_system_lock = threading.Lock()


def plugin_system() -> PluginSystem:
    """The process-wide plugin system (created on first call, loaded on first registry read)."""
    global _system
    if _system is None:
        with _system_lock:
            if _system is None:
                _system = PluginSystem()
    return _system


def reset_plugins() -> None:
    """Forget every loaded plugin; the next registry read discovers again (for tests)."""
    global _system
    with _system_lock:
        _system = None


def _loaded() -> PluginSystem:
    system = plugin_system()
    system.ensure_loaded()
    return system


def get_registry(kind: str) -> Registry[Any]:
    """The loaded registry of ``kind``: ``envs``, ``advantage_estimators``, ``losses``, ``optimizers``,
    ``rollout_proxies``, ``rollout_engines``, ``http_fronts``, ``job_clients`` or ``doctor_checks``."""
    if kind not in KINDS:
        raise ValueError(f"unknown registry kind {kind!r}; kinds are {', '.join(KINDS)}")
    system = plugin_system()
    system.ensure_loaded()
    found: Registry[Any] = getattr(system, kind)
    return found


def register_plugin(plugin: object, name: str | None = None, distribution: str = LOCAL_DIST) -> None:
    """Add an in-process plugin; see :meth:`PluginSystem.register_plugin`."""
    plugin_system().register_plugin(plugin, name=name, distribution=distribution)


def list_plugins() -> list[PluginInfo]:
    system = plugin_system()
    system.ensure_loaded()
    return list(system.plugins)


def env_spec(env_id: str) -> EnvSpec:
    """The :class:`EnvSpec` of a registered env id (did-you-mean on unknown ids)."""
    return _loaded().envs.get(env_id).spec


def make_env(env_id: str, **kwargs: Any) -> Any:
    """Build a registered environment: ``make_env("math/arithmetic-v0", digits=2)``."""
    entry = _loaded().envs.get(env_id)
    return build_env(entry.obj, entry.spec, **kwargs)


def env_factory(env_id: str, **kwargs: Any) -> Callable[[], Any]:
    """A zero-argument builder of a registered environment, looked up once: calling
    ``env_factory("math/arithmetic-v0", digits=2)`` builds what ``make_env`` with the same
    arguments builds, without a registry look-up per env. A class that carries the registered spec
    as its ``env_spec`` (and no ``render_mode`` asked) is called directly: :func:`build_env`
    would attach nothing, and that is decided here once, not per env."""
    entry = _loaded().envs.get(env_id)
    factory, spec = entry.obj, entry.spec
    if isinstance(factory, type) and getattr(factory, "env_spec", None) is spec and "render_mode" not in kwargs:
        return functools.partial(factory, **kwargs)
    return functools.partial(build_env, factory, spec, **kwargs)


def get_advantage_estimator(name: str) -> EstimatorEntry:
    """The advantage estimator registered as ``name`` (``entry.needs_critic`` says whether it
    reads the critic's values)."""
    return _loaded().advantage_estimators.get(name)


def get_loss(name: str) -> LossEntry:
    """The loss registered as ``name`` (``entry.loss_kind``: policy, preference, value, kl or
    supervised)."""
    return _loaded().losses.get(name)


def get_optimizer(name: str) -> Entry[OptimizerFactory]:
    """The optimizer factory registered as ``name``."""
    return _loaded().optimizers.get(name)


def get_rollout_proxy(name: str) -> Entry[Callable[..., Any]]:
    """The rollout proxy registered as ``name`` (``openai``: tinker-serve's)."""
    return _loaded().rollout_proxies.get(name)


def get_rollout_engine(name: str) -> Entry[Callable[..., Any]]:
    """The rollout engine registered as ``name`` (``hf``: tinker-algos' sampler; ``vllm``:
    tinker-engine-vllm's)."""
    return _loaded().rollout_engines.get(name)


def get_http_front(name: str) -> Entry[Callable[..., Any]]:
    """The HTTP front registered as ``name`` (``openai``: tinker-serve's; ``viewer``:
    tinker-client's; see :mod:`tinker_core.http_fronts`)."""
    return _loaded().http_fronts.get(name)


def get_job_client(name: str) -> Entry[Callable[..., Any]]:
    """The JobService client factory registered as ``name`` (``grpc``: tinker-client's)."""
    return _loaded().job_clients.get(name)
