"""Run the conformance kit over everything the plugin registries hold."""

from __future__ import annotations

import importlib.util
import warnings
from collections.abc import Callable

from tinker_core.registry import get_registry
from tinker_core.testing._common import ConformanceError, ConformanceWarning
from tinker_core.testing.envs import check_env
from tinker_core.testing.estimators import check_advantage_estimator
from tinker_core.testing.losses import check_loss
from tinker_core.testing.multi_agent_envs import check_multi_agent_env
from tinker_core.testing.optimizers import check_optimizer

__all__ = ["check_all_registered", "registered_checks"]

_ALIASES = {
    "env": "envs", "envs": "envs",
    "advantage_estimator": "advantage_estimators", "advantage_estimators": "advantage_estimators",
    "estimator": "advantage_estimators", "estimators": "advantage_estimators",
    "loss": "losses", "losses": "losses",
    "optimizer": "optimizers", "optimizers": "optimizers",
}
_KINDS = ("envs", "advantage_estimators", "losses", "optimizers")
_TORCH_KINDS = ("losses", "optimizers")


def _kinds(kind: str | None) -> list[str]:
    if kind is None:
        return list(_KINDS)
    normal = _ALIASES.get(kind.replace("-", "_"))
    if normal is None:
        raise ValueError(f"unknown kind {kind!r}; kinds are {', '.join(_KINDS)} (or None for all)")
    return [normal]


def registered_checks(kind: str | None = None) -> list[tuple[str, str, Callable[[], None]]]:
    """``(kind, name, check)`` for every registered plugin of ``kind`` (None: every kind).

    Each ``check()`` runs the matching conformance check with the registry's options
    (multi-agent envs get :func:`check_multi_agent_env`). Handy to parametrize a test::

        @pytest.mark.parametrize("kind,name,check", registered_checks("envs"),
                                 ids=lambda x: x if isinstance(x, str) else "")
        def test_conformance(kind, name, check):
            check()
    """
    out: list[tuple[str, str, Callable[[], None]]] = []
    for k in _kinds(kind):
        for entry in get_registry(k).entries():
            name = entry.name
            fn: Callable[..., None]
            if k == "envs":
                fn = check_multi_agent_env if entry.spec.is_multi_agent else check_env
            else:
                fn = {  # type: ignore[assignment]
                    "advantage_estimators": check_advantage_estimator,
                    "losses": check_loss,
                    "optimizers": check_optimizer,
                }[k]
            out.append((k, name, _bind(fn, name)))
    return out


def _bind(fn: Callable[..., None], name: str) -> Callable[[], None]:
    def run() -> None:
        fn(name)

    run.__name__ = f"{fn.__name__}[{name}]"
    return run


def check_all_registered(kind: str | None = None, *, raise_on_failure: bool = True) -> list[ConformanceError]:
    """Check every registered plugin of ``kind`` (``envs``, ``advantage_estimators``, ``losses``,
    ``optimizers``; None for all) and collect the failures.

    Losses and optimizers need torch: without it they are skipped with a
    :class:`ConformanceWarning` when ``kind`` is None, and fail when asked for by ``kind``.

    Returns:
        the failures (empty when everything conforms).

    Raises:
        ConformanceError: when ``raise_on_failure`` and anything failed; its message lists every
            failure and ``.failures`` holds them.
    """
    kinds = _kinds(kind)
    have_torch = importlib.util.find_spec("torch") is not None
    failures: list[ConformanceError] = []
    for k in kinds:
        checks = registered_checks(k)
        if k in _TORCH_KINDS and not have_torch and kind is None and checks:
            warnings.warn(f"torch is not installed: skipped checking {len(checks)} registered {k}",
                          ConformanceWarning, stacklevel=2)
            continue
        for _, _, check in checks:
            try:
                check()
            except ConformanceError as e:
                failures.append(e)
    if failures and raise_on_failure:
        lines = [f"{len(failures)} registered plugin(s) failed the conformance kit:"]
        lines += [f"- {str(e).replace(chr(10), chr(10) + '  ')}" for e in failures]
        err = ConformanceError("\n".join(lines), plugin="registered plugins")
        err.failures = failures  # type: ignore[attr-defined]
        raise err
    return failures
