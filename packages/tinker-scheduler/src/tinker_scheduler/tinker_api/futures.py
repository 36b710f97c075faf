"""Tinker futures: long operations answer a request id at once and run in order per model.

The SDK submits a model's requests one at a time (it takes turns) and then polls
``retrieve_future``; each model therefore gets one worker thread that runs its requests in
arrival order (the :class:`~tinker_scheduler.sessions.SessionManager` serialises them on the host
as well). The worker encodes each answer (:class:`Answer`: JSON, protobuf, or a failure
``{"error": ..., "category": "user" | "server"}``) and stores it in the gateway's
:class:`~tinker_scheduler.tinker_api.records.Records`, so a client polling across a scheduler
restart gets it (or, for a request the restart interrupted, a failure saying so). A future
belongs to the tenant that created it: another tenant polling its id gets the same "not found" as
for an id that never existed. A request sent again under the same idempotency key (the SDK's
``X-Idempotency-Key``, kept across its own retries of one call) gets the first one's request id
and runs once: a retry after a timeout must not take a second optimizer step. The newest
:data:`MAX_FUTURES` stay in memory too, their finished answers at most :data:`MAX_HELD_BYTES`
(older ones are read back from the store).
"""

from __future__ import annotations

import asyncio
import json
import logging
import threading
import uuid
from collections import OrderedDict
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from tinker_scheduler.errors import StatusError, classify
from tinker_scheduler.tinker_api.records import MAX_FUTURES, Records

#: answers of finished requests kept in memory at most (the store keeps them all), in bytes
MAX_HELD_BYTES = 32 * 2**20

logger = logging.getLogger("tinker_scheduler.tinker_api")

JSON = "application/json"
#: The answer to a future that a scheduler restart interrupted. Category ``user``: the SDK raises
#: it at once (``RequestFailedError``) instead of retrying.
RESTARTED = {"error": "the scheduler restarted while this request ran; retry it", "category": "user"}
#: Idempotency keys longer than this are refused (the SDK's are ~60 characters).
MAX_KEY_CHARS = 256
#: Failure codes of the server's own making; the rest are the caller's ("user").
SERVER_CODES = frozenset({"INTERNAL", "UNAVAILABLE", "DEADLINE_EXCEEDED"})


@dataclass(frozen=True)
class Answer:
    """A finished request's HTTP body and its media type."""

    body: bytes
    media_type: str = JSON

    @classmethod
    def of(cls, result: Any) -> Answer:
        """A route's result: an :class:`Answer` as it is, a dict as JSON."""
        return result if isinstance(result, Answer) else cls(json.dumps(result).encode())

    @classmethod
    def failed(cls, error: BaseException) -> Answer:
        code, message = classify(error)
        return cls.of({"error": message, "category": "server" if code in SERVER_CODES else "user"})


@dataclass
class Pending:
    tenant: str
    future: Future[Answer]


