from __future__ import annotations

import pickle

import numpy as np
import pytest

from tinker_core import FSMError
from tinker_core.fsm import ALLOWED_TRANSITIONS, TurnFSM, TurnState

S = TurnState


def run_two_turns() -> TurnFSM:
    fsm = TurnFSM()
    fsm.append([1, 2, 3])  # prompt
    fsm.transition(S.GENERATING)
    fsm.append([4, 5], logprobs=[-0.1, -0.2])
    fsm.transition(S.INTERACTING)
    fsm.end_turn(0.5)
    fsm.append([6])  # environment answer
    fsm.transition(S.GENERATING)
    fsm.append([7], logprobs=[-0.3])
    fsm.transition(S.TERMINATED)
    fsm.end_turn(1.0)
    return fsm


def test_only_generating_tokens_carry_loss_weight():
    traj = run_two_turns().to_trajectory(group_id=4, prompt="p")
    assert traj.tokens_T.tolist() == [1, 2, 3, 4, 5, 6, 7]
    assert traj.loss_mask_T.tolist() == [0, 0, 0, 1, 1, 0, 1]
    np.testing.assert_allclose(traj.sampler_logprobs_T, [0, 0, 0, -0.1, -0.2, 0, -0.3], rtol=1e-6)
    assert traj.turn_rewards == [0.5, 1.0] and traj.reward == 1.5
    assert traj.group_id == 4 and traj.info == {"prompt": "p"} and traj.num_generated == 3
    assert pickle.loads(pickle.dumps(traj)).tokens_T.tolist() == traj.tokens_T.tolist()


@pytest.mark.parametrize("start", list(S))
@pytest.mark.parametrize("to", list(S))
def test_every_transition_is_checked(start, to):
    fsm = TurnFSM()
    path = {S.PENDING: [], S.GENERATING: [S.GENERATING], S.INTERACTING: [S.GENERATING, S.INTERACTING],
            S.TERMINATED: [S.TERMINATED]}[start]
    for s in path:
        fsm.transition(s)
    assert fsm.state is start
    if to in ALLOWED_TRANSITIONS[start]:
        fsm.transition(to)
        assert fsm.state is to
    else:
        with pytest.raises(FSMError, match=f"illegal turn transition {start.name} -> {to.name}"):
            fsm.transition(to)
        assert fsm.state is start


def test_the_documented_cycle_is_legal():
    fsm = TurnFSM()
    for s in [S.GENERATING, S.INTERACTING, S.GENERATING, S.INTERACTING, S.TERMINATED]:
        fsm.transition(s)
    assert fsm.history[0] is S.PENDING and fsm.history[-1] is S.TERMINATED and fsm.num_turns == 2


def test_generated_tokens_need_logprobs_and_lengths_must_match():
    fsm = TurnFSM()
    fsm.transition(S.GENERATING)
    with pytest.raises(FSMError, match="logprobs"):
        fsm.append([1, 2])
    with pytest.raises(FSMError, match="2 tokens but 1 logprobs"):
        fsm.append([1, 2], logprobs=[0.0])


def test_no_tokens_after_termination_and_no_trajectory_before_it():
    fsm = TurnFSM()
    with pytest.raises(FSMError, match="TERMINATED episode"):
        fsm.to_trajectory()
    fsm.transition(S.TERMINATED)
    with pytest.raises(FSMError, match="TERMINATED"):
        fsm.append([1])


def test_turn_rewards_are_one_per_turn():
    fsm = TurnFSM()
    with pytest.raises(FSMError, match="before any GENERATING"):
        fsm.end_turn(1.0)
    fsm.transition(S.GENERATING)
    fsm.end_turn(1.0)
    with pytest.raises(FSMError, match="already has a reward"):
        fsm.end_turn(1.0)
    fsm.transition(S.INTERACTING)
    fsm.transition(S.GENERATING)
    fsm.transition(S.TERMINATED)
    assert fsm.to_trajectory().turn_rewards == [1.0, 0.0]  # a turn without a reward gets 0
