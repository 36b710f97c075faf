"""The OpenAI protocol as tinker-serve speaks it -- request bodies, the error shape and the app's
error handlers, the request-size limit -- shared by ``opentinker serve``'s app
(:mod:`tinker_serve.app`) and the rollout proxy (:mod:`tinker_serve.proxy`).

Requests are pydantic models; fields OpenAI defines that change nothing here (``user``...) are
accepted and ignored, fields that would change the answer and are not implemented (``logit_bias``,
``functions``, ``suffix``) are refused with a 400 naming the field. ``frequency_penalty`` and
``presence_penalty`` (-2..2) are OpenAI's (:mod:`tinker_algos.sampling.token_draw`); chat's
``response_format`` is enforced by constrained decoding (:mod:`.routes.constrained`). Chat ``tools``, ``tool_choice`` and tool messages: :mod:`.chat_tools`. Every error is ``{"error": {"message", "type", "param", "code"}}``
(:class:`APIError`).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any, Literal

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict, Field
from starlette.exceptions import HTTPException as StarletteHTTPException

# the one OpenAI-shaped error is tinker-core's, so the scheduler's model directory raises it without importing us
from tinker_core.http_fronts import APIError

logger = logging.getLogger(__name__)
MAX_LOGPROBS = 20
#: The most stop strings a request may give, and the longest one (every decode step checks them).
MAX_STOP = 16
MAX_STOP_CHARS = 256


def bad_request(message: str, param: str | None = None, code: str | None = None) -> APIError:
    return APIError(400, message, param=param, code=code)


class StreamOptions(BaseModel):
    include_usage: bool = False


class _Sampling(BaseModel):
    """Fields completions and chat completions share."""

    model_config = ConfigDict(extra="allow")

    model: str
    temperature: float | None = Field(None, ge=0, le=2)
    top_p: float | None = Field(None, gt=0, le=1)
    top_k: int | None = Field(None, ge=-1)  # vLLM's extension: -1 or 0 = off
    ignore_eos: bool = False  # vLLM's extension: generate past end-of-turn tokens
    n: int = Field(1, ge=1, le=16)
    stop: str | list[str] | None = None
    seed: int | None = None
    stream: bool = False
    stream_options: StreamOptions | None = None
    presence_penalty: float | None = Field(0.0, ge=-2, le=2)
    frequency_penalty: float | None = Field(0.0, ge=-2, le=2)
    logit_bias: dict[str, float] | None = None

    def stop_list(self) -> list[str]:
        stops = [self.stop] if isinstance(self.stop, str) else list(self.stop or [])
        if any(not s for s in stops):
            raise bad_request("'stop' contains an empty string", "stop")
        if len(stops) > MAX_STOP or any(len(s) > MAX_STOP_CHARS for s in stops):
            raise bad_request(f"'stop' takes at most {MAX_STOP} strings of at most {MAX_STOP_CHARS} characters", "stop")
        return stops

    def refuse_unsupported(self, names: tuple[str, ...] = ()) -> None:
        if self.logit_bias:
            raise bad_request("'logit_bias' is not supported by this server", "logit_bias")
        extra = self.model_extra or {}
        for name in names:
            if extra.get(name) not in (None, False, "", [], "none"):
                raise bad_request(f"'{name}' is not supported by this server", name)


class CompletionRequest(_Sampling):
    """``POST /v1/completions``: ``prompt`` is text, a list of texts, token ids or lists of ids."""

    prompt: str | list[str] | list[int] | list[list[int]]
    max_tokens: int | None = Field(16, ge=0)  # 0: score the prompt only (with echo)
    logprobs: int | None = Field(None, ge=0, le=MAX_LOGPROBS)
    echo: bool = False  # put the prompt (and its tokens' logprobs) before the completion


class TextPart(BaseModel):
    model_config = ConfigDict(extra="allow")
    type: Literal["text"]
    text: str


class ChatMessage(BaseModel):
    model_config = ConfigDict(extra="allow")
    role: Literal["system", "developer", "user", "assistant", "tool"]
    content: str | list[TextPart] | None = None
    tool_calls: list[dict[str, Any]] | None = None  # an assistant's calls (OpenAI format)
    tool_call_id: str | None = None  # a tool message: the call it answers
    name: str | None = None

    def text(self) -> str:
        if isinstance(self.content, list):
            return "".join(p.text for p in self.content)
        return self.content or ""


class ChatRequest(_Sampling):
    """``POST /v1/chat/completions``."""

    messages: list[ChatMessage] = Field(min_length=1)
    max_tokens: int | None = Field(None, ge=1)
    max_completion_tokens: int | None = Field(None, ge=1)
    logprobs: bool = False
    top_logprobs: int | None = Field(None, ge=0, le=MAX_LOGPROBS)
    tools: list[Any] | None = None  # OpenAI function tools, checked in :mod:`.chat_tools`
    tool_choice: str | dict[str, Any] | None = None
    response_format: dict[str, Any] | None = None  # text, json_object or json_schema: :mod:`.routes.constrained`
    parallel_tool_calls: bool | None = None  # false: a forced or JSON-constrained answer holds one call at most


class LoadAdapterRequest(BaseModel):
    """vLLM's ``POST /v1/load_lora_adapter`` body."""

    model_config = ConfigDict(extra="allow")
    lora_name: str = Field(min_length=1)
    lora_path: str = Field(min_length=1)


class UnloadAdapterRequest(BaseModel):
    """vLLM's ``POST /v1/unload_lora_adapter`` body."""

    model_config = ConfigDict(extra="allow")
    lora_name: str = Field(min_length=1)


def usage(prompt_tokens: int, completion_tokens: int) -> dict[str, int]:
    return {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens, "total_tokens": prompt_tokens + completion_tokens}


def finish_reason(reason: str | None) -> str | None:
    """The engine's reason as OpenAI names it (``abort``/``error`` end as ``stop``)."""
    return None if reason is None else ("length" if reason == "length" else "stop")


MAX_REQUEST_BYTES = 8 * 1024 * 1024
"""The largest request body ``opentinker serve`` accepts by default (larger: 413)."""


def refused(status: int, message: str) -> JSONResponse:
    """The answer to a request refused before the app runs (413: too large), in OpenAI's shape."""
    kind = "invalid_request_error"
    return JSONResponse(APIError(status, message, type=kind, code="request_too_large" if status == 413 else None).body(),
                        status_code=status)


def install_error_handlers(app: FastAPI) -> None:
    """Answer every error of ``app`` in OpenAI's shape: :class:`APIError` as it is, a validation
    error and malformed JSON as 400 naming the field, a Starlette error with its status, and
    anything else as a 500 that names only its type (the traceback goes to the log)."""
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
