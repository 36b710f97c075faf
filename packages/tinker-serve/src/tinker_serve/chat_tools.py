"""Tool calling on ``POST /v1/chat/completions``: a request's ``tools`` and tool messages in, the
model's ``<tool_call>`` blocks out as OpenAI ``tool_calls``.

In: ``tools`` (OpenAI function tools, checked by :func:`tinker_core.tools.check_tools`; 400
naming the field otherwise) are rendered by the same :class:`~tinker_algos.model.prompts.PromptRenderer`
the training rollout uses: given to a chat template that renders tools itself, else written into
the system prompt in the default (Hermes / Qwen) format. An assistant message's ``tool_calls``
are written back into its content in the default format (:func:`tinker_core.tools.format_tool_call`,
after its text, one block a line), which is what a policy trained on the default format samples,
so a multi-turn tool conversation is rendered as the model produced it. ``tool`` messages keep
their ``name`` and ``tool_call_id``; a template without a ``tool`` role gets them as a user turn
of ``<tool_response>`` blocks (the renderer's fallback). ``tool_choice``: ``"auto"`` (the
default when tools are given) parses calls; ``"none"`` renders and parses no tools (the request
is answered as if it gave none; earlier calls and results in ``messages`` are still rendered);
``"required"`` and a named function (:func:`forced_tools`) constrain the answer to calls of the
tools / of that tool in the default format (:mod:`.routes.constrained`); a named function that is not in
``tools`` is a 400.

Out: the completion is parsed by :func:`tinker_core.tools.parse_tool_calls` against the request's
tools. When it holds valid calls the message has ``tool_calls`` (:meth:`ToolCall.to_openai`, ids
``call_<r>_<k>`` numbering the answer's blocks, ``<r>`` random per answer; the rollout proxy's are
``call_<i>_<k>``, ``i`` the call's index in its episode: never repeated in a conversation, as
OpenAI's), ``content`` is the text outside the blocks (null when there is none; the text of any
invalid block is kept after it) and ``finish_reason`` is ``"tool_calls"``; otherwise the answer is
plain text, as without tools. A streamed request with tools buffers each choice and sends its
content, tool calls and logprobs in one delta when it finishes (a partial ``<tool_call>`` block
cannot be told from text until it closes).
"""

from __future__ import annotations

import json
from typing import Any

from tinker_core.tools import check_tools, format_tool_call, parse_tool_calls, strip_tool_calls
from tinker_serve.protocol import ChatRequest, bad_request

__all__ = ["forced_tools", "request_messages", "tool_message_fields"]


def _tools_of(body: ChatRequest) -> tuple[dict[str, Any], ...]:
    """The request's tools when calls are to be parsed (none for ``tool_choice: "none"``)."""
    choice = body.tool_choice
    if not (choice in (None, "auto", "none", "required") or _named(choice) is not None):
        shown = json.dumps(choice) if not isinstance(choice, str) else repr(choice)
        raise bad_request(
            f"'tool_choice' {shown} is not one of 'auto', 'none', 'required' or "
            "{'type': 'function', 'function': {'name': ...}}", "tool_choice",
        )
    if body.tools is None:
        if choice not in (None, "none"):
            raise bad_request(f"'tool_choice' is {json.dumps(choice)} but no 'tools' are given; give 'tools' or drop 'tool_choice'",
                              "tool_choice")
        return ()
    try:
        tools = check_tools(body.tools)
    except ValueError as e:
        raise bad_request(str(e), "tools") from None
    return () if choice == "none" else tools


def _named(choice: object) -> str | None:
    """The function name of a ``{"type": "function", "function": {"name": ...}}`` tool choice."""
    if isinstance(choice, dict) and choice.get("type") == "function" and isinstance(choice.get("function"), dict):
        name = choice["function"].get("name")
        return name if isinstance(name, str) and name else None
    return None


def forced_tools(body: ChatRequest, tools: tuple[dict[str, Any], ...]) -> tuple[dict[str, Any], ...] | None:
    """The tools one of which the answer must call (``tool_choice`` ``"required"``: any of
    ``tools``; a named function: that one, a 400 when ``tools`` has none of that name), or None."""
    if body.tool_choice == "required":
        return tools
    name = _named(body.tool_choice)
    if name is None:
        return None
    chosen = tuple(t for t in tools if t["function"]["name"] == name)
    if not chosen:
        known = ", ".join(t["function"]["name"] for t in tools)
        raise bad_request(f"'tool_choice' names the function {name!r}, which is not in 'tools' ({known})", "tool_choice.function.name")
    return chosen


def _call_text(call: object, where: str) -> str:
    """One OpenAI ``tool_calls`` entry of an assistant message, written in the default format."""
    fn = call.get("function") if isinstance(call, dict) else None
    if not isinstance(fn, dict) or not isinstance(fn.get("name"), str) or not fn["name"]:
        raise bad_request(f"{where} must be {{'type': 'function', 'function': {{'name': ..., 'arguments': '{{...}}'}}}}, got {call!r}", where)
    raw = fn.get("arguments", "{}")
    try:
        args = json.loads(raw) if isinstance(raw, str) else raw
    except json.JSONDecodeError as e:
        raise bad_request(f"{where}.function.arguments is not JSON ({e.msg}); send the arguments object as a JSON string", f"{where}.function.arguments") from None
    if not isinstance(args, dict):
        raise bad_request(f"{where}.function.arguments must hold a JSON object, got {type(args).__name__}", f"{where}.function.arguments")
    return format_tool_call(fn["name"], args)


def request_messages(body: ChatRequest) -> tuple[list[dict[str, str]], tuple[dict[str, Any], ...]]:
    """``(messages, tools)``: the request's messages as the renderer takes them (``developer`` as
    ``system``, assistant ``tool_calls`` written into the content, ``tool`` messages with their
    ``name`` and ``tool_call_id``) and the tools to render and parse (see the module docstring)."""
    tools = _tools_of(body)
    messages: list[dict[str, str]] = []
    for i, m in enumerate(body.messages):
        msg = {"role": "system" if m.role == "developer" else m.role, "content": m.text()}
        if m.tool_calls:
            if m.role != "assistant":
                raise bad_request(f"messages[{i}]: only assistant messages carry 'tool_calls'", f"messages.{i}.tool_calls")
            blocks = [_call_text(c, f"messages.{i}.tool_calls.{j}") for j, c in enumerate(m.tool_calls)]
            msg["content"] = "\n".join([msg["content"], *blocks] if msg["content"] else blocks)
        if m.role == "tool":
            msg.update({k: v for k, v in (("name", m.name), ("tool_call_id", m.tool_call_id)) if v})
        messages.append(msg)
    return messages, tools


def tool_message_fields(text: str, tools: tuple[dict[str, Any], ...], id_prefix: str = "call_") -> tuple[dict[str, Any], bool]:
    """``(fields, called)``: the response message's ``content`` and, when ``text`` holds valid
    calls of ``tools``, its ``tool_calls`` (then ``called`` is True: finish reason ``"tool_calls"``).
    Call ids are ``id_prefix`` + the block's number in the turn (``call_<k>`` by default)."""
    parsed = parse_tool_calls(text, tools) if tools else None
    if not parsed or not parsed.calls:
        return {"content": text}, False
    content = "\n".join(x for x in (strip_tool_calls(text), *(e.text for e in parsed.errors)) if x)
    calls = [{**c.to_openai(), "id": id_prefix + c.id.removeprefix("call_")} for c in parsed.calls]
    return {"content": content or None, "tool_calls": calls}, True
