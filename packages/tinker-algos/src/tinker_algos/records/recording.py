"""What a run records besides its metrics: sampled episodes (``rollouts.jsonl``) and the time of
each phase of each step (``trace.json``).

The formats and their readers are torch-free, in tinker-core: :class:`tinker_core.episodes.RolloutRecord`
(read by :mod:`tinker_core.run_files`) and :mod:`tinker_core.traces`. This module writes them, and is kept apart from the logic it
observes: the run makes a :class:`Recorder` *active* for the duration of each step
(:meth:`Recorder.active`, a context variable, so jobs sharing a model host each record into their
own run directory), and the code being observed calls three module functions that do nothing when
no recorder is active:

* :func:`phase` (and the decorator :func:`traced`) -- ``with phase("sample"): ...`` times a phase
  as a trace event and measures its peak memory (:mod:`tinker_algos.records.memory`: the event's
  ``peak_rss_gib`` / ``peak_cuda_gib`` args, and :meth:`Recorder.memory_metrics`) (the rollout's
  ``sample`` and ``env`` calls, the trainer's ``logprobs``, ``forward_backward`` and
  ``optim_step``; the run's ``rollout``, ``evaluate``, ``checkpoint``; ``record`` is this module's
  own time);
* :func:`record_train` -- a step's episodes with their advantages (GRPO, PPO);
* :func:`record_eval` -- a held-out evaluation's episodes.

Each recorded episode is a :class:`tinker_core.episodes.Episode` (built by the rollout that played
it) written as its JSON form, :meth:`~tinker_core.episodes.Episode.to_record`.

Recording reads what the rollout produced and never draws a random number, so a run's metrics are
the same with it on or off (tested), and a resumed run drops the records after its checkpoint.
"""

from __future__ import annotations

import contextlib
import functools
import socket
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextvars import ContextVar
from pathlib import Path
from typing import Any, TypeVar

import numpy as np

from tinker_algos.records.memory import Peaks, watch
from tinker_core.config import LoggingConfig, RolloutsLogConfig
from tinker_core.episodes import UNTEMPERED, Episode, RolloutRecord, observation_text
from tinker_core.run_files import ROLLOUTS_FILE, TRACE_FILE, keep_until
from tinker_core.traces import STEP, TraceWriter

__all__ = [  # UNTEMPERED and observation_text live in tinker_core.episodes; the rollouts import them from here
    "TABLE_COLUMNS", "UNTEMPERED", "Recorder", "observation_text", "phase", "record_eval", "record_train", "select",
    "table_rows", "traced", "transcripts",
]

_F = TypeVar("_F", bound=Callable[..., Any])
_ACTIVE: ContextVar[Recorder | None] = ContextVar("opentinker_recorder", default=None)

TABLE_COLUMNS = ("kind", "stage", "step", "group", "episode", "reward", "advantage", "stop_reason", "new_tokens", "prompt", "completion")
"""The columns of the rollout tables sent to experiment trackers (:meth:`Recorder.on_records`)."""


