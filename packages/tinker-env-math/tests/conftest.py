"""Shared fixtures: plugin discovery limited to this distribution, through its real entry point."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tinker_core.registry import reset_plugins


@pytest.fixture
def math_plugin_only(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Discover plugins afresh, loading only tinker-env-math's entry point."""
    monkeypatch.setenv("OPENTINKER_LOAD_PLUGINS", "tinker-env-math")
    reset_plugins()
    yield
    reset_plugins()


# hypothesis: no time limit per example (speed is measured by bench/, never asserted in a test)
from hypothesis import settings as _hypothesis_settings  # noqa: E402

_hypothesis_settings.register_profile("no-deadline", deadline=None)
_hypothesis_settings.load_profile("no-deadline")
