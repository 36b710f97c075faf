"""The turn-taking executor of a model host: one thread runs every unit of work, fairly.

Work is queued per *queue id* (a training session, or a job on the host), and each queue belongs
to a *group* (its tenant; by default a group of its own). One executor thread serves the groups
**round-robin** and, within a group, its queues round-robin: it takes the oldest item of the next
queue of the next group that has work. So a busy queue cannot starve another, and a tenant gets
one turn per round however many sessions it opens: an item of a tenant waits for at most one item
of every other tenant with work (a tenant with four busy sessions and one with one get half the
turns each, not four fifths and one fifth). The items of one queue run in the order they were
queued.

All torch work of a host runs on this one thread: torch's OpenMP thread teams, one per calling
thread, slow each other down when several threads take turns (measured: steps took twice as long
at two threads). Items also run under :attr:`TurnExecutor.model_lock`, one lock per *process*:
the global torch RNG is process-wide, and several hosts share a process with the ``local`` host
backend.

**Deadlines and cancellation.** An item may carry its caller's *deadline* (seconds since the epoch,
:func:`time.time`; it crosses process boundaries to Ray hosts) and a *token*. An item whose
deadline has passed when its turn comes is dropped, not run (``DEADLINE_EXCEEDED``); :meth:`cancel`
drops a waiting item by its token (``CANCELLED``). An item that has started always runs to its
end: its answer is what the request did (the idempotent response cache relies on it).
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from concurrent.futures import CancelledError, Future
from concurrent.futures import TimeoutError as WaitTimeout
from typing import Any

from tinker_scheduler.errors import StatusError

#: A queued unit of work: the callable, its future, its deadline (None: none).
_Item = tuple[Callable[[], Any], Future[Any], float | None]


def expired(what: str = "the request") -> StatusError:
    """The error of work dropped because its caller's deadline passed before it ran."""
    return StatusError("DEADLINE_EXCEEDED", f"{what} was dropped before it ran: the client's deadline passed while it waited")


def cancelled(what: str = "the request") -> StatusError:
    """The error of work dropped because its caller cancelled it before it ran."""
    return StatusError("CANCELLED", f"{what} was dropped before it ran: the client cancelled it")


