"""A real chat model (SmolLM2-135M-Instruct, one loaded copy for this module) through the
``openai`` client: its chat template renders the messages, it answers, and streams the same."""

from __future__ import annotations

import openai
import pytest

from tinker_serve.app import create_app
from tinker_serve.served import ServedModels

NAME = "smollm2-135m-instruct"


@pytest.fixture(scope="module")
def smollm2(smollm2_dir, helpers):
    served = ServedModels.load(str(smollm2_dir), name=NAME, device="cpu", precision="fp32", max_batch=8)
    with helpers.live_server(create_app(served)) as url:
        yield openai.OpenAI(base_url=url + "/v1", api_key="unused", max_retries=0), served


def test_a_chat_answer_through_the_models_template(smollm2):
    client, served = smollm2
    messages = [{"role": "user", "content": "What is the capital of France? Answer in one word."}]
    r = client.chat.completions.create(model=NAME, messages=messages, max_tokens=12, temperature=0)
    assert "Paris" in r.choices[0].message.content
    rendered, _ = served.renderer.start(messages)
    assert r.usage.prompt_tokens == len(rendered)
    assert "<|im_start|>assistant" in served.policy.tokenizer.decode(rendered)
    stream = client.chat.completions.create(model=NAME, messages=messages, max_tokens=12, temperature=0, stream=True)
    assert "".join(c.choices[0].delta.content or "" for c in stream) == r.choices[0].message.content


def test_concurrent_chats_share_decode_steps(smollm2):
    import concurrent.futures

    client, served = smollm2
    questions = ["Name a color.", "Name a fruit.", "Say hello."]

    def ask(q: str) -> str:
        r = client.chat.completions.create(model=NAME, messages=[{"role": "user", "content": q}], max_tokens=6, temperature=0)
        return r.choices[0].message.content

    alone = [ask(q) for q in questions]
    with concurrent.futures.ThreadPoolExecutor(3) as pool:
        together = list(pool.map(ask, questions))
    assert together == alone and served.engine.largest_batch >= 2


PERSON = {
    "type": "object",
    "properties": {"name": {"type": "string", "maxLength": 20}, "age": {"type": "integer", "minimum": 0, "maximum": 150},
                   "city": {"enum": ["Paris", "London", "Tokyo"]}},
    "required": ["name", "age", "city"],
    "additionalProperties": False,
}


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_a_json_schema_answer_from_a_real_tokenizer_validates(smollm2, seed):
    """SmolLM2's byte-level BPE through llguidance's tokenizer import: sampled answers (n=2 per
    seed) parse and validate against the schema."""
    import json

    import jsonschema

    client, _ = smollm2
    r = client.chat.completions.create(
        model=NAME, messages=[{"role": "user", "content": "Describe a person as JSON with name, age and city."}],
        response_format={"type": "json_schema", "json_schema": {"name": "person", "schema": PERSON, "strict": True}},
        seed=seed, n=2, temperature=1.0, max_tokens=60,
    )
    for choice in r.choices:
        assert choice.finish_reason == "stop", choice.message.content
        jsonschema.validate(json.loads(choice.message.content), PERSON)


def test_a_named_tool_choice_on_a_real_model(smollm2):
    import json

    client, _ = smollm2
    tools = [{"type": "function", "function": {"name": "weather", "description": "The weather in a city.",
                                               "parameters": {"type": "object", "properties": {"city": {"type": "string", "maxLength": 20}},
                                                              "required": ["city"], "additionalProperties": False}}}]
    r = client.chat.completions.create(model=NAME, messages=[{"role": "user", "content": "What is the weather in Paris?"}],
                                       tools=tools, tool_choice={"type": "function", "function": {"name": "weather"}},
                                       parallel_tool_calls=False, temperature=0, max_tokens=40)
    choice = r.choices[0]
    assert choice.finish_reason == "tool_calls" and [c.function.name for c in choice.message.tool_calls] == ["weather"]
    assert set(json.loads(choice.message.tool_calls[0].function.arguments)) == {"city"}
