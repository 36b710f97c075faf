"""The one episode record (tinker_core.episodes.Episode) on real rollouts of the tiny model: the
rollout builds it, its JSON form is the ``rollouts.jsonl`` line, and a record reads back into the
same episode (less the token ids a record does not keep)."""

from __future__ import annotations

import dataclasses
import json

import numpy as np

from tinker_algos.rollout.episodes import rollout
from tinker_algos.sampling.sampler import SamplingParams
from tinker_core.contracts import Episode
from tinker_core.coordinator import EpisodeResult, Turn
from tinker_core.env import EnvSpec, TextEnv
from tinker_core.episodes import RolloutRecord


class ThreeTurns(TextEnv):
    """Three turns whatever the policy says (the untrained tiny model fails every real task at
    its first turn): an env reply between turns, 1 reward per turn."""

    env_spec = EnvSpec(id="test/three-turns-v0", description="Say anything, three times.", max_turns=3,
                       reward_range=(0.0, 3.0), action_format="anything")

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.n = int(self.np_random.integers(1, 9))
        return f"Start at {self.n}.\n", {}

    def step(self, action):
        self.n += 1
        return f"Now {self.n}.\n", 1.0, self.n % 3 == 0, False, {}


def test_a_real_rollouts_episodes_round_trip_through_their_records(policy):
    """Several turns with env replies in between: each episode's record carries its turns' texts
    and token counts equal to the trajectory's runs, and reads back into the same episode."""
    params = SamplingParams(max_new_tokens=4, temperature=1.0, stop=("\n",), seed=3)
    result = rollout(policy, ThreeTurns, [0, 1, 2], params, group_size=2)
    assert result.episodes and all(isinstance(e, Episode) for e in result.episodes)
    multi_turn = 0
    for i, e in enumerate(result.episodes):
        record = e.to_record(policy.tokenizer, kind="train", stage="grpo", step=1, episode=i, advantage=0.25)
        line = record.to_json_line()
        back_record = RolloutRecord.model_validate_json(line)
        assert back_record.to_json_line() == line  # the JSON form is stable
        back = Episode.from_record(json.loads(line))
        assert back == dataclasses.replace(e, trajectory=None, entropy_sum=0.0, entropy_tokens=0, transcript=list(e.transcript))
        if e.trajectory is None:
            continue
        # the oracle: the token counts of the record's turns are the loss mask's runs after the prompt
        mask_T = e.trajectory.loss_mask_T > 0
        starts = np.flatnonzero(np.r_[True, mask_T[1:] != mask_T[:-1]])
        runs = np.diff(np.r_[starts, len(mask_T)])[1:]  # without the prompt
        assert [t.tokens for t in record.turns] == [int(n) for n in runs]
        assert sum(t.tokens for t in record.turns if t.role == "policy") == record.new_tokens == e.trajectory.num_generated
        policy_turns = [t for t in record.turns if t.role == "policy"]
        assert [t.text for t in policy_turns] == [a for _o, a in e.transcript]
        assert all(len(t.token_texts) == len(t.logprobs) == t.tokens for t in policy_turns)
        multi_turn += len(policy_turns) > 1
    assert multi_turn, "no episode went past its first turn; the test proves too little"


def test_the_coordinator_builds_each_seats_episode():
    result = EpisodeResult(
        roles=("x", "o"), transcripts={"x": [Turn("board", "5")], "o": [Turn([{"role": "user", "content": "board"}], "1")]},
        turn_rewards={"x": [1.0], "o": [-1.0]}, rewards={"x": 1.0, "o": -1.0}, outcomes={"x": "win", "o": "loss"},
        winner="x", reason="win",
    )
    x, o = result.episode("x"), result.episode("o")
    assert (x.role, x.outcome, x.success, x.reward, list(x.transcript)) == ("x", "win", True, 1.0, [("board", "5")])
    assert (o.outcome, o.success, list(o.transcript)) == ("loss", False, [("user: board", "1")])  # messages as text
    record = o.to_record(None, kind="eval", stage="s", step=0, episode=0)
    assert (record.agent, record.outcome) == ("o", "loss") and Episode.from_record(record) == dataclasses.replace(o, transcript=[("user: board", "1")])
