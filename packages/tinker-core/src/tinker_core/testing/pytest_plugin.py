"""pytest fixtures of the conformance kit, loaded through tinker-core's ``pytest11`` entry point.

Every fixture returns the matching function of :mod:`tinker_core.testing`, so a plugin's tests
need no import::

    def test_my_env(opentinker_check_env):
        opentinker_check_env("mine/task-v0")

    def test_registered(opentinker_registry, opentinker_check_all_registered):
        assert "mine/task-v0" in opentinker_registry("envs")
        opentinker_check_all_registered("envs")

``opentinker_registry`` forgets loaded plugins before and after the test
(:func:`tinker_core.registry.reset_plugins`), so environment switches such as ``OPENTINKER_LOAD_PLUGINS``
set with ``monkeypatch`` take effect, and plugins a test adds with
:func:`tinker_core.registry.register_plugin` do not leak into other tests.

This module is loaded into every pytest run where tinker-core is installed: it imports nothing
heavy (no numpy, gymnasium or torch) until a fixture is used.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest


@pytest.fixture
def opentinker_check_env() -> Callable[..., None]:
    """:func:`tinker_core.testing.check_env`."""
    from tinker_core.testing import check_env

    return check_env


@pytest.fixture
def opentinker_check_multi_agent_env() -> Callable[..., None]:
    """:func:`tinker_core.testing.check_multi_agent_env`."""
    from tinker_core.testing import check_multi_agent_env

    return check_multi_agent_env


@pytest.fixture
def opentinker_check_advantage_estimator() -> Callable[..., None]:
    """:func:`tinker_core.testing.check_advantage_estimator`."""
    from tinker_core.testing import check_advantage_estimator

    return check_advantage_estimator


@pytest.fixture
def opentinker_check_rollout_engine() -> Callable[..., list[str]]:
    """:func:`tinker_core.testing.check_rollout_engine`."""
    from tinker_core.testing import check_rollout_engine

    return check_rollout_engine


@pytest.fixture
def opentinker_check_loss() -> Callable[..., None]:
    """:func:`tinker_core.testing.check_loss` (the test is skipped, with the reason, without torch)."""
    pytest.importorskip("torch", reason="torch not installed: check_loss needs it (install tinker-algos)")
    from tinker_core.testing import check_loss

    return check_loss


@pytest.fixture
def opentinker_check_optimizer() -> Callable[..., None]:
    """:func:`tinker_core.testing.check_optimizer` (the test is skipped, with the reason, without torch)."""
    pytest.importorskip("torch", reason="torch not installed: check_optimizer needs it (install tinker-algos)")
    from tinker_core.testing import check_optimizer

    return check_optimizer


@pytest.fixture
def opentinker_check_all_registered() -> Callable[..., Any]:
    """:func:`tinker_core.testing.check_all_registered`."""
    from tinker_core.testing import check_all_registered

    return check_all_registered


@pytest.fixture
def opentinker_registry() -> Iterator[Callable[[str], Any]]:
    """:func:`tinker_core.registry.get_registry`, with plugin discovery reset before and after the test."""
    from tinker_core.registry import get_registry, reset_plugins

    reset_plugins()
    try:
        yield get_registry
    finally:
        reset_plugins()
