"""The HTTP routes of the Tinker API (``/api/v1/...``) as a FastAPI app.

Quick calls (sessions, ``get_info``, ``create_sampling_session``, the REST listings) answer at
once. Long ones (``create_model``, ``forward_backward``, ``optim_step``, weights, ``asample``)
answer a request id and run in order per model (:mod:`.futures`); ``retrieve_future`` waits up to
:data:`POLL_WAIT_S` for the answer and otherwise answers ``{"type": "try_again"}``, which the SDK
polls again. ``ForwardBackwardOutput`` and ``SampleResponse`` answers are protobuf (as the SDK
reads them, :mod:`.protowire`); the rest is JSON.

Errors are JSON ``{"detail": ..., "code": ...}`` with the HTTP status of their gRPC code
(:data:`HTTP_STATUS`), never a traceback; a failed long request answers ``{"error": ...,
"category": "user" | "server"}`` to ``retrieve_future``. The SDK retries 408, 409, 429 and 5xx,
so what retrying cannot fix is 4xx. Client sessions not heard from (``session_heartbeat``) for
``session_timeout_s`` expire and their models are unloaded (:class:`Expiry`).
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections.abc import Callable
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException

from tinker_core.proto import MAX_MESSAGE_BYTES
from tinker_scheduler.auth import AuthError, AuthMode
from tinker_scheduler.errors import StatusError, classify
from tinker_scheduler.store import JobStore
from tinker_scheduler.tinker_api import listings, protowire, sampling
from tinker_scheduler.tinker_api.auth import tenant_of
from tinker_scheduler.tinker_api.futures import Answer, Futures
from tinker_scheduler.tinker_api.translate import Models
from tinker_serve.http_limits import BODY_TIMEOUT_S, BodyGuard, HttpLimits, parse_json

logger = logging.getLogger("tinker_scheduler.tinker_api")

#: Seconds ``retrieve_future`` waits for a result before answering ``try_again``.
POLL_WAIT_S = 5.0
#: gRPC status code names -> HTTP status. Unimplemented features are 400: the SDK retries 5xx.
HTTP_STATUS = {"INVALID_ARGUMENT": 400, "UNIMPLEMENTED": 400, "UNAUTHENTICATED": 401, "PERMISSION_DENIED": 403,
               "NOT_FOUND": 404, "FAILED_PRECONDITION": 409, "ALREADY_EXISTS": 409, "RESOURCE_EXHAUSTED": 429,
               "UNAVAILABLE": 503, "DEADLINE_EXCEEDED": 504, "CANCELLED": 499,
               "REQUEST_TOO_LARGE": 413, "GONE": 410, "REQUEST_TIMEOUT": 408}
#: Base models listed by ``get_server_capabilities`` (others the scheduler allows load too).
LISTED_MODELS = ("tiny",)
PROTOBUF = "application/x-protobuf"
#: Starlette's own HTTP errors (unknown route, method) -> a code name for the body.
_HTTP_CODES = {400: "INVALID_ARGUMENT", 404: "NOT_FOUND", 405: "METHOD_NOT_ALLOWED", 408: "REQUEST_TIMEOUT",
               413: "REQUEST_TOO_LARGE"}
#: The largest JSON body accepted by default (JSON bodies are small: a sample's prompt of the
#: default 65,536 tokens is under 1 MB; forward_backward's data travel as protobuf).
MAX_JSON_BYTES = 8 * 1024 * 1024


def _error(code: str, message: str, status: int | None = None) -> JSONResponse:
    return JSONResponse({"detail": message, "code": code}, status_code=status or HTTP_STATUS.get(code, 500))


class Expiry:
    """A thread that expires client sessions without a heartbeat for ``timeout_s`` and unloads
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
        """Expire the sessions last heard from before ``now`` (default: the time) minus the timeout."""
        records = self.models.records
        records.expire_sessions((time.time() if now is None else now) - self.timeout_s)
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
    app = FastAPI(title="OpenTinker Tinker API", docs_url=None, redoc_url=None, openapi_url=None)
    app.add_middleware(BodyGuard, limits=HttpLimits(max_request_bytes, body_timeout_s=body_timeout_s),
                       respond=lambda status, message: _error(_HTTP_CODES.get(status, "HTTP_ERROR"), message, status),
                       what="tinker_max_request_bytes")
    if max_json_bytes < 1:
        raise ValueError(f"max_json_bytes must be >= 1 (got {max_json_bytes!r})")
    records = models.records
    futures = Futures(records)
    app.state.models = models
    app.state.futures = futures
    app.state.expiry = Expiry(models, futures, session_timeout_s)

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

    async def body_of(request: Request) -> tuple[str, dict[str, Any]]:
        tenant = tenant_of(store, auth, request.headers)
        raw = await request.body()
        if len(raw) > max_json_bytes:
            raise StatusError("REQUEST_TOO_LARGE", f"the JSON body is larger than the gateway's limit of {max_json_bytes} "
                                                   "bytes (tinker_max_json_bytes)")
        try:
            body = await run_in_threadpool(parse_json, raw) if len(raw) > 65536 else parse_json(raw)
        except ValueError as e:
            raise StatusError("INVALID_ARGUMENT", str(e)) from None
        if not isinstance(body, dict):
            raise StatusError("INVALID_ARGUMENT", "the request body must be a JSON object")
        return tenant, body

    def later(tenant: str, model_id: str, fn: Callable[[], Any]) -> dict[str, Any]:
        return {"request_id": futures.submit(tenant, model_id, fn), "model_id": model_id}

    async def on_model(request: Request, fn: Callable[[str, dict[str, Any]], Any],
                       check: Callable[[dict[str, Any]], Any] | None = None) -> dict[str, Any]:
        """The shape of most long requests: the caller's live model ``model_id``, ``check(body)``
        (field types), then ``fn(tenant, body)`` in the model's turn."""
        tenant, body = await body_of(request)
        model_id = str(body.get("model_id") or "")
        models.session(tenant, model_id)
        if check is not None:
            check(body)
        return later(tenant, model_id, lambda: fn(tenant, body))

    # ---- service --------------------------------------------------------------------------------
    @app.get("/api/v1/healthz")
    def healthz() -> dict[str, str]:
        return {"status": "ok"}

    @app.post("/api/v1/client/config")
    async def client_config(request: Request) -> dict[str, Any]:
        tenant_of(store, auth, request.headers)
        # API keys only; the SDK's requests of a model go one after the other (futures run in order)
        return {"pjwt_auth_enabled": False, "credential_default_source": "api_key", "parallel_fwdbwd_chunks": False,
                "proto_compress_fwdbwd": False, "use_pyqwest_transport": False, "sample_use_retrieve_futures": False,
                "custom_loss_server_side": False, "sample_join_sampling_session": False}

    @app.post("/api/v1/client/dynamic_config")
    async def dynamic_config(request: Request) -> dict[str, Any]:
        tenant_of(store, auth, request.headers)
        return {"refresh_interval_sec": 300, "sample_cancel_enabled": False}

    @app.get("/api/v1/get_server_capabilities")
    async def capabilities(request: Request) -> dict[str, Any]:
        tenant_of(store, auth, request.headers)
        return {"supported_models": [{"model_name": m, "trainable": True, "sampleable": True} for m in LISTED_MODELS]}

    @app.post("/api/v1/telemetry")
    async def telemetry(request: Request) -> dict[str, Any]:
        tenant_of(store, auth, request.headers)
        return {"status": "accepted"}

    @app.post("/api/v1/create_session")
    async def create_session(request: Request) -> dict[str, Any]:
        tenant, _ = await body_of(request)
        sid = f"cs-{uuid.uuid4().hex[:12]}"
        records.add_session(sid, tenant)
        return {"type": "create_session", "session_id": sid}

    @app.post("/api/v1/session_heartbeat")
    async def heartbeat(request: Request) -> dict[str, Any]:
        tenant, body = await body_of(request)
        sid = str(body.get("session_id"))
        state = records.heartbeat(tenant, sid)
        if state == "expired":  # 410: the SDK stops heartbeating
            raise StatusError("GONE", f"session_id: session {sid!r} expired (no heartbeat for {session_timeout_s:g} s)")
        if state is None:
            raise StatusError("NOT_FOUND", f"session_id: no session {sid!r}")
        return {"type": "session_heartbeat"}

    @app.post("/api/v1/sessions/{session_id}/finish")
    async def finish_session(request: Request, session_id: str) -> dict[str, Any]:
        # ServiceClient's close (a `with` block's end); the session's models stay until it expires
        if records.session_state(tenant_of(store, auth, request.headers), session_id) is None:
            raise StatusError("NOT_FOUND", f"session_id: no session {session_id!r}")
        return {}

    # ---- models ---------------------------------------------------------------------------------
    def own_session(tenant: str, body: dict[str, Any]) -> None:
        sid = str(body.get("session_id"))
        state = records.session_state(tenant, sid)
        if state == "expired":
            raise StatusError("NOT_FOUND", f"session_id: session {sid!r} expired (no heartbeat for "
                                           f"{session_timeout_s:g} s); create a new ServiceClient")
        if state is None:
            raise StatusError("NOT_FOUND", f"session_id: no session {sid!r}")

    @app.post("/api/v1/create_model")
    async def create_model(request: Request) -> dict[str, Any]:
        tenant, body = await body_of(request)
        own_session(tenant, body)
        models.create_args(body)  # wrong types: 400 now, not a failed future
        models.sessions.paths.check_model(str(body.get("base_model", "")).strip() or "", tenant, "base_model")
        return {"request_id": futures.submit(tenant, f"create-{tenant}", lambda: models.create(tenant, body))}

    @app.post("/api/v1/get_info")
    async def get_info(request: Request) -> dict[str, Any]:
        tenant, body = await body_of(request)
        return await run_in_threadpool(models.info, tenant, str(body.get("model_id", "")))

    @app.post("/api/v1/unload_model")
    async def unload_model(request: Request) -> dict[str, Any]:
        def unload(tenant: str, body: dict[str, Any]) -> dict[str, Any]:
            answer = models.unload(tenant, str(body["model_id"]))
            futures.close_queue(str(body["model_id"]))  # its worker thread ends after this request
            return answer

        return await on_model(request, unload)

    # ---- training -------------------------------------------------------------------------------
    @app.post("/api/v1/forward_backward")
    async def forward_backward(request: Request) -> dict[str, Any]:
        tenant = tenant_of(store, auth, request.headers)
        if PROTOBUF not in request.headers.get("content-type", ""):
            raise StatusError("INVALID_ARGUMENT", f"forward_backward takes a {PROTOBUF} body (as the tinker SDK sends)")
        if request.headers.get("content-encoding"):
            raise StatusError("INVALID_ARGUMENT", "compressed bodies are not supported")
        # decoded in a thread: pure Python over up to max_request_bytes, refused as soon as it holds
        # more data, tokens or fields than the limits allow
        decoded = await run_in_threadpool(protowire.read_forward_backward, await request.body(), models.limits)
        model_id = decoded["model_id"]
        models.session(tenant, model_id)

        def run() -> Answer:
            logprobs, metrics = models.forward_backward(tenant, decoded)
            return Answer(protowire.forward_backward_output(logprobs, metrics), PROTOBUF)

        return later(tenant, model_id, run)

    @app.post("/api/v1/optim_step")
    async def optim_step(request: Request) -> dict[str, Any]:
        return await on_model(request, models.optim_step, check=models.adam_args)

    @app.post("/api/v1/save_weights")
    async def save_weights(request: Request) -> dict[str, Any]:
        return await on_model(request, lambda tenant, body: models.save(tenant, body, "weights"))

    @app.post("/api/v1/save_weights_for_sampler")
    async def save_weights_for_sampler(request: Request) -> dict[str, Any]:
        return await on_model(request, lambda tenant, body: models.save(tenant, body, "sampler_weights"))

    @app.post("/api/v1/load_weights")
    async def load_weights(request: Request) -> dict[str, Any]:
        tenant, body = await body_of(request)
        model_id = str(body.get("model_id") or "")
        if model_id:
            models.session(tenant, model_id)
        else:
            own_session(tenant, body)
        models.resolve(tenant, str(body.get("path", "")), "weights")
        return later(tenant, model_id or f"create-{tenant}", lambda: models.load(tenant, body))

    # ---- sampling -------------------------------------------------------------------------------
    @app.post("/api/v1/create_sampling_session")
    async def create_sampling_session(request: Request) -> dict[str, Any]:
        tenant, body = await body_of(request)
        sid = await run_in_threadpool(lambda: models.new_sampling_session(tenant, model_path=body.get("model_path"),
                                                                          base_model=body.get("base_model")))
        return {"type": "create_sampling_session", "sampling_session_id": sid}

    @app.post("/api/v1/asample")
    async def asample(request: Request) -> dict[str, Any]:
        tenant, body = await body_of(request)
        n = sampling.num_samples(body, models.limits)  # before any work: the answer lists n ids
        target = await run_in_threadpool(models.sampling_model, tenant, body)

        def run() -> Answer:
            return Answer(protowire.sample_response(models.sample(tenant, body, target)), PROTOBUF)

        # in the turn of the model that saved the weights, or of the tenant's own base sampler
        request_id = futures.submit(tenant, target.model_id or target.session_id, run)
        return {"request_id": request_id, "sample_sequence_ids": [f"{request_id}-{i}" for i in range(n)]}

    @app.get("/api/v1/samplers/{sampler_id}")
    async def sampler(request: Request, sampler_id: str) -> dict[str, Any]:
        return models.sampler_info(tenant_of(store, auth, request.headers), sampler_id)

    @app.post("/api/v1/weights_info")
    async def weights_info(request: Request) -> dict[str, Any]:
        tenant, body = await body_of(request)
        return models.weights_info(tenant, str(body.get("tinker_path", "")))

    # ---- REST listings (RestClient) -------------------------------------------------------------
    @app.get("/api/v1/training_runs")
    def training_runs(request: Request, limit: int = 20, offset: int = 0) -> dict[str, Any]:
        return listings.training_runs(records, tenant_of(store, auth, request.headers), limit, offset)

    @app.get("/api/v1/training_runs/{model_id}")
    def training_run(request: Request, model_id: str) -> dict[str, Any]:
        tenant = tenant_of(store, auth, request.headers)
        return listings.training_run(records, models.record(tenant, model_id))

    @app.get("/api/v1/training_runs/{model_id}/checkpoints")
    def run_checkpoints(request: Request, model_id: str) -> dict[str, Any]:
        return listings.checkpoints(records, tenant_of(store, auth, request.headers), model_id)

    @app.get("/api/v1/checkpoints")
    def user_checkpoints(request: Request, limit: int = 100, offset: int = 0) -> dict[str, Any]:
        return listings.checkpoints(records, tenant_of(store, auth, request.headers), None, limit, offset)

    @app.delete("/api/v1/training_runs/{model_id}/checkpoints/{checkpoint_id:path}", status_code=204)
    def delete_checkpoint(request: Request, model_id: str, checkpoint_id: str) -> Response:
        listings.delete_checkpoint(records, tenant_of(store, auth, request.headers), model_id, checkpoint_id)
        return Response(status_code=204)

    # ---- futures --------------------------------------------------------------------------------
    @app.post("/api/v1/retrieve_future")
    async def retrieve_future(request: Request) -> Response:
        tenant, body = await body_of(request)
        request_id = str(body.get("request_id", ""))
        answer = await futures.wait(tenant, request_id, POLL_WAIT_S)
        if answer is None:
            return JSONResponse({"type": "try_again", "request_id": request_id, "queue_state": "active"})
        return Response(answer.body, media_type=answer.media_type)

    return app
