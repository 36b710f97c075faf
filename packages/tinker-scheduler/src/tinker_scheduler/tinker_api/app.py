"""The HTTP routes of the Tinker API (``/api/v1/...``) as a FastAPI app.

Quick calls (sessions, ``get_info``, ``create_sampling_session``, the REST listings) answer at
once. Long ones (``create_model``, ``forward_backward``, ``optim_step``, weights, ``asample``)
answer a request id and run in order per model (:mod:`.futures`); ``retrieve_future`` waits up to
:data:`POLL_WAIT_S` for the answer and otherwise answers ``{"type": "try_again"}``, which the SDK
polls again. ``ForwardBackwardOutput`` and ``SampleResponse`` answers are protobuf (as the SDK
reads them, :mod:`.protowire`); the rest is JSON.

The routes live in one router module per area (:mod:`.routes`). Errors are JSON
``{"detail": ..., "code": ...}`` with the HTTP status of their gRPC code
(:func:`tinker_scheduler.errors.http_status`), never a traceback; a failed long request answers ``{"error": ...,
"category": "user" | "server"}`` to ``retrieve_future``. The SDK retries 408, 409, 429 and 5xx,
so what retrying cannot fix is 4xx. Tinker sessions (the SDK's ``ServiceClient``) not heard from (``session_heartbeat``) for
``session_timeout_s`` expire and their models are unloaded (:class:`Expiry`), which also deletes
checkpoints whose TTL ran out. External weights leave through signed URLs the gateway serves
itself (:mod:`.downloads`), under a secret drawn when the app is made.
"""

from __future__ import annotations

import logging
import threading
import time

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException

from tinker_core.http_limits import BODY_TIMEOUT_S, BodyGuard, HttpLimits
from tinker_core.proto import MAX_MESSAGE_BYTES
from tinker_scheduler.auth import AuthError, AuthMode
from tinker_scheduler.errors import HTTP_STATUS, StatusError, classify, http_status
from tinker_scheduler.store import JobStore
from tinker_scheduler.tinker_api import listings
from tinker_scheduler.tinker_api.downloads import Downloads, Signer
from tinker_scheduler.tinker_api.futures import Futures
from tinker_scheduler.tinker_api.routes import ROUTERS
from tinker_scheduler.tinker_api.routes.context import Context
from tinker_scheduler.tinker_api.routes.futures import POLL_WAIT_S
from tinker_scheduler.tinker_api.routes.service import LISTED_MODELS
from tinker_scheduler.tinker_api.routes.training import PROTOBUF
from tinker_scheduler.tinker_api.translate import Models

__all__ = ["HTTP_STATUS", "LISTED_MODELS", "MAX_JSON_BYTES", "POLL_WAIT_S", "PROTOBUF", "Expiry", "create_app"]

logger = logging.getLogger("tinker_scheduler.tinker_api")

#: Starlette's own HTTP errors (unknown route, method) -> a code name for the body.
_HTTP_CODES = {400: "INVALID_ARGUMENT", 404: "NOT_FOUND", 405: "METHOD_NOT_ALLOWED", 408: "REQUEST_TIMEOUT",
               413: "REQUEST_TOO_LARGE"}
#: The largest JSON body accepted by default (JSON bodies are small: a sample's prompt of the
#: default 65,536 tokens is under 1 MB; forward_backward's data travel as protobuf).
MAX_JSON_BYTES = 8 * 1024 * 1024


def _error(code: str, message: str, status: int | None = None) -> JSONResponse:
    return JSONResponse({"detail": message, "code": code}, status_code=status or http_status(code))


