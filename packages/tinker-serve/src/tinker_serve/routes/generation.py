"""From an OpenAI request to the engine and back: prompts, sampling parameters, the context
checks, the event stream of a generation, server-sent events and logprobs in OpenAI's shapes.

Shared by ``opentinker serve``'s routes (:mod:`tinker_serve.app`, :mod:`tinker_serve.routes.chat_completions`) and the rollout
proxy (:mod:`tinker_serve.proxy`).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator
from dataclasses import replace
from typing import Any

from fastapi import Request
from fastapi.responses import StreamingResponse

from tinker_algos.sampling.sampler import SamplingParams
from tinker_serve.engine import Event, TokenInfo
from tinker_serve.engine import Request as EngineRequest
from tinker_serve.protocol import APIError, ChatRequest, CompletionRequest, bad_request
from tinker_serve.served import ServedModels


def completion_prompts(served: ServedModels, prompt: str | list[str] | list[int] | list[list[int]]) -> list[list[int]]:
    from tinker_algos.model.prompts import encode_prompt

    items: list[str | list[int]] = [prompt] if isinstance(prompt, str) or (prompt and isinstance(prompt[0], int)) else list(prompt)
    if not items:
        raise bad_request("'prompt' is empty", "prompt")
    vocab = len(served.policy.tokenizer)
    out = []
    for item in items:
        if isinstance(item, str):
            check_chars(served, len(item), "prompt")
        elif served.max_positions is not None and len(item) > served.max_positions:
            check_length(served, len(item), 0, "prompt")
        ids = list(item) if isinstance(item, list) else encode_prompt(served.policy.tokenizer, item)
        if not ids:
            raise bad_request("a prompt encodes to no tokens", "prompt")
        if any(not 0 <= t < vocab for t in ids):
            raise bad_request(f"a prompt token id is outside the vocabulary [0, {vocab})", "prompt")
        out.append(ids)
    return out


def sampling_params(body: CompletionRequest | ChatRequest, max_tokens: int) -> SamplingParams:
    """The engine's :class:`SamplingParams` of a request (penalties included; a chat request's
    grammar is added by :mod:`tinker_serve.routes.chat_completions`)."""
    return SamplingParams(
        max_new_tokens=max_tokens,
        temperature=1.0 if body.temperature is None else body.temperature,
        top_p=1.0 if body.top_p is None else body.top_p,
        top_k=max(0, body.top_k or 0),
        n=body.n,
        stop=body.stop_list(),
        seed=body.seed,
        stop_at_eos=not body.ignore_eos,
        frequency_penalty=body.frequency_penalty or 0.0,
        presence_penalty=body.presence_penalty or 0.0,
    )


def check_chars(served: ServedModels, chars: int, param: str) -> None:
    """Refuse, before tokenizing, a prompt of more characters than the context can hold."""
    bound = served.max_prompt_chars
    if bound is not None and chars > bound:
        raise bad_request(
            f"This model's maximum context length is {served.max_positions} tokens. However, the {param} has "
            f"{chars} characters, more than {served.max_positions} tokens can hold ({bound}). "
            "Please reduce the length of the prompt.", param, "context_length_exceeded",
        )


def check_length(served: ServedModels, prompt_len: int, max_tokens: int, param: str) -> None:
    limit = served.max_positions
    if limit is not None and prompt_len + max_tokens > limit:
        raise bad_request(
            f"This model's maximum context length is {limit} tokens. However, you requested "
            f"{prompt_len + max_tokens} tokens ({prompt_len} in the {param}, {max_tokens} in the completion). "
            "Please reduce the length of the prompt or max_tokens.",
            param if prompt_len >= limit else "max_tokens",
            "context_length_exceeded",
        )


async def generate(
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


def failed(ev: Event) -> APIError:
    return APIError(500, ev.error or "generation failed", type="internal_server_error")


def sse(chunks: AsyncIterator[dict[str, Any]]) -> StreamingResponse:
    async def events() -> AsyncIterator[str]:
        try:
            async for chunk in chunks:
                yield f"data: {json.dumps(chunk)}\n\n"
        except APIError as e:
            yield f"data: {json.dumps(e.body())}\n\n"
        yield "data: [DONE]\n\n"

    return StreamingResponse(events(), media_type="text/event-stream", headers={"Cache-Control": "no-cache"})


def completion_logprobs(tokens: list[TokenInfo], offset: int) -> dict[str, Any]:
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


def chat_logprobs(tokens: list[TokenInfo]) -> dict[str, Any]:
    def entry(text: str, lp: float) -> dict[str, Any]:
        return {"token": text, "logprob": lp, "bytes": list(text.encode("utf-8"))}

    return {"content": [{**entry(t.text, t.logprob), "top_logprobs": [entry(s, v) for s, v in t.top]} for t in tokens]}


__all__ = ["chat_logprobs", "check_chars", "check_length", "completion_logprobs", "completion_prompts", "failed", "generate",
           "sampling_params", "sse"]
