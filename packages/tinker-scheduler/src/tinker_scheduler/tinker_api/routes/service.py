"""Routes: health, client config, capabilities, telemetry, and Tinker sessions (the SDK's
``ServiceClient`` session: created, kept alive by heartbeats, finished)."""

from __future__ import annotations

import json
import uuid

from fastapi import APIRouter, Request

from tinker_scheduler.errors import StatusError
from tinker_scheduler.tinker_api import fields
from tinker_scheduler.tinker_api.routes.context import Body, context

router = APIRouter(prefix="/api/v1")

#: Base models listed by ``get_server_capabilities`` (others the scheduler allows load too).
LISTED_MODELS = ("tiny",)
#: The most characters a session's ``user_metadata`` (as JSON) or ``display_name`` may hold.
MAX_SESSION_METADATA = 16384


@router.get("/healthz")
def healthz() -> dict[str, str]:
    return {"status": "ok"}


@router.post("/client/config")
async def client_config(request: Request) -> Body:
    context(request).tenant(request)
    # API keys only; the SDK's requests of a model go one after the other (futures run in order)
    return {"pjwt_auth_enabled": False, "credential_default_source": "api_key", "parallel_fwdbwd_chunks": False,
            "proto_compress_fwdbwd": False, "use_pyqwest_transport": False, "sample_use_retrieve_futures": False,
            "custom_loss_server_side": False, "sample_join_sampling_session": False}


@router.post("/client/dynamic_config")
async def dynamic_config(request: Request) -> Body:
    context(request).tenant(request)
    return {"refresh_interval_sec": 300, "sample_cancel_enabled": False}


@router.get("/get_server_capabilities")
async def capabilities(request: Request) -> Body:
    context(request).tenant(request)
    return {"supported_models": [{"model_name": m, "trainable": True, "sampleable": True} for m in LISTED_MODELS]}


@router.post("/telemetry")
async def telemetry(request: Request) -> Body:
    context(request).tenant(request)
    return {"status": "accepted"}


@router.post("/create_session")
async def create_session(request: Request) -> Body:
    ctx = context(request)
    tenant, body = await ctx.body_of(request)
    metadata = {str(k): str(v) for k, v in fields.obj(body, "user_metadata").items()}
    display_name = fields.text(body.get("display_name"), "display_name") or None
    if len(json.dumps(metadata)) > MAX_SESSION_METADATA or len(display_name or "") > MAX_SESSION_METADATA:
        raise StatusError("INVALID_ARGUMENT", f"user_metadata, display_name: at most {MAX_SESSION_METADATA} "
                                              "characters each (as JSON)")
    sid = f"cs-{uuid.uuid4().hex[:12]}"
    ctx.records.add_tinker_session(sid, tenant, metadata, display_name)
    return {"type": "create_session", "session_id": sid}


@router.post("/session_heartbeat")
async def heartbeat(request: Request) -> Body:
    ctx = context(request)
    tenant, body = await ctx.body_of(request)
    sid = str(body.get("session_id"))
    state = ctx.records.heartbeat(tenant, sid)
    if state == "expired":  # 410: the SDK stops heartbeating
        raise StatusError("GONE", f"session_id: session {sid!r} expired (no heartbeat for {ctx.session_timeout_s:g} s)")
    if state is None:
        raise StatusError("NOT_FOUND", f"session_id: no session {sid!r}")
    return {"type": "session_heartbeat"}


@router.post("/sessions/{session_id}/finish")
async def finish_session(request: Request, session_id: str) -> Body:
    # ServiceClient's close (a `with` block's end); the session's models stay until it expires
    ctx = context(request)
    if ctx.records.tinker_session_state(ctx.tenant(request), session_id) is None:
        raise StatusError("NOT_FOUND", f"session_id: no session {session_id!r}")
    return {}
