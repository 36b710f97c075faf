"""The HTTP app of ``opentinker serve``: OpenAI's routes on a :class:`~tinker_serve.served.ServedModels`.

Routes: ``GET /v1/models`` and ``GET /v1/models/{id}``, ``POST /v1/completions`` (with ``echo``
and ``max_tokens: 0`` to score a prompt: :mod:`.scoring`), ``POST /v1/chat/completions``
(``stream: true`` answers server-sent events ending with ``data: [DONE]``), vLLM's ``POST
/v1/load_lora_adapter``, ``POST /v1/unload_lora_adapter`` and tokenizer routes (``/tokenize``,
``/detokenize``, ``/tokenizer_info``: :mod:`.harness_routes`), ``GET /health`` and ``GET /`` (a
chat page). The models come from a :class:`~tinker_serve.backend.Backend` (``opentinker serve``:
one base model and its adapters). With an API key every ``/v1`` route wants ``Authorization: Bearer KEY`` (401
otherwise). Every error is OpenAI-shaped (:class:`tinker_serve.protocol.APIError`): 400 for bad
parameters, malformed JSON and prompts longer than the context, 401, 404 for an unknown model or
route; an unexpected failure is a 500 whose body names no more than its type (the traceback goes
to the server's log). A client that disconnects cancels its generation: its rows leave the batch
before the next decode step (a non-streaming request notices within about a second).
"""

from __future__ import annotations

import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from importlib.resources import files
from typing import Any

from fastapi import APIRouter, Depends, FastAPI, Request
from fastapi.responses import HTMLResponse, PlainTextResponse
from starlette.concurrency import run_in_threadpool

from tinker_algos.sampling.sampler import SamplingParams
from tinker_core.http_limits import BodyGuard, HttpLimits
from tinker_serve import scoring
from tinker_serve.backend import Backend, LocalBackend
from tinker_serve.engine import TokenInfo
from tinker_serve.harness_routes import harness_routers
from tinker_serve.protocol import (
    MAX_REQUEST_BYTES,
    ChatRequest,
    CompletionRequest,
    LoadAdapterRequest,
    UnloadAdapterRequest,
    finish_reason,
    install_error_handlers,
    refused,
    usage,
)
from tinker_serve.routes.chat_completions import chat_completion
from tinker_serve.routes.generation import (
    check_length,
    completion_logprobs,
    completion_prompts,
    failed,
    generate,
    sampling_params,
    sse,
)
from tinker_serve.routes.responses_api import responses_router
from tinker_serve.served import ServedModels


def create_app(served: ServedModels | Backend, *, api_key: str | None = None, limits: HttpLimits | None = None) -> FastAPI:
    """The ASGI app over one :class:`ServedModels` (with ``api_key``: callers must send it) or
    any :class:`~tinker_serve.backend.Backend`; its lifespan starts and stops the engines.
    Request bodies are bounded by ``limits`` (default: :data:`MAX_REQUEST_BYTES` and
    :mod:`.http_limits`' timeouts)."""
    backend: Backend = LocalBackend(served, api_key) if isinstance(served, ServedModels) else served

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        backend.start()
        try:
            yield
        finally:
            backend.stop()

    app = FastAPI(title="opentinker serve", lifespan=lifespan, docs_url=None, redoc_url=None, openapi_url=None)
    app.state.backend = backend
    app.add_middleware(BodyGuard, limits=limits or HttpLimits(MAX_REQUEST_BYTES), respond=refused,
                       what="--max-request-bytes")
    if isinstance(served, ServedModels):
        app.state.served = served

    authorize = _authorizer(backend)
    app.include_router(_v1_router(backend, authorize))
    for router in harness_routers(backend, authorize):  # GET /v1/models/{id}, /tokenize, /detokenize, /tokenizer_info
        app.include_router(router)

    @app.get("/health")
    async def health() -> dict[str, Any]:
        engines = backend.engines()
        return {"status": "ok", "rows": sum(e.active_rows for e in engines), "waiting": sum(e.waiting for e in engines)}

    @app.get("/", response_class=HTMLResponse)
    async def chat_page() -> HTMLResponse:
        return HTMLResponse(files("tinker_serve").joinpath("chat.html").read_text(encoding="utf-8"))

    install_error_handlers(app)
    return app


def _authorizer(backend: Backend) -> Callable[[Request], Awaitable[None]]:
    """The dependency every API route runs first: the caller (``request.state.caller``) from the
    request's headers, or the backend's 401."""

    async def authorize(request: Request) -> None:
        request.state.caller = await run_in_threadpool(backend.caller, request.headers)

    return authorize


