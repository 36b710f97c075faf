"""``{{ cookiecutter.__env_id }}``: a multi-turn text environment. THIS is the file to edit.

The task here is a placeholder that really plays, so the package works end to end from the
start: the policy spells a word, one letter per turn, and the env answers every turn.

Episode (word ``"stone"``)::

    observation: "Spell stone, one letter per turn.\n"
    action:      "s"     -> observation "s\n",      reward 0.2
    action:      "t"     -> observation "st\n",     reward 0.2
    action:      "x"     -> observation "wrong: the next letter was 'o'\n", reward 0.0, terminated

Each right letter earns ``1 / len(word)``, so a whole word earns 1.0; a wrong letter ends the
episode. Only the policy's tokens are trained: the env's answers are masked out of the loss.

To make it yours, change :meth:`{{ cookiecutter.__class }}Env.reset` (pose a task, seeded by
``self.np_random``) and :meth:`{{ cookiecutter.__class }}Env.step` (answer an action, score it,
say whether the episode is over), and describe it in ``SPEC``. Keep the rules that
``tests/test_env.py`` checks with ``tinker_core.check_env``: the same seed gives the
same episode, no action raises, every episode ends within ``env_spec.max_turns`` steps, rewards
stay within ``SPEC.reward_range`` and ``info`` holds only JSON values.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from tinker_core import EnvSpec, TextEnv

__all__ = ["SPEC", "WORDS", "{{ cookiecutter.__class }}Env"]

WORDS: tuple[str, ...] = ("stone", "river", "cloud", "maple", "tiger", "ember", "delta", "piano")

SPEC = EnvSpec(
    id="{{ cookiecutter.__env_id }}",
    description={{ cookiecutter.description | jsonify }},
    max_turns=max(len(w) for w in WORDS),
    reward_range=(0.0, 1.0),
    action_format="the next letter, then a newline",
    metadata={"kwargs": {"words": "the words to draw from (default: eight 5-letter words)"}},
)


class {{ cookiecutter.__class }}Env(TextEnv):
    """Spell the word shown, one letter per turn (see the module docstring).

    Args:
        words: the words a task is drawn from (uniformly, with ``self.np_random``); the env's
            ``max_turns`` is the length of the longest one.
    """

    env_spec = SPEC

    def __init__(self, words: Sequence[str] = WORDS) -> None:
        if isinstance(words, str) or not words or not all(isinstance(w, str) and w for w in words):
            raise ValueError(f"words must be a non-empty list of non-empty strings, got {words!r}")
        self.words = tuple(words)
        longest = max(len(w) for w in self.words)
        if longest != SPEC.max_turns:
            self.env_spec = replace(SPEC, max_turns=longest)
        self.word = ""
        self.spelled = ""
        self._done = True

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[str, dict[str, Any]]:
        super().reset(seed=seed)  # seeds self.np_random: the same seed, the same task
        self.word = self.words[int(self.np_random.integers(len(self.words)))]
        self.spelled = ""
        self._done = False
        # info["target"] (the ideal first action) lets `algorithm: sft` warm up on this env.
        return f"Spell {self.word}, one letter per turn.\n", {"target": self.word[0] + "\n"}

    def step(self, action: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        if self._done:
            raise RuntimeError(f"{type(self).__name__}.step: the episode is over; call reset()")
        expected = self.word[len(self.spelled)]
        info: dict[str, Any] = {"correct": action.strip() == expected, "spelled": self.spelled}
        if not info["correct"]:
            self._done = True
            info["word"] = self.word
            return f"wrong: the next letter was {expected!r}\n", 0.0, True, False, info
        self.spelled += expected
        self._done = self.spelled == self.word
        info["spelled"] = self.spelled
        if not self._done:
            info["target"] = self.word[len(self.spelled)] + "\n"  # the ideal next action
        return f"{self.spelled}\n", 1.0 / len(self.word), self._done, False, info
