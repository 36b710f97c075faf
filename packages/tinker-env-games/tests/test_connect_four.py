"""games/connect-four-v0: gravity, wins in four directions, full columns, draws."""

from __future__ import annotations

import pytest

from tinker_core import play_episode
from tinker_env_games.connect_four import LINES, ConnectFourEnv, parse_board
from tinker_env_games.opponents import RandomAgent

# A full board with no four in a row (found by a seeded search, checked by the test).
DRAW = "441365675334466335442232661515577771217122"


def play(moves: str) -> ConnectFourEnv:
    env = ConnectFourEnv()
    env.reset(seed=0)
    for m in moves:
        env.step(m)
    return env


def test_lines() -> None:
    assert len(LINES) == 69  # 24 horizontal + 21 vertical + 12 + 12 diagonal


@pytest.mark.parametrize(
    ("moves", "winner"),
    [
        ("1213141", "x"),  # vertical
        ("33134373", "o"),  # vertical
        ("1122334", "x"),  # horizontal on the bottom row
        ("53517214", "o"),  # horizontal
        ("13434442352", "x"),  # rising diagonal
        ("244133534254", "o"),  # rising diagonal
        ("4256323127111", "x"),  # falling diagonal
        ("231263121134", "o"),  # falling diagonal
    ],
)
def test_wins(moves: str, winner: str) -> None:
    env = play(moves[:-1])
    assert not env.done
    env.step(moves[-1])
    assert env.done and env.infos[winner]["outcome"] == "win"
    assert env.rewards[winner] == 1.0


def test_gravity_and_rendering() -> None:
    env = play("44")
    obs = env.observe("x")
    assert obs.splitlines()[2] == "1 2 3 4 5 6 7"
    board = parse_board(obs)
    assert board[5 * 7 + 3] == "X" and board[4 * 7 + 3] == "O"
    assert board.count(".") == 40


def test_full_column_is_illegal() -> None:
    env = play("444444")
    assert env.legal_moves() == [1, 2, 3, 5, 6, 7]
    env.step("4")
    assert env.rewards["x"] == -0.1 and env.agent_selection == "x"
    assert "column 4 is full" in env.observe("x")
    env.step("8")
    assert "there is no column 8" in env.observe("x")
    env.step("left")
    assert env.done and env.infos["x"]["reason"] == "forfeit-illegal"
    assert env.rewards == {"x": -1.0, "o": 1.0}


def test_draw() -> None:
    env = play(DRAW)
    assert env.done and env.infos["x"]["outcome"] == "draw" and env.rewards == {"x": 0.0, "o": 0.0}
    assert env.env_spec.max_turns == 46


def test_random_self_play_is_deterministic_and_ends() -> None:
    a = [
        play_episode(ConnectFourEnv(), RandomAgent(seed=s), seed=s, turn_timeout_s=None)
        for s in range(20)
    ]
    b = [
        play_episode(ConnectFourEnv(), RandomAgent(seed=s), seed=s, turn_timeout_s=None)
        for s in range(20)
    ]
    assert [r.to_dict() for r in a] == [r.to_dict() for r in b]
    assert all(r.reason in ("win", "draw") for r in a)
