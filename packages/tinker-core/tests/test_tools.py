"""Tool calls: tool schemas, the default-format parser, Action.tool_calls and EnvSpec.tools."""

from __future__ import annotations

import json
import pickle
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tinker_core import (
    Action,
    EnvSpec,
    ToolCall,
    ToolCallError,
    parse_tool_calls,
    tool_calls_of,
    tool_message,
)
from tinker_core.tools import (
    ParsedToolCalls,
    check_tools,
    format_tool_call,
    strip_tool_calls,
    tools_system_prompt,
)

CALC = {
    "type": "function",
    "function": {
        "name": "calculator",
        "description": "Evaluate an expression.",
        "parameters": {"type": "object", "properties": {"expression": {"type": "string"}}, "required": ["expression"]},
    },
}
CLOCK = {"type": "function", "function": {"name": "clock", "description": "The time.", "parameters": {"type": "object", "properties": {}}}}
TOOLS = (CALC, CLOCK)


# ---- parsing --------------------------------------------------------------------------------------
def test_a_valid_call_is_parsed_into_name_and_arguments() -> None:
    text = 'Let me compute.\n<tool_call>\n{"name": "calculator", "arguments": {"expression": "347*29"}}\n</tool_call>'
    assert parse_tool_calls(text, TOOLS) == ParsedToolCalls((ToolCall("calculator", {"expression": "347*29"}, "call_0"),), ())
    assert strip_tool_calls(text) == "Let me compute."


def test_text_without_calls_has_none() -> None:
    parsed = parse_tool_calls("The answer is 4.", TOOLS)
    assert parsed == ParsedToolCalls() and not parsed


def test_several_calls_in_one_turn_keep_their_order_and_ids() -> None:
    text = (format_tool_call("calculator", {"expression": "1+1"}) + " and "
            + format_tool_call("clock", {}) + format_tool_call("calculator", {"expression": "2*3"}))
    calls, errors = parse_tool_calls(text, TOOLS)
    assert errors == ()
    assert calls == (
        ToolCall("calculator", {"expression": "1+1"}, "call_0"),
        ToolCall("clock", {}, "call_1"),
        ToolCall("calculator", {"expression": "2*3"}, "call_2"),
    )


def test_arguments_given_as_a_json_string_are_decoded() -> None:
    text = '<tool_call>{"name": "calculator", "arguments": "{\\"expression\\": \\"5-2\\"}"}</tool_call>'
    assert parse_tool_calls(text, TOOLS).calls == (ToolCall("calculator", {"expression": "5-2"}, "call_0"),)


@pytest.mark.parametrize(
    ("body", "message", "name"),
    [
        ('{"name": "calculator", "arguments": {"expression": "1+1"}', "not valid JSON", None),
        ("{name: calculator}", "not valid JSON", None),
        ('["calculator"]', "must be a JSON object", None),
        ('{"arguments": {}}', "no 'name'", None),
        ('{"name": "calculator", "arguments": [1]}', "'arguments' must be a JSON object", "calculator"),
        ('{"name": "calculator", "arguments": "{oops"}', "'arguments' is a string that is not JSON", "calculator"),
        ('{"name": "weather", "arguments": {}}', "unknown tool 'weather'; the tools are: calculator, clock", "weather"),
        ('{"name": "calculator", "arguments": {}}', "missing required argument(s) 'expression'", "calculator"),
    ],
)
def test_a_malformed_call_is_a_structured_error_not_an_exception(body: str, message: str, name: str | None) -> None:
    text = f"before <tool_call>{body}</tool_call> after"
    calls, errors = parse_tool_calls(text, TOOLS)
    assert calls == ()
    assert len(errors) == 1
    err = errors[0]
    assert isinstance(err, ToolCallError) and message in err.message
    assert (err.name, err.id, err.text) == (name, "call_0", f"<tool_call>{body}</tool_call>")


def test_an_unclosed_call_is_an_error_and_does_not_swallow_the_next_call() -> None:
    text = '<tool_call>{"name": "clock", "arguments": {}}\n' + format_tool_call("calculator", {"expression": "1"})
    calls, errors = parse_tool_calls(text, TOOLS)
    assert calls == (ToolCall("calculator", {"expression": "1"}, "call_1"),)
    assert [e.id for e in errors] == ["call_0"] and "unclosed <tool_call>" in errors[0].message


def test_without_tools_any_name_is_accepted() -> None:
    assert parse_tool_calls(format_tool_call("weather", {"city": "Oslo"})).calls == (ToolCall("weather", {"city": "Oslo"}, "call_0"),)


def test_deeply_nested_json_is_an_error() -> None:
    calls, errors = parse_tool_calls("<tool_call>" + "[" * 100_000 + "</tool_call>", TOOLS)
    assert calls == () and len(errors) == 1


scalars = st.none() | st.booleans() | st.integers(-10**6, 10**6) | st.text(max_size=12)
json_values = scalars | st.lists(scalars, max_size=3) | st.dictionaries(st.text(max_size=6), scalars, max_size=3)


