"""An SFT warm-start set for ``games/negotiation-v0``: dialogues of the scripted negotiators.

Each record is one move of one player, in the JSONL format of tinker-algos' SFT
(``algorithm.data``: ``{"prompt": ..., "completion": ...}``), plus ``role``, ``episode`` and
``seed`` for reference. The prompt is what the role's trajectory holds before that move in a
multi-agent rollout, ``obs_1 act_1 obs_2 act_2 ... obs_k``, each action followed by the ``"\\n"``
that a rollout with ``stop: ["\\n"]`` ends it with; the completion is the move and ``"\\n"``.
By default only games that end in a deal are kept, and scenarios come from the ``train``
split, so a warm-started policy is still evaluated on unseen ``test`` scenarios.

From the command line::

    python -m tinker_env_games.negotiation_sft data/negotiation-sft.jsonl --episodes 500 --seed 0

(``--max-messages`` and ``--brief`` set the env's kwargs; use the job's ``env.kwargs``.)

then ``stages: [{algorithm: {name: sft, data: data/negotiation-sft.jsonl, ...}}, ...]``.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from tinker_core import play_episode
from tinker_env_games.negotiation import NegotiationEnv
from tinker_env_games.negotiation_rules import ROLES

__all__ = ["scripted_dialogues", "write_jsonl"]


def scripted_dialogues(
    episodes: int,
    seed: int = 0,
    *,
    policies: Sequence[str] = ("conceder", "boulware"),
    only_deals: bool = True,
    env_kwargs: dict[str, Any] | None = None,
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
    """
    if episodes < 0:
        raise ValueError(f"episodes must be >= 0, got {episodes}")
    if len(policies) != len(ROLES):
        raise ValueError(f"policies must name {len(ROLES)} negotiators, got {list(policies)}")
    offered = NegotiationEnv.scripted_opponents
    unknown = [p for p in policies if p not in offered]
    if unknown:
        raise ValueError(f"policies: unknown negotiator(s) {unknown}; choose from {sorted(offered)}")
    env = NegotiationEnv(**(env_kwargs or {}))
    records: list[dict[str, Any]] = []
    for i in range(episodes):
        names = list(policies) if i % 2 == 0 else list(reversed(policies))
        agents = {
            role: offered[name](seed=(seed + i) * 2 + k)
            for k, (role, name) in enumerate(zip(ROLES, names, strict=True))
        }
        result = play_episode(env, agents, seed=seed + i)
        if only_deals and result.reason != "deal":
            continue
        for role in ROLES:
            history = ""
            for turn in result.transcripts[role]:
                history += str(turn.observation)
                completion = turn.action + "\n"
                records.append(
                    {"prompt": history, "completion": completion, "role": role, "episode": i, "seed": seed + i}
                )
                history += completion
    return records


def write_jsonl(records: Sequence[dict[str, Any]], path: str | Path) -> Path:
    """Write ``records`` one JSON object a line to ``path`` (parents created); return it."""
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    with out.open("w", encoding="utf-8") as f:
        for rec in records:
            f.write(json.dumps(rec) + "\n")
    return out


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
    parser.add_argument("--all-games", action="store_true", help="keep games without a deal too")
    args = parser.parse_args(argv)
    kwargs: dict[str, Any] = {} if args.max_messages is None else {"max_messages": args.max_messages}
    if args.brief:
        kwargs["brief"] = True
    records = scripted_dialogues(args.episodes, args.seed, only_deals=not args.all_games, env_kwargs=kwargs)
    path = write_jsonl(records, args.out)
    print(f"wrote {len(records)} records to {path}")
    return 0


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