class TurnExecutor:
    """Round-robin queues served by one daemon thread (see the module docstring)."""

    #: Held while an item runs; shared by every executor in the process.
    model_lock = threading.RLock()

    def __init__(self, name: str = "opentinker-model-host") -> None:
        self._queues: dict[str, deque[_Item]] = {}
        self._tokens: dict[str, Future[Any]] = {}  # token -> future of a waiting or running item
        self._group_of: dict[str, str] = {}  # queue id -> its group
        self._rings: dict[str, deque[str]] = {}  # group -> its queue ids with work, in serving order
        self._order: deque[str] = deque()  # groups with work, in serving order
        self._cv = threading.Condition()
        self._closed = False
        self.served: list[str] = []  # queue ids in execution order (for tests / debugging)
        self.dropped: list[str] = []  # queue ids of items dropped unrun: cancelled or expired (likewise)
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    def open(self, qid: str, group: str | None = None) -> bool:
        """Create queue ``qid`` in ``group`` (its tenant; ``None``: a group of its own, named
        ``qid``); False if it exists already."""
        with self._cv:
            if qid in self._queues:
                return False
            self._queues[qid] = deque()
            self._group_of[qid] = qid if group is None else f"group:{group}"
            return True

    def _unlist(self, qid: str) -> None:
        """Take ``qid`` out of the serving order (its group too, when that has no other work)."""
        group = self._group_of.pop(qid, None)
        ring = self._rings.get(group) if group is not None else None
        if ring is None:
            return
        with contextlib.suppress(ValueError):
            ring.remove(qid)
        if not ring:
            del self._rings[group]
            with contextlib.suppress(ValueError):
                self._order.remove(group)

    def discard(self, qid: str, error: StatusError) -> None:
        """Remove queue ``qid``; its waiting items fail with ``error``. Idempotent."""
        with self._cv:
            pending = self._queues.pop(qid, deque())
            self._unlist(qid)
        for _, fut, _ in pending:
            if not fut.done():  # not cancelled meanwhile
                fut.set_exception(error)

    def submit(self, qid: str, work: Callable[[], Any], *, deadline: float | None = None, token: str = "") -> Future[Any]:
        """Queue ``work`` behind the earlier items of ``qid``; NOT_FOUND if there is no such queue.

        ``deadline`` (seconds since the epoch): drop the item if its turn comes later; ``token``:
        a name :meth:`cancel` takes.
        """
        fut: Future[Any] = Future()
        with self._cv:
            queue = self._queues.get(qid)
            if self._closed:
                fut.set_exception(StatusError("UNAVAILABLE", "the model host is shutting down"))
            elif queue is None:
                fut.set_exception(StatusError("NOT_FOUND", f"session {qid!r} is not on this host"))
            else:
                group = self._group_of[qid]
                ring = self._rings.get(group)
                if ring is None:
                    ring = self._rings[group] = deque()
                    self._order.append(group)
                if qid not in ring:
                    ring.append(qid)
                queue.append((work, fut, deadline))
                if token:
                    self._tokens[token] = fut
                    fut.add_done_callback(lambda _: self._forget(token))
                self._cv.notify_all()
        return fut

    def pending(self, qid: str) -> int:
        """How many items of queue ``qid`` wait for their turn (not started, not cancelled)."""
        with self._cv:
            return sum(1 for _, fut, _ in self._queues.get(qid, ()) if not fut.cancelled())

    def _forget(self, token: str) -> None:
        with self._cv:
            self._tokens.pop(token, None)

    def cancel(self, token: str) -> bool:
        """Drop the waiting item submitted with ``token``; False if it has started, ended or is unknown."""
        with self._cv:
            fut = self._tokens.get(token)
        return fut is not None and fut.cancel()

    def call(self, qid: str, work: Callable[[], Any], *, deadline: float | None = None, token: str = "") -> Any:
        """:meth:`submit` and wait for the result (or the exception).

        At the deadline an item still waiting is dropped (``DEADLINE_EXCEEDED``) and the caller
        returns at once; one already running is waited for.
        """
        fut = self.submit(qid, work, deadline=deadline, token=token)
        try:
            try:
                return fut.result(None if deadline is None else max(0.0, deadline - time.time()))
            except WaitTimeout:
                if fut.cancel():
                    raise expired() from None
                return fut.result()
        except CancelledError:
            raise cancelled() from None

    @contextlib.contextmanager
    def serialized(self) -> Iterator[None]:
        """Hold :attr:`model_lock` (for model changes made outside the executor thread)."""
        with self.model_lock:
            yield

    def close(self) -> None:
        """Stop the thread; waiting items fail with UNAVAILABLE."""
        with self._cv:
            self._closed = True
            pending = [fut for queue in self._queues.values() for _, fut, _ in queue]
            for queue in self._queues.values():
                queue.clear()
            self._rings.clear()
            self._order.clear()
            self._cv.notify_all()
        for fut in pending:
            if not fut.done():
                fut.set_exception(StatusError("UNAVAILABLE", "the model host is shutting down"))

    def _next(self) -> tuple[str, _Item] | None:
        with self._cv:
            while not self._closed:
                while self._order:
                    group = self._order.popleft()
                    ring = self._rings[group]
                    qid = ring.popleft()
                    queue = self._queues[qid]  # a discarded queue is in no ring
                    item = queue.popleft()
                    if queue:
                        ring.append(qid)  # back of its group's line: round-robin within the group
                    if ring:
                        self._order.append(group)  # the group to the back: round-robin between groups
                    else:
                        del self._rings[group]
                    return qid, item
                self._cv.wait()
        return None

    def _run(self) -> None:
        while True:
            item = self._next()
            if item is None:
                return
            qid, (work, fut, deadline) = item
            if not fut.set_running_or_notify_cancel():  # cancelled while it waited
                self.dropped.append(qid)
                continue
            if deadline is not None and time.time() >= deadline:
                self.dropped.append(qid)
                fut.set_exception(expired())
                continue
            self.served.append(qid)
            try:
                with self.model_lock:
                    fut.set_result(work())
            except BaseException as e:  # noqa: BLE001 - delivered to the caller
                fut.set_exception(e)
