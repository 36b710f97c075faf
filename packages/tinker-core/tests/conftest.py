from __future__ import annotations

import os

import pytest
from hypothesis import settings

import tinker_core
import tinker_core.registry

# The fuzzers run a fixed sequence of examples by default, so a run (CI's too) does not depend on
# luck; HYPOTHESIS_PROFILE=explore draws new examples each run to look for new failures.
settings.register_profile("fixed", derandomize=True, deadline=None)  # no time limit: speed is measured by bench/, not asserted
settings.register_profile("explore", derandomize=False, deadline=None)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "fixed"))


@pytest.fixture(autouse=True)
def fresh_plugins(monkeypatch: pytest.MonkeyPatch):
    """Each test discovers plugins anew, with the plugin environment variables unset."""
    for var in ("OPENTINKER_LOAD_PLUGINS", "OPENTINKER_DISABLE_PLUGIN_AUTOLOAD", "OPENTINKER_DEBUG_PLUGINS"):
        monkeypatch.delenv(var, raising=False)
    tinker_core.registry.reset_plugins()
    yield
    tinker_core.registry.reset_plugins()
