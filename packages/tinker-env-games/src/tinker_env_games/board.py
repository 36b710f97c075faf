"""The shared rules of the two-player board games (tic-tac-toe, connect four).

Roles are ``"x"`` and ``"o"``; ``x`` moves first. Rewards, per role:

- win ``+1``, loss ``-1``, draw ``0``, given on the step that ends the game;
- an illegal or unparsable move costs its author ``-illegal_move_penalty`` (default 0.1) and
  the same role moves again; the observation then starts with ``Illegal move ...`` and says
  how many illegal moves are left;
- the ``max_illegal_moves``-th illegal move of a role in one episode (default 3) forfeits the
  game: that role gets ``-1`` (instead of the penalty), the other ``+1``, reason
  ``"forfeit-illegal"``.

So an episode always ends, after at most ``cells + 2 * (max_illegal_moves - 1)`` steps.
:meth:`BoardGameEnv.forfeit` ends a game from outside (the coordinator uses it when an agent
times out or fails). At the end every role's ``infos[role]`` holds ``outcome`` (``"win"``,
``"loss"`` or ``"draw"``), ``winner`` (a role or None) and ``reason`` (``"win"``, ``"draw"``,
``"forfeit-illegal"`` or the reason given to :meth:`forfeit`).

Every board game offers the scripted opponent ``random`` (:class:`RandomAgent`, which plays a
move from the ``Legal moves:`` line of the observation) in ``scripted_opponents``, the contract
of :mod:`tinker_core.opponents`; a game adds its own (tic-tac-toe: ``minimax``).
"""

from __future__ import annotations

import random
import re
from abc import abstractmethod
from dataclasses import replace
from typing import Any, ClassVar

from tinker_core import EnvSpec, MultiAgentTextEnv, Observation, OpponentFactory

__all__ = ["ROLES", "BoardGameEnv", "RandomAgent", "board_spec", "legal_moves_in"]

ROLES = ("x", "o")
MARKS = {"x": "X", "o": "O"}
DEFAULT_MAX_ILLEGAL_MOVES = 3
DEFAULT_ILLEGAL_MOVE_PENALTY = 0.1


def board_spec(id: str, game: str, *, cells: int, action_format: str) -> EnvSpec:
    """The :class:`EnvSpec` of a board game on ``cells`` cells played by these rules; ``game``
    starts the description (``"Two-player tic-tac-toe"``)."""
    return EnvSpec(
        id=id,
        description=(
            f"{game} (roles x, o; x first). Win +1, loss -1, draw 0; an illegal move costs 0.1 "
            "and is retried; the 3rd illegal move forfeits."
        ),
        max_turns=cells + 2 * (DEFAULT_MAX_ILLEGAL_MOVES - 1),
        reward_range=(-1.0, 1.0),
        action_format=action_format,
        roles=ROLES,
        metadata={
            "kwargs": {
                "max_illegal_moves": "illegal moves that forfeit the game (default 3)",
                "illegal_move_penalty": "cost of each illegal move before that (default 0.1)",
            },
            "max_turns": "total steps of both roles, illegal moves included",
        },
    )


def other(role: str) -> str:
    return "o" if role == "x" else "x"


_LEGAL_RE = re.compile(r"^Legal moves:((?: \d+)*)\s*$", re.MULTILINE)
_MOVE_RE = re.compile(r"[-+]?\d+")


def legal_moves_in(observation: Observation) -> list[int]:
    """The moves on the observation's ``Legal moves:`` line (empty when it has none)."""
    m = _LEGAL_RE.search(observation) if isinstance(observation, str) else None
    return [int(x) for x in m.group(1).split()] if m else []


class RandomAgent:
    """Plays a uniformly random move from the ``Legal moves:`` line (seeded: the same seed gives
    the same moves for the same observations); with no such line it answers ``"1"``."""

    def __init__(self, seed: int | None = None) -> None:
        self.rng = random.Random(seed)

    def __call__(self, role: str, observation: Observation) -> str:
        moves = legal_moves_in(observation)
        return str(self.rng.choice(moves)) if moves else "1"


