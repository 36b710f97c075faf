"""What `opentinker new` generates is installable and publishable as its README says."""

from __future__ import annotations

import tomllib

import pytest

import tinker_core
from tinker_client.new import KINDS, render, tinker_version_range

RANGE = tinker_version_range(tinker_core.__version__)


@pytest.mark.parametrize("kind", KINDS)
def test_the_train_extra_brings_the_opentinker_command_and_the_engine(kind, tmp_path):
    project = render(kind, "pack-check", output_dir=tmp_path)
    meta = tomllib.loads((project / "pyproject.toml").read_text())
    # opentinker[train] = tinker-client (the command) + tinker-algos + the built-in envs
    assert meta["project"]["optional-dependencies"]["train"] == [f"opentinker[train]{RANGE}"]
    assert f"tinker-client{RANGE}" in meta["dependency-groups"]["dev"]  # `opentinker plugins` in dev


@pytest.mark.parametrize("kind", KINDS)
def test_the_readme_publishes_with_a_command_uv_accepts(kind, tmp_path):
    readme = (render(kind, "pack-check", output_dir=tmp_path) / "README.md").read_text()
    assert "--index testpypi" not in readme  # no index of that name is configured: uv refused it
    assert "uv publish --publish-url https://test.pypi.org/legacy/" in readme
    assert 'pip install -e ".[train]"' in readme
