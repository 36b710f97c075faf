"""What the plugin registries hold and the ``register`` callbacks that fill them.

Each kind of plugin has an entry class that types what it declares when registered
(:class:`EnvEntry`: the spec; :class:`EstimatorEntry`: ``needs_critic``; :class:`LossEntry`: the
loss kind; the others a plain :class:`Entry`), and a registrar: the callable object a plugin's
``opentinker_register_*`` hook receives, implementing that hook's ``register`` Protocol of
:mod:`tinker_core.hookspecs`. :mod:`tinker_core.registry` discovers the plugins and calls them.
"""

from __future__ import annotations

import re
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from tinker_core.env import UNAVAILABLE, EnvSpec
from tinker_core.errors import DuplicateNameError, PluginError, UnknownNameError

if TYPE_CHECKING:
    from tinker_core import hookspecs
    from tinker_core.contracts import AdvantageEstimator, Loss, LossKind

NAME_RE = re.compile(r"^[a-z][a-z0-9_.-]*$")

T = TypeVar("T")
E = TypeVar("E", bound="Entry[Any]")


@dataclass(frozen=True)
class Entry(Generic[T]):
    """One registered thing: its name, the object and who registered it. ``kind`` is the
    registry's (``losses``, ``envs``...); what a kind declares at registration is typed on its
    own entry class: :class:`EnvEntry`, :class:`EstimatorEntry`, :class:`LossEntry`."""

    kind: str
    name: str
    obj: T
    distribution: str
    version: str | None = None
    description: str = ""

    def _declared(self) -> dict[str, Any]:
        return {}

    @property
    def options(self) -> dict[str, Any]:
        """Deprecated (removed in the next release): what the entry declares as the old dict
        (``{"kind": ...}``); read the typed attributes (``entry.loss_kind``, ``entry.needs_critic``,
        ``entry.spec``) instead."""
        warnings.warn(
            f"Entry.options is deprecated: read the typed attributes of {type(self).__name__} "
            "(loss_kind, vanishes_at_zero_advantage, needs_critic, spec)", DeprecationWarning, stacklevel=2,
        )
        return self._declared()


@dataclass(frozen=True)
class EnvEntry(Entry[Callable[..., Any]]):
    """An env: its factory (``obj``) and its :class:`EnvSpec` (``spec.id`` is the name)."""

    spec: EnvSpec = field(kw_only=True)

    def _declared(self) -> dict[str, Any]:
        return {"spec": self.spec}


@dataclass(frozen=True)
class EstimatorEntry(Entry["AdvantageEstimator"]):
    """An advantage estimator and whether it reads the critic's values (``needs_critic``)."""

    needs_critic: bool = field(default=False, kw_only=True)

    def _declared(self) -> dict[str, Any]:
        return {"needs_critic": self.needs_critic}


@dataclass(frozen=True)
class LossEntry(Entry["Loss"]):
    """A loss, its :data:`~tinker_core.contracts.LossKind` and whether it promises a zero loss and
    gradient where the advantage is 0 (policy losses only)."""

    loss_kind: LossKind = field(kw_only=True)
    vanishes_at_zero_advantage: bool = field(default=False, kw_only=True)

    def _declared(self) -> dict[str, Any]:
        return {"kind": self.loss_kind, "vanishes_at_zero_advantage": self.vanishes_at_zero_advantage}


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


class Registry(Generic[E]):
    """Name -> entry (an :class:`Entry` or its typed kind) for one kind; refuses duplicates,
    suggests on unknown names."""

    def __init__(self, kind: str, label: str) -> None:
        self.kind = kind
        self.label = label  # how errors call one of these: "env", "advantage estimator"...
        self._entries: dict[str, E] = {}

    def add(self, entry: E) -> None:
        prev = self._entries.get(entry.name)
        if prev is not None:
            raise DuplicateNameError(
                f"{self.label} {entry.name!r} is registered twice: by distribution "
                f"{prev.distribution!r} and by distribution {entry.distribution!r}; "
                "uninstall one of them or limit loading with OPENTINKER_LOAD_PLUGINS"
            )
        self._entries[entry.name] = entry

    def get(self, name: str) -> E:
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

    def entries(self) -> list[E]:
        return [self._entries[n] for n in self.names()]


