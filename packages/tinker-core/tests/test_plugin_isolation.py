"""A plugin that fails to import is reported and skipped; envs are gymnasium envs too.

The broken plugin is a real installed distribution: a ``.dist-info`` with an ``opentinker``
entry point, on ``sys.path`` in a temporary directory, whose module raises on import.
"""

from __future__ import annotations

import logging
import os
import subprocess
import sys
from pathlib import Path

import gymnasium as gym
import pytest

import tinker_core
import tinker_core.registry
from tinker_core.gymnasium_envs import register_specs


def install_broken_plugin(root: Path, error: str = "import no_such_module_for_opentinker_tests") -> Path:
    """A distribution ``broken-plugin`` (version 0.3) whose entry point module runs ``error``."""
    info = root / "broken_plugin-0.3.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: broken-plugin\nVersion: 0.3\n")
    (info / "entry_points.txt").write_text("[opentinker]\nbroken = broken_plugin_module\n")
    (root / "broken_plugin_module.py").write_text(error + "\n")
    return root


@pytest.fixture
def broken(tmp_path, monkeypatch):
    monkeypatch.syspath_prepend(str(install_broken_plugin(tmp_path)))
    yield
    sys.modules.pop("broken_plugin_module", None)


def test_a_plugin_that_fails_to_import_is_listed_with_its_error_and_the_others_still_work(broken, caplog):
    with caplog.at_level(logging.WARNING, logger="tinker_core.registry"):
        env = tinker_core.make_env("echo/echo-v0")  # a healthy plugin's env
        assert env.reset(seed=0)[0].startswith("Say: ")
        tinker_core.make_env("echo/countdown-v0")  # the registry is loaded once: no second warning
    (failed,) = tinker_core.registry.plugin_system().failures
    assert (failed.name, failed.distribution, failed.version) == ("broken", "broken-plugin", "0.3")
    assert failed.error == "ModuleNotFoundError: No module named 'no_such_module_for_opentinker_tests'"
    assert failed.to_dict()["error"] == failed.error and failed.registers == {}
    listed = {p.distribution: p for p in tinker_core.registry.list_plugins()}
    assert listed["broken-plugin"].error and listed["tinker-env-echo"].error is None
    warnings = [r.getMessage() for r in caplog.records if r.name == "tinker_core.registry"]
    assert len(warnings) == 1
    assert "'broken'" in warnings[0] and "'broken-plugin'" in warnings[0] and "No module named" in warnings[0]


def test_a_plugin_raising_any_exception_on_import_is_skipped_too(tmp_path, monkeypatch):
    monkeypatch.syspath_prepend(str(install_broken_plugin(tmp_path, "raise RuntimeError('half installed')")))
    try:
        assert "echo/echo-v0" in tinker_core.registry.get_registry("envs")
        (failed,) = tinker_core.registry.plugin_system().failures
        assert failed.error == "RuntimeError: half installed"
    finally:
        sys.modules.pop("broken_plugin_module", None)


def test_loading_the_registry_registers_every_single_agent_env_with_gymnasium():
    tinker_core.registry.get_registry("envs")
    env = gym.make("echo/countdown-v0")
    obs, _ = env.reset(seed=0)
    assert isinstance(obs, str) and env.unwrapped.env_spec.id == "echo/countdown-v0"
    assert "echo/call-response-v0" not in gym.registry  # multi-agent: not a gymnasium env


def test_register_specs_leaves_known_ids_and_ids_gymnasium_cannot_parse():
    from tinker_core import EnvSpec

    tinker_core.registry.get_registry("envs")
    before = gym.registry["echo/echo-v0"]
    assert register_specs([(EnvSpec(id="echo/echo-v0"), object), (EnvSpec(id="my.ns/thing-v0"), object)]) == []
    assert gym.registry["echo/echo-v0"] is before and "my.ns/thing-v0" not in gym.registry


@pytest.mark.parametrize(
    "code",
    [
        # gymnasium's convention: import the package (gym.register_envs only keeps the import)
        "import gymnasium as gym, tinker_core.registry\n"
        "import tinker_env_echo\n"
        "gym.register_envs(tinker_env_echo)\n"
        "assert 'echo/echo-v0' in gym.registry and not tinker_core.registry.plugin_system().is_loaded\n"
        "assert gym.make('echo/countdown-v0').reset(seed=1)[0].startswith('Count down')\n",
        # gymnasium imports the package named before the ':' by itself
        "import gymnasium as gym\n"
        "assert gym.make('tinker_env_echo:echo/echo-v0').reset(seed=0)[0].startswith('Say: ')\n",
    ],
    ids=["import", "module-prefix"],
)
def test_an_env_package_registers_its_envs_with_gymnasium_on_import(code):
    env = {k: v for k, v in os.environ.items() if not k.startswith("OPENTINKER_")}
    out = subprocess.run([sys.executable, "-c", code + "print('ok')\n"], capture_output=True, text=True, env=env)
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr


def test_register_package_does_nothing_while_the_registry_discovers_plugins(monkeypatch):
    from tinker_core import gymnasium_envs

    def no_scan(**kwargs):
        raise AssertionError("entry points scanned during discovery")

    monkeypatch.setattr(gymnasium_envs.metadata, "entry_points", no_scan)
    with gymnasium_envs.plugin_discovery():  # discovery imports each env package; the registry registers them after
        assert gymnasium_envs.register_package("tinker_env_echo") == []
    with pytest.raises(AssertionError, match="scanned"):
        gymnasium_envs.register_package("tinker_env_echo")
