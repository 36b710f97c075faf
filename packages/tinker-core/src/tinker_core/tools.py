"""Tool calls: tools declared as JSON Schema, and the calls a policy writes, parsed (no torch).

An env declares its tools in :attr:`EnvSpec.tools <tinker_core.env.EnvSpec>`, each in the OpenAI
function format::

    {"type": "function",
     "function": {"name": "calculator",
                  "description": "Evaluate an arithmetic expression.",
                  "parameters": {"type": "object",
                                 "properties": {"expression": {"type": "string"}},
                                 "required": ["expression"]}}}

The **default format** (Hermes / Qwen style) is how a policy calls a tool when its chat template
has no tool support of its own, and how every call is parsed: one JSON object per call inside
``<tool_call></tool_call>`` tags, several calls per turn allowed::

    <tool_call>
    {"name": "calculator", "arguments": {"expression": "347*29"}}
    </tool_call>

:func:`tools_system_prompt` writes the tool list (JSON inside ``<tools></tools>``) and these
instructions for the system prompt. :func:`parse_tool_calls` turns a turn's text into
:class:`ToolCall` s (name and arguments, with an id ``call_<k>``, ``k`` counting the turn's
``<tool_call>`` blocks from 0) and :class:`ToolCallError` s (a block that is not a valid call:
malformed JSON, no name, arguments that are not an object, an unknown tool, a missing required
argument, an unclosed tag). Parsing never raises; the env answers errors like results, usually
with a :func:`tool_message`. ``arguments`` may also be given as a JSON string holding an object
(the OpenAI wire form).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple

__all__ = [
    "TOOL_CALL_CLOSE",
    "TOOL_CALL_OPEN",
    "ParsedToolCalls",
    "ToolCall",
    "ToolCallError",
    "check_tools",
    "format_tool_call",
    "parse_tool_calls",
    "strip_tool_calls",
    "tool_calls_of",
    "tool_message",
    "tool_names",
    "tools_system_prompt",
]

TOOL_CALL_OPEN, TOOL_CALL_CLOSE = "<tool_call>", "</tool_call>"
_BLOCK = re.compile(  # a block ends at its closing tag, else (unclosed) at the next opening tag or the end
    re.escape(TOOL_CALL_OPEN) + r"(.*?)(?:" + re.escape(TOOL_CALL_CLOSE) + r"|(?=" + re.escape(TOOL_CALL_OPEN) + r")|\Z)", re.DOTALL
)


def check_tools(tools: object, where: str = "tools") -> tuple[dict[str, Any], ...]:
    """``tools`` validated and copied (a JSON round trip): a sequence of OpenAI-format function
    tools with unique names. ValueError naming ``where``, the tool and the fix otherwise."""
    if isinstance(tools, str | bytes | Mapping) or not isinstance(tools, Sequence):
        raise ValueError(f"{where} must be a list of tools ({{'type': 'function', 'function': {{...}}}}), got {type(tools).__name__}")
    fix = "write {'type': 'function', 'function': {'name': ..., 'description': ..., 'parameters': {JSON Schema}}}"
    out: list[dict[str, Any]] = []
    seen: set[str] = set()
    for i, tool in enumerate(tools):
        at = f"{where}[{i}]"
        if not isinstance(tool, Mapping) or tool.get("type") != "function" or not isinstance(tool.get("function"), Mapping):
            raise ValueError(f"{at} is not an OpenAI function tool: {tool!r}; {fix}")
        fn = tool["function"]
        name = fn.get("name")
        if not isinstance(name, str) or not re.fullmatch(r"[A-Za-z0-9_.-]{1,64}", name):
            raise ValueError(f"{at}.function.name must be 1-64 letters, digits, '_', '.' or '-', got {name!r}")
        if name in seen:
            raise ValueError(f"{at}: two tools are named {name!r}; tool names must be unique")
        seen.add(name)
        if not isinstance(fn.get("description", ""), str):
            raise ValueError(f"{at}.function.description must be a str, got {fn.get('description')!r}")
        params = fn.get("parameters", {"type": "object", "properties": {}})
        if not isinstance(params, Mapping) or params.get("type", "object") != "object":
            raise ValueError(f"{at}.function.parameters must be a JSON Schema object ({{'type': 'object', 'properties': ...}}), got {params!r}")
        required = params.get("required", [])
        if not isinstance(required, list) or not all(isinstance(r, str) for r in required):
            raise ValueError(f"{at}.function.parameters.required must be a list of argument names, got {required!r}")
        try:
            out.append(json.loads(json.dumps(tool)))
        except (TypeError, ValueError) as e:
            raise ValueError(f"{at} is not JSON-serialisable ({e}); tools travel as JSON") from None
    return tuple(out)


def tool_names(tools: Iterable[Mapping[str, Any]]) -> list[str]:
    """The names of ``tools``, in order."""
    return [str(t["function"]["name"]) for t in tools]


def tools_system_prompt(tools: Iterable[Mapping[str, Any]]) -> str:
    """The default format's tool instructions for the system prompt (Hermes / Qwen style): the
    tools as JSON lines inside ``<tools></tools>`` and how to call one."""
    listed = "\n".join(json.dumps(dict(t), ensure_ascii=False) for t in tools)
    return (
        "# Tools\n\nYou may call one or more functions to assist with the user query.\n\n"
        "You are provided with function signatures within <tools></tools> XML tags:\n"
        f"<tools>\n{listed}\n</tools>\n\n"
        "For each function call, return a json object with function name and arguments within "
        f"{TOOL_CALL_OPEN}{TOOL_CALL_CLOSE} XML tags:\n"
        f'{TOOL_CALL_OPEN}\n{{"name": <function-name>, "arguments": <args-json-object>}}\n{TOOL_CALL_CLOSE}'
    )


@dataclass(frozen=True)
class ToolCall:
    """A parsed call: the tool's ``name``, its ``arguments`` (a JSON object) and an ``id``
    (``call_<k>``: the ``k``-th ``<tool_call>`` block of its turn) that a tool message answers."""

    name: str
    arguments: dict[str, Any] = field(default_factory=dict)
    id: str = ""

    def to_openai(self) -> dict[str, Any]:
        """The call in the OpenAI chat format (arguments as a JSON string)."""
        return {"id": self.id, "type": "function", "function": {"name": self.name, "arguments": json.dumps(self.arguments)}}


@dataclass(frozen=True)
class ToolCallError:
    """A ``<tool_call>`` block that is not a valid call: what is wrong (``message``, meant to be
    shown to the policy), the block's ``text``, the tool ``name`` when it could be read, and the
    ``id`` the call would have had."""

    message: str
    text: str = ""
    name: str | None = None
    id: str = ""


class ParsedToolCalls(NamedTuple):
    """What :func:`parse_tool_calls` found in a turn: valid ``calls`` and ``errors``, each in text order."""

    calls: tuple[ToolCall, ...] = ()
    errors: tuple[ToolCallError, ...] = ()

    def __bool__(self) -> bool:
        return bool(self.calls or self.errors)


def _arguments(raw: object) -> dict[str, Any] | str:
    """The arguments as a dict, or what is wrong with them."""
    if raw is None:
        return {}
    if isinstance(raw, str):
        try:
            raw = json.loads(raw) if raw.strip() else {}
        except json.JSONDecodeError as e:
            return f"'arguments' is a string that is not JSON ({e.msg})"
        except RecursionError:
            return "'arguments' is nested too deeply"
    if not isinstance(raw, dict):
        return f"'arguments' must be a JSON object, got {type(raw).__name__}"
    return raw


def _one(body: str, closed: bool, tools: Mapping[str, Mapping[str, Any]] | None, call_id: str) -> ToolCall | ToolCallError:
    text = TOOL_CALL_OPEN + body + (TOOL_CALL_CLOSE if closed else "")
    if not closed:
        return ToolCallError(f"unclosed {TOOL_CALL_OPEN} tag; end each call with {TOOL_CALL_CLOSE}", text, None, call_id)
    try:
        obj = json.loads(body)
    except RecursionError:
        return ToolCallError("the call is nested too deeply to read", text, None, call_id)
    except json.JSONDecodeError as e:
        return ToolCallError(f"the call is not valid JSON ({e.msg} at char {e.pos}); write {{\"name\": ..., \"arguments\": {{...}}}}", text, None, call_id)
    if not isinstance(obj, dict):
        return ToolCallError(f"the call must be a JSON object with 'name' and 'arguments', got {type(obj).__name__}", text, None, call_id)
    name = obj.get("name")
    if not isinstance(name, str) or not name:
        return ToolCallError("the call has no 'name' (a string naming the tool)", text, None, call_id)
    args = _arguments(obj.get("arguments", obj.get("parameters")))
    if isinstance(args, str):
        return ToolCallError(args, text, name, call_id)
    if tools is not None:
        if name not in tools:
            known = ", ".join(sorted(tools)) or "none"
            return ToolCallError(f"unknown tool {name!r}; the tools are: {known}", text, name, call_id)
        required = tools[name].get("function", {}).get("parameters", {}).get("required", [])
        missing = [r for r in required if r not in args]
        if missing:
            return ToolCallError(f"{name}: missing required argument(s) {', '.join(map(repr, missing))}", text, name, call_id)
    return ToolCall(name, args, call_id)


def parse_tool_calls(text: str, tools: Iterable[Mapping[str, Any]] | None = None) -> ParsedToolCalls:
    """The ``<tool_call>`` blocks of ``text`` (see the module docstring); with ``tools``, calls of
    unknown tools and calls missing a required argument are errors too. Never raises."""
    if TOOL_CALL_OPEN not in text:
        return ParsedToolCalls()
    by_name = None if tools is None else {str(t["function"]["name"]): t for t in tools}
    calls: list[ToolCall] = []
    errors: list[ToolCallError] = []
    for k, m in enumerate(_BLOCK.finditer(text)):
        closed = text.startswith(TOOL_CALL_CLOSE, m.end(1))
        item = _one(m.group(1), closed, by_name, f"call_{k}")
        (calls if isinstance(item, ToolCall) else errors).append(item)  # type: ignore[arg-type]
    return ParsedToolCalls(tuple(calls), tuple(errors))


def tool_calls_of(action: str, tools: Iterable[Mapping[str, Any]] | None = None) -> ParsedToolCalls:
    """The tool calls of an action: those the rollout parsed (an :class:`~tinker_core.contracts.Action`
    whose ``tool_calls`` is set), else ``action`` parsed here (a plain string, e.g. in a test)."""
    calls = getattr(action, "tool_calls", None)
    if calls is not None:
        return ParsedToolCalls(tuple(calls), tuple(getattr(action, "tool_call_errors", ())))
    return parse_tool_calls(str(action), tools)


def strip_tool_calls(text: str) -> str:
    """``text`` without its ``<tool_call>`` blocks (what the policy said besides), stripped."""
    return _BLOCK.sub("", text).strip()


def format_tool_call(name: str, arguments: Mapping[str, Any]) -> str:
    """A call written in the default format (what a policy should sample)."""
    body = json.dumps({"name": name, "arguments": dict(arguments)}, ensure_ascii=False)
    return f"{TOOL_CALL_OPEN}\n{body}\n{TOOL_CALL_CLOSE}"


def tool_message(content: str, call: ToolCall | ToolCallError | None = None) -> dict[str, str]:
    """A ``tool`` chat message answering ``call`` (its ``name`` and ``tool_call_id`` when known)."""
    msg = {"role": "tool", "content": str(content)}
    if call is not None:
        if call.name:
            msg["name"] = call.name
        if call.id:
            msg["tool_call_id"] = call.id
    return msg
