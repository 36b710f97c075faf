"""Tests of ``{{ cookiecutter.__env_id }}``: the conformance kit, then the rules of the task."""

from __future__ import annotations

import pytest
from tinker_core import env_spec, get_registry
from tinker_core import check_env

from {{ cookiecutter.__module }}.env import SPEC, {{ cookiecutter.__class }}Env

ENV_ID = "{{ cookiecutter.__env_id }}"


def spell_the_word(observation, info):
    """A policy that plays perfectly: info["target"] is the ideal next action."""
    return info["target"]


def test_the_env_passes_the_conformance_kit():
    check_env({{ cookiecutter.__class }}Env)
    check_env({{ cookiecutter.__class }}Env, actions=spell_the_word)  # whole episodes, too


def test_the_installed_plugin_registers_the_env():
    # Goes through the entry point in pyproject.toml: fails until `pip install -e .`
    entry = get_registry("envs").get(ENV_ID)
    assert entry.distribution == "{{ cookiecutter.project_name }}"
    assert env_spec(ENV_ID) == SPEC
    check_env(ENV_ID)


def test_spelling_the_whole_word_earns_1():
    env = {{ cookiecutter.__class }}Env(words=["abc"])
    assert env.reset(seed=0) == ("Spell abc, one letter per turn.\n", {"target": "a\n"})
    rewards = []
    for letter, shown in zip("abc", ["a\n", "ab\n", "abc\n"], strict=True):
        observation, reward, terminated, truncated, _ = env.step(letter + "\n")
        assert observation == shown and not truncated
        rewards.append(reward)
    assert terminated
    assert sum(rewards) == pytest.approx(1.0)


def test_a_wrong_letter_ends_the_episode_with_the_letters_so_far():
    env = {{ cookiecutter.__class }}Env(words=["abcd"])
    env.reset(seed=0)
    assert env.step("a")[1] == 0.25
    observation, reward, terminated, _, info = env.step("z")
    assert (observation, reward, terminated) == ("wrong: the next letter was 'b'\n", 0.0, True)
    assert info["spelled"] == "a"
    with pytest.raises(RuntimeError, match="call reset"):
        env.step("b")


def test_max_turns_follows_the_longest_word():
    assert {{ cookiecutter.__class }}Env(words=["ab", "abcdefg"]).env_spec.max_turns == 7


def test_bad_arguments_are_refused():
    with pytest.raises(ValueError, match="words"):
        {{ cookiecutter.__class }}Env(words="stone")