class Registrar:
    """What every ``register`` callback shares: the registry it fills, the distribution that
    registers (errors name it), the checks of a name and an object, and the entry's description
    (the object's first docstring line unless given)."""

    def __init__(self, registry: Registry[Any], dist: str, version: str | None, info: PluginInfo) -> None:
        self.registry = registry
        self.dist = dist
        self.version = version
        self.info = info

    def check(self, name: object, obj: object) -> None:
        if not isinstance(name, str) or not NAME_RE.fullmatch(name):
            raise PluginError(
                f"distribution {self.dist!r} registered {self.registry.label} name {name!r}; names are "
                "lower-case letters, digits, '_', '-' and '.', starting with a letter"
            )
        self.check_callable(name, obj)

    def check_callable(self, name: str, obj: object) -> None:
        if not callable(obj):
            raise PluginError(
                f"distribution {self.dist!r} registered {self.registry.label} {name!r} with a "
                f"{type(obj).__name__}, which is not callable"
            )

    def common(self, name: str, obj: Any, description: str | None) -> dict[str, Any]:
        """The fields every entry has: ``Entry(**common, ...)``."""
        if description is None:
            doc = (getattr(obj, "__doc__", None) or "").strip()
            description = doc.splitlines()[0] if doc else ""
        return {
            "kind": self.registry.kind, "name": name, "obj": obj, "distribution": self.dist,
            "version": self.version, "description": description,
        }

    def add(self, entry: Entry[Any], spec: EnvSpec | None = None) -> None:
        self.registry.add(entry)
        self.info.add(self.registry.kind, entry.name, spec)


class EnvRegistrar(Registrar):
    """``register(spec, factory)``: :class:`~tinker_core.hookspecs.EnvRegister`."""

    def __call__(self, spec: EnvSpec, factory: Callable[..., Any]) -> None:
        if not isinstance(spec, EnvSpec):
            raise PluginError(
                f"distribution {self.dist!r}: register(spec, factory) needs an EnvSpec as "
                f"spec, got {type(spec).__name__}"
            )
        self.check_callable(spec.id, factory)
        self.add(EnvEntry(**self.common(spec.id, factory, spec.description), spec=spec), spec)


class EstimatorRegistrar(Registrar):
    """``register(name, estimator, *, needs_critic=False, description=None)``:
    :class:`~tinker_core.hookspecs.EstimatorRegister`."""

    def __call__(
        self, name: str, estimator: AdvantageEstimator, *, needs_critic: bool = False, description: str | None = None
    ) -> None:
        self.check(name, estimator)
        self.add(EstimatorEntry(**self.common(name, estimator, description), needs_critic=bool(needs_critic)))


class LossRegistrar(Registrar):
    """``register(name, loss_fn, *, kind="policy", description=None, vanishes_at_zero_advantage=False)``:
    :class:`~tinker_core.hookspecs.LossRegister`."""

    def __call__(
        self, name: str, loss_fn: Loss, *, kind: LossKind = "policy", description: str | None = None,
        vanishes_at_zero_advantage: bool = False,
    ) -> None:
        from tinker_core.contracts import LOSS_KINDS

        self.check(name, loss_fn)
        if kind not in LOSS_KINDS:
            raise PluginError(
                f"distribution {self.dist!r}: loss {name!r} has kind {kind!r}; kinds are {', '.join(LOSS_KINDS)}"
            )
        if vanishes_at_zero_advantage and kind != "policy":
            raise PluginError(
                f"distribution {self.dist!r}: loss {name!r} of kind {kind!r} declares "
                "vanishes_at_zero_advantage=True, which only a policy loss (one that "
                "reads advantages) can; drop the flag or register it with kind='policy'"
            )
        self.add(LossEntry(
            **self.common(name, loss_fn, description), loss_kind=kind,
            vanishes_at_zero_advantage=bool(vanishes_at_zero_advantage),
        ))


class FactoryRegistrar(Registrar):
    """``register(name, factory, *, description=None)``: optimizers
    (:class:`~tinker_core.hookspecs.OptimizerRegister`), rollout proxies and engines, HTTP fronts,
    job clients and doctor checks."""

    def __call__(self, name: str, factory: Callable[..., Any], *, description: str | None = None) -> None:
        self.check(name, factory)
        self.add(Entry(**self.common(name, factory, description)))


REGISTRARS: dict[str, type[Registrar]] = {
    "envs": EnvRegistrar,
    "advantage_estimators": EstimatorRegistrar,
    "losses": LossRegistrar,
    "optimizers": FactoryRegistrar,
    "rollout_proxies": FactoryRegistrar,
    "rollout_engines": FactoryRegistrar,
    "http_fronts": FactoryRegistrar,
    "job_clients": FactoryRegistrar,
    "doctor_checks": FactoryRegistrar,
}
"""Registry kind -> the registrar its hook's ``register`` is; the hook is ``opentinker_register_<kind>``."""

if TYPE_CHECKING:

    def _implements(
        env: EnvRegistrar, estimator: EstimatorRegistrar, loss: LossRegistrar, factory: FactoryRegistrar
    ) -> tuple[hookspecs.EnvRegister, hookspecs.EstimatorRegister, hookspecs.LossRegister, hookspecs.OptimizerRegister]:
        """Each registrar implements its hook's ``register`` Protocol (``mypy --strict`` checks)."""
        return env, estimator, loss, factory
