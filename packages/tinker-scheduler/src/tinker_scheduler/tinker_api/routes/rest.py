"""Routes: the REST listings of training runs and checkpoints (the SDK's ``RestClient``)."""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import Response

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


@router.delete("/training_runs/{model_id}/checkpoints/{checkpoint_id:path}", status_code=204)
def delete_checkpoint(request: Request, model_id: str, checkpoint_id: str) -> Response:
    ctx = context(request)
    listings.delete_checkpoint(ctx.records, ctx.tenant(request), model_id, checkpoint_id)
    return Response(status_code=204)
