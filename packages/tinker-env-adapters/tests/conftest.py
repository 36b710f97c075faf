"""Shared fixtures: plugin discovery limited to this distribution, through its real entry point."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tinker_core.registry import reset_plugins


@pytest.fixture
def adapters_only(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Discover plugins afresh, loading only tinker-env-adapters' entry point."""
    monkeypatch.setenv("OPENTINKER_LOAD_PLUGINS", "tinker-env-adapters")
    reset_plugins()
    yield
    reset_plugins()
