"""The one record of an episode: :class:`Episode`, whose JSON form is a line of ``rollouts.jsonl``.

Every rollout builds it: the single-agent rollout (one per episode), the agent-program rollout
(one per segment of an episode's calls), the multi-agent rollout (one per learner seat, from the
coordinator's :meth:`tinker_core.coordinator.EpisodeResult.episode`); recording writes its
:meth:`Episode.to_record` and the viewer, ``opentinker eval`` and scripts read records back
(:meth:`Episode.from_record`). It is re-exported by :mod:`tinker_core.contracts`.

An episode is one policy's side of a play (a single-agent episode, or one role of a multi-agent
one): its :class:`Turn` s as text (what it saw, what it answered), its trajectory (tokens, loss
mask, sampler logprobs; None for an episode that failed, or one read back from a record, which
keeps token texts, not ids), its reward and, for a multi-agent seat, its ``role`` and ``outcome``.
:class:`Trajectory` (the tokens of one episode) and :class:`TrajectoryGroup` live here too, beside
the episode that holds them; :mod:`tinker_core.contracts` re-exports all of them. No torch here.

**The record**, an episode's JSON form (:class:`RolloutRecord`, with :class:`RolloutTurn`), is
one line of ``rollouts.jsonl``: written by ``tinker_algos.records.recording`` during training
(``kind: "train"``, a sample of each step's episodes, and ``kind: "eval"``, the held-out
evaluation's transcripts) and by ``opentinker eval``; read back with
:func:`tinker_core.run_files.read_rollouts` (whole) or :class:`tinker_core.run_files.JsonLinesReader`
(incrementally). One record (format version :data:`VERSION`)::

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
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, NamedTuple, Protocol

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from tinker_core.tools import tool_calls_of

__all__ = [
    "UNTEMPERED", "VERSION", "Episode", "RolloutRecord", "RolloutTurn", "Tokenizer", "Trajectory", "TrajectoryGroup", "Turn",
    "observation_text",
]

UNTEMPERED = "untempered_logprobs_T"
"""The ``Trajectory.info`` key of each token's logprob under the policy's own distribution
(temperature 1, no top-k/top-p; 0 off the policy's tokens), aligned as ``sampler_logprobs_T``.
Evaluation records show these: a greedy sample's sampler logprobs are a point mass's, all 0."""


class Turn(NamedTuple):
    """One turn of a role: what it saw and what it answered. ``observation`` is an
    :data:`~tinker_core.contracts.Observation` (text or chat messages; text in an :class:`Episode`)."""

    observation: Any
    action: str


@dataclass
class Trajectory:
    """One episode of one policy (or one role of a multi-agent episode).

    ``group_id`` is the index of its :class:`TrajectoryGroup` in the rollout that made it (its
    task); ``info`` holds what the rollout knows besides (role, seed, outcome...).
    """

    tokens_T: np.ndarray
    sampler_logprobs_T: np.ndarray
    loss_mask_T: np.ndarray
    turn_rewards: list[float]
    group_id: int = 0
    info: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.tokens_T = np.asarray(self.tokens_T, dtype=np.int64)
        self.sampler_logprobs_T = np.asarray(self.sampler_logprobs_T, dtype=np.float32)
        self.loss_mask_T = np.asarray(self.loss_mask_T, dtype=np.float32)
        n = len(self.tokens_T)
        for name in ("sampler_logprobs_T", "loss_mask_T"):
            if len(getattr(self, name)) != n:
                raise ValueError(f"Trajectory.{name} has length {len(getattr(self, name))}, tokens_T has {n}")

    @property
    def reward(self) -> float:
        """The episode return: the sum of per-turn rewards."""
        return float(sum(self.turn_rewards))

    @property
    def num_generated(self) -> int:
        return int(self.loss_mask_T.sum())

    def __len__(self) -> int:
        return len(self.tokens_T)


@dataclass
class TrajectoryGroup:
    """The trajectories that answer one task (one env reset seed; for a multi-agent env, one
    role of one task), in sampling order. Failed episodes are left out, so a group may hold fewer
    than ``rollout.group_size`` trajectories, or none."""

    trajectories: list[Trajectory]

    @property
    def rewards_G(self) -> np.ndarray:
        """Each trajectory's return, in order."""
        return np.asarray([t.reward for t in self.trajectories], dtype=np.float64)

    def generated(self) -> TrajectoryGroup:
        """The group without trajectories that have no policy token (nothing to train on)."""
        return TrajectoryGroup([t for t in self.trajectories if t.num_generated > 0])

    def __len__(self) -> int:
        return len(self.trajectories)

    def __iter__(self) -> Iterator[Trajectory]:
        return iter(self.trajectories)


class Tokenizer(Protocol):
    """What :meth:`Episode.to_record` needs of a tokenizer (a Hugging Face one has both)."""

    def decode(self, ids: list[int]) -> str: ...

    def batch_decode(self, ids: list[list[int]]) -> list[str]: ...


def observation_text(observation: Any) -> str:
    """A readable text of an observation: text as is, chat messages as ``role: content`` lines."""
    if isinstance(observation, str):
        return observation
    return "\n".join(f"{m.get('role', '?')}: {m.get('content', '')}" for m in observation)


@dataclass(frozen=True)
class Episode:
    """One finished episode of one policy seat (module docstring).

    ``turns`` counts its policy turns, ``transcript`` holds them as ``(observation, action)``
    texts; ``success`` is whether it reached the top reward (a seat: whether it won); ``error``
    the reason it failed (``env_error``, ``env_timeout``, ``context_overflow``, ``agent_*``...),
    None when it did not; ``group`` the index of its task's :class:`~tinker_core.contracts.TrajectoryGroup`;
    ``entropy_sum`` / ``entropy_tokens`` the policy's entropy summed over its sampled tokens
    (``policy/entropy``); ``role`` and ``outcome`` (``win``, ``draw``, ``loss``, or a forfeit)
    a multi-agent seat's, None for a single-agent episode."""

    trajectory: Trajectory | None
    reward: float
    turns: int
    success: bool
    error: str | None = None
    transcript: Sequence[tuple[str, str]] = field(default_factory=list)
    truncated: bool = False
    group: int = 0
    entropy_sum: float = 0.0
    entropy_tokens: int = 0
    role: str | None = None
    outcome: str | None = None

    def to_record(
        self, tokenizer: Tokenizer | None, *, kind: Literal["train", "eval"], stage: str, step: int, episode: int,
        advantage: float | None = None,
    ) -> RolloutRecord:
        """The episode as a :class:`RolloutRecord` (its JSON form).

        Turns come from the transcript (the texts) and the trajectory's loss mask (the tokens: the
        first masked run is the prompt, then policy and env runs alternate), decoded with
        ``tokenizer``; an episode without a trajectory has turns with their texts only (and needs
        no tokenizer). An ``eval`` record shows the policy's untempered logprobs (:data:`UNTEMPERED`).
        """
        traj = self.trajectory
        policy_runs: list[tuple[int, int]] = []
        env_runs: list[tuple[int, int]] = []
        prompt = self.transcript[0][0] if self.transcript else ""
        if traj is not None:
            assert tokenizer is not None, "Episode.to_record: an episode with a trajectory needs the tokenizer"
            runs = _runs(traj.loss_mask_T)
            if runs and not runs[0][0]:
                prompt = tokenizer.decode([int(t) for t in traj.tokens_T[runs[0][1]:runs[0][2]]])
                runs = runs[1:]
            policy_runs = [(s, t) for trained, s, t in runs if trained]
            env_runs = [(s, t) for trained, s, t in runs if not trained]
        logprobs_T = traj.sampler_logprobs_T if traj is not None else None
        if kind == "eval" and traj is not None and traj.info.get(UNTEMPERED) is not None:
            logprobs_T = traj.info[UNTEMPERED]  # greedy: the sampler's are a point mass's (all 0); the policy's own
        turns: list[RolloutTurn] = []
        messages: list[dict[str, Any]] = []
        for k, (observation, action) in enumerate(self.transcript):
            messages += [{"role": "user", "content": observation}, {"role": "assistant", "content": action}]
            if k > 0:
                s, t = env_runs[k - 1] if k - 1 < len(env_runs) else (0, 0)
                turns.append(RolloutTurn(role="env", text=observation, tokens=t - s))
            if k < len(policy_runs) and traj is not None and tokenizer is not None and logprobs_T is not None:
                s, t = policy_runs[k]
                ids = [int(x) for x in traj.tokens_T[s:t]]
                turns.append(RolloutTurn(
                    role="policy", text=action, tokens=t - s, token_texts=tokenizer.batch_decode([[x] for x in ids]),
                    logprobs=[round(float(x), 5) for x in logprobs_T[s:t]], tool_calls=_tool_calls(action),
                ))
            else:
                turns.append(RolloutTurn(role="policy", text=action, tokens=0, tool_calls=_tool_calls(action)))
        stop = self.error or (traj.info.get("stop_reason") if traj is not None else None) or "unknown"
        return RolloutRecord(
            kind=kind, stage=stage, step=step, group=self.group, episode=episode, prompt=prompt, messages=messages or None,
            turns=turns, reward=float(self.reward), advantage=advantage, stop_reason=str(stop),
            new_tokens=traj.num_generated if traj is not None else 0, success=bool(self.success),
            truncated=bool(self.truncated), error=self.error, agent=self.role, outcome=self.outcome,
        )

    @classmethod
    def from_record(cls, record: RolloutRecord | Mapping[str, Any]) -> Episode:
        """The episode of a record (a :class:`RolloutRecord` or its JSON object): its transcript
        (from the record's ``messages``, else its turns), reward, success, error, truncation,
        group, role and outcome. A record keeps token texts, not ids: the trajectory is None."""
        rec = record if isinstance(record, RolloutRecord) else RolloutRecord.model_validate(record)
        transcript: list[tuple[str, str]] = []
        if rec.messages:
            users = [str(m.get("content", "")) for m in rec.messages if m.get("role") == "user"]
            replies = [str(m.get("content", "")) for m in rec.messages if m.get("role") == "assistant"]
            transcript = list(zip(users, replies, strict=False))
        else:
            observation = rec.prompt
            for t in rec.turns:
                if t.role == "env":
                    observation = t.text
                else:
                    transcript.append((observation, t.text))
        return cls(
            None, rec.reward, len(transcript), bool(rec.success), rec.error, transcript, bool(rec.truncated), rec.group,
            role=rec.agent, outcome=rec.outcome,
        )


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


def _runs(mask_T: np.ndarray) -> list[tuple[bool, int, int]]:
    """``(trained, start, end)`` of each run of equal loss-mask values."""
    out: list[tuple[bool, int, int]] = []
    trained = mask_T > 0
    start = 0
    for i in range(1, len(trained) + 1):
        if i == len(trained) or trained[i] != trained[start]:
            out.append((bool(trained[start]), start, i))
            start = i
    return out


def _tool_calls(action: str) -> list[dict[str, Any]] | None:
    """The turn's ``<tool_call>`` blocks in the OpenAI format (one that is no valid call as
    ``{"error": message, "text": block}``), or None when it has none: as the env got them (an
    :class:`~tinker_core.contracts.Action` with its calls parsed against the env's tools), else
    parsed here from the text."""
    parsed = tool_calls_of(action)
    if not parsed:
        return None
    return [c.to_openai() for c in parsed.calls] + [{"error": e.message, "text": e.text} for e in parsed.errors]
