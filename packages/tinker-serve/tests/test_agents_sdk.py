"""The OpenAI Agents SDK's default model class (``OpenAIResponsesModel``, what a model name gets from
its default provider) runs agent episodes against ``opentinker serve`` and the rollout proxy,
offline (tracing off, the client pointed at localhost): a plain answer, and a function tool
round trip (``tool_choice: "required"`` makes the tiny model call the tool through constrained
decoding; the SDK runs it and sends its output back, and the next turn, offered no tool, answers
with the structured output).
``/v1/responses``' translation is checked on the wire shapes too."""

from __future__ import annotations

import asyncio
import json
from typing import Annotated, Any

import pytest

agents = pytest.importorskip("agents", reason="openai-agents (tinker-serve's dev group) is not installed")

from agents import (  # noqa: E402
    Agent,
    ModelSettings,
    OpenAIProvider,
    OpenAIResponsesModel,
    RunConfig,
    Runner,
    function_tool,
    set_tracing_disabled,
)
from agents.items import MessageOutputItem, ToolCallItem, ToolCallOutputItem  # noqa: E402
from openai import AsyncOpenAI  # noqa: E402
from pydantic import BaseModel, Field  # noqa: E402

from tinker_algos.model.prompts import PromptRenderer  # noqa: E402
from tinker_algos.sampling.sampler import SamplingParams  # noqa: E402
from tinker_serve.app import create_app  # noqa: E402
from tinker_serve.proxy import RolloutProxy  # noqa: E402
from tinker_serve.served import ServedModels  # noqa: E402

set_tracing_disabled(True)
ADDED: list[tuple[int, int]] = []


class Answer(BaseModel):
    """The agents' structured output (``text.format`` json_schema): a grammar that ends, so the
    tiny model's answer completes within its token limit (an incomplete response is an error to
    the SDK, as it is from OpenAI)."""

    answer: int = Field(ge=0, le=99)


@function_tool(is_enabled=lambda ctx, agent: not ADDED)  # offered until it has run once: the next turn answers
def add(a: Annotated[int, Field(ge=0, le=9)], b: Annotated[int, Field(ge=0, le=9)]) -> int:
    """Add two numbers."""
    ADDED.append((a, b))
    return a + b


def run(base_url: str, api_key: str, agent: Agent, question: str) -> Any:
    """One episode through the SDK's default provider (Responses API) on ``base_url``."""
    client = AsyncOpenAI(base_url=base_url, api_key=api_key, max_retries=0, timeout=120)
    provider = OpenAIProvider(openai_client=client)
    assert isinstance(provider.get_model("tiny"), OpenAIResponsesModel)  # the SDK's default model class
    return asyncio.run(Runner.run(agent, question, run_config=RunConfig(model_provider=provider, tracing_disabled=True),
                                  max_turns=4))


def plain_agent() -> Agent:
    return Agent(name="helper", instructions="Answer briefly.", model="tiny", output_type=Answer,
                 model_settings=ModelSettings(max_tokens=40, temperature=0))


def tool_agent() -> Agent:
    return Agent(name="adder", instructions="Use add.", model="tiny", tools=[add], output_type=Answer,
                 model_settings=ModelSettings(max_tokens=100, temperature=0, tool_choice="required",
                                                parallel_tool_calls=False))


@pytest.fixture(scope="module")
def serve_url(tiny_dir, helpers):
    from tinker_algos.model.models import PolicyModel

    served = ServedModels(PolicyModel.load(tiny_dir, device="cpu", precision="fp32"), "tiny", max_batch=8)
    with helpers.live_server(create_app(served, api_key="sk-agents")) as url:
        yield url + "/v1"


def test_an_agent_answers_through_the_responses_api(serve_url):
    result = run(serve_url, "sk-agents", plain_agent(), "What is 2+2?")
    assert isinstance(result.final_output, Answer) and 0 <= result.final_output.answer <= 99
    assert [type(i) for i in result.new_items] == [MessageOutputItem]
    usage = result.context_wrapper.usage
    assert usage.requests == 1 and 0 < usage.output_tokens <= 40 and usage.input_tokens > 0


