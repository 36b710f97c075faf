"""``games/reference-v0``: a cooperative reference game; both roles share one reward.

Roles ``speaker`` (first) and ``listener``. There are ``num_objects`` objects (default 4), each
a size, a colour and a shape (``small red circle``). The speaker sees them all and which one is
the target::

    Reference game. You are the speaker. The listener sees these objects in another order:
    - big blue square
    - small red circle
    - big red circle
    - small green star
    Target: big red circle
    Describe the target to the listener in at most 2 words.

The listener sees the objects numbered in its own (shuffled) order and the speaker's words::

    Reference game. You are the listener. Objects:
    1. small red circle
    2. big red circle
    3. big blue square
    4. small green star
    The speaker says: "big red"
    Reply with the number of the object the speaker means (1-4).

**Message**: only the first ``max_words`` words (default 2) of the speaker's text reach the
listener, with digits and punctuation removed (so the speaker cannot pass a position, which
differs for the listener anyway). **Guess**: the first integer in the listener's text. Both
roles get 1 when the guess is the target and 0 otherwise (a guess with no number or out of
range is wrong). Every scenario has a description of at most ``max_words`` words that only the
target fits. ``infos[role]`` at the end: ``outcome`` (``"win"`` for both roles on success,
``"loss"`` for both otherwise), ``reason`` (``"correct"``, ``"wrong"``, ``"invalid-guess"`` or a
forfeit reason), ``target`` and ``guess`` (object descriptions; the guess None when invalid).

Scenarios come from ``self.np_random`` (seeded by ``reset``) and belong to a fixed split by a
CRC32 of their description (``"test"`` about one in ten); ``split`` (default ``"train"``)
chooses. Scripted partners (``ReferenceGameEnv.scripted_opponents``), each playing either role:
``literal`` (the speaker names the fewest attributes that pick out the target; the listener
picks the object matching most of the words, the lowest number on a tie) and ``random`` (the
speaker says random attributes of the target; the listener picks a random object).
"""

from __future__ import annotations

import itertools
import random
import re
import zlib
from typing import Any, ClassVar, Literal

from tinker_core import EnvSpec, MultiAgentTextEnv, Observation, OpponentFactory

__all__ = [
    "ATTRIBUTES",
    "REFERENCE_SPEC",
    "LiteralPartner",
    "RandomPartner",
    "ReferenceGameEnv",
    "distinguishing_description",
    "filter_message",
    "matches",
    "scenario_split",
]

ROLES = ("speaker", "listener")
"""The roles; the speaker acts first, the listener second and last."""
ATTRIBUTES: tuple[tuple[str, ...], ...] = (
    ("small", "big"),
    ("red", "blue", "green", "yellow"),
    ("circle", "square", "triangle", "star"),
)
"""Sizes, colours, shapes: an object is one of each, written in that order."""

Obj = tuple[str, str, str]

REFERENCE_SPEC = EnvSpec(
    id="games/reference-v0",
    description=(
        "Cooperative reference game (roles speaker, listener; speaker first): the speaker "
        "describes a target object in at most max_words words, the listener picks it among "
        "num_objects by number. Both get 1 if the listener is right, else 0."
    ),
    max_turns=2,
    reward_range=(0.0, 1.0),
    action_format="speaker: a few words, e.g. 'red circle'; listener: a number, e.g. '2'",
    roles=ROLES,
    metadata={
        "kwargs": {
            "num_objects": "objects to choose from, 2-8 (default 4)",
            "max_words": "words of the speaker that reach the listener, 1-3 (default 2)",
            "split": "scenarios drawn from 'train' (default), 'test' (held out) or 'all'",
        },
        "cooperative": True,
    },
)

_WORD_RE = re.compile(r"[a-z]+")
_INT_RE = re.compile(r"[-+]?\d+")


def filter_message(text: str, max_words: int) -> str:
    """What reaches the listener: the first ``max_words`` words of ``text``, lower-cased, with
    digits and punctuation removed."""
    return " ".join(_WORD_RE.findall(text.lower())[:max_words])


def matches(obj: Obj, words: str) -> int:
    """How many attributes of ``obj`` the (space-separated) ``words`` name."""
    said = set(words.split())
    return sum(a in said for a in obj)