def _v1_router(backend: Backend, authorize: Callable[[Request], Awaitable[None]]) -> APIRouter:
    """OpenAI's ``/v1`` routes over ``backend`` (every one authorizes its caller first), with
    vLLM's adapter loading when the backend hot-loads."""

    async def lookup(request: Request, name: str) -> ServedModels:
        return await run_in_threadpool(backend.lookup, request.state.caller, name)

    v1 = APIRouter(prefix="/v1", dependencies=[Depends(authorize)])

    @v1.get("/models")
    async def list_models(request: Request) -> dict[str, Any]:
        return {"object": "list", "data": await run_in_threadpool(backend.list_models, request.state.caller)}

    @v1.post("/completions", response_model=None)
    async def completions(body: CompletionRequest, http: Request) -> Any:
        served = await lookup(http, body.model)
        model = served.get(body.model)
        body.refuse_unsupported(("suffix", "best_of"))
        prompts = await run_in_threadpool(completion_prompts, served, body.prompt)  # tokenizing is work
        scoring.check_scoring_request(body, len(prompts))
        max_tokens = 16 if body.max_tokens is None else body.max_tokens
        params = sampling_params(body, max(1, max_tokens))
        for ids in prompts:
            check_length(served, len(ids), max_tokens, "prompt")
        if body.stream:
            return sse(_stream_completion(served, model.name, prompts, params, body))
        scores = None
        if body.echo:  # the prompt's logprobs first: lm-eval's loglikelihood requests (scoring.py)
            scores = await run_in_threadpool(scoring.score_prompts, served, model.adapter, prompts, body.logprobs or 0)
        if max_tokens == 0:
            response = scoring.unscored_completion(model.name, prompts, body.n, body.logprobs is not None)
        else:
            response = await _complete(served, model.name, prompts, params, body, http)
        return response if scores is None else scoring.with_echo(response, scores, body.n)

    @v1.post("/chat/completions", response_model=None)
    async def chat_completions(body: ChatRequest, http: Request) -> Any:
        served = await lookup(http, body.model)
        return await chat_completion(served, served.get(body.model).name, body, http)

    async def chat_answer(body: ChatRequest, http: Request) -> Any:  # what /v1/responses asks
        return await chat_completions(body, http)

    v1.include_router(responses_router(chat_answer))

    if backend.hot_loading:
        @v1.post("/load_lora_adapter")
        def load_lora_adapter(body: LoadAdapterRequest, request: Request) -> PlainTextResponse:
            backend.load_adapter(request.state.caller, body.lora_name, body.lora_path)
            return PlainTextResponse(f"Success: LoRA adapter '{body.lora_name}' added successfully.")

        @v1.post("/unload_lora_adapter")
        def unload_lora_adapter(body: UnloadAdapterRequest, request: Request) -> PlainTextResponse:
            backend.unload_adapter(request.state.caller, body.lora_name)
            return PlainTextResponse(f"Success: LoRA adapter '{body.lora_name}' removed successfully.")

    return v1


# ---- errors ------------------------------------------------------------------------------------
async def _complete(
    served: ServedModels, model: str, prompts: list[list[int]], params: SamplingParams, body: CompletionRequest, http: Request
) -> dict[str, Any]:
    adapter = served.get(model).adapter
    n = params.n
    texts: dict[int, str] = {}
    toks: dict[int, list[TokenInfo]] = {}
    reasons: dict[int, str | None] = {}
    used = 0
    async for i, ev in generate(served, prompts, params, adapter, body.logprobs or 0, body.logprobs is not None, http):
        if ev.finish_reason == "error":
            raise failed(ev)
        k = i * n + ev.sample
        texts[k] = texts.get(k, "") + ev.text
        toks.setdefault(k, []).extend(ev.tokens)
        if ev.finish_reason:
            reasons[k] = finish_reason(ev.finish_reason)
            used += ev.completion_tokens
    choices = [
        {"index": k, "text": texts.get(k, ""), "finish_reason": reasons.get(k),
         "logprobs": completion_logprobs(toks.get(k, []), 0) if body.logprobs is not None else None}
        for k in range(len(prompts) * n)
    ]
    return {"id": f"cmpl-{uuid.uuid4().hex}", "object": "text_completion", "created": int(time.time()), "model": model,
            "choices": choices, "usage": usage(sum(len(p) for p in prompts), used)}


async def _stream_completion(
    served: ServedModels, model: str, prompts: list[list[int]], params: SamplingParams, body: CompletionRequest
) -> AsyncIterator[dict[str, Any]]:
    adapter = served.get(model).adapter
    rid, created, used = f"cmpl-{uuid.uuid4().hex}", int(time.time()), 0
    offsets: dict[int, int] = {}
    async for i, ev in generate(served, prompts, params, adapter, body.logprobs or 0, body.logprobs is not None):
        if ev.finish_reason == "error":
            raise failed(ev)
        k = i * params.n + ev.sample
        lp = completion_logprobs(ev.tokens, offsets.get(k, 0)) if body.logprobs is not None else None
        offsets[k] = offsets.get(k, 0) + len(ev.text)
        used += ev.completion_tokens
        choice = {"index": k, "text": ev.text, "logprobs": lp, "finish_reason": finish_reason(ev.finish_reason)}
        yield {"id": rid, "object": "text_completion", "created": created, "model": model, "choices": [choice]}
    if body.stream_options and body.stream_options.include_usage:
        yield {"id": rid, "object": "text_completion", "created": created, "model": model, "choices": [],
               "usage": usage(sum(len(p) for p in prompts), used)}


