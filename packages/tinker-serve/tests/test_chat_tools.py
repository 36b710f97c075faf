"""Tool calling over the OpenAI API (:mod:`tinker_serve.chat_tools`), with the official ``openai``
client against a real uvicorn server. SmolLM2-135M-Instruct's real template and weights: given
three worked calculator conversations (assistant ``tool_calls`` and ``tool`` results in the
request), it answers a fourth question with a call, which comes back in ``tool_calls`` (streamed
too); the prompt it saw is exactly what the training renderer makes of the same conversation.
The tiny model: bad ``tools``, ``tool_choice`` and ``tool_calls`` are 400s naming the field, and
the response fields built from sampled text."""

from __future__ import annotations

import json

import openai
import pytest

from tinker_core.tools import format_tool_call, tools_system_prompt
from tinker_serve.app import create_app
from tinker_serve.chat_tools import tool_message_fields
from tinker_serve.served import ServedModels

CALCULATOR = {
    "type": "function",
    "function": {
        "name": "calculator",
        "description": "Evaluate an arithmetic expression.",
        "parameters": {"type": "object", "properties": {"expression": {"type": "string"}}, "required": ["expression"]},
    },
}
TOOLS = [CALCULATOR]


def _call(expr: str) -> dict:
    return {"id": "call_0", "type": "function", "function": {"name": "calculator", "arguments": json.dumps({"expression": expr})}}


def _worked(question: str) -> list[dict]:
    """Three worked tool conversations (call, result, answer), then ``question``."""
    out: list[dict] = []
    for expr, value in (("12+30", "42"), ("51+17", "68"), ("23+45", "68")):
        out += [
            {"role": "user", "content": f"What is {expr}?"},
            {"role": "assistant", "content": None, "tool_calls": [_call(expr)]},
            {"role": "tool", "tool_call_id": "call_0", "name": "calculator", "content": value},
            {"role": "assistant", "content": f"{expr} = {value}"},
        ]
    return [*out, {"role": "user", "content": question}]


def _as_rendered(messages: list[dict]) -> list[dict]:
    """What the renderer is given for ``messages``: assistant calls in the default format."""
    out = []
    for m in messages:
        r = {k: v for k, v in m.items() if k in ("role", "content", "name", "tool_call_id")}
        if m.get("tool_calls"):
            r["content"] = "\n".join(format_tool_call("calculator", json.loads(c["function"]["arguments"])) for c in m["tool_calls"])
        out.append(r)
    return out


@pytest.fixture(scope="module")
def smollm2(smollm2_dir, helpers):
    served = ServedModels.load(str(smollm2_dir), name="smollm2", device="cpu", precision="fp32", max_batch=4)
    with helpers.live_server(create_app(served)) as url:
        yield openai.OpenAI(base_url=url + "/v1", api_key="unused", max_retries=0), served


def test_smollm2_calls_the_tool_through_tool_calls_and_the_prompt_is_the_training_renderers(smollm2):
    client, served = smollm2
    messages = _worked("What is 41+30?")
    r = client.chat.completions.create(model="smollm2", messages=messages, tools=TOOLS, max_tokens=40, temperature=0)
    choice = r.choices[0]
    assert choice.finish_reason == "tool_calls" and choice.message.content is None
    [call] = choice.message.tool_calls
    assert call.id.startswith("call_") and call.id.endswith("_0") and call.type == "function" and call.function.name == "calculator"
    assert json.loads(call.function.arguments) == {"expression": "41+30"}

    # The prompt: the same renderer as training, tools in the system prompt, calls and results rendered.
    ids, _ = served.renderer.start(_as_rendered(messages), "", TOOLS)
    assert r.usage.prompt_tokens == len(ids)
    text = served.policy.tokenizer.decode(ids)
    assert tools_system_prompt(TOOLS) in text and text.count('{"name": "calculator", "arguments": {"expression": ') == 3
    assert "<|im_start|>tool\n42<|im_end|>" in text  # SmolLM2's template renders the tool role

    # Streaming buffers the choice and sends the same call in one delta.
    chunks = list(client.chat.completions.create(model="smollm2", messages=messages, tools=TOOLS, max_tokens=40, temperature=0, stream=True))
    last = chunks[-1].choices[0]
    assert last.finish_reason == "tool_calls"
    [streamed] = last.delta.tool_calls
    assert (streamed.index, streamed.function.name, streamed.function.arguments) == (0, "calculator", call.function.arguments)
    assert streamed.id.endswith("_0") and streamed.id != call.id  # ids never repeat across answers, as OpenAI's
    assert not any(c.choices[0].delta.content for c in chunks)

    # tool_choice "none": the tools are neither rendered nor parsed.
    plain = client.chat.completions.create(model="smollm2", messages=messages, tools=TOOLS, tool_choice="none", max_tokens=1, temperature=0)
    assert plain.usage.prompt_tokens == len(served.renderer.start(_as_rendered(messages))[0]) < r.usage.prompt_tokens
    assert plain.choices[0].message.tool_calls is None


