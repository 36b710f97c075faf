"""A separately written env package, installed with `uv pip install`, is a first-class plugin."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

PYPROJECT = """
[project]
name = "tinker-env-shout"
version = "1.2.3"
requires-python = ">=3.11"
dependencies = ["tinker-core"]

[project.entry-points.opentinker]
shout = "tinker_env_shout.plugin"

[build-system]
requires = ["uv_build>=0.9,<0.14"]
build-backend = "uv_build"
"""

PLUGIN = '''
from tinker_core import EnvSpec, TextEnv, hookimpl

SPEC = EnvSpec(id="shout/upper-v0", description="Shout the word back.", max_turns=1)


class UpperEnv(TextEnv):
    env_spec = SPEC

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.word = ["quiet", "calm", "soft"][int(self.np_random.integers(3))]
        return f"Shout: {self.word}\\n", {}

    def step(self, action):
        return "", float(action.strip() == self.word.upper()), True, False, {}


@hookimpl
def opentinker_register_envs(register):
    register(SPEC, UpperEnv)
'''


@pytest.fixture(scope="module")
def venv(tmp_path_factory) -> Path:
    uv = shutil.which("uv")
    if uv is None:
        pytest.skip("uv is not on PATH; the README's set-up installs it")
    tmp = tmp_path_factory.mktemp("thirdparty")
    pkg = tmp / "tinker-env-shout"
    (pkg / "src" / "tinker_env_shout").mkdir(parents=True)
    (pkg / "pyproject.toml").write_text(textwrap.dedent(PYPROJECT))
    (pkg / "README.md").write_text("# tinker-env-shout\n")
    (pkg / "src" / "tinker_env_shout" / "__init__.py").write_text("")
    (pkg / "src" / "tinker_env_shout" / "plugin.py").write_text(PLUGIN)
    env = {k: v for k, v in os.environ.items() if not k.startswith("UV_") and k != "VIRTUAL_ENV"}
    venv = tmp / ".venv"
    subprocess.run([uv, "venv", "-q", "--python", sys.executable, str(venv)], check=True, env=env)
    subprocess.run(
        [uv, "pip", "install", "-q", "--python", str(venv / "bin" / "python"), "-e", str(ROOT / "packages" / "tinker-core"),
         "-e", str(ROOT / "packages" / "tinker-client"), str(pkg)],
        check=True, env=env, timeout=600,
    )
    return venv


def test_the_installed_package_appears_in_opentinker_plugins(venv):
    result = subprocess.run([str(venv / "bin" / "opentinker"), "plugins", "--json"], capture_output=True, text=True, check=True)
    plugins = {p["distribution"]: p for p in json.loads(result.stdout)}
    assert plugins["tinker-env-shout"]["version"] == "1.2.3"
    assert plugins["tinker-env-shout"]["registers"] == {"envs": ["shout/upper-v0"]}


def test_the_installed_env_passes_check_env(venv):
    code = (
        "from tinker_core.testing import check_env\n"
        "import tinker_core\n"
        "check_env('shout/upper-v0')\n"
        "env = tinker_core.make_env('shout/upper-v0'); env.reset(seed=0)\n"
        "assert env.step(env.word.upper())[1] == 1.0\n"
        "print('ok')\n"
    )
    result = subprocess.run([str(venv / "bin" / "python"), "-c", code], capture_output=True, text=True)
    assert result.returncode == 0 and result.stdout.strip() == "ok", result.stderr
