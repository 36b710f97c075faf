"""Routes evaluation harnesses and OpenAI's clients ask for besides generation.

- ``GET /v1/models/{id}``: one model's ``GET /v1/models`` entry (OpenAI's
  ``client.models.retrieve``); an id the caller does not see is a 404 ``model_not_found``.
- vLLM's tokenizer routes, which lm-evaluation-harness's ``local-completions`` looks for to
  tokenize through the server (its default ``tokenizer_backend=auto`` picks them up, so no
  Hugging Face tokenizer needs to be found or downloaded on the client):
  ``POST /tokenize`` (``{"prompt", "add_special_tokens": true}`` -> ``{"count", "max_model_len",
  "tokens", "token_strs"}``), ``POST /detokenize`` (``{"tokens"}`` -> ``{"prompt"}``) and ``GET
  /tokenizer_info`` (the special tokens, the chat template, the context length). Each takes an
  optional ``model`` (body field, or query parameter for ``GET``); without it the first model of
  ``GET /v1/models`` is used (``opentinker serve``: the base model, whose tokenizer its adapters
  share).

All of them want the API key when the server has one. Bounds: a ``/tokenize`` prompt is refused
(400 ``context_length_exceeded``) above the characters the context can hold, a ``/detokenize``
list above :data:`MAX_DETOKENIZE_TOKENS` or the model's context, and ids outside the vocabulary.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from fastapi import APIRouter, Depends, Request
from pydantic import BaseModel, ConfigDict, Field
from starlette.concurrency import run_in_threadpool

from tinker_serve.backend import Backend
from tinker_serve.protocol import APIError, bad_request
from tinker_serve.served import ServedModels

MAX_DETOKENIZE_TOKENS = 1 << 17
"""The most token ids one ``/detokenize`` request may send (fewer when the context is shorter)."""


class TokenizeRequest(BaseModel):
    """vLLM's ``POST /tokenize`` body (the ``prompt`` form)."""

    model_config = ConfigDict(extra="allow")
    model: str | None = None
    prompt: str
    add_special_tokens: bool = True


class DetokenizeRequest(BaseModel):
    """vLLM's ``POST /detokenize`` body."""

    model_config = ConfigDict(extra="allow")
    model: str | None = None
    tokens: list[int] = Field(max_length=MAX_DETOKENIZE_TOKENS)


def harness_routers(backend: Backend, authorize: Callable[..., Any]) -> list[APIRouter]:
    """The routers of the module docstring, each behind ``authorize`` (the app's API-key check)."""
    v1 = APIRouter(prefix="/v1", dependencies=[Depends(authorize)])
    root = APIRouter(dependencies=[Depends(authorize)])

    @v1.get("/models/{model_id:path}")
    async def retrieve_model(model_id: str, request: Request) -> dict[str, Any]:
        cards = await run_in_threadpool(backend.list_models, request.state.caller)
        for card in cards:
            if card["id"] == model_id:
                return card
        raise APIError(404, f"The model `{model_id}` does not exist.", param="model", code="model_not_found")

    async def served_for(request: Request, model: str | None) -> ServedModels:
        if model is None:
            cards = await run_in_threadpool(backend.list_models, request.state.caller)
            if not cards:
                raise APIError(404, "No model is served to this caller.", param="model", code="model_not_found")
            model = str(cards[0]["id"])
        return await run_in_threadpool(backend.lookup, request.state.caller, model)

    @root.post("/tokenize")
    async def tokenize(body: TokenizeRequest, request: Request) -> dict[str, Any]:
        served = await served_for(request, body.model)
        bound = served.max_prompt_chars
        if bound is not None and len(body.prompt) > bound:
            raise bad_request(f"the prompt has {len(body.prompt)} characters, more than this model's context of "
                              f"{served.max_positions} tokens can hold ({bound})", "prompt", "context_length_exceeded")

        def encode() -> list[int]:
            return list(served.policy.tokenizer(body.prompt, add_special_tokens=body.add_special_tokens)["input_ids"])

        ids = await run_in_threadpool(encode)
        return {"count": len(ids), "max_model_len": served.max_positions, "tokens": ids, "token_strs": None}

    @root.post("/detokenize")
    async def detokenize(body: DetokenizeRequest, request: Request) -> dict[str, Any]:
        served = await served_for(request, body.model)
        limit = min(MAX_DETOKENIZE_TOKENS, served.max_positions or MAX_DETOKENIZE_TOKENS)
        if len(body.tokens) > limit:
            raise bad_request(f"'tokens' holds {len(body.tokens)} ids; at most {limit} are decoded per request", "tokens")
        vocab = len(served.policy.tokenizer)
        if any(not 0 <= t < vocab for t in body.tokens):
            raise bad_request(f"a token id is outside the vocabulary [0, {vocab})", "tokens")
        text = await run_in_threadpool(served.policy.tokenizer.decode, body.tokens)
        return {"prompt": text}

    @root.get("/tokenizer_info")
    async def tokenizer_info(request: Request, model: str | None = None) -> dict[str, Any]:
        served = await served_for(request, model)
        tok = served.policy.tokenizer
        template = getattr(tok, "chat_template", None)
        return {
            "tokenizer_class": type(tok).__name__,
            "bos_token": tok.bos_token, "eos_token": tok.eos_token, "pad_token": tok.pad_token, "unk_token": tok.unk_token,
            "chat_template": template if isinstance(template, str) else None,
            "model_max_length": served.max_positions,
            "vocab_size": len(tok),
        }

    return [v1, root]
