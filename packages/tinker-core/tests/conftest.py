from __future__ import annotations

import pytest

import tinker_core
import tinker_core.registry


@pytest.fixture(autouse=True)
def fresh_plugins(monkeypatch: pytest.MonkeyPatch):
    """Each test discovers plugins anew, with the plugin environment variables unset."""
    for var in ("OPENTINKER_LOAD_PLUGINS", "OPENTINKER_DISABLE_PLUGIN_AUTOLOAD", "OPENTINKER_DEBUG_PLUGINS"):
        monkeypatch.delenv(var, raising=False)
    tinker_core.registry.reset_plugins()
    yield
    tinker_core.registry.reset_plugins()
