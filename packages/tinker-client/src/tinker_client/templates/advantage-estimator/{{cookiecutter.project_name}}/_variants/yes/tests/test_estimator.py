"""Tests of the advantage estimator ``{{ cookiecutter.__registered_name }}``: hand-worked numbers (the conformance kit and the registration are in test_plugin.py)."""

from __future__ import annotations

import numpy as np
import pytest
from tinker_core import AdvantageInputs

from {{ cookiecutter.__module }}.estimator import critic_advantages, estimate, returns_to_go


def test_the_advantage_is_the_return_minus_the_value():
    mask_B_T = np.array([[0, 1, 1, 0, 1]])  # prompt, a turn of two tokens, an env token, a turn
    rewards_B_T = np.array([[0.0, 0.0, 0.0, 0.0, 1.0]])
    values_B_T = np.array([[9.0, 0.2, 0.5, 9.0, 0.9]])  # values off the mask do not count
    adv, returns = critic_advantages(rewards_B_T, values_B_T, mask_B_T)
    np.testing.assert_allclose(returns, [[0, 1, 1, 0, 1]], atol=1e-12)
    np.testing.assert_allclose(adv, [[0, 0.8, 0.5, 0, 0.1]], atol=1e-12)
    adv, returns = critic_advantages(rewards_B_T, values_B_T, mask_B_T, gamma=0.5)
    np.testing.assert_allclose(returns, [[0, 0.25, 0.5, 0, 1]], atol=1e-12)


def test_whitened_advantages_have_zero_mean_on_the_mask():
    inputs = AdvantageInputs(
        rewards_B=[1.0, 0.0], mask_B_T=[[0, 1, 1], [1, 1, 0]], group_ids_B=[0, 0],
        values_B_T=[[0.0, 0.3, 0.6], [0.1, 0.2, 0.0]],
    )
    out = estimate(inputs)
    on = inputs.mask_B_T > 0
    assert out.advantages_B_T[on].mean() == pytest.approx(0.0, abs=1e-12)
    assert out.advantages_B_T[on].std() == pytest.approx(1.0, abs=1e-6)
    assert (out.advantages_B_T[~on] == 0).all()
    np.testing.assert_array_equal(out.returns_B_T, returns_to_go(inputs.token_rewards(), inputs.mask_B_T))


def test_it_refuses_to_run_without_a_critic():
    inputs = AdvantageInputs(rewards_B=[1.0], mask_B_T=[[1, 1]], group_ids_B=[0])
    with pytest.raises(ValueError, match="values_B_T"):
        estimate(inputs)
