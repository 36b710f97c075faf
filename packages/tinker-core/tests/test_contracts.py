from __future__ import annotations

import pickle

import numpy as np
import pytest

from tinker_core import Action, AdvantageInputs, Batch, StepResult, Trajectory, TrajectoryGroup


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


def test_advantage_inputs_need_groups_as_labels_or_sizes():
    with pytest.raises(ValueError, match="needs group_ids_B .* or group_sizes_G"):
        AdvantageInputs(rewards_B=[1.0], mask_B_T=[[1]])
    inp = AdvantageInputs(rewards_B=[1.0, 2.0, 3.0], mask_B_T=np.ones((3, 1)), group_sizes_G=[2, 1])
    assert inp.group_ids_B.tolist() == [0, 0, 1]
    group_of_B, sizes_G = inp.group_index()
    assert group_of_B.tolist() == [0, 0, 1] and sizes_G.tolist() == [2, 1]
    with pytest.raises(ValueError, match="summing to the 3 rows"):
        AdvantageInputs(rewards_B=[1.0, 2.0, 3.0], mask_B_T=np.ones((3, 1)), group_sizes_G=[2, 2])
    with pytest.raises(ValueError, match="do not form contiguous groups"):
        AdvantageInputs(rewards_B=[1.0, 2.0, 3.0], mask_B_T=np.ones((3, 1)), group_ids_B=[0, 1, 0], group_sizes_G=[2, 1])
    labels = AdvantageInputs(rewards_B=[1.0, 2.0, 3.0], mask_B_T=np.ones((3, 1)), group_ids_B=["b", "a", "b"])
    group_of_B, sizes_G = labels.group_index()
    assert group_of_B.tolist() == [1, 0, 1] and sizes_G.tolist() == [1, 2]


def test_batch_from_groups_keeps_groups_together_and_skips_empty_ones():
    g0 = TrajectoryGroup([traj([1, 2], [0, 1], 1.0, 7), traj([3], [1], 0.0, 7)])
    g2 = TrajectoryGroup([traj([4, 5, 6], [0, 1, 1], 0.5, 9)])
    b = Batch.from_groups([g0, TrajectoryGroup([]), g2], pad_token_id=0)
    assert b.shape == (3, 3)
    assert b.group_ids_B.tolist() == [0, 0, 1] and b.group_sizes_G.tolist() == [2, 1]
    assert b.rewards_B.tolist() == [1.0, 0.0, 0.5]
    assert g0.rewards_G.tolist() == [1.0, 0.0] and len(g0) == 2 and list(g0) == g0.trajectories
    inp = AdvantageInputs.from_batch(b)
    assert inp.group_sizes_G.tolist() == [2, 1] and np.array_equal(inp.mask_B_T, b.loss_mask_B_T)
    again = pickle.loads(pickle.dumps(g0))
    assert again.rewards_G.tolist() == [1.0, 0.0]


def test_group_generated_drops_trajectories_without_policy_tokens():
    g = TrajectoryGroup([traj([1, 2], [0, 0], 1.0, 0), traj([3], [1], 0.0, 0)])
    assert [t.num_generated for t in g.generated()] == [1]


def test_batch_take_slices_rows_and_keeps_contiguous_groups():
    b = Batch.from_groups(
        [TrajectoryGroup([traj([1, 2, 3], [0, 1, 1], 1.0, 0), traj([4], [1], 0.0, 0)]),
         TrajectoryGroup([traj([5, 6], [0, 1], 0.5, 1)])],
        pad_token_id=0,
    )
    b.advantages_B_T = np.arange(9, dtype=np.float32).reshape(3, 3)
    sub = b.take([1, 2])
    assert sub.tokens_B_T.tolist() == [[4, 0, 0], [5, 6, 0]]
    assert sub.advantages_B_T.tolist() == [[3, 4, 5], [6, 7, 8]]
    assert sub.group_ids_B.tolist() == [0, 1] and sub.group_sizes_G.tolist() == [1, 1]
    trimmed = b.take(np.array([False, True, True]), trim=True)
    assert trimmed.shape == (2, 2) and trimmed.tokens_B_T.tolist() == [[4, 0], [5, 6]]
    shuffled = b.take([0, 2, 1])  # group 0's rows apart: only the labels remain
    assert shuffled.group_ids_B.tolist() == [0, 1, 0] and shuffled.group_sizes_G is None


def test_step_result_reads_gymnasium_tuples_and_names_the_fix():
    step = StepResult.of(("obs", 1, False, True, {}))
    assert step == ("obs", 1.0, False, True, {}) and step.reward == 1.0 and step.truncated
    with pytest.raises(ValueError, match=r"must return \(observation, reward, terminated, truncated, info\)"):
        StepResult.of(("obs", 1.0))
    with pytest.raises(ValueError, match="numeric reward"):
        StepResult.of(("obs", "high", False, False, {}))


def test_action_is_re_exported_from_the_env_module_for_old_imports():
    import tinker_core.env

    assert tinker_core.env.Action is Action and Action("x", "length").stop_reason == "length"
