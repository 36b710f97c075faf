"""What a rollout proxy records per call, and how one episode's calls become trajectories.

A rollout proxy (the hook ``opentinker_register_rollout_proxies``; tinker-serve's ``openai``)
serves a job's policy to an agent program and records every call as a :class:`ProxyCall`: the
prompt's token ids *as rendered*, the token ids the policy sampled, their logprobs under the
distribution they were drawn from, and the finish reason. Nothing is decoded and encoded again:
training uses these ids.

:func:`merge_calls` joins the calls of one episode, in order, into trajectories. A call whose
prompt starts with the previous call's prompt + completion *extends* the current segment: the
new prompt tokens after that prefix (the tool result, the next user message, the chat template's
glue) are appended masked, its completion is appended as a trained turn, exactly as sampled. Any
other call (the agent rewrote, truncated or summarised its history, or the template renders
earlier turns differently) starts a new *segment*, a trajectory of its own. Every segment carries
the episode's reward on its last turn; ``agent/segments_rewritten`` counts the segments that
history rewrites started.

:class:`EpisodeLog` is the proxy's side: which episode ids are open, and their calls so far
(thread-safe; a call for an episode that is not open is refused).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from tinker_core.contracts import Trajectory
from tinker_core.env import EnvSpec
from tinker_core.fsm import TurnFSM, TurnState

__all__ = [
    "AGENT_PROGRAM_SPEC", "EpisodeLog", "ProxyCall", "UnknownEpisode", "merge_calls", "segment_trajectory", "split_segments",
    "transcript",
]

AGENT_PROGRAM_SPEC = EnvSpec(
    id="agent/program-v0",
    description="An agent program run(task, client) -> reward, trained through the rollout proxy "
    "(kwargs: entry 'module:run', tasks: a list or 'module:TASKS', timeout_s, reward 'module:fn', path, isolation: thread | process, "
    "demo 'module:fn' for an SFT warm start)",
    agent_program=True,
    import_kwargs=("entry", "tasks", "reward", "demo"),
)
"""The spec of the env ``agent/program-v0`` (:mod:`tinker_algos.rollout.agent_program`), here so that the
plugin registers it without importing torch."""


@dataclass(frozen=True)
class ProxyCall:
    """One call an agent made through the proxy (see the module docstring)."""

    prompt_ids: tuple[int, ...]
    completion_ids: tuple[int, ...]
    #: the sampler's logprob of each completion token (the behaviour policy), as sampled
    logprobs: tuple[float, ...]
    #: how the sample ended: ``stop``, ``length``, ``tool_calls``
    finish_reason: str
    #: the completion's text (decoded without special tokens), for transcripts
    text: str = ""
    #: ``chat`` or ``completion``
    route: str = "chat"

    def __post_init__(self) -> None:
        if len(self.logprobs) != len(self.completion_ids):
            raise ValueError(f"ProxyCall: {len(self.completion_ids)} completion ids but {len(self.logprobs)} logprobs")


class UnknownEpisode(KeyError):
    """A call names an episode that is not open (never opened, or already closed)."""


@dataclass
class EpisodeLog:
    """The proxy's record: open episode ids and their calls, in order."""

    _calls: dict[str, list[ProxyCall]] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def open(self, episode_id: str) -> None:
        """Accept calls for ``episode_id`` from now on."""
        with self._lock:
            if episode_id in self._calls:
                raise ValueError(f"episode {episode_id!r} is already open")
            self._calls[episode_id] = []

    def is_open(self, episode_id: str) -> bool:
        with self._lock:
            return episode_id in self._calls

    def add(self, episode_id: str, call: ProxyCall) -> None:
        """Record ``call`` (UnknownEpisode when the episode is not open: a late call is dropped)."""
        with self._lock:
            if episode_id not in self._calls:
                raise UnknownEpisode(episode_id)
            self._calls[episode_id].append(call)

    def calls(self, episode_id: str) -> list[ProxyCall]:
        """The calls recorded so far (a copy)."""
        with self._lock:
            if episode_id not in self._calls:
                raise UnknownEpisode(episode_id)
            return list(self._calls[episode_id])

    def close(self, episode_id: str) -> list[ProxyCall]:
        """Stop accepting calls for ``episode_id``; its calls, in order."""
        with self._lock:
            if episode_id not in self._calls:
                raise UnknownEpisode(episode_id)
            return self._calls.pop(episode_id)


def split_segments(calls: Sequence[ProxyCall]) -> list[list[ProxyCall]]:
    """The calls split where a prompt does not extend the previous prompt + completion."""
    out: list[list[ProxyCall]] = []
    context: tuple[int, ...] = ()
    for call in calls:
        if out and call.prompt_ids[: len(context)] == context and len(call.prompt_ids) >= len(context):
            out[-1].append(call)
        else:
            out.append([call])
        context = call.prompt_ids + call.completion_ids
    return out


def segment_trajectory(calls: Sequence[ProxyCall], reward: float, group_id: int = 0, **info: object) -> Trajectory:
    """The trajectory of one segment's calls (each extends the last): prompt tokens masked, each
    completion trained with its logprobs, ``reward`` on the last turn."""
    fsm = TurnFSM()
    context: tuple[int, ...] = ()
    for k, call in enumerate(calls):
        if k:
            fsm.end_turn(0.0)  # only the episode's end is rewarded
        fsm.append(call.prompt_ids[len(context):])  # masked: PENDING first, INTERACTING after
        fsm.transition(TurnState.GENERATING)
        fsm.append(call.completion_ids, logprobs=call.logprobs)
        fsm.transition(TurnState.INTERACTING)
        context = call.prompt_ids + call.completion_ids
    fsm.end_turn(reward)
    fsm.transition(TurnState.TERMINATED)
    return fsm.to_trajectory(group_id=group_id, stop_reason=calls[-1].finish_reason, **info)


def merge_calls(calls: Sequence[ProxyCall], reward: float, group_id: int = 0, **info: object) -> list[Trajectory]:
    """One episode's calls as trajectories, one per segment (see the module docstring): prompt
    tokens masked, completion tokens trained with the sampler's logprobs, ``reward`` on the last
    turn of every segment. ``info`` goes into each trajectory's ``info`` (with ``segment``)."""
    return [
        segment_trajectory(seg, reward, group_id, **info, segment=i) for i, seg in enumerate(split_segments(calls))
    ]


def transcript(calls: Sequence[ProxyCall], decode: Callable[[list[int]], str]) -> list[tuple[str, str]]:
    """``(observation, action)`` texts of the calls, as rollout transcripts have them: the first
    prompt whole, then each prompt's tokens after the previous context (whole when it does not
    extend it), and each completion's text."""
    out: list[tuple[str, str]] = []
    context: tuple[int, ...] = ()
    for call in calls:
        extends = bool(context) and call.prompt_ids[: len(context)] == context
        out.append((decode(list(call.prompt_ids[len(context):] if extends else call.prompt_ids)), call.text))
        context = call.prompt_ids + call.completion_ids
    return out
