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


def test_the_train_extra_brings_the_engine_its_writers_and_the_builtin_envs():
    requirements = [Requirement(r) for r in distribution("opentinker").requires or []]
    train = {r.name: r for r in requirements if r.marker is not None and r.marker.evaluate({"extra": "train"})}
    assert set(train) == {"tinker-client", "tinker-algos", "tinker-env-echo", "tinker-env-math", "tinker-env-games"}
    assert train["tinker-algos"].extras == {"tensorboard", "plot"}
