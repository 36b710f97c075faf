"""An SFT warm-start set for ``games/negotiation-v0``: dialogues of the scripted negotiators
(:mod:`tinker_env_games.scripted_sft` for this game, keeping the games that end in a deal).

Each record is one move of one player, in the JSONL format of tinker-algos' SFT
(``algorithm.data``: ``{"prompt": ..., "completion": ...}``), plus ``role``, ``episode`` and
``seed`` for reference. The prompt is what the role's trajectory holds before that move in a
multi-agent rollout, ``obs_1 act_1 obs_2 act_2 ... obs_k``, each action followed by the ``"\\n"``
that a rollout with ``stop: ["\\n"]`` ends it with; the completion is the move and ``"\\n"``.
``--format messages`` writes a conversation per player and game instead, for a chat model
(:func:`tinker_env_games.scripted_sft.conversation_records`). By default only games that end in a deal are kept, and scenarios come from the ``train``
split, so a warm-started policy is still evaluated on unseen ``test`` scenarios.

From the command line::

    python -m tinker_env_games.negotiation_sft data/negotiation-sft.jsonl --episodes 500 --seed 0

(``--max-messages``, ``--brief`` and ``--first-mover`` set the env's kwargs; use the job's
``env.kwargs``.)

then ``stages: [{algorithm: {name: sft, data: data/negotiation-sft.jsonl, ...}}, ...]``.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from typing import Any

from tinker_env_games.negotiation import NegotiationEnv
from tinker_env_games.scripted_sft import add_format_argument, scripted_games, write_jsonl

__all__ = ["scripted_dialogues", "write_jsonl"]


def scripted_dialogues(
    episodes: int,
    seed: int = 0,
    *,
    policies: Sequence[str] = ("conceder", "boulware"),
    only_deals: bool = True,
    env_kwargs: dict[str, Any] | None = None,
    messages: bool = False,
) -> list[dict[str, Any]]:
    """SFT records from ``episodes`` games between scripted negotiators (see the module docs).

    Args:
        episodes: games played (fewer records come back when ``only_deals`` drops some).
        seed: game ``i`` is played with seed ``seed + i``; the same arguments, the same records.
        policies: the scripted opponents (names in ``NegotiationEnv.scripted_opponents``) that
            play ``alice`` and ``bob``; game ``i`` swaps them when ``i`` is odd, so both
            policies are seen in both seats.
        only_deals: keep only the games that end in a deal.
        env_kwargs: passed to :class:`NegotiationEnv` (default split: ``train``).
        messages: a conversation record per player and game instead of a record per move.
    """
    return scripted_games(NegotiationEnv(**(env_kwargs or {})), policies, episodes, seed,
                          reasons={"deal"} if only_deals else None, messages=messages)


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m tinker_env_games.negotiation_sft OUT.jsonl [--episodes N] [--seed S]``."""
    parser = argparse.ArgumentParser(
        prog="python -m tinker_env_games.negotiation_sft",
        description="Write SFT records of scripted negotiation dialogues (games/negotiation-v0).",
    )
    parser.add_argument("out", help="the JSONL file to write")
    parser.add_argument("--episodes", type=int, default=500, help="games to play (default 500)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the first game (default 0)")
    parser.add_argument("--max-messages", type=int, default=None, help="the env's max_messages")
    parser.add_argument("--brief", action="store_true", help="the env's brief observations")
    parser.add_argument("--first-mover", choices=("alice", "bob", "random"), default=None,
                        help="the env's first_mover (default: alice)")
    parser.add_argument("--all-games", action="store_true", help="keep games without a deal too")
    add_format_argument(parser)
    args = parser.parse_args(argv)
    kwargs: dict[str, Any] = {} if args.max_messages is None else {"max_messages": args.max_messages}
    if args.brief:
        kwargs["brief"] = True
    if args.first_mover is not None:
        kwargs["first_mover"] = args.first_mover
    records = scripted_dialogues(args.episodes, args.seed, only_deals=not args.all_games, env_kwargs=kwargs,
                                 messages=args.format == "messages")
    path = write_jsonl(records, args.out)
    print(f"wrote {len(records)} records to {path}")
    return 0


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
