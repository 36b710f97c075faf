"""The install command ``opentinker new`` prints works before a release: in a fresh venv holding
tinker-core from a source directory and tinker-client from a locally built wheel (no OpenTinker
package on the index), the printed ``test:`` line, run as printed in a shell, installs the
generated env package with its dev group and passes its tests. After a release (packages from
the index) the line is the plain one: ``local_sources()`` adds nothing for a package that has
no ``file://`` origin.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ROOT / "packages"


def run(args: list[str | Path], *, cwd: Path | None = None, env: dict[str, str] | None = None) -> str:
    result = subprocess.run([str(a) for a in args], cwd=cwd, env=env, capture_output=True, text=True, timeout=900,
                            stdin=subprocess.DEVNULL)
    assert result.returncode == 0, f"{args} exited {result.returncode}\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}"
    return result.stdout


def test_the_printed_test_command_installs_and_passes_before_a_release(tmp_path):
    uv = shutil.which("uv")
    if uv is None:
        pytest.skip("uv is not on PATH; the README's set-up installs it")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("VIRTUAL_ENV", "UV_PROJECT", "UV_PYTHON", "CONDA_PREFIX"))}  # nox sets UV_PYTHON to its venv
    wheels = tmp_path / "wheels"
    run([uv, "build", "-q", "--wheel", "--out-dir", wheels, PACKAGES / "tinker-client"], env=env)
    venv = tmp_path / "venv"
    run([uv, "venv", "-q", "--python", sys.executable, venv], env=env)
    run([uv, "pip", "install", "-q", "--python", venv / "bin" / "python", PACKAGES / "tinker-core",
         *wheels.glob("tinker_client-*.whl")], env=env)
    out = run([venv / "bin" / "opentinker", "new", "env", "--name", "word-count", "--no-input", "--output", tmp_path / "new"],
              env=env)
    [line] = [x for x in out.splitlines() if x.startswith("test:  ")]
    command = line.removeprefix("test:  ")
    assert f"--find-links {wheels}" in command and str(PACKAGES / "tinker-core") in command, command
    tests = run(["bash", "-c", command], cwd=tmp_path, env={k: v for k, v in env.items() if k != "VIRTUAL_ENV"})
    assert " passed" in tests and " failed" not in tests, tests


def test_packages_from_an_index_add_nothing_and_source_trees_their_path():
    from tinker_client.new import local_sources

    assert local_sources(("pytest",)) == []  # installed from the index: no file:// origin
    # in the workspace tinker-core and tinker-client are editable source directories
    assert local_sources() == [str(PACKAGES / "tinker-core"), str(PACKAGES / "tinker-client")]
