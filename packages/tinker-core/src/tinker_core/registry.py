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
from dataclasses import dataclass, field
from importlib import metadata
from typing import TYPE_CHECKING, Any, Generic, TypeVar

import pluggy

from tinker_core import hookspecs
from tinker_core.env import UNAVAILABLE, EnvSpec
from tinker_core.errors import DuplicateNameError, PluginError, UnknownNameError
from tinker_core.gymnasium_envs import build_env, plugin_discovery, register_specs

if TYPE_CHECKING:
    from tinker_core.contracts import AdvantageEstimator, Loss, OptimizerFactory

NAME_RE = re.compile(r"^[a-z][a-z0-9_.-]*$")
LOCAL_DIST = "<local>"
log = logging.getLogger(__name__)

T = TypeVar("T")


def normalize_dist_name(name: str) -> str:
    """PEP 503 normalisation: ``Tinker_Env.Math`` -> ``tinker-env-math``."""
    return re.sub(r"[-_.]+", "-", name).lower()


def _truthy(value: str | None) -> bool:
    return (value or "").strip().lower() not in ("", "0", "false", "no", "off")


@dataclass(frozen=True)
class Entry(Generic[T]):
    """One registered thing: its name, the object, who registered it and any options."""

    kind: str
    name: str
    obj: T
    distribution: str
    version: str | None = None
    options: dict[str, Any] = field(default_factory=dict)
    description: str = ""


@dataclass
class PluginInfo:
    """A plugin: its distribution and everything it registered, by kind; ``error`` is why it
    could not be imported (then it registered nothing), None when it loaded; ``unavailable``:
    the env ids it registered that cannot be built here, with why (``EnvSpec.metadata["unavailable"]``)."""

    name: str
    distribution: str
    version: str | None
    registers: dict[str, list[str]] = field(default_factory=dict)
    error: str | None = None
    unavailable: dict[str, str] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "distribution": self.distribution,
            "version": self.version,
            "registers": {k: sorted(v) for k, v in self.registers.items()},
            "error": self.error,
            "unavailable": dict(sorted(self.unavailable.items())),
        }

    def add(self, kind: str, name: str, spec: EnvSpec | None = None) -> None:
        """Record that this plugin registered ``name`` of ``kind`` (an env with its ``spec``)."""
        self.registers.setdefault(kind, []).append(name)
        if spec is not None and spec.metadata.get(UNAVAILABLE):
            self.unavailable[name] = str(spec.metadata[UNAVAILABLE])


class Registry(Generic[T]):
    """Name -> :class:`Entry` for one kind; refuses duplicates, suggests on unknown names."""

    def __init__(self, kind: str, label: str) -> None:
        self.kind = kind
        self.label = label  # how errors call one of these: "env", "advantage estimator"...
        self._entries: dict[str, Entry[T]] = {}

    def add(self, entry: Entry[T]) -> None:
        prev = self._entries.get(entry.name)
        if prev is not None:
            raise DuplicateNameError(
                f"{self.label} {entry.name!r} is registered twice: by distribution "
                f"{prev.distribution!r} and by distribution {entry.distribution!r}; "
                "uninstall one of them or limit loading with OPENTINKER_LOAD_PLUGINS"
            )
        self._entries[entry.name] = entry

    def get(self, name: str) -> Entry[T]:
        try:
            return self._entries[name]
        except KeyError:
            raise UnknownNameError(self.label, name, self._entries) from None

    def __contains__(self, name: object) -> bool:
        return name in self._entries

    def __iter__(self) -> Iterator[str]:
        return iter(sorted(self._entries))

    def __len__(self) -> int:
        return len(self._entries)

    def names(self) -> list[str]:
        return sorted(self._entries)

    def entries(self) -> list[Entry[T]]:
        return [self._entries[n] for n in self.names()]


