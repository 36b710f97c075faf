from __future__ import annotations

import pickle

import numpy as np
import pytest

from tinker_core import AdvantageInputs
from tinker_core.contracts import Batch, Trajectory


def traj(tokens, mask, reward, group):
    lps = [-0.5 if m else 0.0 for m in mask]
    return Trajectory(tokens, lps, mask, [reward], group_id=group)


def test_batch_pads_on_the_right_and_keeps_alignment():
    b = Batch.from_trajectories([traj([5, 6, 7], [0, 1, 1], 1.0, 0), traj([8], [1], 0.0, 1)], pad_token_id=99)
    assert b.shape == (2, 3)
    assert b.tokens_B_T.tolist() == [[5, 6, 7], [8, 99, 99]]
    assert b.attention_mask_B_T.tolist() == [[1, 1, 1], [1, 0, 0]]
    assert b.loss_mask_B_T.tolist() == [[0, 1, 1], [1, 0, 0]]
    assert b.sampler_logprobs_B_T.tolist() == [[0, -0.5, -0.5], [-0.5, 0, 0]]
    assert b.rewards_B.tolist() == [1.0, 0.0] and b.group_ids_B.tolist() == [0, 1]
    again = pickle.loads(pickle.dumps(b))
    np.testing.assert_array_equal(again.tokens_B_T, b.tokens_B_T)


def test_batch_needs_trajectories():
    with pytest.raises(ValueError, match="at least one"):
        Batch.from_trajectories([])


def test_trajectory_lengths_must_match():
    with pytest.raises(ValueError, match="loss_mask_T has length 1"):
        Trajectory([1, 2], [0, 0], [1], [0.0])


def test_advantage_inputs_validate_shapes_and_place_rewards_on_last_response_token():
    inp = AdvantageInputs(rewards_B=[1.0, 2.0], mask_B_T=[[0, 1, 1, 0], [1, 0, 0, 0]], group_ids_B=[0, 0])
    assert inp.token_rewards().tolist() == [[0, 0, 1, 0], [2, 0, 0, 0]]
    with pytest.raises(ValueError, match=r"rewards_B must have shape \(2,\)"):
        AdvantageInputs(rewards_B=[1.0], mask_B_T=[[1], [1]], group_ids_B=[0, 0])
    with pytest.raises(ValueError, match="values_B_T must have shape"):
        AdvantageInputs(rewards_B=[1.0], mask_B_T=[[1]], group_ids_B=[0], values_B_T=[[1, 2]])