@pytest.fixture(scope="module")
def tiny_client(tiny_dir, helpers):
    from tinker_algos.model.models import PolicyModel

    served = ServedModels(PolicyModel.load(tiny_dir, device="cpu", precision="fp32"), "tiny", max_batch=4)
    with helpers.live_server(create_app(served)) as url:
        yield openai.OpenAI(base_url=url + "/v1", api_key="unused", max_retries=0), served


@pytest.mark.parametrize(
    ("extra", "messages", "param", "says"),
    [
        ({"tools": [{"type": "function", "function": {"name": "bad name!"}}]}, None, "tools", "tools[0].function.name"),
        ({"tools": [CALCULATOR, CALCULATOR]}, None, "tools", "unique"),
        ({"tools": {"calculator": CALCULATOR}}, None, "tools", None),
        ({"tools": TOOLS, "tool_choice": "sometimes"}, None, "tool_choice", "'required'"),
        ({"tools": TOOLS, "tool_choice": {"type": "function", "function": {"name": "search"}}}, None, "tool_choice.function.name",
         "not in 'tools' (calculator)"),
        ({"tool_choice": "required"}, None, "tool_choice", "no 'tools'"),
        ({"tool_choice": "auto"}, None, "tool_choice", "no 'tools'"),
        ({"functions": [CALCULATOR["function"]]}, None, "functions", "not supported"),
        ({"tools": TOOLS}, [{"role": "user", "content": "1+1"}, {"role": "assistant", "content": None, "tool_calls": [
            {"id": "call_0", "type": "function", "function": {"name": "calculator", "arguments": "{not json"}}]}],
         "messages.1.tool_calls.0.function.arguments", "not JSON"),
        ({}, [{"role": "user", "content": "1+1", "tool_calls": [_call("1+1")]}], "messages.0.tool_calls", "only assistant"),
    ],
)
def test_bad_tools_and_tool_choice_are_400s_naming_the_field(tiny_client, extra, messages, param, says):
    client, _ = tiny_client
    with pytest.raises(openai.BadRequestError) as e:
        client.chat.completions.create(
            model="tiny", messages=messages or [{"role": "user", "content": "1+1="}], max_tokens=2, **extra
        )
    err = e.value.body
    assert err["param"] == param and err["type"] == "invalid_request_error"
    assert says is None or says in err["message"]


def test_plain_rendering_puts_the_tools_before_the_text_and_renders_tool_results(tiny_client):
    client, served = tiny_client
    messages = [{"role": "user", "content": "1+1="}, {"role": "assistant", "content": None, "tool_calls": [_call("1+1")]},
                {"role": "tool", "tool_call_id": "call_0", "name": "calculator", "content": "2"}]
    r = client.chat.completions.create(model="tiny", messages=messages, tools=TOOLS, max_tokens=2, temperature=0)
    ids, _ = served.renderer.start(_as_rendered(messages), "", TOOLS)
    assert r.usage.prompt_tokens == len(ids)
    text = served.policy.tokenizer.decode(ids)
    assert text.index("<tools>") < text.index("1+1=") < text.index('"expression": "1+1"') < text.index("tool: 2")


def test_response_fields_from_sampled_text():
    call = format_tool_call("calculator", {"expression": "3*4"})
    fields, called = tool_message_fields(f"Let me compute.\n{call}", tuple(TOOLS))
    assert called and fields["content"] == "Let me compute."
    assert fields["tool_calls"] == [{"id": "call_0", "type": "function", "function": {"name": "calculator", "arguments": '{"expression": "3*4"}'}}]
    # Two calls, one of an unknown tool: the valid one is a call, the invalid block stays in the content.
    bad = format_tool_call("search", {"q": "x"})
    fields, called = tool_message_fields(f"{call}\n{bad}", tuple(TOOLS))
    assert called and [c["id"] for c in fields["tool_calls"]] == ["call_0"] and fields["content"] == bad
    # No valid call (unclosed at the token limit), or no tools: plain text, unchanged.
    assert tool_message_fields("<tool_call>\n{\"name\": \"calcul", tuple(TOOLS)) == ({"content": "<tool_call>\n{\"name\": \"calcul"}, False)
    assert tool_message_fields(call, ()) == ({"content": call}, False)