class BoardGameEnv(MultiAgentTextEnv):
    """Turn order, illegal-move handling, forfeits, rewards and infos for a 2-player game.

    Subclasses define the board: :meth:`new_board`, :meth:`illegal_reason`, :meth:`apply_move`,
    :meth:`legal_moves`, :meth:`winner`, :meth:`render_board` (and :meth:`parse_move` when a
    move is not the first integer of the action), and the class attributes ``title``,
    ``move_prompt``, ``base_spec`` (see :func:`board_spec`), ``num_cells`` and
    ``no_move_reason``. ``scripted_opponents`` names the agents it can be played against.

    Args:
        max_illegal_moves: the n-th illegal move of a role forfeits its game (default 3).
        illegal_move_penalty: cost of each earlier illegal move (default 0.1).
    """

    scripted_opponents: ClassVar[dict[str, OpponentFactory]] = {"random": RandomAgent}
    title: ClassVar[str]
    move_prompt: ClassVar[str]
    base_spec: ClassVar[EnvSpec]
    num_cells: ClassVar[int]
    no_move_reason: ClassVar[str] = "no move found"

    def __init__(
        self,
        max_illegal_moves: int = DEFAULT_MAX_ILLEGAL_MOVES,
        illegal_move_penalty: float = DEFAULT_ILLEGAL_MOVE_PENALTY,
    ) -> None:
        if max_illegal_moves < 1:
            raise ValueError(f"max_illegal_moves must be >= 1, got {max_illegal_moves}")
        if not 0.0 <= illegal_move_penalty <= 1.0:
            raise ValueError(f"illegal_move_penalty must be in [0, 1], got {illegal_move_penalty}")
        self.max_illegal_moves = int(max_illegal_moves)
        self.illegal_move_penalty = float(illegal_move_penalty)
        self.possible_agents = list(ROLES)
        max_steps = self.num_cells + 2 * (self.max_illegal_moves - 1)
        self.env_spec = replace(self.base_spec, max_turns=max_steps)
        self.reset()

    # ---- the board (subclasses) ------------------------------------------------------------
    @abstractmethod
    def new_board(self) -> list[str]: ...

    def parse_move(self, action: str) -> int | None:
        """The move named by ``action`` (its first integer), or None when it names none."""
        m = _MOVE_RE.search(action)
        return int(m.group(0)) if m else None

    @abstractmethod
    def illegal_reason(self, move: int) -> str | None:
        """Why ``move`` is illegal on the current board, or None when it is legal."""

    @abstractmethod
    def apply_move(self, move: int, mark: str) -> None: ...

    @abstractmethod
    def legal_moves(self) -> list[int]: ...

    @abstractmethod
    def winner(self) -> str | None:
        """The mark (``"X"``/``"O"``) with a winning line, or None."""

    @abstractmethod
    def render_board(self) -> str: ...

    # ---- the AEC protocol ------------------------------------------------------------------
    def reset(self, seed: int | None = None, options: dict[str, Any] | None = None) -> None:
        super().reset(seed=seed, options=options)
        self.board = self.new_board()
        self.agent_selection = "x"
        self.illegal_counts = {r: 0 for r in ROLES}
        self.last_error: dict[str, str | None] = {r: None for r in ROLES}
        self.last_move: tuple[str, int] | None = None
        self.moves: list[tuple[str, int]] = []
        self.outcome_reason: str | None = None
        self.winning_role: str | None = None
        self._update_infos()

    def observe(self, agent: str) -> str:
        self.check_role(agent)
        lines = [f"{self.title}. You play {MARKS[agent]}."]
        if self.last_move is not None:
            role, move = self.last_move
            lines.append(f"Last move: {MARKS[role]} played {move}.")
        if self.done:
            lines.append(self.render_board())
            lines.append(self._result_line(agent))
            return "\n".join(lines) + "\n"
        if self.last_error[agent]:
            left = self.max_illegal_moves - self.illegal_counts[agent]
            lines.append(f"{self.last_error[agent]} {left} more illegal move(s) and you forfeit.")
        lines.append(self.render_board())
        if agent == self.agent_selection:
            lines.append("Legal moves: " + " ".join(str(m) for m in self.legal_moves()))
            lines.append(self.move_prompt)
        else:
            lines.append(f"Waiting for {MARKS[other(agent)]} to move.")
        return "\n".join(lines) + "\n"

    def step(self, action: str) -> None:
        role = self._begin_step()
        text = action if isinstance(action, str) else repr(action)
        move = self.parse_move(text)
        reason = self.no_move_reason if move is None else self.illegal_reason(move)
        if reason is not None:
            self.illegal_counts[role] += 1
            shown = text.strip()[:40]
            self.last_error[role] = f"Illegal move {shown!r}: {reason}."
            if self.illegal_counts[role] >= self.max_illegal_moves:
                self._finish(other(role), "forfeit-illegal")
            else:
                self.rewards[role] = -self.illegal_move_penalty
        else:
            assert move is not None
            self.last_error[role] = None
            self.apply_move(move, MARKS[role])
            self.last_move = (role, move)
            self.moves.append((role, move))
            if self.winner() is not None:
                self._finish(role, "win")
            elif not self.legal_moves():
                self._finish(None, "draw")
            else:
                self.agent_selection = other(role)
        self._end_step()

    def forfeit(self, role: str, reason: str = "forfeit") -> None:
        """End the game now: ``role`` loses (-1), the other role wins (+1). No-op when over."""
        if self._begin_forfeit(role):
            self._finish(other(role), reason)
            self._end_step()

    # ---- helpers ---------------------------------------------------------------------------
    def _finish(self, winner: str | None, reason: str) -> None:
        self.winning_role = winner
        self.outcome_reason = reason
        for r in ROLES:
            self.rewards[r] = 0.0 if winner is None else (1.0 if r == winner else -1.0)
            self.terminations[r] = True

    def _outcome(self, role: str) -> str:
        if self.winning_role is None:
            return "draw"
        return "win" if role == self.winning_role else "loss"

    def _result_line(self, role: str) -> str:
        if self.winning_role is None:
            return "Game over: draw."
        how = {"win": "wins", "forfeit-illegal": "wins: too many illegal moves by the opponent"}
        verb = how.get(self.outcome_reason or "", f"wins by forfeit ({self.outcome_reason})")
        you = "You won." if role == self.winning_role else "You lost."
        return f"Game over: {MARKS[self.winning_role]} {verb}. {you}"

    def _update_infos(self) -> None:
        for r in ROLES:
            info: dict[str, Any] = {"illegal_moves": self.illegal_counts[r]}
            if self.done:
                info.update(
                    outcome=self._outcome(r), winner=self.winning_role, reason=self.outcome_reason
                )
            elif r == self.agent_selection:
                info["legal_moves"] = self.legal_moves()
            self.infos[r] = info

    def render(self) -> str | None:
        return self.render_board()
