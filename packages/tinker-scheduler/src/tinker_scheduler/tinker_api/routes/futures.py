"""Route: ``retrieve_future`` (waits up to :data:`POLL_WAIT_S` for a long request's answer)."""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, Response

from tinker_scheduler.tinker_api.routes.context import context

router = APIRouter(prefix="/api/v1")

#: Seconds ``retrieve_future`` waits for a result before answering ``try_again``.
POLL_WAIT_S = 5.0


@router.post("/retrieve_future")
async def retrieve_future(request: Request) -> Response:
    ctx = context(request)
    tenant, body = await ctx.body_of(request)
    request_id = str(body.get("request_id", ""))
    answer = await ctx.futures.wait(tenant, request_id, POLL_WAIT_S)
    if answer is None:
        return JSONResponse({"type": "try_again", "request_id": request_id, "queue_state": "active"})
    return Response(answer.body, media_type=answer.media_type)