class Recorder:
    """Writes one run's records: episodes to ``rollouts_path`` (None: none) chosen by ``rollouts``,
    phases to ``trace`` (None: none). ``on_records(step, records)`` gets each batch written (the
    experiment trackers' rollout tables)."""

    def __init__(
        self, rollouts_path: Path | None, rollouts: RolloutsLogConfig, trace: TraceWriter | None,
        on_records: Callable[[int, list[RolloutRecord]], None] | None = None,
    ) -> None:
        self.rollouts_path = rollouts_path if rollouts.per_step > 0 else None
        self.rollouts = rollouts
        self.trace = trace
        self.on_records = on_records
        self.stage = ""
        self.step = 0
        self.args: dict[str, Any] = {}
        self.memory: dict[str, Peaks] = {}
        self._memory_lock = threading.Lock()
        self._step_watch: int | None = None

    @classmethod
    def for_run(cls, run_dir: Path, logging: LoggingConfig, *, job_name: str, resume_step: int | None) -> Recorder:
        """The recorder ``logging`` asks for in ``run_dir``: a fresh run (``resume_step=None``) starts
        both files over; a resumed one keeps the records up to ``resume_step`` and appends."""
        path = run_dir / ROLLOUTS_FILE
        if resume_step is None:
            path.unlink(missing_ok=True)
        else:
            keep_until(path, resume_step)
        trace = None
        if logging.trace:
            trace = TraceWriter(run_dir / TRACE_FILE, process_name=f"{job_name} on {socket.gethostname()}", fresh=resume_step is None)
        return cls(path, logging.rollouts, trace)

    @contextlib.contextmanager
    def active(self, stage: str, step: int) -> Iterator[Recorder]:
        """Record into this run while the block runs: step ``step`` of stage ``stage`` (a ``step`` trace event)."""
        self.stage, self.step, self.args = stage, step, {"stage": stage, "step": step}
        self.memory = {}
        token = _ACTIVE.set(self)
        self._step_watch = watch().begin()
        ts, t0 = time.time(), time.perf_counter()
        try:
            yield self
        finally:
            _ACTIVE.reset(token)
            peaks = watch().end(self._step_watch)
            self._step_watch = None
            if self.trace is not None:
                self.trace.complete(STEP, ts * 1e6, (time.perf_counter() - t0) * 1e6, {**self.args, **_memory_args(peaks)})
                self.trace.flush()

    def note_memory(self, name: str, peaks: Peaks) -> None:
        """Phase ``name`` of this step peaked at ``peaks`` (a phase run several times: the largest)."""
        with self._memory_lock:
            self.memory.setdefault(name, Peaks()).fold(peaks.bytes)

    def memory_metrics(self) -> dict[str, float]:
        """``memory/<phase>_<measure>_gib`` of the phases this step has finished so far, and
        ``memory/step_<measure>_gib``: the step's peak until now (``rss``: the process's resident
        set, ``cuda``: torch's allocated bytes; see :mod:`tinker_algos.records.memory`)."""
        with self._memory_lock:
            phases = dict(self.memory)
        if self._step_watch is not None:
            phases[STEP] = watch().peek(self._step_watch)
        return {f"memory/{name}_{k}_gib": v for name, p in sorted(phases.items()) for k, v in p.gib().items()}

    def write(self, records: list[RolloutRecord]) -> None:
        if self.rollouts_path is None or not records:
            return
        with self.rollouts_path.open("a", encoding="utf-8") as f:
            f.write("".join(r.to_json_line() for r in records))
        if self.on_records is not None:
            self.on_records(self.step, records)


@contextlib.contextmanager
def phase(name: str) -> Iterator[None]:
    """Time the block as phase ``name`` of the active recorder's step (nothing without one)."""
    rec = _ACTIVE.get()
    if rec is None:
        yield
        return
    w = watch()
    i = w.begin()
    ts, t0 = time.time(), time.perf_counter()
    try:
        yield
    finally:
        dur_us = (time.perf_counter() - t0) * 1e6
        peaks = w.end(i)
        rec.note_memory(name, peaks)
        if rec.trace is not None:
            rec.trace.complete(name, ts * 1e6, dur_us, {**rec.args, **_memory_args(peaks)})


def _memory_args(peaks: Peaks) -> dict[str, float]:
    """A trace event's memory args: ``peak_rss_gib``, ``peak_cuda_gib`` (those measured)."""
    return {f"peak_{k}_gib": v for k, v in peaks.gib().items()}


def traced(name: str) -> Callable[[_F], _F]:
    """A decorator: each call of the function is phase ``name`` (see :func:`phase`)."""

    def wrap(fn: _F) -> _F:
        @functools.wraps(fn)
        def call(*args: Any, **kwargs: Any) -> Any:
            if _ACTIVE.get() is None:
                return fn(*args, **kwargs)
            with phase(name):
                return fn(*args, **kwargs)

        return call  # type: ignore[return-value]

    return wrap


