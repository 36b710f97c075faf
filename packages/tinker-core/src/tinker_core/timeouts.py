"""Calls with a time limit that cannot hang the caller.

The call runs in a **daemon** thread; when it overruns, the caller stops waiting and the thread
is abandoned, never joined (a ``ThreadPoolExecutor`` worker would be joined at interpreter exit,
so one stuck call would hang the process). A late answer is dropped. What is called must
therefore not hold locks that the caller needs afterwards.

- :func:`call_with_timeout` waits for the answer in this thread (the env calls of a rollout,
  the coordinator's synchronous agent calls);
- :func:`start_daemon` is the building block for an event loop: it hands the answer to a
  callback (the coordinator's asynchronous agent calls);
- :class:`CallRunner` runs many calls, each within the limit, in **one** pooled worker thread
  (the env calls of a rollout: hundreds per step, where a thread per call costs more than the
  call). A call that overruns is reported as :class:`CallTimeout`; its worker is abandoned like
  any stuck daemon thread and a new one runs the calls after it.
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

__all__ = ["CallRunner", "CallTimeout", "Outcome", "call_with_timeout", "start_daemon"]

T = TypeVar("T")


class CallTimeout(TimeoutError):
    """A call did not finish within its time limit (its thread was abandoned)."""


def start_daemon(
    fn: Callable[[], T], on_done: Callable[[T | None, BaseException | None], None], *, name: str
) -> None:
    """Run ``fn()`` in a daemon thread named ``name``, then ``on_done(value, None)``, or
    ``on_done(None, error)`` with whatever it raised (``BaseException`` too: nothing is lost)."""

    def target() -> None:
        try:
            value = fn()
        except BaseException as e:  # noqa: BLE001 - handed to on_done, never lost
            on_done(None, e)
        else:
            on_done(value, None)

    threading.Thread(target=target, name=name, daemon=True).start()


def call_with_timeout(
    fn: Callable[[], T], timeout_s: float | None, *, name: str, message: str | None = None
) -> T:
    """``fn()``, within ``timeout_s`` seconds.

    ``timeout_s=None`` calls ``fn`` here, unguarded. Otherwise it runs in a daemon thread named
    ``name`` (:func:`start_daemon`); whatever it raises is re-raised here, and when it overruns
    :class:`CallTimeout` is raised with ``message`` (default: ``"<name> took longer than
    <timeout_s> s"``).
    """
    if timeout_s is None:
        return fn()
    done = threading.Event()
    box: dict[str, Any] = {}

    def on_done(value: T | None, error: BaseException | None) -> None:
        box["value"], box["error"] = value, error
        done.set()

    start_daemon(fn, on_done, name=name)
    if not done.wait(timeout_s):
        raise CallTimeout(message or f"{name} took longer than {timeout_s} s")
    if box["error"] is not None:
        raise box["error"]
    value: T = box["value"]
    return value


Outcome = tuple[Any, BaseException | None]
"""``(value, None)`` when a call returned, ``(None, error)`` when it raised or overran."""


class _Job:
    """Calls handed to a worker at once; ``index`` is the one running, ``started`` its start."""

    def __init__(self, fns: Sequence[Callable[[], object]]) -> None:
        self.fns = fns
        self.outcomes: list[Outcome] = []
        self.index = 0
        self.lock = threading.Lock()
        self.started = time.monotonic()
        self.abandoned = False
        self.done = threading.Event()


class CallRunner:
    """Runs calls one after another in one daemon worker thread, each within ``timeout_s`` seconds.

    :meth:`map` hands a whole list of calls to the worker at once (one hand-over, not one thread,
    per call) and returns one :data:`Outcome` per call, in order. Each call's time limit counts
    from its own start. When one overruns, its outcome is ``(None, CallTimeout(message))``, the
    worker running it is abandoned (a daemon, never joined; whatever it returns later is dropped)
    and a fresh worker runs the calls after it. ``timeout_s=None`` runs every call inline in the
    caller's thread. :meth:`close` (or leaving a ``with`` block) lets the worker exit.

    Not for use from several threads at once: each user (a rollout) makes its own.
    """

    def __init__(self, timeout_s: float | None, *, name: str, message: str | None = None) -> None:
        if timeout_s is not None and not timeout_s > 0:
            raise ValueError(f"timeout_s must be > 0 or None, got {timeout_s}")
        self.timeout_s = timeout_s
        self.name = name
        self.message = message or f"{name} took longer than {timeout_s} s"
        self._queue: queue.SimpleQueue[_Job | None] | None = None

    def __enter__(self) -> CallRunner:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Let the worker (if any) exit once it is idle."""
        if self._queue is not None:
            self._queue.put(None)
            self._queue = None

    def call(self, fn: Callable[[], T]) -> T:
        """``fn()`` within the limit: its value, or what it raised (:class:`CallTimeout` on overrun)."""
        value, error = self.map([fn])[0]
        if error is not None:
            raise error
        result: T = value
        return result

    def map(self, fns: Sequence[Callable[[], object]]) -> list[Outcome]:
        """Run ``fns`` in order; one :data:`Outcome` per call."""
        if self.timeout_s is None:
            return [_run_one(fn) for fn in fns]
        out: list[Outcome] = []
        rest = list(fns)
        while rest:
            job = _Job(rest)
            self._worker().put(job)
            timed_out = self._wait(job)
            out.extend(job.outcomes)
            if not timed_out:
                break
            out.append((None, CallTimeout(self.message)))
            rest = rest[len(job.outcomes) + 1 :]
        return out

    def _worker(self) -> queue.SimpleQueue[_Job | None]:
        if self._queue is None:
            self._queue = queue.SimpleQueue()
            threading.Thread(target=_work, args=(self._queue,), name=self.name, daemon=True).start()
        return self._queue

    def _wait(self, job: _Job) -> bool:
        """Wait for ``job``; True when a call overran (the job and its worker are then abandoned)."""
        assert self.timeout_s is not None
        while True:
            with job.lock:
                if job.index >= len(job.fns):
                    return False
                left = job.started + self.timeout_s - time.monotonic()
                if left <= 0:
                    job.abandoned = True
                    self._queue = None  # that worker is stuck in a call: the next job gets a new one
                    return True
            job.done.wait(left)


def _run_one(fn: Callable[[], object]) -> Outcome:
    try:
        return fn(), None
    except BaseException as e:  # noqa: BLE001 - handed back as the call's outcome, never lost
        return None, e


def _work(jobs: queue.SimpleQueue[_Job | None]) -> None:
    """A :class:`CallRunner` worker: run each job's calls, stop when abandoned or told to."""
    while True:
        job = jobs.get()
        if job is None:
            return
        for fn in job.fns:
            outcome = _run_one(fn)
            with job.lock:
                if job.abandoned:
                    return  # the caller gave up on this call; a new worker runs the rest
                job.outcomes.append(outcome)
                job.index += 1
                job.started = time.monotonic()
        job.done.set()
