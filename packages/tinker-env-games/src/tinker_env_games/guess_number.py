"""``games/guess-number-v0``: find a secret number; the env answers "higher" or "lower".

Episode (defaults ``low=1``, ``high=100``, ``max_turns=8``)::

    observation: "Guess my number between 1 and 100.\\n"
    action:      "50"            -> observation "higher\\n"   (the secret is above 50)
    action:      "75"            -> observation "lower\\n"
    action:      "62"            -> observation "correct\\n", terminated, reward 0.875

The action is read as the first integer in the text (``"50"``, ``"I guess 50."``). An action
with no integer gets ``"invalid: reply with a whole number from 1 to 100\\n"`` and still uses a
turn; a guess outside the range is answered ``higher``/``lower`` as usual.

Reward: 0 on every step except a correct guess on turn ``t`` (1-based), which earns
``1 - (t - 1) / max_turns`` (1.0 on the first turn, ``1 / max_turns`` on the last). After
``max_turns`` turns without success the episode is truncated with reward 0.
"""

from __future__ import annotations

import re
from dataclasses import replace
from typing import Any

from tinker_core import EnvSpec, TextEnv

__all__ = ["GUESS_NUMBER_SPEC", "GuessNumberEnv", "success_reward"]

GUESS_NUMBER_SPEC = EnvSpec(
    id="games/guess-number-v0",
    description=(
        "Guess a secret integer in [low, high]; the env answers 'higher' or 'lower'. "
        "Success on turn t earns 1 - (t-1)/max_turns; truncated after max_turns."
    ),
    max_turns=8,
    reward_range=(0.0, 1.0),
    action_format="a whole number, e.g. '50'",
    metadata={
        "kwargs": {
            "low": "smallest secret (default 1)",
            "high": "largest secret (default 100)",
            "max_turns": "guesses allowed (default 8)",
        }
    },
)

_INT_RE = re.compile(r"[-+]?\d+")


def success_reward(turn: int, max_turns: int) -> float:
    """The reward for guessing right on ``turn`` (1-based) out of ``max_turns``."""
    if not 1 <= turn <= max_turns:
        raise ValueError(f"turn must be in 1..{max_turns}, got {turn}")
    return 1.0 - (turn - 1) / max_turns


class GuessNumberEnv(TextEnv):
    """Guess the number; see the module docstring.

    Args:
        low, high: the secret is drawn uniformly from ``[low, high]`` (seeded by ``reset``).
        max_turns: guesses before truncation.
    """

    env_spec = GUESS_NUMBER_SPEC

    def __init__(self, low: int = 1, high: int = 100, max_turns: int = 8) -> None:
        if low > high:
            raise ValueError(f"low must be <= high, got low={low}, high={high}")
        if max_turns < 1:
            raise ValueError(f"max_turns must be >= 1, got {max_turns}")
        self.low, self.high, self.max_turns = int(low), int(high), int(max_turns)
        if max_turns != GUESS_NUMBER_SPEC.max_turns:
            self.env_spec = replace(GUESS_NUMBER_SPEC, max_turns=self.max_turns)
        self.secret = low
        self.turn = 0
        self.guesses: list[int] = []
        self._done = True

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[str, dict[str, Any]]:
        """Draw the secret; ``options={"secret": n}`` fixes it instead."""
        super().reset(seed=seed)
        if options and "secret" in options:
            self.secret = int(options["secret"])
            if not self.low <= self.secret <= self.high:
                raise ValueError(
                    f"options['secret'] must be in [{self.low}, {self.high}], got {self.secret}"
                )
        else:
            self.secret = int(self.np_random.integers(self.low, self.high + 1))
        self.turn = 0
        self.guesses = []
        self._done = False
        return f"Guess my number between {self.low} and {self.high}.\n", {
            "max_turns": self.max_turns
        }

    def step(self, action: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        if self._done:
            raise RuntimeError(
                "GuessNumberEnv.step: the episode is over or not started; call reset()"
            )
        if not isinstance(action, str):
            raise TypeError(
                f"GuessNumberEnv.step: action must be a str, got {type(action).__name__}"
            )
        self.turn += 1
        m = _INT_RE.search(action)
        reward, terminated = 0.0, False
        if m is None:
            obs, event = (
                f"invalid: reply with a whole number from {self.low} to {self.high}\n",
                "invalid",
            )
        else:
            guess = int(m.group(0))
            self.guesses.append(guess)
            if guess == self.secret:
                obs, event, terminated = "correct\n", "correct", True
                reward = success_reward(self.turn, self.max_turns)
            elif guess < self.secret:
                obs, event = "higher\n", "higher"
            else:
                obs, event = "lower\n", "lower"
        truncated = not terminated and self.turn >= self.max_turns
        self._done = terminated or truncated
        info: dict[str, Any] = {"event": event, "turn": self.turn}
        if self._done:
            info["secret"] = self.secret
        return obs, reward, terminated, truncated, info

    def render(self) -> str | None:
        return f"secret={self.secret} guesses={self.guesses}"
