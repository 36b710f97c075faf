"""``games/tictactoe-v0``: tic-tac-toe for two roles, ``x`` (moves first) and ``o``.

What role ``x`` sees on its turn::

    Tic-tac-toe. You play X.
    Last move: O played 5.
    X|2|3
    -+-+-
    4|O|6
    -+-+-
    7|8|9
    Legal moves: 2 3 4 6 7 8 9
    Reply with the number of a free cell (1-9).

Free cells show their number, so the action is one of the numbers on the board: the first
integer in the action text is taken (``"3"``, ``"I play 3"``). Rewards, illegal moves and
forfeits follow :mod:`tinker_env_games.board`.

Scripted opponents (``TicTacToeEnv.scripted_opponents``): ``random`` (:class:`RandomAgent`),
``minimax`` (:class:`MinimaxAgent`), perfect play: exhaustive negamax, memoised over the 5478
reachable positions; among equally good moves it prefers the quickest win or the slowest loss,
then the lowest cell (or a seeded random one with ``seed=``); and ``mixed``
(:class:`MixedAgent`): each move a perfect one with probability 1/2, else a random legal one, an
opponent that can be beaten but punishes blunders. All read only the observation text, like a
model would.
"""

from __future__ import annotations

import functools
import random
import re
from collections.abc import Sequence
from typing import ClassVar

from tinker_core import Observation, OpponentFactory
from tinker_env_games.board import BoardGameEnv, RandomAgent, board_spec

__all__ = [
    "LINES",
    "TICTACTOE_SPEC",
    "MinimaxAgent",
    "MixedAgent",
    "TicTacToeEnv",
    "free_cells",
    "minimax_moves",
    "minimax_value",
    "parse_board",
    "render_board",
    "winner_of",
]

EMPTY = "."
LINES: tuple[tuple[int, int, int], ...] = (
    (0, 1, 2),
    (3, 4, 5),
    (6, 7, 8),  # rows
    (0, 3, 6),
    (1, 4, 7),
    (2, 5, 8),  # columns
    (0, 4, 8),
    (2, 4, 6),  # diagonals
)

TICTACTOE_SPEC = board_spec(
    "games/tictactoe-v0",
    "Two-player tic-tac-toe",
    cells=9,
    action_format="the number (1-9) of a free cell, e.g. '5'",
)

_ROW_RE = re.compile(r"^([XO1-9])\|([XO1-9])\|([XO1-9])$")


def winner_of(board: Sequence[str]) -> str | None:
    """``"X"`` or ``"O"`` when that mark fills a line of the 9-cell ``board``, else None."""
    for a, b, c in LINES:
        if board[a] != EMPTY and board[a] == board[b] == board[c]:
            return board[a]
    return None


def free_cells(board: Sequence[str]) -> list[int]:
    """The free cells, numbered 1-9 (row by row)."""
    return [i + 1 for i, v in enumerate(board) if v == EMPTY]


def render_board(board: Sequence[str]) -> str:
    """Three rows ``X|2|3`` separated by ``-+-+-``; free cells show their number."""
    cells = [v if v != EMPTY else str(i + 1) for i, v in enumerate(board)]
    rows = ["|".join(cells[r * 3 : r * 3 + 3]) for r in range(3)]
    return "\n-+-+-\n".join(rows)


def parse_board(observation: str) -> list[str]:
    """The 9 cells (``"X"``, ``"O"`` or ``"."``) of the board in a tic-tac-toe observation."""
    cells: list[str] = []
    for line in observation.splitlines():
        m = _ROW_RE.match(line.strip())
        if m:
            cells.extend(v if v in "XO" else EMPTY for v in m.groups())
    if len(cells) != 9:
        raise ValueError("parse_board: the observation does not contain a 3x3 tic-tac-toe board")
    return cells


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

    def __call__(self, role: str, observation: Observation) -> str:
        mark = {"x": "X", "o": "O"}.get(role)
        if mark is None:
            raise ValueError(f"MinimaxAgent plays tic-tac-toe roles 'x' or 'o', got {role!r}")
        if not isinstance(observation, str):
            raise TypeError(f"MinimaxAgent reads a text observation, got {type(observation).__name__}")
        moves = minimax_moves(parse_board(observation), mark)
        if not moves:
            return "1"  # the game is over; any answer will do
        return str(self.rng.choice(moves) if self.rng else moves[0])


class MixedAgent:
    """Each move: :class:`MinimaxAgent`'s with probability ``minimax_prob``, else
    :class:`~tinker_env_games.board.RandomAgent`'s (a uniformly random legal cell).

    Args:
        seed: seeds the coin and both players (same seed, same observations: same moves).
        minimax_prob: the chance of a perfect move (default 0.5).
    """

    def __init__(self, seed: int | None = None, minimax_prob: float = 0.5) -> None:
        if not 0.0 <= minimax_prob <= 1.0:
            raise ValueError(f"minimax_prob must be in [0, 1], got {minimax_prob}")
        self.rng = random.Random(seed)
        self.minimax_prob = minimax_prob
        self.perfect = MinimaxAgent(seed=self.rng.randrange(2**31))
        self.random = RandomAgent(seed=self.rng.randrange(2**31))

    def __call__(self, role: str, observation: Observation) -> str:
        player = self.perfect if self.rng.random() < self.minimax_prob else self.random
        return player(role, observation)


class TicTacToeEnv(BoardGameEnv):
    """Tic-tac-toe; see the module docstring, and :class:`~tinker_env_games.board.BoardGameEnv`
    for the rules and arguments."""

    scripted_opponents: ClassVar[dict[str, OpponentFactory]] = {
        "random": RandomAgent,
        "minimax": MinimaxAgent,
        "mixed": MixedAgent,
    }
    title = "Tic-tac-toe"
    move_prompt = "Reply with the number of a free cell (1-9)."
    base_spec = TICTACTOE_SPEC
    num_cells = 9
    no_move_reason = "no cell number found"

    def new_board(self) -> list[str]:
        return [EMPTY] * 9

    def illegal_reason(self, move: int) -> str | None:
        if not 1 <= move <= 9:
            return f"there is no cell {move}; cells are 1 to 9"
        if self.board[move - 1] != EMPTY:
            return f"cell {move} is taken"
        return None

    def apply_move(self, move: int, mark: str) -> None:
        self.board[move - 1] = mark

    def legal_moves(self) -> list[int]:
        return [] if self.winner() else free_cells(self.board)

    def winner(self) -> str | None:
        return winner_of(self.board)

    def render_board(self) -> str:
        return render_board(self.board)
