"""The HTTP routes of the Tinker API (``/api/v1/...``) as a FastAPI app.

Quick calls (sessions, ``get_info``, ``create_sampling_session``) answer at once. Long ones
(``create_model``, ``forward_backward``, ``optim_step``, weights, ``asample``) answer a request id
and run in order per model (:mod:`.futures`); ``retrieve_future`` waits up to
:data:`POLL_WAIT_S` for the result and otherwise answers ``{"type": "try_again"}``, which the SDK
polls again. ``ForwardBackwardOutput`` and ``SampleResponse`` results are protobuf (as the SDK
reads them, :mod:`.protowire`); the rest is JSON. Errors are JSON ``{"detail": ...}`` with the
HTTP status of their gRPC code (:data:`HTTP_STATUS`); a failed long request answers
``{"error": ..., "category": "user" | "server"}`` to ``retrieve_future``.
"""

from __future__ import annotations

import logging
import threading
import uuid
from collections.abc import Callable
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response

from tinker_scheduler.auth import AuthError, AuthMode
from tinker_scheduler.errors import StatusError, classify
from tinker_scheduler.store import JobStore
from tinker_scheduler.tinker_api import protowire
from tinker_scheduler.tinker_api.auth import tenant_of
from tinker_scheduler.tinker_api.futures import Futures
from tinker_scheduler.tinker_api.translate import Models

logger = logging.getLogger("tinker_scheduler.tinker_api")

#: Seconds ``retrieve_future`` waits for a result before answering ``try_again``.
POLL_WAIT_S = 5.0
#: gRPC status code names -> HTTP status. Unimplemented features are 400: the SDK retries 5xx.
HTTP_STATUS = {"INVALID_ARGUMENT": 400, "UNIMPLEMENTED": 400, "UNAUTHENTICATED": 401, "PERMISSION_DENIED": 403,
               "NOT_FOUND": 404, "FAILED_PRECONDITION": 409, "ALREADY_EXISTS": 409, "RESOURCE_EXHAUSTED": 429,
               "UNAVAILABLE": 503, "DEADLINE_EXCEEDED": 504, "CANCELLED": 499}
#: Base models listed by ``get_server_capabilities`` (others the scheduler allows load too).
LISTED_MODELS = ("tiny",)
PROTOBUF = "application/x-protobuf"


def _error(code: str, message: str) -> JSONResponse:
    return JSONResponse({"detail": message, "code": code}, status_code=HTTP_STATUS.get(code, 500))