@given(name=st.from_regex(r"[A-Za-z_][A-Za-z0-9_]{0,15}", fullmatch=True),
       arguments=st.dictionaries(st.text(max_size=8), json_values, max_size=4),
       before=st.text(max_size=20), after=st.text(max_size=20), as_string=st.booleans())
def test_a_written_call_parses_back_to_itself(name: str, arguments: dict[str, Any], before: str, after: str, as_string: bool) -> None:
    if as_string:  # the OpenAI wire form: arguments as a JSON string
        call = "<tool_call>" + json.dumps({"name": name, "arguments": json.dumps(arguments)}) + "</tool_call>"
    else:
        call = format_tool_call(name, arguments)
    before, after = before.replace("<tool_call>", ""), after.replace("<tool_call>", "")
    assert parse_tool_calls(before + call + after) == ParsedToolCalls((ToolCall(name, arguments, "call_0"),), ())


@given(st.text(alphabet=st.sampled_from(list('<>/tool_cal{}":, []namergus0123\n')), max_size=80))
def test_parsing_any_text_never_raises_and_accounts_for_every_block(text: str) -> None:
    calls, errors = parse_tool_calls(text, TOOLS)
    ids = sorted(int(x.id.removeprefix("call_")) for x in (*calls, *errors))
    assert ids == list(range(len(ids)))
    assert len(ids) == text.count("<tool_call>")


# ---- schemas, prompts, messages -------------------------------------------------------------------
def test_the_default_format_lists_the_tools_as_json_and_shows_the_call_format() -> None:
    prompt = tools_system_prompt(TOOLS)
    inside = prompt.split("<tools>\n", 1)[1].split("\n</tools>", 1)[0]
    assert [json.loads(line) for line in inside.splitlines()] == list(TOOLS)
    assert '<tool_call>\n{"name": <function-name>, "arguments": <args-json-object>}\n</tool_call>' in prompt


@pytest.mark.parametrize(
    ("tools", "match"),
    [
        ("calculator", "must be a list of tools"),
        ([{"name": "calculator"}], r"tools\[0\] is not an OpenAI function tool"),
        ([{"type": "function", "function": {"name": "two words"}}], r"tools\[0\]\.function\.name"),
        ([CALC, CALC], "two tools are named 'calculator'"),
        ([{"type": "function", "function": {"name": "f", "parameters": {"type": "array"}}}], "JSON Schema object"),
        ([{"type": "function", "function": {"name": "f", "parameters": {"type": "object", "required": "x"}}}], "required must be a list"),
        ([{"type": "function", "function": {"name": "f", "description": 3}}], "description must be a str"),
        ([{"type": "function", "function": {"name": "f", "parameters": {"default": object()}}}], "not JSON-serialisable"),
    ],
)
def test_bad_tool_declarations_are_refused_naming_the_tool(tools: Any, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        check_tools(tools)


def test_a_tool_message_answers_its_call() -> None:
    call = ToolCall("calculator", {"expression": "1"}, "call_2")
    assert tool_message("1", call) == {"role": "tool", "content": "1", "name": "calculator", "tool_call_id": "call_2"}
    assert tool_message("error: x") == {"role": "tool", "content": "error: x"}
    assert call.to_openai() == {"id": "call_2", "type": "function", "function": {"name": "calculator", "arguments": '{"expression": "1"}'}}


# ---- what travels: Action, EnvSpec ----------------------------------------------------------------
def test_an_action_carries_its_parsed_calls_through_a_pickle() -> None:
    text = format_tool_call("calculator", {"expression": "1+1"}) + "<tool_call>{bad</tool_call>"
    parsed = parse_tool_calls(text, TOOLS)
    action = Action(text, "end_of_turn", parsed.calls, parsed.errors)
    back = pickle.loads(pickle.dumps(action))
    assert (back, back.stop_reason, back.tool_calls, back.tool_call_errors) == (text, "end_of_turn", parsed.calls, parsed.errors)
    assert tool_calls_of(back, TOOLS) == parsed
    assert Action("x").tool_calls is None  # nothing was parsed


def test_tool_calls_of_a_plain_string_parses_it() -> None:
    text = format_tool_call("clock", {})
    assert tool_calls_of(text, TOOLS).calls == (ToolCall("clock", {}, "call_0"),)
    assert tool_calls_of(Action(text, None, (), ()), TOOLS) == ParsedToolCalls()  # the rollout's parse wins


def test_env_spec_tools_round_trip_through_json_and_are_checked() -> None:
    spec = EnvSpec("demo/tools-v0", tools=[CALC])
    assert spec.tools == (CALC,) and isinstance(spec.tools, tuple)
    assert EnvSpec.from_json(spec.to_json()) == spec
    assert "tools" not in EnvSpec("demo/plain-v0").to_dict()  # older readers accept tool-less specs
    with pytest.raises(ValueError, match="EnvSpec 'demo/bad-v0': tools"):
        EnvSpec("demo/bad-v0", tools=[{"name": "calculator"}])
