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

import asyncio
import contextlib
import json
import logging
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import asynccontextmanager
from dataclasses import replace
from importlib.resources import files
from typing import Any

from fastapi import APIRouter, Depends, FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import HTMLResponse, JSONResponse, PlainTextResponse, StreamingResponse
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException as StarletteHTTPException

from tinker_algos.sampling.sampler import SamplingParams
from tinker_core.http_limits import BodyGuard, HttpLimits
from tinker_serve import scoring
from tinker_serve.backend import Backend, LocalBackend
from tinker_serve.chat_tools import request_messages, tool_message_fields
from tinker_serve.engine import Event, TokenInfo
from tinker_serve.engine import Request as EngineRequest
from tinker_serve.harness_routes import harness_routers
from tinker_serve.protocol import (
    APIError,
    ChatRequest,
    CompletionRequest,
    LoadAdapterRequest,
    UnloadAdapterRequest,
    bad_request,
    finish_reason,
    usage,
)
from tinker_serve.served import ServedModels

logger = logging.getLogger(__name__)
DEFAULT_CHAT_MAX_TOKENS = 512
"""``max_tokens`` of a chat request that gives none (capped by what the context has left)."""
MAX_REQUEST_BYTES = 8 * 1024 * 1024
"""The largest request body ``opentinker serve`` accepts by default (larger: 413)."""