def test_a_function_tool_round_trip(serve_url):
    ADDED.clear()
    result = run(serve_url, "sk-agents", tool_agent(), "Add 2 and 3.")
    kinds = [type(i) for i in result.new_items]
    assert kinds[0] is ToolCallItem and ToolCallOutputItem in kinds and kinds[-1] is MessageOutputItem
    call = result.new_items[0].raw_item
    args = json.loads(call.arguments)
    assert call.name == "add" and set(args) == {"a", "b"} and ADDED[0] == (args["a"], args["b"])
    output = next(i for i in result.new_items if isinstance(i, ToolCallOutputItem))
    assert output.output == args["a"] + args["b"]
    assert isinstance(result.final_output, Answer) and result.context_wrapper.usage.requests == 2


def test_the_rollout_proxy_records_an_agents_episode(policy):
    renderer = PromptRenderer.from_config(policy.tokenizer, "auto")
    proxy = RolloutProxy(policy, renderer, SamplingParams(max_new_tokens=100, temperature=0.0, seed=3))
    ADDED.clear()
    with proxy.running():
        key = proxy.open_episode("ep-agents")
        result = run(proxy.base_url, key, tool_agent(), "Add 2 and 3.")
        calls = proxy.close_episode("ep-agents")
    assert len(calls) == 2 and calls[0].finish_reason == "tool_calls" and len(ADDED) == 1
    assert isinstance(result.final_output, Answer) and Answer.model_validate_json(calls[1].text) == result.final_output
    # the second call's prompt holds the first call and the tool's output (offered no tool, it
    # renders afresh: a new segment of the episode's trajectory, tinker_algos.rollout.agent_calls)
    a, b = ADDED[0]
    second = policy.tokenizer.decode(list(calls[1].prompt_ids))
    assert '"name": "add"' in second and f'"a": {a}' in second and str(a + b) in second.split('"add"')[-1]


def test_what_responses_does_not_do_is_a_400_naming_the_field(serve_url):
    import httpx

    base = {"model": "tiny", "input": "hi", "max_output_tokens": 4}
    cases = [
        ({"stream": True}, "stream"),
        ({"previous_response_id": "resp_1"}, "previous_response_id"),
        ({"tools": [{"type": "web_search"}]}, "tools.0.type"),
        ({"input": [{"type": "message", "role": "user", "content": [{"type": "input_image", "image_url": "x"}]}]},
         "input.0.content.0.type"),
        ({"input": [{"type": "computer_call"}]}, "input.0.type"),
        ({"input": [{"role": "user", "content": "hi"}] * 1025}, "input"),
        ({"text": {"format": {"type": "json_schema", "name": "x", "schema": {"type": "object", "if": {}}}}},
         "response_format.json_schema.schema"),
        ({"tool_choice": {"type": "function", "name": "nope"}, "tools": [
            {"type": "function", "name": "add", "parameters": {"type": "object", "properties": {}}}]}, "tool_choice.function.name"),
    ]
    with httpx.Client(headers={"Authorization": "Bearer sk-agents"}, timeout=60) as http:
        for extra, param in cases:
            r = http.post(serve_url + "/responses", json={**base, **extra})
            assert r.status_code == 400 and r.json()["error"]["param"] == param, (str(extra)[:200], r.text[:300])
        schema = {**Answer.model_json_schema(), "additionalProperties": False}
        ok = http.post(serve_url + "/responses", json={**base, "instructions": "Be brief.", "max_output_tokens": 40, "temperature": 0,
                                                       "text": {"format": {"type": "json_schema", "name": "a", "schema": schema}}}).json()
        assert ok["object"] == "response" and ok["status"] == "completed"
        Answer.model_validate_json(ok["output"][0]["content"][0]["text"])
