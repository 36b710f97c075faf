"""The turn state machine every rollout goes through, and the loss-mask rule.

::

    PENDING -> GENERATING -> INTERACTING -> GENERATING -> ... -> TERMINATED

Tokens are appended to one flat sequence. Only tokens appended in ``GENERATING`` (produced by
the policy) carry loss weight; prompt tokens (``PENDING``) and environment tokens
(``INTERACTING``) are masked. Illegal transitions and tokens appended in the wrong state raise
:class:`~tinker_core.errors.FSMError`.
"""

from __future__ import annotations

import enum
from collections.abc import Sequence

import numpy as np

from tinker_core.contracts import Trajectory
from tinker_core.errors import FSMError


class TurnState(enum.Enum):
    PENDING = "pending"
    GENERATING = "generating"
    INTERACTING = "interacting"
    TERMINATED = "terminated"


ALLOWED_TRANSITIONS: dict[TurnState, frozenset[TurnState]] = {
    TurnState.PENDING: frozenset({TurnState.GENERATING, TurnState.TERMINATED}),
    TurnState.GENERATING: frozenset({TurnState.INTERACTING, TurnState.TERMINATED}),
    TurnState.INTERACTING: frozenset({TurnState.GENERATING, TurnState.TERMINATED}),
    TurnState.TERMINATED: frozenset(),
}

LOSS_WEIGHT: dict[TurnState, int] = {
    TurnState.PENDING: 0,
    TurnState.GENERATING: 1,
    TurnState.INTERACTING: 0,
    TurnState.TERMINATED: 0,
}
"""The loss-mask rule: the weight of a token appended in each state."""


class TurnFSM:
    """Tracks one episode's state and builds its token sequence with the loss mask.

    Example::

        fsm = TurnFSM()
        fsm.append(prompt_ids)                     # PENDING: the prompt, masked
        fsm.transition(TurnState.GENERATING)
        fsm.append(action_ids, logprobs=lps)       # trained on
        fsm.transition(TurnState.INTERACTING)
        fsm.end_turn(reward=0.0)
        fsm.append(observation_ids)                # masked
        ...
        fsm.transition(TurnState.TERMINATED)
        traj = fsm.to_trajectory(group_id=3)
    """

    def __init__(self) -> None:
        self.state = TurnState.PENDING
        self.history: list[TurnState] = [TurnState.PENDING]
        self._tokens: list[int] = []
        self._logprobs: list[float] = []
        self._mask: list[int] = []
        self.turn_rewards: list[float] = []
        self.num_turns = 0

    def transition(self, to: TurnState) -> None:
        if to not in ALLOWED_TRANSITIONS[self.state]:
            allowed = sorted(s.name for s in ALLOWED_TRANSITIONS[self.state]) or ["none"]
            raise FSMError(
                f"illegal turn transition {self.state.name} -> {to.name}; "
                f"from {self.state.name} the allowed next states are {', '.join(allowed)}"
            )
        if to is TurnState.GENERATING:
            self.num_turns += 1
        self.state = to
        self.history.append(to)

    def append(self, token_ids: Sequence[int], logprobs: Sequence[float] | None = None) -> None:
        """Append tokens in the current state; their loss weight follows the state."""
        if self.state is TurnState.TERMINATED:
            raise FSMError("cannot append tokens: the episode is TERMINATED")
        token_ids = [int(t) for t in token_ids]
        weight = LOSS_WEIGHT[self.state]
        if logprobs is None:
            if weight:
                raise FSMError("tokens appended in GENERATING need the sampler's logprobs")
            logprobs = [0.0] * len(token_ids)
        elif len(logprobs) != len(token_ids):
            raise FSMError(
                f"got {len(token_ids)} tokens but {len(logprobs)} logprobs; they must match"
            )
        self._tokens.extend(token_ids)
        self._logprobs.extend(float(x) for x in logprobs)
        self._mask.extend([weight] * len(token_ids))

    def end_turn(self, reward: float) -> None:
        """Record the reward the environment gave for the policy's last turn."""
        if self.num_turns == 0:
            raise FSMError("end_turn() before any GENERATING turn")
        if len(self.turn_rewards) >= self.num_turns:
            raise FSMError(f"turn {self.num_turns} already has a reward")
        self.turn_rewards.append(float(reward))

    @property
    def tokens(self) -> list[int]:
        """A copy of the token sequence so far (the context the policy sees next)."""
        return list(self._tokens)

    @property
    def num_tokens(self) -> int:
        return len(self._tokens)

    def to_trajectory(self, group_id: int = 0, **info: object) -> Trajectory:
        if self.state is not TurnState.TERMINATED:
            raise FSMError(f"to_trajectory() needs a TERMINATED episode, state is {self.state.name}")
        while len(self.turn_rewards) < self.num_turns:
            self.turn_rewards.append(0.0)
        return Trajectory(
            tokens_T=np.asarray(self._tokens, dtype=np.int64),
            sampler_logprobs_T=np.asarray(self._logprobs, dtype=np.float32),
            loss_mask_T=np.asarray(self._mask, dtype=np.float32),
            turn_rewards=list(self.turn_rewards),
            group_id=group_id,
            info=dict(info),
        )