class Expiry:
    """A thread that expires Tinker sessions without a heartbeat for ``timeout_s`` and unloads
    their models (checking every quarter of the timeout, at most every 5 s)."""

    def __init__(self, models: Models, futures: Futures, timeout_s: float) -> None:
        self.models, self.futures, self.timeout_s = models, futures, timeout_s
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="tinker-session-expiry", daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        while not self._stop.wait(max(0.05, min(5.0, self.timeout_s / 4))):
            try:
                self.expire()
            except Exception:  # noqa: BLE001 - keep expiring
                logger.exception("expiring Tinker sessions failed")

    def expire(self, now: float | None = None) -> None:
        """Expire the sessions last heard from before ``now`` (default: the time) minus the timeout,
        and delete the checkpoints whose TTL ran out by ``now``."""
        records = self.models.records
        now = time.time() if now is None else now
        for tenant, saved in records.expired_checkpoints(now):
            logger.info("checkpoint %s expired: deleting it", saved.tinker_path)
            listings.remove(records, tenant, saved)
        records.expire_tinker_sessions(now - self.timeout_s)
        for m in records.live_models_of_expired():
            logger.info("Tinker session %s expired: unloading model %s", m.client_session, m.model_id)
            try:
                self.models.unload(m.tenant, m.model_id, "expired")
            except StatusError:
                records.set_model_state(m.model_id, "expired")
            self.futures.close_queue(m.model_id)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=10)


def create_app(models: Models, store: JobStore, auth: AuthMode, *, session_timeout_s: float = 600.0,
               max_request_bytes: int = MAX_MESSAGE_BYTES, max_json_bytes: int = MAX_JSON_BYTES,
               body_timeout_s: float = BODY_TIMEOUT_S) -> FastAPI:
    """The gateway's app over ``models``; keys are checked against ``store`` in mode ``auth``.

    Bodies larger than ``max_request_bytes`` (JSON ones: ``max_json_bytes``) get 413, bodies not
    in within ``body_timeout_s`` 408; bodies are decoded off the event loop, after their size
    (and, for ``forward_backward``, while their data and tokens) are checked."""
    if max_json_bytes < 1:
        raise ValueError(f"max_json_bytes must be >= 1 (got {max_json_bytes!r})")
    app = FastAPI(title="OpenTinker Tinker API", docs_url=None, redoc_url=None, openapi_url=None)
    app.add_middleware(BodyGuard, limits=HttpLimits(max_request_bytes, body_timeout_s=body_timeout_s),
                       respond=lambda status, message: _error(_HTTP_CODES.get(status, "HTTP_ERROR"), message, status),
                       what="tinker_max_request_bytes")
    futures = Futures(models.records)
    app.state.models = models
    app.state.futures = futures
    app.state.expiry = Expiry(models, futures, session_timeout_s)
    app.state.context = Context(models, futures, store, auth, session_timeout_s, max_json_bytes,
                                Downloads(models.records, Signer()))
    _add_error_handlers(app)
    for router in ROUTERS:
        app.include_router(router)
    return app


def _add_error_handlers(app: FastAPI) -> None:
    """Every error as ``{"detail", "code"}`` with its HTTP status, never a traceback."""

    @app.exception_handler(StatusError)
    async def status_error(_: Request, e: StatusError) -> JSONResponse:
        return _error(e.code, str(e))

    @app.exception_handler(AuthError)
    async def auth_error(_: Request, e: AuthError) -> JSONResponse:
        return _error("UNAUTHENTICATED", str(e))

    @app.exception_handler(ValueError)
    async def bad_input(_: Request, e: ValueError) -> JSONResponse:
        return _error("INVALID_ARGUMENT", str(e))

    @app.exception_handler(RequestValidationError)
    async def bad_body(_: Request, e: RequestValidationError) -> JSONResponse:
        first = (e.errors() or [{}])[0]
        where = ".".join(str(p) for p in first.get("loc", ())[1:])
        return _error("INVALID_ARGUMENT", f"{where or 'the request body'}: {first.get('msg', 'invalid')}")

    @app.exception_handler(HTTPException)
    async def http_error(_: Request, e: HTTPException) -> JSONResponse:  # unknown routes and methods
        return _error(_HTTP_CODES.get(e.status_code, "HTTP_ERROR"), str(e.detail), e.status_code)

    @app.exception_handler(Exception)
    async def failed(_: Request, e: Exception) -> JSONResponse:  # a status and one line, never a traceback
        return _error(*classify(e))
