"""The rules of ``games/negotiation-v0`` as pure functions: items, scenarios, splits, message
parsing and deal scoring (see :mod:`tinker_env_games.negotiation` for the game itself).

Shared by the env and by the scripted negotiators (:mod:`tinker_env_games.negotiators`).
"""

from __future__ import annotations

import itertools
import re
import zlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

__all__ = [
    "ITEMS",
    "POT_VALUE",
    "ROLES",
    "Command",
    "Scenario",
    "deal_scores",
    "draw_scenario",
    "format_items",
    "other_role",
    "parse_command",
    "parse_items",
    "scenario_split",
    "total_value",
]

ROLES = ("alice", "bob")
"""The players; ``alice`` sends the first message."""
ITEMS = ("book", "hat", "ball")
"""The item types of the pot, in the order of every count and value tuple."""
POT_VALUE = 10
"""What the whole pot is worth to each player."""
DEFAULT_MAX_MESSAGES = 8
DEFAULT_INVALID_PENALTY = 0.05
MAX_MESSAGE_CHARS = 200
"""A message is passed on (and shown) cut to this many characters."""
Split = Literal["train", "test", "all"]


def format_items(counts: Sequence[int]) -> str:
    """``book=2 hat=1 ball=3``: the counts (or values) of :data:`ITEMS`, in order."""
    return " ".join(f"{name}={int(n)}" for name, n in zip(ITEMS, counts, strict=True))


_ITEM_WORDS = "|".join(ITEMS)
_ITEM_RE = re.compile(
    rf"\b(?:(\d+)\s*({_ITEM_WORDS})e?s?\b|({_ITEM_WORDS})e?s?\s*[=:]?\s*(\d+))", re.IGNORECASE
)


_JOINER_RE = re.compile(r"^[\s,;:&+/.]*(?:and)?[\s,;:&+/.]*$", re.IGNORECASE)


def parse_items(text: str) -> tuple[int, ...] | str:
    """The counts of :data:`ITEMS` in the first run of item counts in ``text`` (an item not
    named is 0), or a string saying why there are none (``"names no item ..."``, ``"names book
    twice ..."``).

    The run ends at the first text between two counts other than spaces, punctuation and
    ``and``: in ``"1 book and 2 hats, you keep 3 balls"`` it is ``1 book and 2 hats``.
    """
    found: dict[str, int] = {}
    end: int | None = None
    for m in _ITEM_RE.finditer(text):
        if end is not None and not _JOINER_RE.match(text[end : m.start()]):
            break
        end = m.end()
        if m.group(1) is not None:
            name, n = m.group(2).lower(), int(m.group(1))
        else:
            name, n = m.group(3).lower(), int(m.group(4))
        if found.get(name, n) != n:
            return f"names {name} twice ({found[name]} and {n})"
        found[name] = n
    if not found:
        return f"names no item (write e.g. PROPOSE {format_items((1, 0, 2))})"
    return tuple(found.get(name, 0) for name in ITEMS)


_COMMAND_RE = re.compile(
    r"^[\s*_>#\-\[(\"'`]*(propose|offer|accept|walk[\s_-]*away|no[\s_-]*deal)\b(.*)$",
    re.IGNORECASE | re.MULTILINE,
)


@dataclass(frozen=True)
class Command:
    """A message parsed by :func:`parse_command`.

    Attributes:
        kind: ``"propose"``, ``"accept"``, ``"walk-away"`` or ``"talk"`` (no command line).
        items: for ``"propose"``: the speaker's counts, or a string saying why the proposal
            names none (an invalid proposal); None for the other kinds.
        text: the whole message on one line (lines joined by ``" / "``), at most 200 characters.
    """

    kind: Literal["propose", "accept", "walk-away", "talk"]
    items: tuple[int, ...] | str | None
    text: str


def parse_command(action: str) -> Command:
    """The command of a message: the first line that starts with one (see the module docs)."""
    lines = [line.strip() for line in action.splitlines() if line.strip()]
    text = " / ".join(lines)[:MAX_MESSAGE_CHARS]
    m = _COMMAND_RE.search(action)
    if m is None:
        return Command("talk", None, text)
    word = m.group(1).lower()
    if word in ("propose", "offer"):
        return Command("propose", parse_items(m.group(2)), text)
    if word == "accept":
        return Command("accept", None, text)
    return Command("walk-away", None, text)