def record_train(result: Any, tokenizer: Any, advantages_B_T: np.ndarray | None, mask_B_T: np.ndarray | None, *, generated_only: bool = False) -> None:
    """Record a sample of a training step's episodes (every ``logging.rollouts.every``-th step).

    ``result``: the step's :class:`~tinker_algos.rollout.RolloutResult` (other results, multi-agent
    ones, are not recorded); ``advantages_B_T`` and ``mask_B_T``: the batch's, whose rows are the
    result's trajectories in order (``generated_only``: those that generated a token).
    """
    rec = _ACTIVE.get()
    if rec is None or rec.rollouts_path is None or rec.step % rec.rollouts.every:
        return
    eps = _recordable(result)
    if eps is None:
        return
    with phase("record"):
        advantage: dict[int, float] = {}
        if advantages_B_T is not None and mask_B_T is not None:
            trajs = [t for t in result.trajectories if not generated_only or t.num_generated > 0]
            if len(trajs) == len(advantages_B_T):
                rows = (advantages_B_T * mask_B_T).sum(axis=1) / np.maximum(mask_B_T.sum(axis=1), 1.0)
                advantage = {id(t): float(a) for t, a in zip(trajs, rows, strict=True)}
        chosen = select(eps, rec.rollouts.per_step, rec.rollouts.keep)
        rec.write([
            eps[i].to_record(tokenizer, kind="train", stage=rec.stage, step=rec.step, episode=i,
                             advantage=advantage.get(id(eps[i].trajectory)))
            for i in chosen
        ])


def record_eval(result: Any, tokenizer: Any) -> None:
    """Record a held-out evaluation's episodes (at most ``logging.rollouts.per_step``)."""
    rec = _ACTIVE.get()
    if rec is None or rec.rollouts_path is None:
        return
    eps = _recordable(result)
    if eps is None:
        return
    with phase("record"):
        chosen = select(eps, rec.rollouts.per_step, rec.rollouts.keep)
        rec.write([eps[i].to_record(tokenizer, kind="eval", stage=rec.stage, step=rec.step, episode=i) for i in chosen])


@contextlib.contextmanager
def transcripts(path: Path, *, stage: str, step: int, limit: int = 10**9) -> Iterator[Recorder]:
    """Record every evaluation in the block (up to ``limit`` episodes each) into ``path``, started
    over: the transcripts of ``opentinker eval``."""
    path.unlink(missing_ok=True)
    # model_construct: an evaluation may play more episodes than a run's per_step allows
    rec = Recorder(path, RolloutsLogConfig.model_construct(every=1, per_step=limit, keep="all"), None)
    with rec.active(stage, step):
        yield rec


def _recordable(result: Any) -> list[Episode] | None:
    """The :class:`~tinker_core.episodes.Episode` s of a rollout's result, or None for a result of
    another kind: a single-agent :class:`tinker_algos.rollout.RolloutResult`'s as they are; a
    multi-agent result's (one with ``roles``) one per learner seat of each episode, episode after
    episode (:meth:`tinker_algos.multiagent.MultiAgentEpisode.seat_episodes`). Duck-typed: the
    rollouts import this module."""
    episodes = getattr(result, "episodes", None)
    if episodes is None:
        return None
    if hasattr(result, "roles"):
        return [seat for ep in episodes for seat in ep.seat_episodes(result.roles, getattr(result, "group_size", 1))]
    if all(isinstance(e, Episode) for e in episodes):
        return list(episodes)
    return None


def select(episodes: Sequence[Any], n: int, keep: str) -> list[int]:
    """The indices of the ``n`` episodes to record, in episode order: the first ``n`` (``all``), or
    the ``n - n // 2`` highest and the ``n // 2`` lowest rewards (``best-and-worst``; ties keep
    episode order)."""
    if len(episodes) <= n:
        return list(range(len(episodes)))
    if keep != "best-and-worst":
        return list(range(n))
    order = sorted(range(len(episodes)), key=lambda i: (-episodes[i].reward, i))
    best = order[: n - n // 2]
    worst = order[len(order) - n // 2:] if n // 2 else []
    return sorted(set(best) | set(worst))


def table_rows(records: Sequence[RolloutRecord]) -> list[list[Any]]:
    """The rows of a tracker table (:data:`TABLE_COLUMNS`): the policy's turns joined as the completion."""
    rows = []
    for r in records:
        completion = "\n".join(t.text for t in r.turns if t.role == "policy")
        rows.append([r.kind, r.stage, r.step, r.group, r.episode, r.reward, r.advantage, r.stop_reason, r.new_tokens, r.prompt, completion])
    return rows