KINDS = (
    "envs", "advantage_estimators", "losses", "optimizers", "rollout_proxies", "rollout_engines", "http_fronts",
    "job_clients", "doctor_checks",
)


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
        self.envs: Registry[Callable[..., Any]] = Registry("envs", "env")
        self.advantage_estimators: Registry[AdvantageEstimator] = Registry(
            "advantage_estimators", "advantage estimator"
        )
        self.losses: Registry[Loss] = Registry("losses", "loss")
        self.optimizers: Registry[OptimizerFactory] = Registry("optimizers", "optimizer")
        self.rollout_proxies: Registry[Callable[..., Any]] = Registry("rollout_proxies", "rollout proxy")
        self.rollout_engines: Registry[Callable[..., Any]] = Registry("rollout_engines", "rollout engine")
        self.http_fronts: Registry[Callable[..., Any]] = Registry("http_fronts", "HTTP front")
        self.job_clients: Registry[Callable[..., Any]] = Registry("job_clients", "job client")
        self.doctor_checks: Registry[Callable[[], Any]] = Registry("doctor_checks", "doctor check")
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
        register_specs((entry.options["spec"], entry.obj) for entry in self.envs.entries())

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
        for hook_name, kind in (
            ("opentinker_register_envs", "envs"),
            ("opentinker_register_advantage_estimators", "advantage_estimators"),
            ("opentinker_register_losses", "losses"),
            ("opentinker_register_optimizers", "optimizers"),
            ("opentinker_register_rollout_proxies", "rollout_proxies"),
            ("opentinker_register_rollout_engines", "rollout_engines"),
            ("opentinker_register_http_fronts", "http_fronts"),
            ("opentinker_register_job_clients", "job_clients"),
            ("opentinker_register_doctor_checks", "doctor_checks"),
        ):
            hook = getattr(self.pm.hook, hook_name)
            for impl in hook.get_hookimpls():  # registration order: the first one wins a name
                if id(impl.plugin) not in wanted:
                    continue
                dist, version = self._dist_of(impl.plugin)
                info = self._info_for(impl.plugin_name, dist, version)
                register = self._make_register(kind, dist, version, info)
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

    def _make_register(self, kind: str, dist: str, version: str | None, info: PluginInfo) -> Callable[..., None]:
        registry: Registry[Any] = getattr(self, kind)

        def add(name: str, obj: object, description: str | None, options: dict[str, Any]) -> None:
            if description is None:
                doc = (getattr(obj, "__doc__", None) or "").strip()
                description = doc.splitlines()[0] if doc else ""
            registry.add(Entry(kind, name, obj, dist, version, options, description))
            info.add(kind, name, options.get("spec"))

        def check_name(name: object) -> None:
            if not isinstance(name, str) or not NAME_RE.fullmatch(name):
                raise PluginError(
                    f"distribution {dist!r} registered {registry.label} name {name!r}; names are "
                    "lower-case letters, digits, '_', '-' and '.', starting with a letter"
                )

        def check_callable(name: str, obj: object) -> None:
            if not callable(obj):
                raise PluginError(
                    f"distribution {dist!r} registered {registry.label} {name!r} with a "
                    f"{type(obj).__name__}, which is not callable"
                )

        if kind == "envs":

            def register_env(spec: EnvSpec, factory: Callable[..., Any]) -> None:
                if not isinstance(spec, EnvSpec):
                    raise PluginError(
                        f"distribution {dist!r}: register(spec, factory) needs an EnvSpec as "
                        f"spec, got {type(spec).__name__}"
                    )
                check_callable(spec.id, factory)
                add(spec.id, factory, spec.description, {"spec": spec})

            return register_env
        if kind == "advantage_estimators":

            def register_estimator(
                name: str, estimator: Callable[..., Any], *, needs_critic: bool = False,
                description: str | None = None,
            ) -> None:
                check_name(name)
                check_callable(name, estimator)
                add(name, estimator, description, {"needs_critic": bool(needs_critic)})

            return register_estimator
        if kind == "losses":
            from tinker_core.contracts import LOSS_KINDS

            def register_loss(
                name: str, loss_fn: Callable[..., Any], *, kind: str = "policy",
                description: str | None = None, vanishes_at_zero_advantage: bool = False,
            ) -> None:
                check_name(name)
                check_callable(name, loss_fn)
                if kind not in LOSS_KINDS:
                    raise PluginError(
                        f"distribution {dist!r}: loss {name!r} has kind {kind!r}; "
                        f"kinds are {', '.join(LOSS_KINDS)}"
                    )
                if vanishes_at_zero_advantage and kind != "policy":
                    raise PluginError(
                        f"distribution {dist!r}: loss {name!r} of kind {kind!r} declares "
                        "vanishes_at_zero_advantage=True, which only a policy loss (one that "
                        "reads advantages) can; drop the flag or register it with kind='policy'"
                    )
                add(name, loss_fn, description, {"kind": kind, "vanishes_at_zero_advantage": bool(vanishes_at_zero_advantage)})

            return register_loss

        # optimizers, rollout proxies and engines, HTTP fronts, job clients, doctor checks: register(name, factory, *, description=None)
        def register_optimizer(
            name: str, factory: Callable[..., Any], *, description: str | None = None
        ) -> None:
            check_name(name)
            check_callable(name, factory)
            add(name, factory, description, {})

        return register_optimizer


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
    spec: EnvSpec = get_registry("envs").get(env_id).options["spec"]
    return spec


