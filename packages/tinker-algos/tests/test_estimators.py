"""Advantage estimators, reached through the plugin registry exactly as a trainer reaches them."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import tinker_core
import tinker_core.registry
from tinker_core.contracts import AdvantageInputs, AdvantageOutputs

ESTIMATOR_NAMES = ["gae", "grpo", "dr_grpo", "rloo", "reinforce_pp", "reinforce_pp_baseline"]


pytestmark = pytest.mark.usefixtures("only_tinker_algos_plugins")


def estimate(name: str, inputs: AdvantageInputs, **config) -> AdvantageOutputs:
    out = tinker_core.registry.get_advantage_estimator(name).obj(inputs, **config)
    assert isinstance(out, AdvantageOutputs)
    assert out.advantages_B_T.shape == inputs.mask_B_T.shape
    assert out.returns_B_T.shape == inputs.mask_B_T.shape
    return out


def seq_inputs(
    rewards, group_ids=None, T=3, mask=None, values=None, token_rewards=None
) -> AdvantageInputs:
    rewards = np.asarray(rewards, dtype=np.float64)
    B = len(rewards)
    return AdvantageInputs(
        rewards_B=rewards,
        mask_B_T=np.ones((B, T)) if mask is None else mask,
        group_ids_B=np.zeros(B, dtype=np.int64) if group_ids is None else np.asarray(group_ids),
        token_rewards_B_T=token_rewards,
        values_B_T=values,
    )


# ---- GAE ----------------------------------------------------------------------------------


def test_gae_oracle():
    inputs = seq_inputs([1.0], values=np.array([[0.5, 0.6, 0.7]]))
    out = estimate("gae", inputs, gamma=1.0, lam=0.95, whiten=False)
    np.testing.assert_allclose(out.advantages_B_T, [[0.46575, 0.385, 0.3]], atol=1e-9)
    np.testing.assert_allclose(out.returns_B_T, [[0.96575, 0.985, 1.0]], atol=1e-9)


def test_gae_is_registered_as_needing_a_critic_and_says_so_without_values():
    entry = tinker_core.registry.get_advantage_estimator("gae")
    assert entry.needs_critic is True
    with pytest.raises(ValueError, match="values_B_T"):
        entry.obj(seq_inputs([1.0]))


def test_gae_skips_prompt_padding_and_environment_tokens():
    # Oracle tokens at positions 2, 4, 5; the prompt (0, 1), an environment token (3) and
    # padding (6) are masked, and their values must not matter.
    mask = np.array([[0, 0, 1, 0, 1, 1, 0]], dtype=np.float64)
    values = np.array([[9.0, -9.0, 0.5, 42.0, 0.6, 0.7, 7.0]])
    out = estimate("gae", seq_inputs([1.0], T=7, mask=mask, values=values), lam=0.95, whiten=False)
    np.testing.assert_allclose(out.advantages_B_T, [[0, 0, 0.46575, 0, 0.385, 0.3, 0]], atol=1e-9)
    np.testing.assert_allclose(out.returns_B_T, [[0, 0, 0.96575, 0, 0.985, 1.0, 0]], atol=1e-9)


def test_gae_credits_a_reward_on_an_environment_token_to_the_action_before_it():
    mask = np.array([[1, 0, 1]], dtype=np.float64)
    token_rewards = np.array([[0.0, 2.0, 1.0]])  # 2.0 sits on the environment token
    values = np.zeros((1, 3))
    out = estimate(
        "gae",
        seq_inputs([3.0], mask=mask, values=values, token_rewards=token_rewards),
        gamma=0.5,
        lam=1.0,
        whiten=False,
    )
    # trained steps: r = [2, 1] -> returns [2 + 0.5 * 1, 1]
    np.testing.assert_allclose(out.advantages_B_T, [[2.5, 0.0, 1.0]])


def test_reward_before_the_first_trained_token_is_an_error():
    mask = np.array([[0, 1, 1]], dtype=np.float64)
    token_rewards = np.array([[1.0, 0.0, 0.0]])
    with pytest.raises(ValueError, match="before its first trained token"):
        estimate("reinforce_pp", seq_inputs([1.0], mask=mask, token_rewards=token_rewards))


def test_gae_whitening_is_masked():
    rng = np.random.default_rng(0)
    mask = np.array([[0, 1, 1, 1, 0], [0, 0, 1, 1, 1], [1, 1, 0, 0, 0]], dtype=np.float64)
    inputs = seq_inputs([1.0, -0.5, 2.0], T=5, mask=mask, values=rng.normal(size=(3, 5)))
    raw = estimate("gae", inputs, gamma=0.99, lam=0.9, whiten=False)
    white = estimate("gae", inputs, gamma=0.99, lam=0.9)
    on = mask > 0
    assert np.all(white.advantages_B_T[~on] == 0.0)
    assert white.advantages_B_T[on].mean() == pytest.approx(0.0, abs=1e-12)
    assert white.advantages_B_T[on].std() == pytest.approx(1.0, abs=1e-6)
    vals = raw.advantages_B_T[on]
    np.testing.assert_allclose(white.advantages_B_T[on], (vals - vals.mean()) / (vals.std() + 1e-8))
    np.testing.assert_allclose(white.returns_B_T, raw.returns_B_T)  # returns come before whitening


# ---- group estimators ---------------------------------------------------------------------


def test_grpo_oracle_uses_unbiased_std():
    out = estimate("grpo", seq_inputs([1, 0, 0, 1]))
    expected = np.array([0.866025, -0.866025, -0.866025, 0.866025])
    np.testing.assert_allclose(
        out.advantages_B_T, np.repeat(expected[:, None], 3, axis=1), atol=1e-5
    )
    assert not np.allclose(np.abs(out.advantages_B_T), 1.0, atol=1e-3)  # population std gives +-1


def test_dr_grpo_oracle():
    out = estimate("dr_grpo", seq_inputs([1, 0, 0, 1], T=2))
    np.testing.assert_allclose(out.advantages_B_T[:, 0], [0.5, -0.5, -0.5, 0.5])


def test_rloo_oracle():
    out = estimate("rloo", seq_inputs([1, 0, 0, 1], T=2))
    np.testing.assert_allclose(out.advantages_B_T[:, 1], [2 / 3, -2 / 3, -2 / 3, 2 / 3], atol=1e-6)


@pytest.mark.parametrize("name", ["grpo", "dr_grpo", "rloo"])
def test_group_estimators_work_per_group_broadcast_on_the_mask_and_zero_singletons(name):
    mask = np.array([[0, 1, 1], [1, 1, 0], [0, 0, 1], [1, 1, 1], [1, 0, 1]], dtype=np.float64)
    # groups: "a" = rows 0, 2 (oracle-like), "b" = row 1 alone, "c" = rows 3, 4
    inputs = seq_inputs([1.0, 5.0, 0.0, 3.0, 3.0], group_ids=["a", "b", "a", "c", "c"], mask=mask)
    out = estimate(name, inputs)
    adv = out.advantages_B_T
    assert np.all(adv[mask == 0] == 0.0)
    assert np.all(adv[1] == 0.0)  # a group of one sequence
    assert np.all(adv[3:] == 0.0)  # identical rewards
    on0 = adv[0][mask[0] > 0]
    assert np.all(on0 == on0[0]) and on0[0] > 0
    assert adv[0][mask[0] > 0][0] == pytest.approx(-adv[2][mask[2] > 0][0])
    # returns: the sequence reward on every trained token (gamma = 1)
    np.testing.assert_allclose(out.returns_B_T, mask * inputs.rewards_B[:, None])


def test_grpo_eps_is_configurable_and_unknown_keys_are_refused():
    out = estimate("grpo", seq_inputs([1, 0], T=1), eps=1.0)
    std = np.std([1, 0], ddof=1)
    np.testing.assert_allclose(out.advantages_B_T[:, 0], [0.5 / (std + 1.0), -0.5 / (std + 1.0)])
    with pytest.raises(
        TypeError, match=r"'grpo' got unknown config key\(s\) 'gamma'.*allowed keys are eps"
    ):
        estimate("grpo", seq_inputs([1, 0]), gamma=0.9)


# ---- REINFORCE++ --------------------------------------------------------------------------


def test_reinforce_pp_discounted_return_to_go_then_whitening():
    token_rewards = np.array([[0.0, 1.0, 0.0, 2.0], [0.0, 0.0, 1.0, 0.0]])
    mask = np.array([[1, 1, 1, 1], [1, 1, 1, 0]], dtype=np.float64)
    inputs = seq_inputs([3.0, 1.0], group_ids=[0, 1], T=4, mask=mask, token_rewards=token_rewards)
    raw = estimate("reinforce_pp", inputs, gamma=0.5, whiten=False)
    expected = np.array([[0.75, 1.5, 1.0, 2.0], [0.25, 0.5, 1.0, 0.0]])
    np.testing.assert_allclose(raw.returns_B_T, expected)
    np.testing.assert_allclose(raw.advantages_B_T, expected)
    out = estimate("reinforce_pp", inputs, gamma=0.5)
    vals = expected[mask > 0]
    np.testing.assert_allclose(
        out.advantages_B_T[mask > 0], (vals - vals.mean()) / (vals.std() + 1e-8)
    )
    assert out.advantages_B_T[1, 3] == 0.0


def test_reinforce_pp_default_puts_the_sequence_reward_on_the_last_trained_token():
    mask = np.array([[0, 1, 1, 0], [1, 1, 1, 1]], dtype=np.float64)
    out = estimate(
        "reinforce_pp", seq_inputs([2.0, 0.0], group_ids=[0, 1], T=4, mask=mask), whiten=False
    )
    np.testing.assert_allclose(out.advantages_B_T, [[0, 2, 2, 0], [0, 0, 0, 0]])


def test_reinforce_pp_baseline_subtracts_the_group_mean_then_whitens():
    out = estimate("reinforce_pp_baseline", seq_inputs([1, 0, 0, 1], T=2), whiten=False)
    np.testing.assert_allclose(out.advantages_B_T[:, 0], [0.5, -0.5, -0.5, 0.5])
    white = estimate("reinforce_pp_baseline", seq_inputs([1, 0, 0, 1], T=2))
    np.testing.assert_allclose(white.advantages_B_T[:, 0], [1, -1, -1, 1], atol=1e-6)


def test_reinforce_pp_baseline_keeps_token_level_shaping():
    # KL-shaped token rewards: the sequence reward sits on the last token, -0.1 per token
    token_rewards = np.array([[-0.1, -0.1, 0.9], [-0.1, -0.1, -0.1]])
    inputs = seq_inputs([1.0, 0.0], T=3, token_rewards=token_rewards)
    out = estimate("reinforce_pp_baseline", inputs, whiten=False)
    # baseline 0.5 subtracted at the last token, then return-to-go with gamma = 1
    np.testing.assert_allclose(out.returns_B_T, [[0.2, 0.3, 0.4], [-0.8, -0.7, -0.6]], atol=1e-12)


# ---- properties ---------------------------------------------------------------------------


@st.composite
def batches(draw):
    B = draw(st.integers(1, 8))
    T = draw(st.integers(1, 6))
    mask = np.array(
        draw(
            st.lists(
                st.lists(st.sampled_from([0.0, 1.0]), min_size=T, max_size=T),
                min_size=B,
                max_size=B,
            )
        )
    )
    rewards = np.array(draw(st.lists(st.floats(-5, 5, allow_nan=False), min_size=B, max_size=B)))
    groups = np.array(draw(st.lists(st.integers(0, 2), min_size=B, max_size=B)))
    values = np.array(
        draw(
            st.lists(
                st.lists(st.floats(-3, 3, allow_nan=False), min_size=T, max_size=T),
                min_size=B,
                max_size=B,
            )
        )
    )
    return AdvantageInputs(rewards_B=rewards, mask_B_T=mask, group_ids_B=groups, values_B_T=values)


@settings(max_examples=60, deadline=None)
@given(inputs=batches(), name=st.sampled_from(ESTIMATOR_NAMES))
def test_masked_positions_are_exactly_zero_and_outputs_finite(inputs, name):
    out = estimate(name, inputs)
    off = inputs.mask_B_T == 0
    assert np.all(out.advantages_B_T[off] == 0.0)
    assert np.all(out.returns_B_T[off] == 0.0)
    assert np.all(np.isfinite(out.advantages_B_T)) and np.all(np.isfinite(out.returns_B_T))
    assert all(isinstance(v, float) for v in out.metrics.values())


@settings(max_examples=60, deadline=None)
@given(inputs=batches())
def test_group_advantages_sum_to_zero_per_group_and_rloo_is_a_rescaled_dr_grpo(inputs):
    grpo = estimate("grpo", seq_inputs(inputs.rewards_B, inputs.group_ids_B, T=1)).advantages_B_T[
        :, 0
    ]
    dr = estimate("dr_grpo", seq_inputs(inputs.rewards_B, inputs.group_ids_B, T=1)).advantages_B_T[
        :, 0
    ]
    rloo = estimate("rloo", seq_inputs(inputs.rewards_B, inputs.group_ids_B, T=1)).advantages_B_T[
        :, 0
    ]
    for g in np.unique(inputs.group_ids_B):
        rows = inputs.group_ids_B == g
        n = rows.sum()
        assert abs(grpo[rows].sum()) < 1e-6
        assert abs(dr[rows].sum()) < 1e-9
        if n > 1:
            np.testing.assert_allclose(rloo[rows], n / (n - 1) * dr[rows], atol=1e-9)
            std = np.std(inputs.rewards_B[rows], ddof=1)
            np.testing.assert_allclose(grpo[rows], dr[rows] / (std + 1e-6), atol=1e-9)
        else:
            assert grpo[rows][0] == dr[rows][0] == rloo[rows][0] == 0.0


def test_estimators_are_deterministic_and_do_not_modify_their_inputs():
    rng = np.random.default_rng(1)
    mask = (rng.random((6, 5)) > 0.3).astype(np.float64)
    inputs = AdvantageInputs(
        rng.normal(size=6), mask, np.array([0, 0, 1, 1, 2, 2]), values_B_T=rng.normal(size=(6, 5))
    )
    before = (inputs.rewards_B.copy(), inputs.mask_B_T.copy(), inputs.values_B_T.copy())
    for name in ESTIMATOR_NAMES:
        a, b = estimate(name, inputs), estimate(name, inputs)
        assert np.array_equal(a.advantages_B_T, b.advantages_B_T)
        assert np.array_equal(a.returns_B_T, b.returns_B_T)
    assert all(
        np.array_equal(x, y)
        for x, y in zip(before, (inputs.rewards_B, inputs.mask_B_T, inputs.values_B_T), strict=True)
    )
