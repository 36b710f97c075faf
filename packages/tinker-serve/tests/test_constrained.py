"""Constrained decoding on the tiny model through the ``openai`` client: ``response_format`` JSON
that parses and validates against its schema (jsonschema) for several seeds, ``tool_choice``
``"required"`` / a named function answered with valid calls, schemas that cannot be enforced
or are too big refused with a 400 naming the field, and the penalties the sampler applies."""

from __future__ import annotations

import json

import jsonschema
import openai
import pytest

from tinker_serve.app import create_app
from tinker_serve.routes.constrained import MAX_SCHEMA_CHARS, MAX_SCHEMA_DEPTH
from tinker_serve.served import ServedModels

SCHEMA = {
    "type": "object",
    "properties": {
        "answer": {"type": "integer", "minimum": 0, "maximum": 99},
        "unit": {"enum": ["cm", "kg", "s"]},
        "note": {"type": "string", "maxLength": 6},
        "flags": {"type": "array", "items": {"type": "boolean"}, "maxItems": 3},
        "where": {"type": "object", "properties": {"x": {"type": "integer", "minimum": -5, "maximum": 5}}, "required": ["x"],
                  "additionalProperties": False},
    },
    "required": ["answer", "unit", "note", "flags", "where"],
    "additionalProperties": False,
}
CALCULATOR = {"type": "function", "function": {  # short: the tiny model's context is 1024 characters
    "name": "calc", "parameters": {"type": "object", "properties": {"e": {"type": "string", "maxLength": 8}},
                                   "required": ["e"], "additionalProperties": False}}}
WEATHER = {"type": "function", "function": {
    "name": "wx", "parameters": {"type": "object", "properties": {"c": {"enum": ["Paris", "Oslo"]},
                                                                 "d": {"type": "integer", "minimum": 1, "maximum": 7}},
                                 "required": ["c", "d"], "additionalProperties": False}}}
MESSAGES = [{"role": "user", "content": "Give me the answer as JSON."}]


@pytest.fixture(scope="module")
def tiny(tiny_dir, helpers):
    from tinker_algos.model.models import PolicyModel

    served = ServedModels(PolicyModel.load(tiny_dir, device="cpu", precision="fp32"), "tiny", max_batch=8)
    with helpers.live_server(create_app(served)) as url:
        yield openai.OpenAI(base_url=url + "/v1", api_key="unused", max_retries=0), served


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_a_json_schema_answer_parses_and_validates(tiny, seed):
    client, _ = tiny
    r = client.chat.completions.create(
        model="tiny", messages=MESSAGES, seed=seed, temperature=1.0, n=2, max_tokens=600,
        response_format={"type": "json_schema", "json_schema": {"name": "answer", "schema": SCHEMA, "strict": True}},
    )
    for choice in r.choices:
        assert choice.finish_reason == "stop", choice.message.content
        jsonschema.validate(json.loads(choice.message.content), SCHEMA)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_json_mode_answers_a_json_object(tiny, seed):
    client, _ = tiny
    r = client.chat.completions.create(model="tiny", messages=MESSAGES, seed=seed, max_tokens=900, temperature=0.7,
                                       response_format={"type": "json_object"})
    choice = r.choices[0]
    assert choice.finish_reason == "stop", choice.message.content
    assert isinstance(json.loads(choice.message.content), dict)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_tool_choice_required_answers_valid_calls(tiny, seed):
    client, _ = tiny
    r = client.chat.completions.create(model="tiny", messages=[{"role": "user", "content": "2+2?"}], tools=[CALCULATOR, WEATHER],
                                       tool_choice="required", parallel_tool_calls=False, seed=seed, max_tokens=180)
    choice = r.choices[0]
    assert choice.finish_reason == "tool_calls", choice.message.content
    by_name = {t["function"]["name"]: t["function"]["parameters"] for t in (CALCULATOR, WEATHER)}
    for call in choice.message.tool_calls:
        jsonschema.validate(json.loads(call.function.arguments), by_name[call.function.name])


@pytest.mark.parametrize("seed", [0, 1])
def test_a_named_tool_choice_calls_that_tool(tiny, seed):
    client, _ = tiny
    r = client.chat.completions.create(model="tiny", messages=[{"role": "user", "content": "Weather?"}], tools=[CALCULATOR, WEATHER],
                                       tool_choice={"type": "function", "function": {"name": "wx"}}, parallel_tool_calls=False,
                                       seed=seed, max_tokens=180)
    calls = r.choices[0].message.tool_calls
    assert r.choices[0].finish_reason == "tool_calls" and calls and {c.function.name for c in calls} == {"wx"}
    for call in calls:
        jsonschema.validate(json.loads(call.function.arguments), WEATHER["function"]["parameters"])


