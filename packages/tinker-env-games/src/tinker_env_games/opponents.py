"""Opponents that need no model, usable wherever an agent is: ``agent(role, observation) -> str``.

They read only the observation text, like a model would:

- :class:`RandomAgent` plays a uniformly random move from the ``Legal moves:`` line of any game
  in this package (seeded: the same seed gives the same moves for the same observations).
- :class:`MinimaxAgent` plays perfect tic-tac-toe (exhaustive negamax, memoised over the 5478
  reachable positions); among equally good moves it prefers the quickest win or the slowest
  loss, then the lowest cell (or a seeded random one with ``seed=``).
"""

from __future__ import annotations

import functools
import random
import re

from tinker_env_games.tictactoe import EMPTY, free_cells, parse_board, winner_of

__all__ = ["MinimaxAgent", "RandomAgent", "legal_moves_in", "minimax_moves", "minimax_value"]

_LEGAL_RE = re.compile(r"^Legal moves:((?: \d+)*)\s*$", re.MULTILINE)


def legal_moves_in(observation: str) -> list[int]:
    """The moves on the observation's ``Legal moves:`` line (empty when it has none)."""
    m = _LEGAL_RE.search(observation)
    return [int(x) for x in m.group(1).split()] if m else []


class RandomAgent:
    """Plays a random legal move; with no ``Legal moves:`` line it answers ``"1"``."""

    def __init__(self, seed: int | None = None) -> None:
        self.rng = random.Random(seed)

    def __call__(self, role: str, observation: str) -> str:
        moves = legal_moves_in(observation)
        return str(self.rng.choice(moves)) if moves else "1"


def _other(mark: str) -> str:
    return "O" if mark == "X" else "X"


@functools.cache
def _solve(board: str, mark: str) -> tuple[int, tuple[int, ...]]:
    """Negamax value for ``mark`` to move on ``board`` (9 chars), and the best cells (1-9).

    The value is ``1 + free cells`` for a win (so earlier wins score higher), its negative for
    a loss, 0 for a draw.
    """
    if winner_of(board) is not None:  # the previous mover won
        return -(1 + board.count(EMPTY)), ()
    cells = free_cells(board)
    if not cells:
        return 0, ()
    best, best_moves = None, []
    for cell in cells:
        child = board[: cell - 1] + mark + board[cell:]
        value = -_solve(child, _other(mark))[0]
        if best is None or value > best:
            best, best_moves = value, [cell]
        elif value == best:
            best_moves.append(cell)
    assert best is not None
    return best, tuple(best_moves)


def minimax_value(board: list[str] | str, mark: str) -> int:
    """Positive when ``mark`` to move wins with perfect play, 0 for a draw, negative for a loss."""
    return _solve("".join(board), mark)[0]


def minimax_moves(board: list[str] | str, mark: str) -> tuple[int, ...]:
    """All optimal cells (1-9) for ``mark`` to move."""
    return _solve("".join(board), mark)[1]


class MinimaxAgent:
    """Perfect tic-tac-toe: never loses. Reads the board from the observation.

    Args:
        seed: None (default) plays the lowest optimal cell; an int picks among the optimal
            cells with a seeded RNG, for varied but still perfect games.
    """

    def __init__(self, seed: int | None = None) -> None:
        self.rng = random.Random(seed) if seed is not None else None

    def __call__(self, role: str, observation: str) -> str:
        mark = {"x": "X", "o": "O"}.get(role)
        if mark is None:
            raise ValueError(f"MinimaxAgent plays tic-tac-toe roles 'x' or 'o', got {role!r}")
        moves = minimax_moves(parse_board(observation), mark)
        if not moves:
            return "1"  # the game is over; any answer will do
        return str(self.rng.choice(moves) if self.rng else moves[0])
