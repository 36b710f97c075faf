"""``{{ cookiecutter.__env_id }}``: a single-turn text environment. THIS is the file to edit.

The task here is a placeholder that really plays, so the package works end to end from the
start: the env shows a word and rewards the policy for writing it backwards.

Episode::

    observation: "Reverse: stone\n"      info: {"target": "enots\n"}
    action:      "enots"                -> reward 1.0, terminated

To make it yours, change :meth:`{{ cookiecutter.__class }}Env.reset` (pose a task, seeded by
``self.np_random``) and :meth:`{{ cookiecutter.__class }}Env.step` (score the answer), and
describe it in ``SPEC``. Keep the rules that ``tests/test_env.py`` checks with
``tinker_core.check_env``: the same seed gives the same episode, no action raises,
rewards stay within ``SPEC.reward_range`` and ``info`` holds only JSON values.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from tinker_core import EnvSpec, TextEnv

__all__ = ["SPEC", "WORDS", "{{ cookiecutter.__class }}Env"]

WORDS: tuple[str, ...] = ("stone", "river", "cloud", "maple", "tiger", "ember", "delta", "piano")

SPEC = EnvSpec(
    id="{{ cookiecutter.__env_id }}",
    description={{ cookiecutter.description | jsonify }},
    max_turns=1,
    reward_range=(0.0, 1.0),
    action_format="the word written backwards, then a newline",
    metadata={"kwargs": {"words": "the words to draw from (default: eight 5-letter words)"}},
)


class {{ cookiecutter.__class }}Env(TextEnv):
    """Write the word shown backwards; reward 1.0 for an exact answer, else 0.0.

    Args:
        words: the words a task is drawn from (uniformly, with ``self.np_random``).
    """

    env_spec = SPEC

    def __init__(self, words: Sequence[str] = WORDS) -> None:
        if isinstance(words, str) or not words or not all(isinstance(w, str) and w for w in words):
            raise ValueError(f"words must be a non-empty list of non-empty strings, got {words!r}")
        self.words = tuple(words)
        self.word = ""
        self._done = True

    @property
    def target(self) -> str:
        """The ideal action: the word backwards, then the newline that ends the answer."""
        return self.word[::-1] + "\n"

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[str, dict[str, Any]]:
        super().reset(seed=seed)  # seeds self.np_random: the same seed, the same task
        self.word = self.words[int(self.np_random.integers(len(self.words)))]
        self._done = False
        # info["target"] lets `algorithm: sft` train on this env without a data file.
        return f"Reverse: {self.word}\n", {"target": self.target}

    def step(self, action: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        if self._done:
            raise RuntimeError(f"{type(self).__name__}.step: the episode is over; call reset()")
        self._done = True
        correct = action.strip() == self.word[::-1]
        return "", 1.0 if correct else 0.0, True, False, {"target": self.target, "correct": correct}