def test_streamed_json_is_the_same_answer(tiny):
    client, _ = tiny
    kwargs = dict(model="tiny", messages=MESSAGES, seed=5, max_tokens=600,
                  response_format={"type": "json_schema", "json_schema": {"name": "answer", "schema": SCHEMA}})
    whole = client.chat.completions.create(**kwargs).choices[0].message.content
    streamed = "".join(c.choices[0].delta.content or "" for c in client.chat.completions.create(**kwargs, stream=True) if c.choices)
    assert streamed == whole


def _deep(levels: int) -> dict:
    schema: dict = {"type": "string"}
    for _ in range(levels):
        schema = {"type": "object", "properties": {"a": schema}}
    return schema


@pytest.mark.parametrize(
    ("extra", "param", "says"),
    [
        ({"response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "object", "if": {}}}}},
         "response_format.json_schema.schema", '"if"'),
        ({"response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": {"$ref": "http://example.com/s.json"}}}},
         "response_format.json_schema.schema", "cannot be enforced"),
        ({"response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": _deep(MAX_SCHEMA_DEPTH)}}},
         "response_format.json_schema.schema", "nests deeper"),
        ({"response_format": {"type": "json_schema", "json_schema": {
            "name": "x", "schema": {"type": "object", "description": "x" * MAX_SCHEMA_CHARS}}}},
         "response_format.json_schema.schema", "characters"),
        ({"response_format": {"type": "json_schema", "json_schema": {"name": "x"}}}, "response_format.json_schema.schema", "schema"),
        ({"response_format": {"type": "yaml"}}, "response_format.type", "'json_schema'"),
        ({"response_format": {"type": "json_object"}, "extra_body": {"ignore_eos": True}}, "ignore_eos", "grammar"),
        ({"tools": [{"type": "function", "function": {"name": "f", "parameters": {"type": "object", "not": {}}}}], "tool_choice": "required"},
         "tools", '"not"'),
        ({"frequency_penalty": 2.5}, "frequency_penalty", "2"),
    ],
)
def test_what_cannot_be_enforced_is_a_400_naming_the_field(tiny, extra, param, says):
    client, _ = tiny
    with pytest.raises(openai.BadRequestError) as e:
        client.chat.completions.create(model="tiny", messages=MESSAGES, max_tokens=4, **extra)
    err = e.value.body
    assert err["param"] == param and says in err["message"], err


def test_the_callable_tools_together_are_one_bounded_schema():
    """20 tools of 2,000 characters each: each is within bounds, together they are not (a 400
    naming ``tools``; the tiny model's context refuses such a prompt first, so this is checked
    on the grammar builder itself)."""
    from tinker_serve.protocol import APIError
    from tinker_serve.routes.constrained import chat_grammar

    tools = [{"type": "function", "function": {"name": f"f{i}", "parameters": {
        "type": "object", "properties": {"x": {"type": "string", "description": "d" * 2000}}}}} for i in range(20)]
    assert chat_grammar(None, tools[:1], tools[:1]) is not None
    with pytest.raises(APIError) as e:
        chat_grammar(None, tools, tools)
    assert e.value.param == "tools" and "characters" in e.value.message


def test_the_engine_applies_the_penalties_as_the_sampler_does(tiny):
    """Greedy with penalties through the server = the sampler's tokens (whose penalties are checked
    against an independent oracle in tinker-algos' test_logits_adjust)."""
    from tinker_algos.sampling.sampler import SamplingParams, sample

    client, served = tiny
    for frequency, presence in ((1.5, 0.0), (0.3, 1.2)):
        r = client.completions.create(model="tiny", prompt="12+34=", max_tokens=20, temperature=0, frequency_penalty=frequency,
                                      presence_penalty=presence, extra_body={"ignore_eos": True})
        want = sample(served.policy, "12+34=", SamplingParams(max_new_tokens=20, temperature=0.0, stop_at_eos=False,
                                                              frequency_penalty=frequency, presence_penalty=presence))[0][0]
        assert r.choices[0].text == want.text