@dataclass(frozen=True)
class Scenario:
    """A pot and the two players' private values.

    Attributes:
        counts: how many of each of :data:`ITEMS` the pot holds.
        values: per role, its value of one of each item; ``values[r] . counts == 10``.
    """

    counts: tuple[int, ...]
    values: Mapping[str, tuple[int, ...]]

    def __post_init__(self) -> None:
        object.__setattr__(self, "counts", tuple(int(c) for c in self.counts))
        object.__setattr__(self, "values", {r: tuple(int(v) for v in self.values[r]) for r in ROLES})
        if len(self.counts) != len(ITEMS) or any(c < 0 for c in self.counts):
            raise ValueError(f"Scenario.counts must be {len(ITEMS)} counts >= 0, got {self.counts}")
        for r in ROLES:
            vals = self.values[r]
            if len(vals) != len(ITEMS) or any(v < 0 for v in vals):
                raise ValueError(f"Scenario.values[{r!r}] must be {len(ITEMS)} values >= 0, got {vals}")
            if total_value(vals, self.counts) <= 0:
                raise ValueError(f"Scenario.values[{r!r}]: the pot must be worth > 0 to {r}")

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Scenario:
        """From ``{"counts": [...], "values": {"alice": [...], "bob": [...]}}`` (:meth:`to_dict`)."""
        return cls(tuple(d["counts"]), {r: tuple(d["values"][r]) for r in ROLES})

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready: ``{"counts": [...], "values": {"alice": [...], "bob": [...]}}``."""
        return {"counts": list(self.counts), "values": {r: list(self.values[r]) for r in ROLES}}

    @property
    def key(self) -> str:
        """``"2,1,3|2,3,1|0,4,2"``: counts, then alice's and bob's values."""
        parts = [self.counts, *(self.values[r] for r in ROLES)]
        return "|".join(",".join(str(x) for x in p) for p in parts)


def total_value(values: Sequence[int], counts: Sequence[int]) -> int:
    """The value of ``counts`` items to a player with per-item ``values``."""
    return sum(int(v) * int(c) for v, c in zip(values, counts, strict=True))


def scenario_split(scenario: Scenario) -> Literal["train", "test"]:
    """``"test"`` for about one scenario in ten (CRC32 of :attr:`Scenario.key`), else ``"train"``."""
    return "test" if zlib.crc32(scenario.key.encode()) % 10 == 0 else "train"


def _value_vectors(counts: tuple[int, ...]) -> list[tuple[int, ...]]:
    ranges = [range(POT_VALUE // c + 1) for c in counts]
    return [v for v in itertools.product(*ranges) if total_value(v, counts) == POT_VALUE]


def draw_scenario(rng: Any, split: Split = "train") -> Scenario:
    """A scenario from ``rng`` (a numpy Generator) in ``split``: 1-4 of each item, 5-7 in all;
    each player's values sum over the pot to 10; every item is worth something to someone and
    the players' values differ."""
    if split not in ("train", "test", "all"):
        raise ValueError(f"split must be 'train', 'test' or 'all', got {split!r}")
    for _ in range(100_000):
        counts = tuple(int(c) for c in rng.integers(1, 5, size=len(ITEMS)))
        if not 5 <= sum(counts) <= 7:
            continue
        vectors = _value_vectors(counts)
        a, b = (vectors[int(i)] for i in rng.integers(0, len(vectors), size=2))
        if a == b or any(x == 0 and y == 0 for x, y in zip(a, b, strict=True)):
            continue
        scenario = Scenario(counts, {"alice": a, "bob": b})
        if split == "all" or scenario_split(scenario) == split:
            return scenario
    raise RuntimeError("draw_scenario: no scenario found")  # pragma: no cover - never in practice


def deal_scores(scenario: Scenario, proposer: str, proposer_items: Sequence[int]) -> dict[str, float]:
    """Each role's score of the deal where ``proposer`` gets ``proposer_items`` and the other
    role the rest: its value of its share divided by its value of the whole pot."""
    rest = tuple(c - n for c, n in zip(scenario.counts, proposer_items, strict=True))
    if any(n < 0 for n in proposer_items) or any(n < 0 for n in rest):
        raise ValueError(f"deal_scores: {tuple(proposer_items)} is not a share of {scenario.counts}")
    shares = {r: (tuple(proposer_items) if r == proposer else rest) for r in ROLES}
    return {
        r: total_value(scenario.values[r], shares[r]) / total_value(scenario.values[r], scenario.counts)
        for r in ROLES
    }


def other_role(role: str) -> str:
    """The other player: ``"bob"`` for ``"alice"`` and the reverse."""
    return "bob" if role == "alice" else "alice"
