"""The calculator agent written with the OpenAI Agents SDK (``pip install openai-agents``): an
``agents.Agent`` with an ``add`` function tool, run by ``Runner``, scored on its final answer.
`opentinker train` trains it unchanged (see agents-sdk-agent.yaml and
docs/guides/train-an-existing-agent.md, "With the OpenAI Agents SDK").

Three things make it train through the rollout proxy: the model is the SDK's Chat Completions
model (the proxy serves no Responses API), on an ``AsyncOpenAI`` client built from the episode's
client (its ``base_url`` and ``api_key``, the episode's key), and tracing is off (the SDK would
otherwise export traces to OpenAI)."""

import asyncio
import concurrent.futures

from agents import (
    Agent,
    MaxTurnsExceeded,
    ModelSettings,
    OpenAIChatCompletionsModel,
    RunConfig,
    Runner,
    function_tool,
)
from openai import AsyncOpenAI

TASKS = [{"a": a, "b": b} for a in range(10, 90, 9) for b in range(11, 60, 7)]


@function_tool
def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


async def solve(task, client):
    llm = AsyncOpenAI(base_url=client.base_url, api_key=client.api_key, timeout=client.timeout, max_retries=0)
    try:
        agent = Agent(
            name="calculator",
            instructions="Answer with the number.",
            tools=[add],
            model=OpenAIChatCompletionsModel(model="policy", openai_client=llm),
            model_settings=ModelSettings(max_tokens=8),
        )
        result = await Runner.run(agent, f"What is {task['a']}+{task['b']}?", max_turns=3,
                                  run_config=RunConfig(tracing_disabled=True))
        return str(result.final_output or "")
    finally:
        await llm.close()


def run_async(coro):
    """Run ``coro`` to its end from sync code, also where this thread already runs an event loop
    (a notebook, an async host): then in a thread of its own."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(coro)
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        return pool.submit(asyncio.run, coro).result()


def run(task, client):
    try:
        answer = run_async(solve(task, client)).strip()
    except MaxTurnsExceeded:  # the model kept calling tools past max_turns
        return 0.0
    if answer == str(task["a"] + task["b"]):
        return 1.0
    # partial credit: the share of the answer that is digits (what a model learns first)
    return 0.5 * sum(ch.isdigit() for ch in answer) / max(len(answer), 1)
