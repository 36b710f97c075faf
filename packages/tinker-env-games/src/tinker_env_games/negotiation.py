"""``games/negotiation-v0``: two players split a pot of items they value differently.

Roles ``alice`` (speaks first, by default) and ``bob``. The pot holds some books, hats and balls (1-4 of
each, 5-7 items in all); each player has private per-item values, whole numbers that make the
whole pot worth exactly 10 to that player (the setting of Lewis et al., 2017, "Deal or No
Deal?"). The players take turns sending one message each, ``max_messages`` in all (default 8).
``first_mover`` says who opens: ``"alice"`` (the default), ``"bob"``, or ``"random"`` (drawn
per game from the reset's seed, after the scenario, so a seed's scenario is the same whoever
opens; each seat then plays both first and second, and neither is stuck answering ultimatums).
What ``alice`` sees on her turn::

    Negotiation. You are alice; bob is the other player.
    Pot: book=2 hat=1 ball=3
    Your values: book=2 hat=3 ball=1 (the pot is worth 10 to you; bob's values are secret)
    bob said: PROPOSE book=0 hat=1 ball=1 I need the hat
    Offer from bob: you get book=2 hat=0 ball=2 (worth 6 to you)
    Messages left: 6 of 8
    Reply with one line: a message, which may start with PROPOSE book=n hat=n ball=n (the items you get), ACCEPT (bob's offer) or WALK AWAY.

With ``brief=True`` the observation leaves out the ``(the pot is worth ...)`` note and the
``Reply with one line ...`` line (for models with a small context window, such as the tiny
preset's 1024 characters: a role's trajectory holds all its observations).

**Actions** are free text. A line that *starts* with a command (case-insensitive, after any
spaces, quotes, brackets or markdown marks) is a move; the first such line counts. The whole
message, on one line (at most 200 characters), is passed on to the other player
(``bob said: ...``):

- ``PROPOSE book=1 hat=0 ball=2`` (alias ``OFFER``): the items the speaker gets; the other
  player gets the rest. Counts may be written ``book=1``, ``books: 1``, ``book 1`` or
  ``1 book``; an item not named counts as 0. The first run of counts (joined by spaces,
  punctuation or ``and``) is the proposal, so talk after it may name items
  (``PROPOSE book=2 you keep 3 balls``). The new proposal replaces any earlier one.
- ``ACCEPT``: take the other player's standing proposal: a deal, the game ends.
- ``WALK AWAY`` (aliases ``WALKAWAY``, ``WALK-AWAY``, ``NO DEAL``): the game ends with no deal.

Everything else is talk. An **invalid** command (a proposal naming no item, an item twice, or
more than the pot holds; ``ACCEPT`` with no offer from the other player on the table) costs its
author ``invalid_penalty`` (default 0.05), still uses the message, and is reported to its
author in the next observation (``Your last command was invalid: ...``).

**End and scoring**, by rule: on a deal each player's reward is the value of what it gets
divided by the pot's value to it (10), in ``[0, 1]``. With no deal (``WALK AWAY``, or
``max_messages`` messages without an accepted proposal: a proposal in the very last message
cannot be answered) both get ``no_deal_reward`` (default 0). Rewards are given on the final
step. ``infos[role]`` then holds ``outcome`` (``"win"`` when the role's score is higher than
the other's, ``"loss"`` when lower, ``"draw"`` when equal, no deal included), ``reason``
(``"deal"``, ``"walk-away"``, ``"turn-limit"`` or a forfeit reason), ``deal`` (bool),
``score`` (the role's deal score, 0 without a deal), ``allocation`` (the items it got) and
``values`` (its values). :meth:`NegotiationEnv.forfeit` (used by the coordinator when a
scripted agent times out or fails) ends the game with no deal and costs the offender -1 (its
outcome ``"loss"``, the other's ``"win"``).

**Scenarios** are drawn from ``self.np_random`` (seeded by ``reset``): the same seed, the
same pot and values. Each scenario belongs to a fixed split by a CRC32 of its description:
``"test"`` for about one in ten, ``"train"`` otherwise; the env draws from ``split="train"``
by default, so held-out evaluation (``env.eval_kwargs: {split: test}``) never sees a training
scenario. ``reset(options={"scenario": Scenario(...)})`` (a
:class:`~tinker_env_games.negotiation_rules.Scenario`, or its dict form) fixes one. The rules
themselves (parsing, scoring, scenario draws) are pure functions in
:mod:`tinker_env_games.negotiation_rules`. The spec's reward range is ``[-1, 1]``: a step
gives a deal score in ``[0, 1]``, minus ``invalid_penalty`` for an invalid command, or -1 for
a forfeit.

Scripted opponents (``NegotiationEnv.scripted_opponents``, from
:mod:`tinker_env_games.negotiators`): ``random``, ``conceder`` and ``boulware``.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any, ClassVar, Literal, get_args

from tinker_core import EnvSpec, MultiAgentTextEnv, OpponentFactory
from tinker_env_games.negotiation_rules import (
    DEFAULT_INVALID_PENALTY,
    DEFAULT_MAX_MESSAGES,
    ITEMS,
    ROLES,
    Command,
    Scenario,
    Split,
    deal_scores,
    draw_scenario,
    format_items,
    parse_command,
    total_value,
)
from tinker_env_games.negotiation_rules import other_role as _other
from tinker_env_games.negotiators import BoulwareAgent, ConcederAgent, RandomNegotiator

__all__ = ["NEGOTIATION_SPEC", "FirstMover", "NegotiationEnv"]

FirstMover = Literal["alice", "bob", "random"]
FIRST_MOVERS: tuple[str, ...] = get_args(FirstMover)

NEGOTIATION_SPEC = EnvSpec(
    id="games/negotiation-v0",
    description=(
        "Two-player negotiation (roles alice, bob; alice first unless first_mover says "
        "otherwise): split a pot of books, hats and balls with private per-item values (the pot is worth 10 to each) in at most "
        "max_messages messages of free text with PROPOSE / ACCEPT / WALK AWAY commands. A deal "
        "scores each player's value of its share / 10; no deal scores no_deal_reward (0)."
    ),
    max_turns=DEFAULT_MAX_MESSAGES,
    reward_range=(-1.0, 1.0),
    action_format="one line, e.g. 'PROPOSE book=1 hat=0 ball=2 you keep the rest', 'ACCEPT'",
    roles=ROLES,
    metadata={
        "kwargs": {
            "max_messages": f"messages of both players together (default {DEFAULT_MAX_MESSAGES})",
            "invalid_penalty": f"cost of an invalid command (default {DEFAULT_INVALID_PENALTY})",
            "no_deal_reward": "both players' reward without a deal (default 0)",
            "split": "scenarios drawn from 'train' (default), 'test' (held out) or 'all'",
            "brief": "shorter observations, without the instructions (default false)",
            "first_mover": "who opens: 'alice' (default), 'bob' or 'random' (drawn per game from the seed)",
        },
        "max_turns": "messages of both players together (max_messages)",
    },
)


class NegotiationEnv(MultiAgentTextEnv):
    """Split a pot by negotiation; see the module docstring for the rules and the text format.

    Args:
        max_messages: messages of both players together before the game ends with no deal.
        invalid_penalty: the cost of an invalid command, in ``[0, 1]``.
        no_deal_reward: both players' reward without a deal, in ``[0, 1]``.
        split: draw scenarios from ``"train"``, ``"test"`` or ``"all"``.
        brief: shorter observations for small context windows: without the ``(the pot is
            worth ...)`` note and the ``Reply with one line ...`` instructions.
        first_mover: who sends the first message: ``"alice"``, ``"bob"`` or ``"random"`` (drawn
            per game from ``self.np_random`` after the scenario).
    """

    scripted_opponents: ClassVar[dict[str, OpponentFactory]] = {
        "random": RandomNegotiator,
        "conceder": ConcederAgent,
        "boulware": BoulwareAgent,
    }

    def __init__(
        self,
        max_messages: int = DEFAULT_MAX_MESSAGES,
        invalid_penalty: float = DEFAULT_INVALID_PENALTY,
        no_deal_reward: float = 0.0,
        split: Split = "train",
        brief: bool = False,
        first_mover: FirstMover = "alice",
    ) -> None:
        if max_messages < 1:
            raise ValueError(f"max_messages must be >= 1, got {max_messages}")
        if not 0.0 <= invalid_penalty <= 1.0:
            raise ValueError(f"invalid_penalty must be in [0, 1], got {invalid_penalty}")
        if not 0.0 <= no_deal_reward <= 1.0:
            raise ValueError(f"no_deal_reward must be in [0, 1], got {no_deal_reward}")
        if split not in ("train", "test", "all"):
            raise ValueError(f"split must be 'train', 'test' or 'all', got {split!r}")
        if first_mover not in FIRST_MOVERS:
            raise ValueError(f"first_mover must be 'alice', 'bob' or 'random', got {first_mover!r}")
        self.max_messages = int(max_messages)
        self.invalid_penalty = float(invalid_penalty)
        self.no_deal_reward = float(no_deal_reward)
        self.split: Split = split
        self.brief = bool(brief)
        self.first_mover: FirstMover = first_mover
        self.possible_agents = list(ROLES)
        self.env_spec = NEGOTIATION_SPEC
        if self.max_messages != NEGOTIATION_SPEC.max_turns:
            self.env_spec = replace(NEGOTIATION_SPEC, max_turns=self.max_messages)
        self.reset()

    # ---- the AEC protocol ------------------------------------------------------------------
    def reset(self, seed: int | None = None, options: dict[str, Any] | None = None) -> None:
        """Draw a scenario; ``options={"scenario": Scenario | dict}`` fixes it instead."""
        super().reset(seed=seed, options=options)
        given = (options or {}).get("scenario")
        if given is None:
            self.scenario = draw_scenario(self.np_random, self.split)
        else:
            self.scenario = given if isinstance(given, Scenario) else Scenario.from_dict(given)
        if self.first_mover == "random":
            self.agent_selection = ROLES[int(self.np_random.integers(len(ROLES)))]
        else:
            self.agent_selection = self.first_mover
        self.messages: list[tuple[str, str]] = []
        self.offer: tuple[str, tuple[int, ...]] | None = None  # (proposer, proposer's items)
        self.invalid_counts = {r: 0 for r in ROLES}
        self.last_error: dict[str, str | None] = {r: None for r in ROLES}
        self.reason: str | None = None
        self.forfeited_by: str | None = None
        self.allocation: dict[str, tuple[int, ...]] | None = None
        self.scores = {r: 0.0 for r in ROLES}
        self._update_infos()

    @property
    def messages_left(self) -> int:
        """Messages both players may still send before the game ends with no deal."""
        return self.max_messages - len(self.messages)

    def observe(self, agent: str) -> str:
        self.check_role(agent)
        s, other = self.scenario, _other(agent)
        values = f"Your values: {format_items(s.values[agent])}"
        if not self.brief:
            worth = total_value(s.values[agent], s.counts)
            values += f" (the pot is worth {worth} to you; {other}'s values are secret)"
        lines = [
            f"Negotiation. You are {agent}; {other} is the other player.",
            f"Pot: {format_items(s.counts)}",
            values,
        ]
        said = [text for role, text in self.messages if role == other]
        if said:
            lines.append(f"{other} said: {said[-1]}")
        if self.done:
            lines.append(self._result_line(agent))
            return "\n".join(lines) + "\n"
        if self.offer is not None:
            proposer, items = self.offer
            mine = items if proposer == agent else tuple(c - n for c, n in zip(s.counts, items, strict=True))
            worth = total_value(s.values[agent], mine)
            by = "you" if proposer == agent else other
            lines.append(f"Offer from {by}: you get {format_items(mine)} (worth {worth} to you)")
        if self.last_error[agent]:
            lines.append(f"Your last command was invalid: {self.last_error[agent]}.")
        lines.append(f"Messages left: {self.messages_left} of {self.max_messages}")
        if agent == self.agent_selection:
            if self.brief:
                return "\n".join(lines) + "\n"
            lines.append(
                "Reply with one line: a message, which may start with PROPOSE book=n hat=n ball=n "
                f"(the items you get), ACCEPT ({other}'s offer) or WALK AWAY."
            )
        else:
            lines.append(f"Waiting for {other}.")
        return "\n".join(lines) + "\n"

    def step(self, action: str) -> None:
        role = self._begin_step()
        cmd = parse_command(action if isinstance(action, str) else repr(action))
        self.messages.append((role, cmd.text))
        error = self._apply(role, cmd)
        self.last_error[role] = error
        if error is not None:
            self.invalid_counts[role] += 1
            self.rewards[role] -= self.invalid_penalty
        if not self.done:
            if self.messages_left <= 0:
                self._finish("turn-limit", None)
            else:
                self.agent_selection = _other(role)
        self._end_step()

    def forfeit(self, role: str, reason: str = "forfeit") -> None:
        """End the game now with no deal: ``role`` gets -1, the other ``no_deal_reward``."""
        if self._begin_forfeit(role):
            self.forfeited_by = role
            self._finish(reason, None)
            self.rewards[role] = -1.0
            self._end_step()

    # ---- rules -----------------------------------------------------------------------------
    def _apply(self, role: str, cmd: Command) -> str | None:
        """Apply ``cmd`` by ``role``; the reason it is invalid, or None."""
        if cmd.kind == "propose":
            if isinstance(cmd.items, str):
                return f"the proposal {cmd.items}"
            assert cmd.items is not None
            for name, n, c in zip(ITEMS, cmd.items, self.scenario.counts, strict=True):
                if n > c:
                    return f"you asked for {n} {name} but the pot has {c}"
            self.offer = (role, cmd.items)
        elif cmd.kind == "accept":
            if self.offer is None or self.offer[0] == role:
                return f"there is no offer from {_other(role)} to accept"
            self._finish("deal", self.offer)
        elif cmd.kind == "walk-away":
            self._finish("walk-away", None)
        return None

    def _finish(self, reason: str, deal: tuple[str, tuple[int, ...]] | None) -> None:
        self.reason = reason
        if deal is None:
            self.scores = {r: 0.0 for r in ROLES}
            for r in ROLES:
                self.rewards[r] += self.no_deal_reward
        else:
            proposer, items = deal
            rest = tuple(c - n for c, n in zip(self.scenario.counts, items, strict=True))
            self.allocation = {proposer: items, _other(proposer): rest}
            self.scores = deal_scores(self.scenario, proposer, items)
            for r in ROLES:
                self.rewards[r] += self.scores[r]
        for r in ROLES:
            self.terminations[r] = True

    def _outcome(self, role: str) -> str:
        if self.forfeited_by is not None:
            return "loss" if role == self.forfeited_by else "win"
        mine, theirs = self.scores[role], self.scores[_other(role)]
        return "draw" if mine == theirs else ("win" if mine > theirs else "loss")

    def _result_line(self, role: str) -> str:
        other = _other(role)
        theirs = format_items(self.scenario.values[other])
        if self.allocation is None:
            how = {"walk-away": "someone walked away", "turn-limit": "no messages left"}
            why = how.get(self.reason or "", self.reason or "")
            return f"Game over: no deal ({why}). {other}'s values were {theirs}."
        got = self.allocation[role]
        worth = total_value(self.scenario.values[role], got)
        return (
            f"Game over: deal. You get {format_items(got)} (worth {worth} to you). "
            f"{other}'s values were {theirs}."
        )

    def _update_infos(self) -> None:
        for r in ROLES:
            info: dict[str, Any] = {"invalid_commands": self.invalid_counts[r]}
            if self.done:
                info.update(
                    outcome=self._outcome(r),
                    reason=self.reason,
                    deal=self.allocation is not None,
                    score=self.scores[r],
                    allocation=list(self.allocation[r]) if self.allocation else None,
                    values=list(self.scenario.values[r]),
                )
            else:
                info["messages_left"] = self.messages_left
            self.infos[r] = info

    def render(self) -> str | None:
        return "\n".join(f"{role}: {text}" for role, text in self.messages)
