"""SFT warm-start sets from scripted games (``tinker_env_games.scripted_sft``)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tinker_env_games.board import legal_moves_in
from tinker_env_games.scripted_sft import main, scripted_games
from tinker_env_games.tictactoe import TicTacToeEnv


def test_random_tictactoe_games_give_legal_moves_as_trajectory_prefixes() -> None:
    records = scripted_games(TicTacToeEnv(), ["random", "random"], 20, seed=4)
    assert records == scripted_games(TicTacToeEnv(), ["random", "random"], 20, seed=4)
    assert {r["role"] for r in records} == {"x", "o"} and {r["episode"] for r in records} == set(range(20))
    by_game: dict[tuple[int, str], list[dict]] = {}
    for rec in records:
        by_game.setdefault((rec["episode"], rec["role"]), []).append(rec)
    for turns in by_game.values():  # each move's prompt holds the earlier moves of that role's game
        seen = ""
        for rec in turns:
            assert rec["prompt"].startswith(seen)
            observation = rec["prompt"][len(seen):]  # what the role was shown for this move
            move = int(rec["completion"])
            assert rec["completion"] == f"{move}\n" and move in legal_moves_in(observation), rec
            seen = rec["prompt"] + rec["completion"]
    assert {r["reason"] for r in records} <= {"win", "draw"}  # random players never play illegally


def test_reasons_keep_only_the_games_that_ended_so() -> None:
    everything = scripted_games(TicTacToeEnv(), ["minimax", "random"], 12, seed=0)
    wins = scripted_games(TicTacToeEnv(), ["minimax", "random"], 12, seed=0, reasons={"win"})
    assert wins == [r for r in everything if r["reason"] == "win"] and 0 < len(wins) < len(everything)


def test_the_command_writes_the_records_and_names_a_bad_argument(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "ttt.jsonl"
    assert main([str(out), "--env", "games/tictactoe-v0", "--players", "random", "mixed", "--episodes", "3", "--kwargs", '{"max_illegal_moves": 2}']) == 0
    expected = scripted_games(TicTacToeEnv(max_illegal_moves=2), ["random", "mixed"], 3)
    assert [json.loads(line) for line in out.read_text().splitlines()] == expected
    for argv, fragment in [
        (["--env", "games/tictactoe-v0", "--players", "random", "perfect"], "unknown scripted opponent(s) ['perfect']"),
        (["--env", "games/tictactoe-v0", "--players", "random"], "players must name 2"),
        (["--env", "games/guess-number-v0", "--players", "random"], "--env: games/guess-number-v0 is not a multi-agent env"),
        (["--env", "games/tictactoe-v0", "--players", "random", "random", "--kwargs", "[1]"], "--kwargs"),
    ]:
        with pytest.raises(SystemExit) as exit_:
            main([str(out), *argv])
        assert exit_.value.code == 2 and fragment in capsys.readouterr().err, argv


def test_a_conversation_record_is_a_players_game_as_messages(tmp_path: Path) -> None:
    moves = scripted_games(TicTacToeEnv(), ["random", "mixed"], 6, seed=2)
    conversations = scripted_games(TicTacToeEnv(), ["random", "mixed"], 6, seed=2, messages=True)
    assert len(conversations) == 12  # a record per player and game
    for conv in conversations:
        mine = [r for r in moves if (r["episode"], r["role"]) == (conv["episode"], conv["role"])]
        roles = [m["role"] for m in conv["messages"]]
        assert roles == ["user", "assistant"] * len(mine)
        # the same moves, shown the same observations, as the per-move records of that game
        assert [m["content"] + "\n" for m in conv["messages"][1::2]] == [r["completion"] for r in mine]
        assert "".join(m["content"] + ("\n" if m["role"] == "assistant" else "") for m in conv["messages"]) == mine[-1]["prompt"] + mine[-1]["completion"]
        assert conv["reason"] == mine[0]["reason"] and conv["seed"] == mine[0]["seed"]
    out = tmp_path / "c.jsonl"
    assert main([str(out), "--env", "games/tictactoe-v0", "--players", "random", "mixed", "--episodes", "6", "--seed", "2", "--format", "messages"]) == 0
    assert [json.loads(line) for line in out.read_text().splitlines()] == conversations
