"""Routes: the REST listings of training runs, checkpoints and sessions, checkpoint TTLs and the
signed download URLs of external weights (the SDK's ``RestClient``)."""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import Response
from starlette.concurrency import run_in_threadpool

from tinker_scheduler.tinker_api import listings
from tinker_scheduler.tinker_api.routes.context import Body, context

router = APIRouter(prefix="/api/v1")


@router.get("/training_runs")
def training_runs(request: Request, limit: int = 20, offset: int = 0) -> Body:
    ctx = context(request)
    return listings.training_runs(ctx.records, ctx.tenant(request), limit, offset)


@router.get("/training_runs/{model_id}")
def training_run(request: Request, model_id: str) -> Body:
    ctx = context(request)
    return listings.training_run(ctx.records, ctx.models.record(ctx.tenant(request), model_id))


@router.get("/training_runs/{model_id}/checkpoints")
def run_checkpoints(request: Request, model_id: str) -> Body:
    ctx = context(request)
    return listings.checkpoints(ctx.records, ctx.tenant(request), model_id)


@router.get("/checkpoints")
def user_checkpoints(request: Request, limit: int = 100, offset: int = 0) -> Body:
    ctx = context(request)
    return listings.checkpoints(ctx.records, ctx.tenant(request), None, limit, offset)


@router.get("/training_runs/{model_id}/checkpoints/{checkpoint_id:path}/external_weights_urls")
async def external_weights_urls(request: Request, model_id: str, checkpoint_id: str) -> Body:
    ctx = context(request)
    tenant = ctx.tenant(request)
    return await run_in_threadpool(ctx.downloads.urls, tenant, model_id, checkpoint_id, str(request.base_url))


@router.put("/training_runs/{model_id}/checkpoints/{checkpoint_id:path}/ttl")
async def checkpoint_ttl(request: Request, model_id: str, checkpoint_id: str) -> Response:
    ctx = context(request)
    tenant, body = await ctx.body_of(request)
    listings.set_ttl(ctx.records, tenant, model_id, checkpoint_id, body)
    return Response(status_code=204)


@router.get("/sessions")
def sessions(request: Request, limit: int = 20, offset: int = 0, access_scope: str = "owned") -> Body:
    ctx = context(request)
    return listings.sessions(ctx.records, ctx.tenant(request), limit, offset, access_scope)


@router.get("/sessions/{session_id}")
def session(request: Request, session_id: str, access_scope: str = "owned") -> Body:
    ctx = context(request)
    tenant = ctx.tenant(request)
    return listings.session(ctx.records, tenant, session_id, ctx.models.samplers_of(tenant, session_id), access_scope)


@router.delete("/training_runs/{model_id}/checkpoints/{checkpoint_id:path}", status_code=204)
def delete_checkpoint(request: Request, model_id: str, checkpoint_id: str) -> Response:
    ctx = context(request)
    listings.delete_checkpoint(ctx.records, ctx.tenant(request), model_id, checkpoint_id)
    return Response(status_code=204)