class Futures:
    """Request ids -> answers, and one ordered worker per model."""

    def __init__(self, records: Records | None = None, max_held_bytes: int = MAX_HELD_BYTES) -> None:
        self.records = records
        self._futures: OrderedDict[str, Pending] = OrderedDict()
        self._workers: dict[str, ThreadPoolExecutor] = {}
        self._lock = threading.Lock()
        self.max_held_bytes = max_held_bytes
        self._finished: OrderedDict[str, int] = OrderedDict()  # finished request ids -> answer bytes held
        self._keys: OrderedDict[tuple[str, str], str] = OrderedDict()  # (tenant, idempotency key) -> request id
        self.held_bytes = 0

    def submit(self, tenant: str, queue: str, fn: Callable[[], Any], key: str | None = None) -> str:
        """Run ``fn`` after the earlier requests of ``queue`` (a model id); its request id. With an
        idempotency ``key`` the tenant used before (among the newest :data:`MAX_FUTURES`), nothing
        runs: the answer is the first request's id."""
        if key is not None and len(key) > MAX_KEY_CHARS:
            raise StatusError("INVALID_ARGUMENT", f"X-Idempotency-Key: at most {MAX_KEY_CHARS} characters")
        request_id = f"req-{uuid.uuid4().hex}"
        if key is not None:
            with self._lock:  # the key is taken before anything else, so two racing attempts run once
                first = self._keys.setdefault((tenant, key), request_id)
                while len(self._keys) > MAX_FUTURES:
                    self._keys.popitem(last=False)
            if first != request_id:
                logger.info("a retry of request %s (same idempotency key): not run again", first)
                return first
        if self.records is not None:
            try:
                self.records.add_future(request_id, tenant)
            except Exception:
                if key is not None:  # nothing was queued: a retry must run, not name this id
                    with self._lock:
                        self._keys.pop((tenant, key), None)
                raise

        def run() -> Answer:
            try:
                answer = Answer.of(fn())
            except Exception as e:  # noqa: BLE001 - every failure is an answer
                answer = Answer.failed(e)
            if self.records is not None:
                try:
                    self.records.finish_future(request_id, answer.media_type, answer.body, model_id=queue)
                except Exception:  # noqa: BLE001 - the answer is still in memory
                    logger.warning("storing the answer of %s failed", request_id, exc_info=True)
            return answer

        with self._lock:
            worker = self._workers.get(queue)
            if worker is None:
                worker = self._workers[queue] = ThreadPoolExecutor(1, thread_name_prefix=f"tinker-{queue}")
            future = worker.submit(run)
            self._futures[request_id] = Pending(tenant, future)
            while len(self._futures) > MAX_FUTURES:
                old, _ = self._futures.popitem(last=False)
                self.held_bytes -= self._finished.pop(old, 0)
        future.add_done_callback(lambda f: self._finish(request_id, f))
        return request_id

    @property
    def answers_held(self) -> int:
        """Finished answers held in memory now (the store holds them all)."""
        with self._lock:
            return len(self._finished)

    def _finish(self, request_id: str, future: Future[Answer]) -> None:
        """Count a finished answer's bytes; with a store (which holds every answer), forget the
        oldest finished answers once more than ``max_held_bytes`` are held here: memory stays
        bounded by bytes, not only by the count of requests (the 30-minute soak grew ~2 MB a
        minute keeping every answer of its 3,600 requests)."""
        size = len(future.result().body) if not future.cancelled() else 0
        with self._lock:
            if request_id not in self._futures:
                return
            self._finished[request_id] = size
            self.held_bytes += size
            while self.records is not None and self.held_bytes > self.max_held_bytes and self._finished:
                old, n = self._finished.popitem(last=False)
                self.held_bytes -= n
                self._futures.pop(old, None)

    async def wait(self, tenant: str, request_id: str, timeout: float) -> Answer | None:
        """The answer of the tenant's request ``request_id``, waiting up to ``timeout`` s; None if
        it is still running then; NOT_FOUND if the tenant has no such request. It waits on the
        event loop: the worker's result wakes it directly, no thread blocks meanwhile."""
        pending = self._pending(tenant, request_id)
        if pending is None:
            return self._stored(tenant, request_id)
        if not pending.done():
            try:
                await asyncio.wait_for(asyncio.shield(asyncio.wrap_future(pending)), timeout)
            except TimeoutError:
                return None
        return pending.result()

    def _pending(self, tenant: str, request_id: str) -> Future[Answer] | None:
        with self._lock:
            pending = self._futures.get(request_id)
        return pending.future if pending is not None and pending.tenant == tenant else None

    def _stored(self, tenant: str, request_id: str) -> Answer:
        """The answer the store holds (a request of this tenant from before a restart, or forgotten
        here); NOT_FOUND if none."""
        with self._lock:
            pending = self._futures.get(request_id)
        stored = self.records.future(tenant, request_id) if self.records is not None and pending is None else None
        if stored is None:
            raise StatusError("NOT_FOUND", f"request_id: no request {request_id!r}")
        state, media_type, body = stored
        if state == "done":
            return Answer(body, media_type)
        return Answer.of(RESTARTED)  # pending in the store, unknown here: a restart interrupted it

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
