"""Routes: training a Tinker model (``forward_backward``, ``optim_step``, saving and loading weights,
``save_weights_external``)."""

from __future__ import annotations

from fastapi import APIRouter, Request
from starlette.concurrency import run_in_threadpool

from tinker_scheduler.errors import StatusError
from tinker_scheduler.tinker_api import protowire
from tinker_scheduler.tinker_api.futures import Answer
from tinker_scheduler.tinker_api.routes.context import Body, context

router = APIRouter(prefix="/api/v1")

PROTOBUF = "application/x-protobuf"


@router.post("/forward_backward")
async def forward_backward(request: Request) -> Body:
    ctx = context(request)
    tenant = ctx.tenant(request)
    if PROTOBUF not in request.headers.get("content-type", ""):
        raise StatusError("INVALID_ARGUMENT", f"forward_backward takes a {PROTOBUF} body (as the tinker SDK sends)")
    if request.headers.get("content-encoding"):
        raise StatusError("INVALID_ARGUMENT", "compressed bodies are not supported")
    # decoded in a thread: pure Python over up to max_request_bytes, refused as soon as it holds
    # more data, tokens or fields than the limits allow
    decoded = await run_in_threadpool(protowire.read_forward_backward, await request.body(), ctx.models.limits)
    model_id = decoded["model_id"]
    ctx.models.session(tenant, model_id)

    def run() -> Answer:
        logprobs, metrics = ctx.models.forward_backward(tenant, decoded)
        return Answer(protowire.forward_backward_output(logprobs, metrics), PROTOBUF)

    return ctx.later(request, tenant, model_id, run)


@router.post("/optim_step")
async def optim_step(request: Request) -> Body:
    ctx = context(request)
    return await ctx.on_model(request, ctx.models.optim_step, check=ctx.models.adam_args)


@router.post("/save_weights")
async def save_weights(request: Request) -> Body:
    ctx = context(request)
    return await ctx.on_model(request, lambda tenant, body: ctx.models.save(tenant, body, "weights"))


@router.post("/save_weights_for_sampler")
async def save_weights_for_sampler(request: Request) -> Body:
    ctx = context(request)
    return await ctx.on_model(request, lambda tenant, body: ctx.models.save(tenant, body, "sampler_weights"))


@router.post("/save_weights_external")
async def save_weights_external(request: Request) -> Body:
    ctx = context(request)
    kind = "external_weights"
    return await ctx.on_model(request, lambda tenant, body: ctx.models.save(tenant, body, kind),
                              check=lambda body: ctx.models.save_args(body, kind))


@router.post("/load_weights")
async def load_weights(request: Request) -> Body:
    ctx = context(request)
    tenant, body = await ctx.body_of(request)
    model_id = str(body.get("model_id") or "")
    if model_id:
        ctx.models.session(tenant, model_id)
    else:
        ctx.own_tinker_session(tenant, body)
    ctx.models.resolve(tenant, str(body.get("path", "")), "weights")
    return ctx.later(request, tenant, model_id or f"create-{tenant}", lambda: ctx.models.load(tenant, body))
