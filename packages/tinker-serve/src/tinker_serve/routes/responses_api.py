"""``POST /v1/responses``: OpenAI's Responses API, as much of it as an agent framework's default
model class asks (the OpenAI Agents SDK's ``OpenAIResponsesModel``), answered through the chat route.

A request is translated into a chat request and answered by whatever answers chat completions
(``opentinker serve``'s route, or the rollout proxy's, which records the tokens), and the chat
answer is translated back into a ``response`` object:

* in: ``instructions`` (a system message first), ``input`` (a string: one user message; or items:
  messages with text content parts ``input_text`` / ``output_text``, ``function_call`` items (an
  assistant's ``tool_calls``), ``function_call_output`` items (``tool`` messages; the function's
  name is looked up by ``call_id``), ``reasoning`` items (skipped)), ``tools`` (``{"type":
  "function", "name", "description", "parameters"}``), ``tool_choice`` (``"auto"``, ``"none"``,
  ``"required"``, ``{"type": "function", "name": ...}``), ``text.format`` (``text``,
  ``json_object``, ``json_schema`` with ``name`` and ``schema``: constrained decoding, as chat's
  ``response_format``), ``parallel_tool_calls`` (false: at most one call in a constrained
  answer), ``max_output_tokens``, ``temperature``, ``top_p``; fields that change nothing here
  (``store``, ``include``, ``metadata``, ``truncation``, ``reasoning``, ``prompt_cache_*``...)
  are accepted and ignored.
* out: a ``message`` item with the answer's text (``output_text``) and a ``function_call`` item per
  tool call (``call_id`` the chat call's id); ``status`` ``"completed"``, or ``"incomplete"``
  (``incomplete_details.reason: "max_output_tokens"``) when the answer hit its token limit;
  ``usage`` in the Responses shape.

Refused with a 400 naming the field: ``stream: true`` (the Agents SDK's ``Runner.run`` does not
stream; ``Runner.run_streamed`` needs it), ``previous_response_id`` and ``conversation`` (this
server keeps no responses: send the whole input), ``prompt`` (stored prompt templates), tools
other than functions, and input items or content parts other than the ones above (images, files).
An ``input`` holds at most :data:`MAX_INPUT_ITEMS` items.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Awaitable, Callable
from typing import Annotated, Any

from fastapi import APIRouter, Request
from pydantic import BaseModel, ConfigDict, Field

from tinker_serve.protocol import APIError, ChatRequest, bad_request

MAX_INPUT_ITEMS = 1024
"""The most items one request's ``input`` may hold."""
_IGNORED = ("store", "include", "metadata", "truncation", "reasoning", "prompt_cache_key",
            "prompt_cache_retention", "prompt_cache_options", "service_tier", "user", "safety_identifier", "background",
            "context_management", "top_logprobs", "max_tool_calls", "stream_options")
ChatAnswer = Callable[[ChatRequest, Request], Awaitable[Any]]
"""What answers a chat request: a ``chat.completion`` object (as a dict) for a non-streaming one."""


class ResponsesRequest(BaseModel):
    """``POST /v1/responses`` (the fields read; others are refused or ignored: the module docstring)."""

    model_config = ConfigDict(extra="allow")

    model: str
    input: str | Annotated[list[dict[str, Any]], Field(max_length=MAX_INPUT_ITEMS)]
    instructions: str | None = None
    tools: list[dict[str, Any]] | None = None
    tool_choice: str | dict[str, Any] | None = None
    text: dict[str, Any] | None = None
    max_output_tokens: int | None = Field(None, ge=1)
    temperature: float | None = None
    top_p: float | None = None
    stream: bool = False
    previous_response_id: str | None = None
    conversation: str | dict[str, Any] | None = None
    prompt: dict[str, Any] | None = None

    def refuse_unsupported(self) -> None:
        if self.stream:
            raise bad_request("this server answers /v1/responses whole: send stream: false (Runner.run does)", "stream")
        for name, why in (("previous_response_id", "it keeps no responses; send the whole conversation as 'input'"),
                          ("conversation", "it keeps no conversations; send the whole conversation as 'input'"),
                          ("prompt", "it has no stored prompt templates; send 'instructions' and 'input'")):
            if getattr(self, name):
                raise bad_request(f"'{name}' is not supported by this server: {why}", name)
        known = set(type(self).model_fields) | set(_IGNORED)
        for name in self.model_extra or {}:
            if name not in known and name not in ChatRequest.model_fields:
                raise bad_request(f"'{name}' is not supported by this server's /v1/responses", name)


