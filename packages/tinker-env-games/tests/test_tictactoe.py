"""games/tictactoe-v0: rules, rendering, illegal moves and forfeits, and the opponents."""

from __future__ import annotations

import pytest

from tinker_core import play_episode
from tinker_env_games.opponents import (
    MinimaxAgent,
    MixedAgent,
    RandomAgent,
    legal_moves_in,
    minimax_moves,
    minimax_value,
)
from tinker_env_games.tictactoe import TicTacToeEnv, parse_board, winner_of


def play(env: TicTacToeEnv, moves: list[str]) -> None:
    env.reset(seed=0)
    for m in moves:
        env.step(m)


@pytest.mark.parametrize(
    ("moves", "winner"),
    [
        (["1", "4", "2", "5", "3"], "x"),  # top row
        (["1", "2", "4", "3", "7"], "x"),  # left column
        (["1", "2", "5", "3", "9"], "x"),  # diagonal
        (["1", "3", "2", "5", "4", "7"], "o"),  # anti-diagonal
    ],
)
def test_wins(moves: list[str], winner: str) -> None:
    env = TicTacToeEnv()
    play(env, moves)
    loser = "o" if winner == "x" else "x"
    assert env.done and env.terminations == {"x": True, "o": True}
    assert env.rewards == {winner: 1.0, loser: -1.0}
    assert env._cumulative_rewards == {winner: 1.0, loser: -1.0}
    assert env.infos[winner] == {
        "illegal_moves": 0,
        "outcome": "win",
        "winner": winner,
        "reason": "win",
    }
    assert env.infos[loser]["outcome"] == "loss"
    assert "You won." in env.observe(winner) and "You lost." in env.observe(loser)
    with pytest.raises(RuntimeError, match="game is over"):
        env.step("9")


def test_draw() -> None:
    env = TicTacToeEnv()
    play(env, ["1", "2", "3", "5", "4", "6", "8", "7", "9"])
    assert env.done and env.rewards == {"x": 0.0, "o": 0.0}
    assert env.infos["x"]["outcome"] == env.infos["o"]["outcome"] == "draw"
    assert env.infos["x"]["reason"] == "draw"
    assert "Game over: draw." in env.observe("x")


def test_observation_format() -> None:
    env = TicTacToeEnv()
    env.reset(seed=0)
    assert env.observe("x") == (
        "Tic-tac-toe. You play X.\n1|2|3\n-+-+-\n4|5|6\n-+-+-\n7|8|9\n"
        "Legal moves: 1 2 3 4 5 6 7 8 9\nReply with the number of a free cell (1-9).\n"
    )
    assert env.last() == (env.observe("x"), 0.0, False, False, env.infos["x"])
    env.step("I will take the centre: 5")
    obs = env.observe("o")
    assert "Last move: X played 5." in obs and "4|X|6" in obs
    assert legal_moves_in(obs) == [1, 2, 3, 4, 6, 7, 8, 9]
    assert "Waiting for O to move." in env.observe("x")
    assert parse_board(obs) == [".", ".", ".", ".", "X", ".", ".", ".", "."]
    assert env.agent_selection == "o"


def test_illegal_moves_are_penalised_then_forfeit() -> None:
    env = TicTacToeEnv()
    env.reset(seed=0)
    env.step("5")
    env.step("5")  # taken
    assert env.agent_selection == "o"  # the same role moves again
    assert env.rewards == {"x": 0.0, "o": -0.1}
    obs = env.observe("o")
    assert (
        obs.splitlines()[2]
        == "Illegal move '5': cell 5 is taken. 2 more illegal move(s) and you forfeit."
    )
    env.step("banana")  # unparsable
    assert env.rewards["o"] == -0.1 and "no cell number found" in env.observe("o")
    assert env.infos["o"]["illegal_moves"] == 2
    assert not env.done
    env.step("10")  # no such cell: the third illegal move forfeits
    assert env.done
    assert env.rewards == {"x": 1.0, "o": -1.0}
    assert env._cumulative_rewards == {"x": 1.0, "o": pytest.approx(-1.2)}
    assert env.infos["o"] == {
        "illegal_moves": 3,
        "outcome": "loss",
        "winner": "x",
        "reason": "forfeit-illegal",
    }
    assert "too many illegal moves" in env.observe("x")