def _refused(status: int, message: str) -> JSONResponse:
    kind = "invalid_request_error"
    return JSONResponse(APIError(status, message, type=kind, code="request_too_large" if status == 413 else None).body(),
                        status_code=status)


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
    app.add_middleware(BodyGuard, limits=limits or HttpLimits(MAX_REQUEST_BYTES), respond=_refused,
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

    _install_error_handlers(app)
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
        prompts = await run_in_threadpool(_completion_prompts, served, body.prompt)  # tokenizing is work
        scoring.check_scoring_request(body, len(prompts))
        max_tokens = 16 if body.max_tokens is None else body.max_tokens
        params = _params(body, max(1, max_tokens))
        for ids in prompts:
            _check_length(served, len(ids), max_tokens, "prompt")
        if body.stream:
            return _sse(_stream_completion(served, model.name, prompts, params, body))
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
        model = served.get(body.model)
        body.refuse_unsupported(("functions", "function_call", "response_format", "suffix"))
        messages, tools = request_messages(body)  # tools: :mod:`.chat_tools`
        _check_chars(served, sum(len(m["content"]) for m in messages) + len(json.dumps(tools)), "messages")
        ids, _ = await run_in_threadpool(served.renderer.start, messages, "", tools)
        if not ids:
            raise bad_request("the messages render to no tokens", "messages")
        asked = body.max_completion_tokens or body.max_tokens
        room = (served.max_positions or len(ids) + DEFAULT_CHAT_MAX_TOKENS) - len(ids)
        params = _params(body, asked or max(1, min(DEFAULT_CHAT_MAX_TOKENS, room)))
        _check_length(served, len(ids), params.max_new_tokens, "messages")
        top = (body.top_logprobs or 0) if body.logprobs else 0
        if body.top_logprobs and not body.logprobs:
            raise bad_request("'top_logprobs' needs 'logprobs': true", "top_logprobs")
        if body.stream:
            return _sse(_stream_chat(served, model.name, ids, params, body, top, tools))
        return await _chat(served, model.name, ids, params, body, top, http, tools)

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
def _install_error_handlers(app: FastAPI) -> None:
    @app.exception_handler(APIError)
    async def api_error(_: Request, e: APIError) -> JSONResponse:
        return JSONResponse(e.body(), status_code=e.status)

    @app.exception_handler(RequestValidationError)
    async def invalid(_: Request, e: RequestValidationError) -> JSONResponse:
        first = e.errors()[0] if e.errors() else {}
        if first.get("type") == "json_invalid":
            err = bad_request(f"the request body is not valid JSON: {first.get('ctx', {}).get('error', 'parse error')}", code="invalid_json")
        else:
            param = _param(first.get("loc", ())) or None
            msg = "; ".join(f"{_param(x.get('loc', ())) or 'body'}: {x.get('msg')}" for x in e.errors())
            err = bad_request(msg or "invalid request", param)
        return JSONResponse(err.body(), status_code=400)

    @app.exception_handler(StarletteHTTPException)
    async def http_error(_: Request, e: StarletteHTTPException) -> JSONResponse:
        kind = "not_found_error" if e.status_code == 404 else "invalid_request_error"
        return JSONResponse(APIError(e.status_code, str(e.detail), type=kind).body(), status_code=e.status_code)

    @app.exception_handler(Exception)
    async def unexpected(_: Request, e: Exception) -> JSONResponse:
        logger.exception("tinker-serve: unexpected error")
        err = APIError(500, f"internal server error ({type(e).__name__}); see the server's log", type="internal_server_error")
        return JSONResponse(err.body(), status_code=500)


def _param(loc: Sequence[int | str]) -> str:
    """A validation error's location as a dotted field path (without pydantic's union-member tags)."""
    parts = []
    for p in loc:
        if p == "body" and not parts:
            continue
        if isinstance(p, str) and ("[" in p or p in ("str", "int", "float", "bool", "list", "dict", "none")):
            break
        parts.append(str(p))
    return ".".join(parts)


# ---- requests -> engine ------------------------------------------------------------------------
def _completion_prompts(served: ServedModels, prompt: str | list[str] | list[int] | list[list[int]]) -> list[list[int]]:
    from tinker_algos.model.tokenizer import encode_prompt

    items: list[str | list[int]] = [prompt] if isinstance(prompt, str) or (prompt and isinstance(prompt[0], int)) else list(prompt)
    if not items:
        raise bad_request("'prompt' is empty", "prompt")
    vocab = len(served.policy.tokenizer)
    out = []
    for item in items:
        if isinstance(item, str):
            _check_chars(served, len(item), "prompt")
        elif served.max_positions is not None and len(item) > served.max_positions:
            _check_length(served, len(item), 0, "prompt")
        ids = list(item) if isinstance(item, list) else encode_prompt(served.policy.tokenizer, item)
        if not ids:
            raise bad_request("a prompt encodes to no tokens", "prompt")
        if any(not 0 <= t < vocab for t in ids):
            raise bad_request(f"a prompt token id is outside the vocabulary [0, {vocab})", "prompt")
        out.append(ids)
    return out


def _params(body: CompletionRequest | ChatRequest, max_tokens: int) -> SamplingParams:
    return SamplingParams(
        max_new_tokens=max_tokens,
        temperature=1.0 if body.temperature is None else body.temperature,
        top_p=1.0 if body.top_p is None else body.top_p,
        top_k=max(0, body.top_k or 0),
        n=body.n,
        stop=body.stop_list(),
        seed=body.seed,
        stop_at_eos=not body.ignore_eos,
    )


def _check_chars(served: ServedModels, chars: int, param: str) -> None:
    """Refuse, before tokenizing, a prompt of more characters than the context can hold."""
    bound = served.max_prompt_chars
    if bound is not None and chars > bound:
        raise bad_request(
            f"This model's maximum context length is {served.max_positions} tokens. However, the {param} has "
            f"{chars} characters, more than {served.max_positions} tokens can hold ({bound}). "
            "Please reduce the length of the prompt.", param, "context_length_exceeded",
        )


def _check_length(served: ServedModels, prompt_len: int, max_tokens: int, param: str) -> None:
    limit = served.max_positions
    if limit is not None and prompt_len + max_tokens > limit:
        raise bad_request(
            f"This model's maximum context length is {limit} tokens. However, you requested "
            f"{prompt_len + max_tokens} tokens ({prompt_len} in the {param}, {max_tokens} in the completion). "
            "Please reduce the length of the prompt or max_tokens.",
            param if prompt_len >= limit else "max_tokens",
            "context_length_exceeded",
        )


async def _generate(
    served: ServedModels, prompts: list[list[int]], params: SamplingParams, adapter: str | None, top: int, logprobs: bool,
    http: Request | None = None,
) -> AsyncIterator[tuple[int, Event]]:
    """``(prompt index, event)`` until every sample has finished; leaving early cancels the rest,
    and so does ``http``'s client going away (checked about once a second)."""
    loop = asyncio.get_running_loop()
    queue: asyncio.Queue[tuple[int, Event]] = asyncio.Queue()
    reqs = []
    for i, ids in enumerate(prompts):
        def on_event(ev: Event, i: int = i) -> None:
            with contextlib.suppress(RuntimeError):  # the event loop has closed: nobody listens
                loop.call_soon_threadsafe(queue.put_nowait, (i, ev))

        reqs.append(EngineRequest(ids, replace(params), on_event, adapter, top, logprobs))
    finished: set[tuple[int, int]] = set()
    try:
        for r in reqs:
            try:
                served.engine.submit(r)
            except ValueError as e:
                raise bad_request(str(e)) from None
        next_check = loop.time() + 1.0
        while len(finished) < len(prompts) * params.n:
            try:
                item: tuple[int, Event] | None = await asyncio.wait_for(queue.get(), timeout=1.0)
            except TimeoutError:
                item = None
            if http is not None and loop.time() >= next_check:
                next_check = loop.time() + 1.0
                if await http.is_disconnected():
                    return
            if item is None:
                continue
            i, ev = item
            if (i, ev.sample) in finished:
                continue
            if ev.finish_reason is not None:
                finished.add((i, ev.sample))
            yield i, ev
    finally:
        if len(finished) < len(prompts) * params.n:
            for r in reqs:
                served.engine.cancel(r)


def _failed(ev: Event) -> APIError:
    return APIError(500, ev.error or "generation failed", type="internal_server_error")


def _sse(chunks: AsyncIterator[dict[str, Any]]) -> StreamingResponse:
    async def events() -> AsyncIterator[str]:
        try:
            async for chunk in chunks:
                yield f"data: {json.dumps(chunk)}\n\n"
        except APIError as e:
            yield f"data: {json.dumps(e.body())}\n\n"
        yield "data: [DONE]\n\n"

    return StreamingResponse(events(), media_type="text/event-stream", headers={"Cache-Control": "no-cache"})


def _completion_logprobs(tokens: list[TokenInfo], offset: int) -> dict[str, Any]:
    offsets, at = [], offset
    for t in tokens:
        offsets.append(at)
        at += len(t.text)
    return {
        "tokens": [t.text for t in tokens],
        "token_logprobs": [t.logprob for t in tokens],
        "top_logprobs": [dict(t.top) for t in tokens],
        "text_offset": offsets,
    }


def _chat_logprobs(tokens: list[TokenInfo]) -> dict[str, Any]:
    def entry(text: str, lp: float) -> dict[str, Any]:
        return {"token": text, "logprob": lp, "bytes": list(text.encode("utf-8"))}

    return {"content": [{**entry(t.text, t.logprob), "top_logprobs": [entry(s, v) for s, v in t.top]} for t in tokens]}


async def _complete(
    served: ServedModels, model: str, prompts: list[list[int]], params: SamplingParams, body: CompletionRequest, http: Request
) -> dict[str, Any]:
    adapter = served.get(model).adapter
    n = params.n
    texts: dict[int, str] = {}
    toks: dict[int, list[TokenInfo]] = {}
    reasons: dict[int, str | None] = {}
    used = 0
    async for i, ev in _generate(served, prompts, params, adapter, body.logprobs or 0, body.logprobs is not None, http):
        if ev.finish_reason == "error":
            raise _failed(ev)
        k = i * n + ev.sample
        texts[k] = texts.get(k, "") + ev.text
        toks.setdefault(k, []).extend(ev.tokens)
        if ev.finish_reason:
            reasons[k] = finish_reason(ev.finish_reason)
            used += ev.completion_tokens
    choices = [
        {"index": k, "text": texts.get(k, ""), "finish_reason": reasons.get(k),
         "logprobs": _completion_logprobs(toks.get(k, []), 0) if body.logprobs is not None else None}
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
    async for i, ev in _generate(served, prompts, params, adapter, body.logprobs or 0, body.logprobs is not None):
        if ev.finish_reason == "error":
            raise _failed(ev)
        k = i * params.n + ev.sample
        lp = _completion_logprobs(ev.tokens, offsets.get(k, 0)) if body.logprobs is not None else None
        offsets[k] = offsets.get(k, 0) + len(ev.text)
        used += ev.completion_tokens
        choice = {"index": k, "text": ev.text, "logprobs": lp, "finish_reason": finish_reason(ev.finish_reason)}
        yield {"id": rid, "object": "text_completion", "created": created, "model": model, "choices": [choice]}
    if body.stream_options and body.stream_options.include_usage:
        yield {"id": rid, "object": "text_completion", "created": created, "model": model, "choices": [],
               "usage": usage(sum(len(p) for p in prompts), used)}


async def _chat(
    served: ServedModels, model: str, ids: list[int], params: SamplingParams, body: ChatRequest, top: int, http: Request,
    tools: tuple[dict[str, Any], ...] = (),
) -> dict[str, Any]:
    adapter = served.get(model).adapter
    texts: dict[int, str] = {}
    toks: dict[int, list[TokenInfo]] = {}
    reasons: dict[int, str | None] = {}
    used = 0
    async for _, ev in _generate(served, [ids], params, adapter, top, body.logprobs, http):
        if ev.finish_reason == "error":
            raise _failed(ev)
        texts[ev.sample] = texts.get(ev.sample, "") + ev.text
        toks.setdefault(ev.sample, []).extend(ev.tokens)
        if ev.finish_reason:
            reasons[ev.sample] = finish_reason(ev.finish_reason)
            used += ev.completion_tokens
    choices = []
    for k in range(params.n):
        fields, called = tool_message_fields(texts.get(k, ""), tools, id_prefix=_call_id_prefix())
        choices.append({"index": k, "message": {"role": "assistant", **fields}, "finish_reason": "tool_calls" if called else reasons.get(k),
                        "logprobs": _chat_logprobs(toks.get(k, [])) if body.logprobs else None})
    return {"id": f"chatcmpl-{uuid.uuid4().hex}", "object": "chat.completion", "created": int(time.time()), "model": model,
            "choices": choices, "usage": usage(len(ids), used)}


def _call_id_prefix() -> str:
    """A choice's tool call ids: ``call_<random>_<k>``, unique across answers as OpenAI's are (an
    agent framework keys its history by call id; the OpenAI Agents SDK drops a repeated one)."""
    return f"call_{uuid.uuid4().hex[:12]}_"


async def _stream_chat(
    served: ServedModels, model: str, ids: list[int], params: SamplingParams, body: ChatRequest, top: int,
    tools: tuple[dict[str, Any], ...] = (),
) -> AsyncIterator[dict[str, Any]]:
    """The chat's chunks: each event's text as it comes, or with ``tools`` each choice whole when
    it finishes (:mod:`.chat_tools`)."""
    adapter = served.get(model).adapter
    rid, created, used = f"chatcmpl-{uuid.uuid4().hex}", int(time.time()), 0

    def chunk(choices: list[dict[str, Any]], **extra: Any) -> dict[str, Any]:
        return {"id": rid, "object": "chat.completion.chunk", "created": created, "model": model, "choices": choices, **extra}

    yield chunk([{"index": k, "delta": {"role": "assistant", "content": ""}, "logprobs": None, "finish_reason": None} for k in range(params.n)])
    texts: dict[int, str] = {}
    toks: dict[int, list[TokenInfo]] = {}
    async for _, ev in _generate(served, [ids], params, adapter, top, body.logprobs):
        if ev.finish_reason == "error":
            raise _failed(ev)
        used += ev.completion_tokens
        if tools:  # buffered: a <tool_call> block is only known once it closes
            texts[ev.sample] = texts.get(ev.sample, "") + ev.text
            toks.setdefault(ev.sample, []).extend(ev.tokens)
            if not ev.finish_reason:
                continue
            fields, called = tool_message_fields(texts.pop(ev.sample), tools, id_prefix=_call_id_prefix())
            if "tool_calls" in fields:
                fields["tool_calls"] = [{"index": j, **c} for j, c in enumerate(fields["tool_calls"])]
            delta = {k: v for k, v in fields.items() if v}
            lp = _chat_logprobs(toks.pop(ev.sample)) if body.logprobs else None
            reason = "tool_calls" if called else finish_reason(ev.finish_reason)
            yield chunk([{"index": ev.sample, "delta": delta, "logprobs": lp, "finish_reason": reason}])
            continue
        delta = {"content": ev.text} if ev.text or not ev.finish_reason else {}
        lp = _chat_logprobs(ev.tokens) if body.logprobs else None
        yield chunk([{"index": ev.sample, "delta": delta, "logprobs": lp, "finish_reason": finish_reason(ev.finish_reason)}])
    if body.stream_options and body.stream_options.include_usage:
        yield chunk([], usage=usage(len(ids), used))