def distinguishing_description(target: Obj, objects: list[Obj], max_words: int) -> str | None:
    """The shortest description (attributes of ``target``, in size-colour-shape order) that no
    other object fits, of at most ``max_words`` words; the first such in that order; None if
    there is none."""
    for k in range(1, min(max_words, len(target)) + 1):
        for idx in itertools.combinations(range(len(target)), k):
            attrs = {target[i] for i in idx}
            if not any(o != target and attrs <= set(o) for o in objects):
                return " ".join(target[i] for i in idx)
    return None


def _key(objects: list[Obj], target: int) -> str:
    return "|".join(" ".join(o) for o in objects) + f"#{target}"


def scenario_split(objects: list[Obj], target: int) -> Literal["train", "test"]:
    """``"test"`` for about one scenario in ten (CRC32 of the objects and target)."""
    return "test" if zlib.crc32(_key(objects, target).encode()) % 10 == 0 else "train"


# ---- scripted partners ----------------------------------------------------------------------
_LISTED_RE = re.compile(r"^(?:- |(\d+)\. )(\w+) (\w+) (\w+)$", re.MULTILINE)
_TARGET_RE = re.compile(r"^Target: (\w+) (\w+) (\w+)$", re.MULTILINE)
_SAYS_RE = re.compile(r'^The speaker says: "(.*)"$', re.MULTILINE)
_BUDGET_RE = re.compile(r"at most (\d+) word")


def _read(observation: Observation) -> tuple[list[Obj], Obj | None, str]:
    text = observation if isinstance(observation, str) else ""
    objects: list[Obj] = [(m.group(2), m.group(3), m.group(4)) for m in _LISTED_RE.finditer(text)]
    t = _TARGET_RE.search(text)
    says = _SAYS_RE.search(text)
    return objects, (t.group(1), t.group(2), t.group(3)) if t else None, says.group(1) if says else ""


class LiteralPartner:
    """A rule-based partner for either role (see the module docstring); ``seed`` breaks a
    listener's ties at random instead of taking the lowest number."""

    def __init__(self, seed: int | None = None) -> None:
        self.rng = random.Random(seed) if seed is not None else None

    def __call__(self, role: str, observation: Observation) -> str:
        objects, target, says = _read(observation)
        if role == "speaker":
            if target is None:
                return "nothing"
            budget = _BUDGET_RE.search(observation if isinstance(observation, str) else "")
            words = int(budget.group(1)) if budget else 3
            return distinguishing_description(target, objects, words) or " ".join(target[:words])
        if not objects:
            return "1"
        scores = [matches(o, says) for o in objects]
        best = [n for n, s in enumerate(scores, 1) if s == max(scores)]
        return str(self.rng.choice(best) if self.rng else best[0])


class RandomPartner:
    """A random partner for either role (seeded): the speaker says one to three random
    attributes of the target, the listener picks a random object."""

    def __init__(self, seed: int | None = None) -> None:
        self.rng = random.Random(seed)

    def __call__(self, role: str, observation: Observation) -> str:
        objects, target, _ = _read(observation)
        if role == "speaker":
            if target is None:
                return "nothing"
            return " ".join(self.rng.sample(list(target), self.rng.randint(1, 3)))
        return str(self.rng.randint(1, max(1, len(objects))))


