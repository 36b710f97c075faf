"""Scripted negotiators for ``games/negotiation-v0``: agents ``agent(role, observation) -> str``
that read only the observation text, like a model would.

- :class:`RandomNegotiator` (``random``): accepts an offer with probability 0.3, walks away
  with probability 0.05, and otherwise proposes a uniformly random share of the pot.
- :class:`ConcederAgent` (``conceder``) and :class:`BoulwareAgent` (``boulware``): the
  time-dependent tactics of Faratin et al. (1998). The agent's aspiration, a share of the pot's
  value to it, falls from 1 to ``reserve`` (default 0.5) as the messages run out:
  ``1 - (1 - reserve) * progress ** (1 / exponent)`` with ``progress`` the fraction of
  messages used. The conceder (``exponent=2``) gives ground early, the boulware
  (``exponent=0.5``) holds out until late. On its turn it accepts the other's offer when the
  offer is worth at least its aspiration (or anything above 0 when its message is the last);
  otherwise it proposes the share it values closest above its aspiration, leaving the other as
  many items as it can (ties broken by its seeded RNG), and walks away on the last message
  when there is nothing worth accepting.

:func:`parse_view` reads what an agent needs from an observation.
"""

from __future__ import annotations

import itertools
import random
import re
from dataclasses import dataclass

from tinker_core import Observation
from tinker_env_games.negotiation_rules import format_items, parse_items, total_value

__all__ = [
    "BoulwareAgent",
    "ConcederAgent",
    "NegotiationView",
    "RandomNegotiator",
    "parse_view",
    "shares",
]

ACCEPT_PROBABILITY = 0.3
WALK_AWAY_PROBABILITY = 0.05


@dataclass(frozen=True)
class NegotiationView:
    """What a player sees, read from its observation by :func:`parse_view`.

    Attributes:
        role, other: the player's role and the other player's.
        counts: the pot; ``values``: the player's per-item values.
        offer: the player's share under the standing proposal, or None when there is none.
        offer_by_other: whether the standing proposal is the other player's (acceptable).
        messages_left, max_messages: the message budget of both players together.
    """

    role: str
    other: str
    counts: tuple[int, ...]
    values: tuple[int, ...]
    offer: tuple[int, ...] | None
    offer_by_other: bool
    messages_left: int
    max_messages: int


_HEAD_RE = re.compile(r"^Negotiation\. You are (\w+); (\w+) is the other player\.$", re.MULTILINE)
_POT_RE = re.compile(r"^Pot: (.*)$", re.MULTILINE)
_VALUES_RE = re.compile(r"^Your values: ([^(\n]*)", re.MULTILINE)
_OFFER_RE = re.compile(r"^Offer from (\w+): you get ([^(\n]*)", re.MULTILINE)
_LEFT_RE = re.compile(r"^Messages left: (\d+) of (\d+)$", re.MULTILINE)


def parse_view(observation: Observation) -> NegotiationView | None:
    """The :class:`NegotiationView` in a negotiation observation; None when it is not one of
    a live game (wrong text, or the game is over)."""
    if not isinstance(observation, str):
        return None
    head, pot, values, left = (r.search(observation) for r in (_HEAD_RE, _POT_RE, _VALUES_RE, _LEFT_RE))
    if head is None or pot is None or values is None or left is None:
        return None
    counts, vals = parse_items(pot.group(1)), parse_items(values.group(1))
    if isinstance(counts, str) or isinstance(vals, str):
        return None
    offer_m = _OFFER_RE.search(observation)
    offer = parse_items(offer_m.group(2)) if offer_m else None
    return NegotiationView(
        role=head.group(1),
        other=head.group(2),
        counts=counts,
        values=vals,
        offer=offer if isinstance(offer, tuple) else None,
        offer_by_other=bool(offer_m and offer_m.group(1) != "you"),
        messages_left=int(left.group(1)),
        max_messages=int(left.group(2)),
    )


def shares(counts: tuple[int, ...]) -> list[tuple[int, ...]]:
    """Every share of a pot with ``counts``: each item from 0 to its count."""
    return list(itertools.product(*(range(c + 1) for c in counts)))


class RandomNegotiator:
    """Random play in valid syntax (seeded): see the module docstring."""

    def __init__(self, seed: int | None = None) -> None:
        self.rng = random.Random(seed)

    def __call__(self, role: str, observation: Observation) -> str:
        view = parse_view(observation)
        if view is None:
            return "WALK AWAY"
        r = self.rng.random()
        if view.offer_by_other and r < ACCEPT_PROBABILITY:
            return "ACCEPT"
        if r > 1.0 - WALK_AWAY_PROBABILITY:
            return "WALK AWAY"
        share = tuple(self.rng.randint(0, c) for c in view.counts)
        return f"PROPOSE {format_items(share)}"


class ConcederAgent:
    """A time-dependent negotiator (see the module docstring).

    Args:
        seed: breaks ties between equally good proposals (None: the first in item order).
        exponent: > 1 concedes early, < 1 late (boulware); 1 is linear.
        reserve: the lowest aspiration, a fraction of the pot's value to the agent, in [0, 1].
    """

    default_exponent = 2.0

    def __init__(self, seed: int | None = None, exponent: float | None = None, reserve: float = 0.5) -> None:
        self.exponent = float(self.default_exponent if exponent is None else exponent)
        if self.exponent <= 0:
            raise ValueError(f"exponent must be > 0, got {self.exponent}")
        if not 0.0 <= reserve <= 1.0:
            raise ValueError(f"reserve must be in [0, 1], got {reserve}")
        self.reserve = float(reserve)
        self.rng = random.Random(seed) if seed is not None else None

    def aspiration(self, view: NegotiationView) -> float:
        """The value the agent asks for now: its whole pot's value falling to ``reserve`` of it."""
        total = total_value(view.values, view.counts)
        progress = (view.max_messages - view.messages_left) / max(1, view.max_messages)
        return total * (1.0 - (1.0 - self.reserve) * progress ** (1.0 / self.exponent))

    def __call__(self, role: str, observation: Observation) -> str:
        view = parse_view(observation)
        if view is None:
            return "WALK AWAY"
        target = self.aspiration(view)
        if view.offer_by_other and view.offer is not None:
            offered = total_value(view.values, view.offer)
            if offered >= target - 1e-9 or (view.messages_left == 1 and offered > 0):
                return "ACCEPT"
        if view.messages_left <= 1:
            return "WALK AWAY"
        candidates = [s for s in shares(view.counts) if total_value(view.values, s) >= target - 1e-9]
        best = min((total_value(view.values, s), sum(s)) for s in candidates)
        ties = [s for s in candidates if (total_value(view.values, s), sum(s)) == best]
        share = self.rng.choice(ties) if self.rng else ties[0]
        return f"PROPOSE {format_items(share)}"


class BoulwareAgent(ConcederAgent):
    """A :class:`ConcederAgent` that holds out until late (``exponent=0.5``)."""

    default_exponent = 0.5
