"""Tinker futures: long operations answer a request id at once and run in order per model.

The SDK submits a model's requests one at a time (it takes turns) and then polls
``retrieve_future``; each model therefore gets one worker thread that runs its requests in
arrival order (the :class:`~tinker_scheduler.sessions.SessionManager` serialises them on the host
as well). A future belongs to the tenant that created it: another tenant polling its id gets the
same "not found" as for an id that never existed. Finished futures are kept (newest
:data:`MAX_FUTURES`) so a client may poll again.
"""

from __future__ import annotations

import contextlib
import threading
import uuid
from collections import OrderedDict
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import TimeoutError as WaitTimeout
from dataclasses import dataclass
from typing import Any

#: Futures kept (finished or not); the oldest are forgotten first.
MAX_FUTURES = 4096


@dataclass
class Pending:
    tenant: str
    future: Future[Any]


class Futures:
    """Request ids -> results, and one ordered worker per model."""

    def __init__(self) -> None:
        self._futures: OrderedDict[str, Pending] = OrderedDict()
        self._workers: dict[str, ThreadPoolExecutor] = {}
        self._lock = threading.Lock()

    def submit(self, tenant: str, queue: str, fn: Callable[[], Any]) -> str:
        """Run ``fn`` after the earlier requests of ``queue`` (a model id); its request id."""
        request_id = f"req-{uuid.uuid4().hex}"
        with self._lock:
            worker = self._workers.get(queue)
            if worker is None:
                worker = self._workers[queue] = ThreadPoolExecutor(1, thread_name_prefix=f"tinker-{queue}")
            self._futures[request_id] = Pending(tenant, worker.submit(fn))
            while len(self._futures) > MAX_FUTURES:
                self._futures.popitem(last=False)
        return request_id

    def done_now(self, tenant: str, result: Any) -> str:
        """A request id whose answer is already known (quick operations)."""
        future: Future[Any] = Future()
        future.set_result(result)
        request_id = f"req-{uuid.uuid4().hex}"
        with self._lock:
            self._futures[request_id] = Pending(tenant, future)
        return request_id

    def wait(self, tenant: str, request_id: str, timeout: float) -> Future[Any] | None:
        """The tenant's future ``request_id`` once done or after ``timeout`` s (check ``done()``);
        None if it has no such future."""
        with self._lock:
            pending = self._futures.get(request_id)
        if pending is None or pending.tenant != tenant:
            return None
        with contextlib.suppress(WaitTimeout):
            pending.future.exception(timeout)
        return pending.future

    def close_queue(self, queue: str) -> None:
        with self._lock:
            worker = self._workers.pop(queue, None)
        if worker is not None:
            worker.shutdown(wait=False)

    def close(self) -> None:
        with self._lock:
            workers, self._workers = list(self._workers.values()), {}
        for w in workers:
            w.shutdown(wait=False, cancel_futures=True)
