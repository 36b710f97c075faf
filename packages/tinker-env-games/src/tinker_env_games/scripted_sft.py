"""SFT warm-start sets from games between scripted opponents, for any multi-agent env here.

A warm start teaches a model the game's reply format before reinforcement learning: each record
is one move of one player, in the JSONL format of tinker-algos' SFT (``algorithm.data``:
``{"prompt": ..., "completion": ...}``), plus ``role``, ``episode``, ``seed`` and ``reason`` (how
the game ended) for reference. The prompt is what the role's trajectory holds before that move
in a multi-agent rollout, ``obs_1 act_1 obs_2 act_2 ... obs_k``, each action followed by the
``"\\n"`` that a rollout with ``stop: ["\\n"]`` ends it with; the completion is the move and
``"\\n"``. The players are the env's own scripted opponents (its class's ``scripted_opponents``),
by name: ``random`` players on a board game teach legal moves and no strategy.

From the command line::

    python -m tinker_env_games.scripted_sft runs/tictactoe-sft.jsonl --env games/tictactoe-v0 \\
        --players random random --episodes 2000

then ``stages: [{algorithm: {name: sft, data: runs/tictactoe-sft.jsonl, ...}}, ...]``.
(:mod:`tinker_env_games.negotiation_sft` is this for ``games/negotiation-v0``, keeping only deals.)
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Collection, Sequence
from pathlib import Path
from typing import Any

from tinker_core import EpisodeResult, MultiAgentTextEnv, play_episode

__all__ = ["conversation_records", "episode_records", "scripted_games", "write_jsonl"]


def scripted_games(
    env: MultiAgentTextEnv,
    players: Sequence[str],
    episodes: int,
    seed: int = 0,
    *,
    reasons: Collection[str] | None = None,
    messages: bool = False,
) -> list[dict[str, Any]]:
    """SFT records of ``episodes`` games of ``env`` between its scripted ``players``.

    Args:
        env: the game (reset for each episode).
        players: one scripted opponent's name per role of the env (``env.possible_agents``
            order); game ``i`` reverses them when ``i`` is odd, so each is seen in every seat.
        episodes: games played (fewer come back when ``reasons`` drops some).
        seed: game ``i`` is played with seed ``seed + i``; the same arguments, the same records.
        reasons: keep only the games that ended for one of these reasons (e.g. ``{"deal"}``);
            None keeps every game.
        messages: one conversation record per player and game instead of one record a move.
    """
    roles = list(env.possible_agents)
    offered = type(env).scripted_opponents
    if episodes < 0:
        raise ValueError(f"episodes must be >= 0, got {episodes}")
    if len(players) != len(roles):
        raise ValueError(f"players must name {len(roles)} scripted opponents (roles {roles}), got {list(players)}")
    unknown = [p for p in players if p not in offered]
    if unknown:
        raise ValueError(f"players: unknown scripted opponent(s) {unknown}; this env offers {sorted(offered)}")
    records: list[dict[str, Any]] = []
    for i in range(episodes):
        names = list(players) if i % 2 == 0 else list(reversed(players))
        agents = {role: offered[name](seed=(seed + i) * len(roles) + k) for k, (role, name) in enumerate(zip(roles, names, strict=True))}
        result = play_episode(env, agents, seed=seed + i, turn_timeout_s=None)
        if reasons is not None and result.reason not in reasons:
            continue
        records += (conversation_records if messages else episode_records)(result, roles, episode=i, seed=seed + i)
    return records


def episode_records(result: EpisodeResult, roles: Sequence[str], *, episode: int, seed: int) -> list[dict[str, Any]]:
    """One SFT record per move of a played game (:func:`tinker_core.play_episode`'s result), in
    ``roles`` order: ``prompt`` is the role's trajectory before the move, ``completion`` the move
    and ``"\n"``, with ``role``, ``episode``, ``seed`` and ``reason`` beside them."""
    records: list[dict[str, Any]] = []
    for role in roles:
        history = ""
        for turn in result.transcripts[role]:
            history += str(turn.observation)
            completion = turn.action + "\n"
            records.append({"prompt": history, "completion": completion, "role": role, "episode": episode, "seed": seed,
                            "reason": result.reason})
            history += completion
    return records


def conversation_records(result: EpisodeResult, roles: Sequence[str], *, episode: int, seed: int) -> list[dict[str, Any]]:
    """One SFT conversation record per role of a played game, in ``roles`` order: ``messages``
    alternate the role's observations (``user``) and moves (``assistant``), with ``role``,
    ``episode``, ``seed`` and ``reason`` beside them. A role that never moved gives none."""
    records: list[dict[str, Any]] = []
    for role in roles:
        messages: list[dict[str, str]] = []
        for turn in result.transcripts[role]:
            messages += [{"role": "user", "content": str(turn.observation)}, {"role": "assistant", "content": turn.action}]
        if messages:
            records.append({"messages": messages, "role": role, "episode": episode, "seed": seed, "reason": result.reason})
    return records


def write_jsonl(records: Sequence[dict[str, Any]], path: str | Path) -> Path:
    """Write ``records`` one JSON object a line to ``path`` (parents created); return it."""
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    with out.open("w", encoding="utf-8") as f:
        for rec in records:
            f.write(json.dumps(rec) + "\n")
    return out


def add_format_argument(parser: argparse.ArgumentParser) -> None:
    """``--format text|messages``: a record per move (plain-text models) or a conversation per
    player and game (chat models)."""
    parser.add_argument("--format", choices=("text", "messages"), default="text",
                        help="text: a prompt/completion record per move (default); messages: a conversation per player and game, for a chat model")


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m tinker_env_games.scripted_sft OUT.jsonl --env ID --players A B [...]``."""
    import tinker_core

    parser = argparse.ArgumentParser(
        prog="python -m tinker_env_games.scripted_sft",
        description="Write SFT records of games between a multi-agent env's scripted opponents.",
    )
    parser.add_argument("out", help="the JSONL file to write")
    parser.add_argument("--env", required=True, help="a multi-agent env id, e.g. games/tictactoe-v0")
    parser.add_argument("--players", nargs="+", required=True, help="a scripted opponent per role, e.g. random random")
    parser.add_argument("--episodes", type=int, default=500, help="games to play (default 500)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the first game (default 0)")
    parser.add_argument("--kwargs", default="{}", help="the env's kwargs as JSON (use the job's env.kwargs)")
    parser.add_argument("--reasons", nargs="*", default=None, help="keep only games that ended so (e.g. deal)")
    add_format_argument(parser)
    args = parser.parse_args(argv)
    try:
        kwargs = json.loads(args.kwargs)
        if not isinstance(kwargs, dict):
            raise ValueError("not a JSON object")
    except ValueError as e:
        parser.error(f"--kwargs: {e}; pass a JSON object, e.g. '{{\"max_illegal_moves\": 2}}'")
    env = tinker_core.make_env(args.env, **kwargs)
    if not isinstance(env, MultiAgentTextEnv):
        parser.error(f"--env: {args.env} is not a multi-agent env")
    try:
        records = scripted_games(env, args.players, args.episodes, args.seed, reasons=args.reasons, messages=args.format == "messages")
    except ValueError as e:
        parser.error(str(e))
    path = write_jsonl(records, args.out)
    print(f"wrote {len(records)} records to {path}")
    return 0


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
