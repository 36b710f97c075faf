"""Tests of the advantage estimator ``{{ cookiecutter.__registered_name }}``: hand-worked numbers (the conformance kit and the registration are in test_plugin.py)."""

from __future__ import annotations

import numpy as np
import pytest
from tinker_core import AdvantageInputs

from {{ cookiecutter.__module }}.estimator import estimate, group_advantages, returns_to_go


def test_each_sequence_is_compared_with_its_own_group():
    rewards_B = np.array([1.0, 0.0, 0.5, 0.5, 0.7])
    groups_B = np.array(["a", "a", "b", "b", "c"])  # "c" is a group of one
    assert group_advantages(rewards_B, groups_B) == pytest.approx([0.5, -0.5, 0.0, 0.0, 0.0])
    # normalised: the group of [1, 0] has mean 0.5 and (population) std 0.5
    assert group_advantages(rewards_B, groups_B, normalize=True, eps=0.0)[:2] == pytest.approx([1.0, -1.0])


def test_advantages_sit_on_the_response_tokens_only():
    mask_B_T = np.array([[0, 1, 1, 0], [0, 0, 1, 1]])
    out = estimate(AdvantageInputs(rewards_B=[1.0, 0.0], mask_B_T=mask_B_T, group_ids_B=[7, 7]))
    np.testing.assert_allclose(out.advantages_B_T, [[0, 0.5, 0.5, 0], [0, 0, -0.5, -0.5]], atol=1e-12)
    np.testing.assert_allclose(out.returns_B_T, [[0, 1, 1, 0], [0, 0, 0, 0]], atol=1e-12)


def test_a_reward_on_an_environment_token_counts_for_the_action_before_it():
    mask_B_T = np.array([[1, 1, 0, 1]])  # a turn, an env token, another turn
    rewards_B_T = np.array([[0.0, 0.0, 0.5, 1.0]])
    np.testing.assert_allclose(returns_to_go(rewards_B_T, mask_B_T), [[1.5, 1.5, 0.0, 1.0]], atol=1e-12)
    np.testing.assert_allclose(returns_to_go(rewards_B_T, mask_B_T, gamma=0.5), [[0.5, 1.0, 0.0, 1.0]], atol=1e-12)
