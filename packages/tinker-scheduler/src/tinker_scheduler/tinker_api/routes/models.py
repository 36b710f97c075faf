"""Routes: Tinker models (``create_model``, ``get_info``, ``unload_model``)."""

from __future__ import annotations

from fastapi import APIRouter, Request
from starlette.concurrency import run_in_threadpool

from tinker_scheduler.tinker_api.routes.context import Body, context, idempotency_key

router = APIRouter(prefix="/api/v1")


@router.post("/create_model")
async def create_model(request: Request) -> Body:
    ctx = context(request)
    tenant, body = await ctx.body_of(request)
    ctx.own_tinker_session(tenant, body)
    ctx.models.create_args(body)  # wrong types: 400 now, not a failed future
    ctx.models.sessions.paths.check_model(str(body.get("base_model", "")).strip() or "", tenant, "base_model")
    return {"request_id": ctx.futures.submit(tenant, f"create-{tenant}", lambda: ctx.models.create(tenant, body),
                                             idempotency_key(request))}


@router.post("/get_info")
async def get_info(request: Request) -> Body:
    ctx = context(request)
    tenant, body = await ctx.body_of(request)
    return await run_in_threadpool(ctx.models.info, tenant, str(body.get("model_id", "")))


@router.post("/unload_model")
async def unload_model(request: Request) -> Body:
    ctx = context(request)

    def unload(tenant: str, body: Body) -> Body:
        answer = ctx.models.unload(tenant, str(body["model_id"]))
        ctx.futures.close_queue(str(body["model_id"]))  # its worker thread ends after this request
        return answer

    return await ctx.on_model(request, unload)