def make_env(env_id: str, **kwargs: Any) -> Any:
    """Build a registered environment: ``make_env("math/arithmetic-v0", digits=2)``."""
    entry = get_registry("envs").get(env_id)
    return build_env(entry.obj, entry.options["spec"], **kwargs)


def env_factory(env_id: str, **kwargs: Any) -> Callable[[], Any]:
    """A zero-argument builder of a registered environment, looked up once: calling
    ``env_factory("math/arithmetic-v0", digits=2)`` builds what ``make_env`` with the same
    arguments builds, without a registry look-up per env. A class that carries the registered spec
    as its ``env_spec`` (and no ``render_mode`` asked) is called directly: :func:`build_env`
    would attach nothing, and that is decided here once, not per env."""
    entry = get_registry("envs").get(env_id)
    factory, spec = entry.obj, entry.options["spec"]
    if isinstance(factory, type) and getattr(factory, "env_spec", None) is spec and "render_mode" not in kwargs:
        return functools.partial(factory, **kwargs)
    return functools.partial(build_env, factory, spec, **kwargs)


def get_advantage_estimator(name: str) -> Entry[AdvantageEstimator]:
    return get_registry("advantage_estimators").get(name)


def get_loss(name: str) -> Entry[Loss]:
    return get_registry("losses").get(name)


def get_optimizer(name: str) -> Entry[OptimizerFactory]:
    return get_registry("optimizers").get(name)


def get_rollout_proxy(name: str) -> Entry[Callable[..., Any]]:
    """The rollout proxy registered as ``name`` (``openai``: tinker-serve's)."""
    return get_registry("rollout_proxies").get(name)


def get_rollout_engine(name: str) -> Entry[Callable[..., Any]]:
    """The rollout engine registered as ``name`` (``hf``: tinker-algos' sampler; ``vllm``:
    tinker-engine-vllm's)."""
    return get_registry("rollout_engines").get(name)


def get_http_front(name: str) -> Entry[Callable[..., Any]]:
    """The HTTP front registered as ``name`` (``openai``: tinker-serve's; ``viewer``:
    tinker-client's; see :mod:`tinker_core.http_fronts`)."""
    return get_registry("http_fronts").get(name)


def get_job_client(name: str) -> Entry[Callable[..., Any]]:
    """The JobService client factory registered as ``name`` (``grpc``: tinker-client's)."""
    return get_registry("job_clients").get(name)
