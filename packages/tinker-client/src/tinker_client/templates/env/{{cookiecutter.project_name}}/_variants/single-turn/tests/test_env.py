"""Tests of ``{{ cookiecutter.__env_id }}``: the conformance kit, then the rules of the task."""

from __future__ import annotations

import pytest
from tinker_core import env_spec, get_registry
from tinker_core import check_env

from {{ cookiecutter.__module }}.env import SPEC, {{ cookiecutter.__class }}Env

ENV_ID = "{{ cookiecutter.__env_id }}"


def test_the_env_passes_the_conformance_kit():
    check_env({{ cookiecutter.__class }}Env)


def test_the_installed_plugin_registers_the_env():
    # Goes through the entry point in pyproject.toml: fails until `pip install -e .`
    entry = get_registry("envs").get(ENV_ID)
    assert entry.distribution == "{{ cookiecutter.project_name }}"
    assert env_spec(ENV_ID) == SPEC
    check_env(ENV_ID)


def test_the_right_answer_earns_1_and_anything_else_0():
    env = {{ cookiecutter.__class }}Env(words=["stone"])
    observation, info = env.reset(seed=0)
    assert observation == "Reverse: stone\n"
    assert info["target"] == "enots\n"
    assert env.step("enots\n")[:4] == ("", 1.0, True, False)
    env.reset(seed=0)
    assert env.step("stone")[1] == 0.0


def test_the_same_seed_poses_the_same_task():
    tasks = [{{ cookiecutter.__class }}Env().reset(seed=seed)[0] for seed in (3, 3)]
    assert tasks[0] == tasks[1]


def test_a_step_after_the_end_raises():
    env = {{ cookiecutter.__class }}Env()
    env.reset(seed=0)
    env.step("x")
    with pytest.raises(RuntimeError, match="call reset"):
        env.step("x")


def test_bad_arguments_are_refused():
    with pytest.raises(ValueError, match="words"):
        {{ cookiecutter.__class }}Env(words=[])