def create_app(models: Models, store: JobStore, auth: AuthMode) -> FastAPI:
    """The gateway's app over ``models``; keys are checked against ``store`` in mode ``auth``."""
    app = FastAPI(title="OpenTinker Tinker API", docs_url=None, redoc_url=None, openapi_url=None)
    futures = Futures()
    client_sessions: dict[str, str] = {}  # SDK session id -> tenant
    lock = threading.Lock()
    app.state.futures = futures

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
        return _error("INVALID_ARGUMENT", f"the request body is not a JSON object ({first.get('msg', 'invalid')})")

    @app.exception_handler(Exception)
    async def failed(_: Request, e: Exception) -> JSONResponse:  # a status and one line, never a traceback
        return _error(*classify(e))

    async def body_of(request: Request) -> tuple[str, dict[str, Any]]:
        tenant = tenant_of(store, auth, request.headers)
        try:
            body = await request.json()
        except ValueError:
            raise StatusError("INVALID_ARGUMENT", "the request body is not valid JSON") from None
        if not isinstance(body, dict):
            raise StatusError("INVALID_ARGUMENT", "the request body must be a JSON object")
        return tenant, body

    def later(tenant: str, model_id: str, fn: Callable[[], Any]) -> dict[str, Any]:
        return {"request_id": futures.submit(tenant, model_id, fn), "model_id": model_id}

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
        with lock:
            client_sessions[sid] = tenant
        return {"type": "create_session", "session_id": sid}

    @app.post("/api/v1/session_heartbeat")
    async def heartbeat(request: Request) -> dict[str, Any]:
        tenant, body = await body_of(request)
        own_session(tenant, body)
        return {"type": "session_heartbeat"}

    # ---- models ---------------------------------------------------------------------------------
    def own_session(tenant: str, body: dict[str, Any]) -> None:
        with lock:
            owner = client_sessions.get(str(body.get("session_id")))
        if owner != tenant:
            raise StatusError("NOT_FOUND", f"session_id: no session {body.get('session_id')!r}")

    @app.post("/api/v1/create_model")
    async def create_model(request: Request) -> dict[str, Any]:
        tenant, body = await body_of(request)
        own_session(tenant, body)
        models.sessions.paths.check_model(str(body.get("base_model", "")).strip() or "", tenant, "base_model")
        return {"request_id": futures.submit(tenant, f"create-{tenant}", lambda: models.create(tenant, body))}

    @app.post("/api/v1/get_info")
    def get_info(request: Request, body: dict[str, Any]) -> dict[str, Any]:
        tenant = tenant_of(store, auth, request.headers)
        return models.info(tenant, str(body.get("model_id", "")))

    @app.post("/api/v1/unload_model")
    async def unload_model(request: Request) -> dict[str, Any]:
        tenant, body = await body_of(request)
        model_id = str(body.get("model_id", ""))
        models.session(tenant, model_id)
        return later(tenant, model_id, lambda: models.unload(tenant, model_id))

    # ---- training -------------------------------------------------------------------------------
    @app.post("/api/v1/forward_backward")
    async def forward_backward(request: Request) -> dict[str, Any]:
        tenant = tenant_of(store, auth, request.headers)
        if PROTOBUF not in request.headers.get("content-type", ""):
            raise StatusError("INVALID_ARGUMENT", f"forward_backward takes a {PROTOBUF} body (as the tinker SDK sends)")
        if request.headers.get("content-encoding"):
            raise StatusError("INVALID_ARGUMENT", "compressed bodies are not supported")
        decoded = protowire.read_forward_backward(await request.body())
        model_id = decoded["model_id"]
        models.session(tenant, model_id)

        def run() -> Response:
            logprobs, metrics = models.forward_backward(tenant, decoded)
            return Response(protowire.forward_backward_output(logprobs, metrics), media_type=PROTOBUF)

        return later(tenant, model_id, run)

    @app.post("/api/v1/optim_step")
    async def optim_step(request: Request) -> dict[str, Any]:
        tenant, body = await body_of(request)
        model_id = str(body.get("model_id", ""))
        models.session(tenant, model_id)
        return later(tenant, model_id, lambda: models.optim_step(tenant, body))

    @app.post("/api/v1/save_weights")
    async def save_weights(request: Request) -> dict[str, Any]:
        tenant, body = await body_of(request)
        model_id = str(body.get("model_id", ""))
        models.session(tenant, model_id)
        return later(tenant, model_id, lambda: models.save(tenant, body, "weights"))

    @app.post("/api/v1/save_weights_for_sampler")
    async def save_weights_for_sampler(request: Request) -> dict[str, Any]:
        tenant, body = await body_of(request)
        model_id = str(body.get("model_id", ""))
        models.session(tenant, model_id)
        return later(tenant, model_id, lambda: models.save(tenant, body, "sampler_weights"))

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
    def create_sampling_session(request: Request, body: dict[str, Any]) -> dict[str, Any]:
        tenant = tenant_of(store, auth, request.headers)
        sid = models.new_sampling_session(tenant, model_path=body.get("model_path"), base_model=body.get("base_model"))
        return {"type": "create_sampling_session", "sampling_session_id": sid}

    @app.post("/api/v1/asample")
    async def asample(request: Request) -> dict[str, Any]:
        tenant, body = await body_of(request)
        target = models.sampling_model(tenant, body)

        def run() -> Response:
            return Response(protowire.sample_response(models.sample(tenant, body, target)), media_type=PROTOBUF)

        request_id = futures.submit(tenant, target.model_id, run)
        n = int(body.get("num_samples") or 1)
        return {"request_id": request_id, "sample_sequence_ids": [f"{request_id}-{i}" for i in range(n)]}

    @app.get("/api/v1/samplers/{sampler_id}")
    async def sampler(request: Request, sampler_id: str) -> dict[str, Any]:
        return models.sampler_info(tenant_of(store, auth, request.headers), sampler_id)

    @app.post("/api/v1/weights_info")
    async def weights_info(request: Request) -> dict[str, Any]:
        tenant, body = await body_of(request)
        return models.weights_info(tenant, str(body.get("tinker_path", "")))

    # ---- futures --------------------------------------------------------------------------------
    @app.post("/api/v1/retrieve_future")
    def retrieve_future(request: Request, body: dict[str, Any]) -> Any:
        tenant = tenant_of(store, auth, request.headers)
        request_id = str(body.get("request_id", ""))
        future = futures.wait(tenant, request_id, POLL_WAIT_S)
        if future is None:
            raise StatusError("NOT_FOUND", f"request_id: no request {request_id!r}")
        if not future.done():
            return {"type": "try_again", "request_id": request_id, "queue_state": "active"}
        error = future.exception()
        if error is not None:
            code, message = classify(error)
            category = "server" if code in ("INTERNAL", "UNAVAILABLE", "DEADLINE_EXCEEDED") else "user"
            return {"error": message, "category": category}
        return future.result()

    return app
