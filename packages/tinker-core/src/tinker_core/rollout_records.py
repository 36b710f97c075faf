"""Rollout records: the sampled episodes a run keeps, one JSON object per line of ``rollouts.jsonl``.

Written by ``tinker_algos.records.recording`` during training (``kind: "train"``, a sample of each step's
episodes, and ``kind: "eval"``, the held-out evaluation's transcripts) and by ``opentinker eval``;
read by the run viewer and anything else with :func:`read_rollouts` (whole) or
:class:`tinker_core.run_files.JsonLinesReader` (incrementally). No torch here.

One record (format version :data:`VERSION`)::

    {"v": 1, "kind": "train" | "eval", "stage": str, "step": int, "group": int, "episode": int,
     "prompt": str, "messages": [{"role": str, "content": str}, ...] | null,
     "turns": [{"role": "policy" | "env", "text": str, "tokens": int,
                "token_texts": [str, ...] | null, "logprobs": [float, ...] | null,
                "tool_calls": [...] | null}, ...],
     "reward": float, "advantage": float | null, "stop_reason": str, "new_tokens": int,
     "success": bool | null, "truncated": bool | null, "error": str | null,
     "agent": str | null, "outcome": str | null}

``prompt`` is the rendered first prompt (chat template included), ``messages`` the episode as chat
messages (the observations as ``user``, the policy's replies as ``assistant``; a system prompt
first). ``turns`` alternate policy and env: a policy turn's ``token_texts`` are its sampled tokens
each decoded alone and ``logprobs`` the sampler's (an ``eval`` record's, greedy: the policy's
untempered ones, a point mass's being all 0); an env turn is the environment's reply and the
tokens it took in the context. ``stop_reason`` is how the last policy turn ended (``eos``,
``stop_id``, ``stop_string``, ``length``) or, for a failed episode, the error (``env_error``,
``env_timeout``, ``context_overflow``). ``advantage`` is the mean advantage over the episode's
trained tokens (null for evaluation and for episodes left out of training). ``episode`` counts the
episodes of one step (or evaluation) from 0, ``group`` is its task's index.

A multi-agent episode is recorded once per learner seat (``agent``: its role; ``outcome``: ``win``,
``draw``, ``loss`` or a forfeit; ``turns``: that seat's own turns, the other seats' moves being
part of the observations it saw; ``group``: its GRPO group, ``task * number of roles + role
index``). ``agent`` and ``outcome`` are null for single-agent episodes; readers of older files see
them absent.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from tinker_core.run_files import ROLLOUTS_FILE, JsonLinesReader, keep_lines

VERSION = 1


class RolloutTurn(BaseModel):
    """One turn of a recorded episode: the policy's reply or the environment's."""

    model_config = ConfigDict(extra="allow")

    role: Literal["policy", "env"]
    text: str
    tokens: int = Field(ge=0, description="Tokens of this turn in the episode's context.")
    token_texts: list[str] | None = None
    logprobs: list[float] | None = None
    tool_calls: list[Any] | None = None


class RolloutRecord(BaseModel):
    """One recorded episode (see the module docstring for every field); unknown fields are kept."""

    model_config = ConfigDict(extra="allow")

    v: int = VERSION
    kind: Literal["train", "eval"]
    stage: str
    step: int
    group: int
    episode: int
    prompt: str
    messages: list[dict[str, Any]] | None = None
    turns: list[RolloutTurn]
    reward: float
    advantage: float | None = None
    stop_reason: str
    new_tokens: int
    success: bool | None = None
    truncated: bool | None = None
    error: str | None = None
    agent: str | None = None
    outcome: str | None = None

    def to_json_line(self) -> str:
        """The record as one line of ``rollouts.jsonl`` (with its newline)."""
        return json.dumps(self.model_dump(mode="json"), ensure_ascii=False) + "\n"


def iter_rollouts(path: str | Path) -> Iterator[RolloutRecord]:
    """The records of a ``rollouts.jsonl`` file, in order, read with
    :class:`tinker_core.run_files.JsonLinesReader`. A last line cut short (the run is writing it)
    is skipped; a blank line is skipped; a line that is not a record raises ``ValueError`` naming
    the file and the line."""
    p = Path(path)
    read = JsonLinesReader(p).read()
    first_bad = min(read.skipped, key=lambda s: s.number, default=None)
    for row in read.rows:
        if first_bad is not None and row.number > first_bad.number:
            break
        try:
            yield RolloutRecord.model_validate(row.value)
        except ValueError as e:
            raise ValueError(f"{p}:{row.number} is not a rollout record: {e}") from None
    if first_bad is not None:
        raise ValueError(f"{p}:{first_bad.number} is not a rollout record: {first_bad.why}")


def read_rollouts(path: str | Path) -> list[RolloutRecord]:
    """Every record of a ``rollouts.jsonl`` file (or of ``RUN_DIR/rollouts.jsonl`` for a directory);
    an empty list when there is none."""
    p = Path(path)
    if p.is_dir():
        p = p / ROLLOUTS_FILE
    if not p.is_file():
        return []
    return list(iter_rollouts(p))


def keep_until(path: str | Path, step: int) -> None:
    """Drop the records after ``step`` (a run resuming from the checkpoint of ``step`` writes them
    again); lines that do not parse are dropped too."""
    if Path(path).is_file():
        keep_lines(path, lambda row: int(row["step"]) <= step)


__all__ = ["ROLLOUTS_FILE", "VERSION", "RolloutRecord", "RolloutTurn", "iter_rollouts", "keep_until", "read_rollouts"]
