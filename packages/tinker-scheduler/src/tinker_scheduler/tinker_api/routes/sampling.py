"""Routes: sampling (``create_sampling_session``, ``asample``, ``samplers/{id}``, ``weights_info``)."""

from __future__ import annotations

import threading

from fastapi import APIRouter, Request
from starlette.concurrency import run_in_threadpool

from tinker_scheduler.tinker_api import protowire, sampling
from tinker_scheduler.tinker_api.futures import Answer
from tinker_scheduler.tinker_api.routes.context import Body, context, idempotency_key
from tinker_scheduler.tinker_api.routes.training import PROTOBUF

router = APIRouter(prefix="/api/v1")


@router.post("/create_sampling_session")
async def create_sampling_session(request: Request) -> Body:
    ctx = context(request)
    tenant, body = await ctx.body_of(request)
    sid = await run_in_threadpool(lambda: ctx.models.new_sampling_session(
        tenant, model_path=body.get("model_path"), base_model=body.get("base_model"),
        client_session=str(body.get("session_id") or "")))
    return {"type": "create_sampling_session", "sampling_session_id": sid}


@router.post("/asample")
async def asample(request: Request) -> Body:
    ctx = context(request)
    tenant, body = await ctx.body_of(request)
    n = sampling.num_samples(body, ctx.models.limits)  # before any work: the answer lists n ids
    target = await run_in_threadpool(ctx.models.sampling_model, tenant, body)

    submitted: list[str] = []
    known = threading.Event()

    def own_id() -> str:  # the request's id, once submit has answered it (stability records use it)
        known.wait()
        return submitted[0]

    def run() -> Answer:
        return Answer(protowire.sample_response(ctx.models.sample(tenant, body, target, own_id)), PROTOBUF)

    # in the turn of the model that saved the weights, or of the tenant's own base sampler
    request_id = ctx.futures.submit(tenant, target.model_id or target.session_id, run, idempotency_key(request))
    submitted.append(request_id)
    known.set()
    return {"request_id": request_id, "sample_sequence_ids": [f"{request_id}-{i}" for i in range(n)]}


@router.get("/samplers/{sampler_id}")
async def sampler(request: Request, sampler_id: str) -> Body:
    ctx = context(request)
    return ctx.models.sampler_info(ctx.tenant(request), sampler_id)


@router.post("/weights_info")
async def weights_info(request: Request) -> Body:
    ctx = context(request)
    tenant, body = await ctx.body_of(request)
    return ctx.models.weights_info(tenant, str(body.get("tinker_path", "")))