class ReferenceGameEnv(MultiAgentTextEnv):
    """The reference game; see the module docstring.

    Args:
        num_objects: objects to choose from, 2 to 8.
        max_words: words of the speaker's message that reach the listener, 1 to 3.
        split: draw scenarios from ``"train"``, ``"test"`` or ``"all"``.
    """

    scripted_opponents: ClassVar[dict[str, OpponentFactory]] = {
        "literal": LiteralPartner,
        "random": RandomPartner,
    }

    def __init__(self, num_objects: int = 4, max_words: int = 2, split: str = "train") -> None:
        if not 2 <= num_objects <= 8:
            raise ValueError(f"num_objects must be in 2..8, got {num_objects}")
        if not 1 <= max_words <= 3:
            raise ValueError(f"max_words must be in 1..3, got {max_words}")
        if split not in ("train", "test", "all"):
            raise ValueError(f"split must be 'train', 'test' or 'all', got {split!r}")
        self.num_objects, self.max_words, self.split = int(num_objects), int(max_words), split
        self.possible_agents = list(ROLES)
        self.env_spec = REFERENCE_SPEC
        self.reset()

    def reset(self, seed: int | None = None, options: dict[str, Any] | None = None) -> None:
        """Draw a scenario; ``options={"objects": [[size, colour, shape], ...], "target": i,
        "order": [...]}`` fixes it (``order``: the listener's order of the object indices)."""
        super().reset(seed=seed, options=options)
        if options and "objects" in options:
            self.objects = [tuple(o) for o in options["objects"]]
            self.target = int(options["target"])
            self.order = list(options.get("order", range(len(self.objects))))
        else:
            self.objects, self.target = self._draw()
            self.order = [int(i) for i in self.np_random.permutation(len(self.objects))]
        self.agent_selection = "speaker"
        self.message: str | None = None
        self.guess: int | None = None  # an index into self.objects
        self.reason: str | None = None
        self._update_infos()

    def _draw(self) -> tuple[list[Obj], int]:
        all_objects = list(itertools.product(*ATTRIBUTES))
        for _ in range(10_000):
            picks = self.np_random.choice(len(all_objects), size=self.num_objects, replace=False)
            objects: list[Obj] = [all_objects[int(i)] for i in picks]  # type: ignore[misc]
            target = int(self.np_random.integers(len(objects)))
            if distinguishing_description(objects[target], objects, self.max_words) is None:
                continue
            if self.split == "all" or scenario_split(objects, target) == self.split:
                return objects, target
        raise RuntimeError(  # pragma: no cover - needs near-impossible settings
            f"no scenario with {self.num_objects} objects is describable in {self.max_words} word(s)"
        )

    def observe(self, agent: str) -> str:
        self.check_role(agent)
        lines = [f"Reference game. You are the {agent}."]
        if agent == "speaker":
            lines[0] += " The listener sees these objects in another order:"
            lines += [f"- {' '.join(o)}" for o in self.objects]
            lines.append(f"Target: {' '.join(self.objects[self.target])}")
        else:
            lines[0] += " Objects:"
            lines += [f"{n}. {' '.join(self.objects[i])}" for n, i in enumerate(self.order, 1)]
        if self.message is not None:
            lines.append(f'The speaker says: "{self.message}"')
        if self.done:
            guess = "nothing valid" if self.guess is None else " ".join(self.objects[self.guess])
            verdict = "right" if self.reason == "correct" else "wrong"
            lines.append(f"Game over: the listener picked {guess}, which is {verdict}.")
        elif agent == "speaker" and self.agent_selection == "speaker":
            lines.append(f"Describe the target to the listener in at most {self.max_words} word(s).")
        elif agent == "listener" and self.agent_selection == "listener":
            lines.append(f"Reply with the number of the object the speaker means (1-{len(self.objects)}).")
        else:
            lines.append(f"Waiting for the {'listener' if agent == 'speaker' else 'speaker'}.")
        return "\n".join(lines) + "\n"

    def step(self, action: str) -> None:
        self._begin_step()
        text = action if isinstance(action, str) else repr(action)
        if self.agent_selection == "speaker":
            self.message = filter_message(text, self.max_words)
            self.agent_selection = "listener"
        else:
            m = _INT_RE.search(text)
            n = int(m.group(0)) if m else 0
            if 1 <= n <= len(self.objects):
                self.guess = self.order[n - 1]
                self._finish("correct" if self.guess == self.target else "wrong")
            else:
                self._finish("invalid-guess")
        self._end_step()

    def forfeit(self, role: str, reason: str = "forfeit") -> None:
        """End the game now, failed: both roles get 0."""
        if self._begin_forfeit(role):
            self._finish(reason)
            self._end_step()

    def _finish(self, reason: str) -> None:
        self.reason = reason
        for r in ROLES:
            self.rewards[r] = 1.0 if reason == "correct" else 0.0
            self.terminations[r] = True

    def _update_infos(self) -> None:
        for r in ROLES:
            info: dict[str, Any] = {}
            if self.done:
                info.update(
                    outcome="win" if self.reason == "correct" else "loss",
                    reason=self.reason,
                    target=" ".join(self.objects[self.target]),
                    guess=None if self.guess is None else " ".join(self.objects[self.guess]),
                )
            self.infos[r] = info

    def render(self) -> str | None:
        return f"target={' '.join(self.objects[self.target])} message={self.message!r} guess={self.guess}"