def test_a_legal_move_clears_the_error_but_not_the_count() -> None:
    env = TicTacToeEnv(max_illegal_moves=2, illegal_move_penalty=0.5)
    env.reset(seed=0)
    env.step("0")
    assert env.rewards["x"] == -0.5
    env.step("1")
    assert "Illegal" not in env.observe("x")
    env.step("1")  # o: taken, its first illegal move
    env.step("2")
    env.step("x marks the spot")  # x's second illegal move: forfeit (max 2)
    assert env.done and env.infos["x"]["outcome"] == "loss"


def test_forfeit_method() -> None:
    env = TicTacToeEnv()
    env.reset(seed=0)
    env.forfeit("x", "forfeit-timeout")
    assert env.done and env.rewards == {"x": -1.0, "o": 1.0}
    assert env.infos["o"]["reason"] == "forfeit-timeout"
    env.forfeit("o")  # no-op once over
    assert env._cumulative_rewards == {"x": -1.0, "o": 1.0}


def test_spec_and_bad_kwargs() -> None:
    env = TicTacToeEnv(max_illegal_moves=1)
    assert env.env_spec.roles == ("x", "o") and env.env_spec.max_turns == 9
    assert TicTacToeEnv().env_spec.max_turns == 13
    with pytest.raises(ValueError, match="max_illegal_moves"):
        TicTacToeEnv(max_illegal_moves=0)
    with pytest.raises(ValueError, match="illegal_move_penalty"):
        TicTacToeEnv(illegal_move_penalty=2)


def test_minimax_values() -> None:
    empty = ["."] * 9
    assert minimax_value(empty, "X") == 0  # perfect play draws
    assert set(minimax_moves(empty, "X")) == {1, 2, 3, 4, 5, 6, 7, 8, 9}
    # X to move wins at once in cell 3 (top row)
    assert minimax_moves(list("XX.OO...."), "X") == (3,)
    # O to move must block at 3
    assert minimax_moves(list("XX..O...."), "O") == (3,)
    assert winner_of(list("XXXOO....")) == "X"


@pytest.mark.parametrize("minimax_role", ["x", "o"])
def test_minimax_never_loses_to_random(minimax_role: str) -> None:
    random_role = "o" if minimax_role == "x" else "x"
    outcomes = []
    for seed in range(150):
        agents = {minimax_role: MinimaxAgent(seed=seed), random_role: RandomAgent(seed=seed)}
        result = play_episode(TicTacToeEnv(), agents, seed=seed, turn_timeout_s=None)
        outcomes.append(result.outcomes[minimax_role])
    assert "loss" not in outcomes
    assert outcomes.count("win") > 100  # and it beats a random player most of the time


def test_minimax_self_play_draws() -> None:
    for seed in range(10):
        result = play_episode(
            TicTacToeEnv(), MinimaxAgent(seed=seed), seed=seed, turn_timeout_s=None
        )
        assert result.reason == "draw" and result.num_steps == 9


def test_random_agent_is_seeded() -> None:
    def moves(seed: int) -> list[str]:
        r = play_episode(TicTacToeEnv(), RandomAgent(seed=seed), seed=0, turn_timeout_s=None)
        return [t.action for t in r.transcripts["x"] + r.transcripts["o"]]

    assert moves(3) == moves(3)
    assert any(moves(3) != moves(s) for s in range(4, 10))


def test_the_mixed_opponent_sits_between_random_and_perfect_play() -> None:
    """Against a random o, x wins more often as the mixed agent than as a random one, and less
    often than as minimax; the same seed gives the same moves."""

    def wins(make_x) -> int:
        results = [play_episode(TicTacToeEnv(), {"x": make_x(seed), "o": RandomAgent(seed=1000 + seed)}, seed=seed,
                                turn_timeout_s=None) for seed in range(200)]
        return sum(r.outcomes["x"] == "win" for r in results)

    random_wins, mixed_wins, perfect_wins = wins(RandomAgent), wins(MixedAgent), wins(MinimaxAgent)
    assert random_wins + 15 < mixed_wins < perfect_wins - 5, (random_wins, mixed_wins, perfect_wins)
    assert TicTacToeEnv.scripted_opponents["mixed"] is MixedAgent

    def moves(seed: int) -> list[str]:
        r = play_episode(TicTacToeEnv(), {"x": MixedAgent(seed=seed), "o": RandomAgent(seed=0)}, seed=0, turn_timeout_s=None)
        return [t.action for t in r.transcripts["x"]]

    assert moves(5) == moves(5) and any(moves(5) != moves(s) for s in range(6, 12))
    with pytest.raises(ValueError, match="minimax_prob"):
        MixedAgent(minimax_prob=1.5)
