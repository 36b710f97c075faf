"""SFT records for the tic-tac-toe warm start of examples/tictactoe-learners.yaml.

Both players of each game mostly take the highest free cell (probability ``--p``, default 0.8)
and otherwise a random free one. A move that is usually the last number of the observation's
"Legal moves:" line sits at a fixed distance before the reply, so the random-init tiny model
learns to reply with a legal cell from these in a few hundred steps; on games between two
uniformly random players (``python -m tinker_env_games.scripted_sft ... --players random
random``) it learned the reply format (a digit and a newline) but not legality in 160 steps of
64 (docs/explanation/experiments/multi-agent.md). The records have the form of
``tinker_env_games.scripted_sft`` (``prompt``: the role's trajectory so far, ``completion``: the
move and "\\n")::

    python examples/tictactoe_warm_start.py runs/ttt-sft-last.jsonl --episodes 3000
"""

from __future__ import annotations

import argparse
import random

from tinker_core import play_episode
from tinker_env_games.board import legal_moves_in
from tinker_env_games.scripted_sft import episode_records, write_jsonl
from tinker_env_games.tictactoe import TicTacToeEnv


class MostlyLastCell:
    """The highest free cell with probability ``p``, else a uniformly random free one."""

    def __init__(self, seed: int, p: float = 0.8) -> None:
        self.rng, self.p = random.Random(seed), p

    def __call__(self, role: str, observation: object) -> str:
        moves = legal_moves_in(observation)
        if not moves:
            return "1"
        return str(moves[-1] if self.rng.random() < self.p else self.rng.choice(moves))


def records(episodes: int, p: float = 0.8, seed: int = 0) -> list[dict]:
    """One record per move of ``episodes`` games (game ``i`` on env seed ``seed + i``)."""
    env = TicTacToeEnv(max_illegal_moves=1)
    out: list[dict] = []
    for i in range(episodes):
        k = seed + i
        agents = {"x": MostlyLastCell(2 * k, p), "o": MostlyLastCell(2 * k + 1, p)}
        result = play_episode(env, agents, seed=k, turn_timeout_s=None)
        out += episode_records(result, ("x", "o"), episode=i, seed=k)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out")
    parser.add_argument("--episodes", type=int, default=3000)
    parser.add_argument("--p", type=float, default=0.8)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    path = write_jsonl(records(args.episodes, args.p, args.seed), args.out)
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