def _text_of(content: Any, where: str) -> str:
    """The text of a message's content: a string or text parts (``input_text``, ``output_text``)."""
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        raise bad_request(f"'{where}' must be a string or a list of text parts", where)
    texts = []
    for j, part in enumerate(content):
        kind = part.get("type") if isinstance(part, dict) else None
        if kind not in ("input_text", "output_text", "text") or not isinstance(part.get("text"), str):
            raise bad_request(f"'{where}.{j}' is a {kind!r} part; this server reads text parts only "
                              "(input_text, output_text)", f"{where}.{j}.type")
        texts.append(part["text"])
    return "".join(texts)


def chat_messages(body: ResponsesRequest) -> list[dict[str, Any]]:
    """``body``'s ``instructions`` and ``input`` as chat messages (the module docstring)."""
    messages: list[dict[str, Any]] = [{"role": "system", "content": body.instructions}] if body.instructions else []
    if isinstance(body.input, str):
        return [*messages, {"role": "user", "content": body.input}]
    names: dict[str, str] = {}
    for i, item in enumerate(body.input):
        kind = item.get("type", "message")
        if kind == "message":
            role = item.get("role")
            if role not in ("user", "system", "developer", "assistant"):
                raise bad_request(f"'input.{i}.role' must be user, system, developer or assistant, got {role!r}", f"input.{i}.role")
            messages.append({"role": role, "content": _text_of(item.get("content", ""), f"input.{i}.content")})
        elif kind == "function_call":
            name, call_id, arguments = item.get("name"), item.get("call_id"), item.get("arguments", "{}")
            if not (isinstance(name, str) and isinstance(call_id, str) and isinstance(arguments, str)):
                raise bad_request(f"'input.{i}' (a function_call) needs string 'name', 'call_id' and 'arguments'", f"input.{i}")
            names[call_id] = name
            call = {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}
            last = messages[-1] if messages else None
            if last is not None and last["role"] == "assistant":  # the answer's text, then its calls: one message
                last.setdefault("tool_calls", []).append(call)
            else:
                messages.append({"role": "assistant", "content": None, "tool_calls": [call]})
        elif kind == "function_call_output":
            call_id = item.get("call_id")
            output = item.get("output", "")
            text = output if isinstance(output, str) else _text_of(output, f"input.{i}.output")
            messages.append({"role": "tool", "tool_call_id": call_id, "name": names.get(str(call_id)), "content": text})
        elif kind != "reasoning":
            raise bad_request(f"'input.{i}' is a {kind!r} item; this server reads message, function_call, "
                              "function_call_output and reasoning items", f"input.{i}.type")
    return messages


