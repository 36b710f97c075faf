"""The turn-taking executor of a model host: one thread runs every unit of work, fairly.

Work is queued per *queue id* (a training session, or a job on the host). One executor thread
serves the queues **round-robin**: it takes the oldest item of the next queue that has work, so
a busy queue cannot starve another (each waits for at most one item of every other queue), and
the items of one queue run in the order they were queued.

All torch work of a host runs on this one thread: torch's OpenMP thread teams, one per calling
thread, slow each other down when several threads take turns (measured: steps took twice as long
at two threads). Items also run under :attr:`TurnExecutor.model_lock`, one lock per *process*:
the global torch RNG is process-wide, and several hosts share a process with the ``local`` host
backend.
"""

from __future__ import annotations

import contextlib
import threading
from collections import deque
from collections.abc import Callable, Iterator
from concurrent.futures import Future
from typing import Any

from tinker_scheduler.errors import StatusError


class TurnExecutor:
    """Round-robin queues served by one daemon thread (see the module docstring)."""

    #: Held while an item runs; shared by every executor in the process.
    model_lock = threading.RLock()

    def __init__(self, name: str = "opentinker-model-host") -> None:
        self._queues: dict[str, deque[tuple[Callable[[], Any], Future[Any]]]] = {}
        self._order: deque[str] = deque()  # queue ids with work, in serving order
        self._cv = threading.Condition()
        self._closed = False
        self.served: list[str] = []  # queue ids in execution order (for tests / debugging)
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    def open(self, qid: str) -> bool:
        """Create queue ``qid``; False if it exists already."""
        with self._cv:
            if qid in self._queues:
                return False
            self._queues[qid] = deque()
            return True

    def discard(self, qid: str, error: StatusError) -> None:
        """Remove queue ``qid``; its waiting items fail with ``error``. Idempotent."""
        with self._cv:
            pending = self._queues.pop(qid, deque())
            with contextlib.suppress(ValueError):
                self._order.remove(qid)
        for _, fut in pending:
            fut.set_exception(error)

    def submit(self, qid: str, work: Callable[[], Any]) -> Future[Any]:
        """Queue ``work`` behind the earlier items of ``qid``; NOT_FOUND if there is no such queue."""
        fut: Future[Any] = Future()
        with self._cv:
            queue = self._queues.get(qid)
            if self._closed:
                fut.set_exception(StatusError("UNAVAILABLE", "the model host is shutting down"))
            elif queue is None:
                fut.set_exception(StatusError("NOT_FOUND", f"session {qid!r} is not on this host"))
            else:
                if not queue and qid not in self._order:
                    self._order.append(qid)
                queue.append((work, fut))
                self._cv.notify_all()
        return fut

    def call(self, qid: str, work: Callable[[], Any]) -> Any:
        """:meth:`submit` and wait for the result (or the exception)."""
        return self.submit(qid, work).result()

    @contextlib.contextmanager
    def serialized(self) -> Iterator[None]:
        """Hold :attr:`model_lock` (for model changes made outside the executor thread)."""
        with self.model_lock:
            yield

    def close(self) -> None:
        """Stop the thread; waiting items fail with UNAVAILABLE."""
        with self._cv:
            self._closed = True
            pending = [fut for queue in self._queues.values() for _, fut in queue]
            for queue in self._queues.values():
                queue.clear()
            self._cv.notify_all()
        for fut in pending:
            if not fut.done():
                fut.set_exception(StatusError("UNAVAILABLE", "the model host is shutting down"))

    def _next(self) -> tuple[str, Callable[[], Any], Future[Any]] | None:
        with self._cv:
            while not self._closed:
                while self._order:
                    qid = self._order.popleft()
                    queue = self._queues.get(qid)
                    if not queue:
                        continue
                    work, fut = queue.popleft()
                    if queue:
                        self._order.append(qid)  # back of the line: round-robin
                    return qid, work, fut
                self._cv.wait()
        return None

    def _run(self) -> None:
        while True:
            item = self._next()
            if item is None:
                return
            qid, work, fut = item
            if not fut.set_running_or_notify_cancel():
                continue
            self.served.append(qid)
            try:
                with self.model_lock:
                    fut.set_result(work())
            except BaseException as e:  # noqa: BLE001 - delivered to the caller
                fut.set_exception(e)
