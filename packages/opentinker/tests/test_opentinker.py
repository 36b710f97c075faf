"""The umbrella distribution: one version with its packages, and extras that pin their series."""

from __future__ import annotations

import re
from importlib.metadata import distribution

from packaging.requirements import Requirement

import opentinker
import tinker_core


def test_the_version_is_the_release_of_the_packages_it_installs():
    assert distribution("opentinker").version == opentinker.__version__ == tinker_core.__version__


def test_every_sibling_requirement_is_a_range_over_this_minor_series():
    major, minor = map(int, re.match(r"(\d+)\.(\d+)", opentinker.__version__).groups())
    series = {f">={major}.{minor}", f"<{major}.{minor + 1}"}
    requirements = [Requirement(r) for r in distribution("opentinker").requires or []]
    siblings = [r for r in requirements if r.name.startswith("tinker-")]
    assert {r.name for r in siblings} >= {"tinker-core", "tinker-client", "tinker-algos", "tinker-scheduler",
                                           "tinker-serve", "tinker-env-echo", "tinker-env-math", "tinker-env-games"}
    for requirement in siblings:
        assert {str(s) for s in requirement.specifier} == series, requirement


def test_the_train_extra_brings_the_engine_its_writers_hub_data_and_the_builtin_envs():
    requirements = [Requirement(r) for r in distribution("opentinker").requires or []]
    train = {r.name: r for r in requirements if r.marker is not None and r.marker.evaluate({"extra": "train"})}
    assert set(train) == {"tinker-client", "tinker-algos", "tinker-env-echo", "tinker-env-math", "tinker-env-games"}
    assert train["tinker-algos"].extras == {"tensorboard", "plot", "hub"}


def test_the_front_door_api_is_importable_without_the_engine():
    """``import opentinker`` loads no torch and no engine: train, evaluate, load_policy load it on call."""
    import subprocess
    import sys

    code = ("import sys, opentinker; print(callable(opentinker.train), callable(opentinker.evaluate), "
            "callable(opentinker.load_policy), sorted(m for m in sys.modules if m.split('.')[0] in ('torch', 'tinker_algos')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.split() == ["True", "True", "True", "[]"]


def test_keyword_overrides_replace_top_level_fields():
    job = opentinker.job_config({"name": "a", "algorithm": {"name": "sft", "steps": 1}}, check_plugins=False, seed=7, name="b")
    assert (job.name, job.seed, job.algorithm.steps) == ("b", 7, 1)
    assert opentinker.job_config(job, check_plugins=False, seed=8).seed == 8
    assert job.seed == 7  # the JobConfig given is not changed


def test_a_yaml_path_is_loaded(tmp_path):
    (tmp_path / "job.yaml").write_text("name: from-file\nalgorithm: {name: sft, steps: 1}\n")
    assert opentinker.job_config(tmp_path / "job.yaml", check_plugins=False, seed=2).model_dump(include={"name", "seed"}) == {"name": "from-file", "seed": 2}
    assert opentinker.job_config(str(tmp_path / "job.yaml"), check_plugins=False).name == "from-file"


def test_a_bad_override_is_a_config_error_naming_it():
    import pytest

    from tinker_core.errors import ConfigError

    with pytest.raises(ConfigError, match="did you mean 'seed'"):
        opentinker.job_config({"algorithm": {"name": "sft"}}, check_plugins=False, sed=1)
    with pytest.raises(TypeError):
        opentinker.job_config(42)


def test_without_the_train_extra_the_functions_say_how_to_install_it(monkeypatch):
    import sys

    import pytest

    for name in ("tinker_algos", "tinker_algos.run.job", "tinker_algos.commands.evaluation", "tinker_algos.run.progress"):
        monkeypatch.setitem(sys.modules, name, None)
    for call in (lambda: opentinker.train({"algorithm": {"name": "sft", "steps": 1}}, run_dir="unused"),
                 lambda: opentinker.evaluate("unused"), lambda: opentinker.load_policy("unused")):
        with pytest.raises(opentinker.MissingExtraError, match=r'pip install "opentinker\[train\]"'):
            call()