def chat_request(body: ResponsesRequest) -> ChatRequest:
    """The chat request that answers ``body``."""
    body.refuse_unsupported()
    tools = None
    if body.tools is not None:
        tools = []
        for i, tool in enumerate(body.tools):
            if tool.get("type") != "function":
                raise bad_request(f"'tools.{i}' is a {tool.get('type')!r} tool; this server calls function tools only", f"tools.{i}.type")
            fn = {k: tool[k] for k in ("name", "description", "parameters") if tool.get(k) is not None}
            tools.append({"type": "function", "function": fn})
    choice = body.tool_choice
    if isinstance(choice, dict):
        if choice.get("type") != "function" or not isinstance(choice.get("name"), str):
            raise bad_request("'tool_choice' must be 'auto', 'none', 'required' or {'type': 'function', 'name': ...}", "tool_choice")
        choice = {"type": "function", "function": {"name": choice["name"]}}
    fmt = (body.text or {}).get("format")
    response_format = None
    if isinstance(fmt, dict) and fmt.get("type") == "json_schema":
        response_format = {"type": "json_schema", "json_schema": {"name": fmt.get("name"), "schema": fmt.get("schema"),
                                                                  "strict": fmt.get("strict")}}
    elif fmt is not None:
        response_format = fmt
    extra = {k: v for k, v in (body.model_extra or {}).items() if k in ChatRequest.model_fields and k not in _IGNORED}
    fields = {"model": body.model, "messages": chat_messages(body), "tools": tools, "tool_choice": choice,
              "response_format": response_format, "max_tokens": body.max_output_tokens, "temperature": body.temperature,
              "top_p": body.top_p, **extra}
    try:
        return ChatRequest.model_validate({k: v for k, v in fields.items() if v is not None})
    except ValueError as e:
        raise bad_request(f"the request does not translate into a chat request: {e}") from None


def response_object(body: ResponsesRequest, chat: dict[str, Any]) -> dict[str, Any]:
    """The ``response`` object of a ``chat.completion`` answer to ``body``."""
    choice = chat["choices"][0]
    message = choice["message"]
    output: list[dict[str, Any]] = []
    if message.get("content") or not message.get("tool_calls"):
        output.append({"type": "message", "id": f"msg_{uuid.uuid4().hex}", "role": "assistant", "status": "completed",
                       "content": [{"type": "output_text", "text": message.get("content") or "", "annotations": [], "logprobs": []}]})
    for call in message.get("tool_calls") or ():
        output.append({"type": "function_call", "id": f"fc_{uuid.uuid4().hex}", "call_id": call["id"], "status": "completed",
                       "name": call["function"]["name"], "arguments": call["function"]["arguments"]})
    cut = choice.get("finish_reason") == "length"
    used = chat["usage"]
    return {
        "id": f"resp_{uuid.uuid4().hex}", "object": "response", "created_at": int(time.time()), "model": chat["model"],
        "status": "incomplete" if cut else "completed", "error": None,
        "incomplete_details": {"reason": "max_output_tokens"} if cut else None,
        "instructions": body.instructions, "output": output,
        "parallel_tool_calls": (body.model_extra or {}).get("parallel_tool_calls") is not False,
        "tool_choice": body.tool_choice or "auto", "tools": body.tools or [], "temperature": body.temperature,
        "top_p": body.top_p, "max_output_tokens": body.max_output_tokens, "metadata": {}, "text": body.text or {"format": {"type": "text"}},
        "usage": {"input_tokens": used["prompt_tokens"], "input_tokens_details": {"cached_tokens": 0},
                  "output_tokens": used["completion_tokens"], "output_tokens_details": {"reasoning_tokens": 0},
                  "total_tokens": used["total_tokens"]},
    }


def responses_router(answer: ChatAnswer) -> APIRouter:
    """``POST /responses`` answered through ``answer`` (mount it under ``/v1``)."""
    router = APIRouter()

    @router.post("/responses", response_model=None)
    async def responses(body: ResponsesRequest, http: Request) -> dict[str, Any]:
        chat = await answer(chat_request(body), http)
        if not isinstance(chat, dict):  # an answer that is not a chat.completion object: a bug here, not the caller's
            raise APIError(500, f"the chat route answered {type(chat).__name__}", type="internal_server_error")
        return response_object(body, json.loads(json.dumps(chat)))

    return router


__all__ = ["MAX_INPUT_ITEMS", "ResponsesRequest", "chat_messages", "chat_request", "response_object", "responses_router"]
