"""What every route of the gateway shares: its models, futures, store and limits, and the steps
most routes begin with (the caller's tenant and JSON body, the model's turn)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from fastapi import Request
from starlette.concurrency import run_in_threadpool

from tinker_core.http_limits import parse_json
from tinker_scheduler.auth import AuthMode
from tinker_scheduler.errors import StatusError
from tinker_scheduler.store import JobStore
from tinker_scheduler.tinker_api.auth import tenant_of
from tinker_scheduler.tinker_api.downloads import Downloads
from tinker_scheduler.tinker_api.futures import Futures
from tinker_scheduler.tinker_api.records import Records
from tinker_scheduler.tinker_api.translate import Models

#: Request bodies larger than this are parsed off the event loop.
INLINE_JSON_BYTES = 65536

Body = dict[str, Any]


@dataclass(frozen=True)
class Context:
    """The gateway's shared state (``app.state.context``)."""

    models: Models
    futures: Futures
    store: JobStore
    auth: AuthMode
    session_timeout_s: float
    max_json_bytes: int
    downloads: Downloads

    @property
    def records(self) -> Records:
        return self.models.records

    def tenant(self, request: Request) -> str:
        """The caller's tenant from its ``tml-`` key (UNAUTHENTICATED without a valid one)."""
        return tenant_of(self.store, self.auth, request.headers)

    async def body_of(self, request: Request) -> tuple[str, Body]:
        """The caller's tenant and JSON object body (its size checked before it is parsed)."""
        tenant = self.tenant(request)
        raw = await request.body()
        if len(raw) > self.max_json_bytes:
            raise StatusError("REQUEST_TOO_LARGE", f"the JSON body is larger than the gateway's limit of "
                                                   f"{self.max_json_bytes} bytes (tinker_max_json_bytes)")
        try:
            body = await run_in_threadpool(parse_json, raw) if len(raw) > INLINE_JSON_BYTES else parse_json(raw)
        except ValueError as e:
            raise StatusError("INVALID_ARGUMENT", str(e)) from None
        if not isinstance(body, dict):
            raise StatusError("INVALID_ARGUMENT", "the request body must be a JSON object")
        return tenant, body

    def later(self, request: Request, tenant: str, model_id: str, fn: Callable[[], Any]) -> Body:
        """Run ``fn`` in the model's turn, once per idempotency key; the answer names its future."""
        return {"request_id": self.futures.submit(tenant, model_id, fn, idempotency_key(request)), "model_id": model_id}

    async def on_model(self, request: Request, fn: Callable[[str, Body], Any],
                       check: Callable[[Body], Any] | None = None) -> Body:
        """The shape of most long requests: the caller's live model ``model_id``, ``check(body)``
        (field types), then ``fn(tenant, body)`` in the model's turn."""
        tenant, body = await self.body_of(request)
        model_id = str(body.get("model_id") or "")
        self.models.session(tenant, model_id)
        if check is not None:
            check(body)
        return self.later(request, tenant, model_id, lambda: fn(tenant, body))

    def own_tinker_session(self, tenant: str, body: Body) -> None:
        """NOT_FOUND unless the body's ``session_id`` is a live Tinker session of the tenant."""
        sid = str(body.get("session_id"))
        state = self.records.tinker_session_state(tenant, sid)
        if state == "expired":
            raise StatusError("NOT_FOUND", f"session_id: session {sid!r} expired (no heartbeat for "
                                           f"{self.session_timeout_s:g} s); create a new ServiceClient")
        if state is None:
            raise StatusError("NOT_FOUND", f"session_id: no session {sid!r}")


def idempotency_key(request: Request) -> str | None:
    """The request's ``X-Idempotency-Key`` (the SDK keeps one across its retries of a call)."""
    return request.headers.get("x-idempotency-key")


def context(request: Request) -> Context:
    """The gateway's :class:`Context` (set by :func:`~tinker_scheduler.tinker_api.app.create_app`)."""
    ctx: Context = request.app.state.context
    return ctx
