"""``games/connect-four-v0``: connect four on a 6x7 board, roles ``x`` (first) and ``o``.

What role ``o`` sees on its turn::

    Connect four. You play O.
    Last move: X played 4.
    1 2 3 4 5 6 7
    . . . . . . .
    . . . . . . .
    . . . . . . .
    . . . . . . .
    . . . . . . .
    . . . X . . .
    Legal moves: 1 2 3 4 5 6 7
    Reply with a column number (1-7); your piece drops to the lowest free row.

The first integer in the action is the column. Four in a row (horizontal, vertical or
diagonal) wins; a full board is a draw. Rewards, illegal moves (no number, no such column, a
full column) and forfeits follow :mod:`tinker_env_games.board`.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from tinker_env_games.board import BoardGameEnv, board_spec

__all__ = ["CONNECT_FOUR_SPEC", "COLUMNS", "ROWS", "ConnectFourEnv", "parse_board", "winner_of"]

ROWS, COLUMNS, CONNECT = 6, 7, 4
EMPTY = "."

CONNECT_FOUR_SPEC = board_spec(
    "games/connect-four-v0",
    "Two-player connect four on 6x7",
    cells=ROWS * COLUMNS,
    action_format="a column number 1-7, e.g. '4'",
)

def _lines() -> list[tuple[int, ...]]:
    out = []
    for r in range(ROWS):
        for c in range(COLUMNS):
            for dr, dc in ((0, 1), (1, 0), (1, 1), (1, -1)):
                end_r, end_c = r + dr * (CONNECT - 1), c + dc * (CONNECT - 1)
                if 0 <= end_r < ROWS and 0 <= end_c < COLUMNS:
                    out.append(tuple((r + dr * k) * COLUMNS + c + dc * k for k in range(CONNECT)))
    return out


LINES: tuple[tuple[int, ...], ...] = tuple(_lines())
"""Every run of four cells (index ``row * 7 + column``, row 0 at the top): 69 of them."""


def winner_of(board: Sequence[str]) -> str | None:
    """``"X"`` or ``"O"`` when that mark has four in a row on the 42-cell ``board``."""
    for line in LINES:
        first = board[line[0]]
        if first != EMPTY and all(board[i] == first for i in line[1:]):
            return first
    return None


def parse_board(observation: str) -> list[str]:
    """The 42 cells (``"X"``, ``"O"``, ``"."``) of the board in a connect-four observation."""
    rows = [
        line.split()
        for line in observation.splitlines()
        if re.fullmatch(r"[XO.](?: [XO.]){6}", line.strip())
    ]
    if len(rows) != ROWS:
        raise ValueError("parse_board: the observation does not contain a 6x7 connect-four board")
    return [v for row in rows for v in row]


class ConnectFourEnv(BoardGameEnv):
    """Connect four; see the module docstring, and :class:`~tinker_env_games.board.BoardGameEnv`
    for the rules and arguments."""

    title = "Connect four"
    move_prompt = "Reply with a column number (1-7); your piece drops to the lowest free row."
    base_spec = CONNECT_FOUR_SPEC
    num_cells = ROWS * COLUMNS
    no_move_reason = "no column number found"

    def new_board(self) -> list[str]:
        return [EMPTY] * (ROWS * COLUMNS)

    def illegal_reason(self, move: int) -> str | None:
        if not 1 <= move <= COLUMNS:
            return f"there is no column {move}; columns are 1 to {COLUMNS}"
        if self.board[move - 1] != EMPTY:  # the top cell of the column
            return f"column {move} is full"
        return None

    def apply_move(self, move: int, mark: str) -> None:
        col = move - 1
        for row in range(ROWS - 1, -1, -1):
            if self.board[row * COLUMNS + col] == EMPTY:
                self.board[row * COLUMNS + col] = mark
                return
        raise AssertionError("apply_move on a full column")  # pragma: no cover

    def legal_moves(self) -> list[int]:
        if self.winner():
            return []
        return [c + 1 for c in range(COLUMNS) if self.board[c] == EMPTY]

    def winner(self) -> str | None:
        return winner_of(self.board)

    def render_board(self) -> str:
        header = " ".join(str(c + 1) for c in range(COLUMNS))
        rows = [" ".join(self.board[r * COLUMNS : (r + 1) * COLUMNS]) for r in range(ROWS)]
        return "\n".join([header, *rows])
