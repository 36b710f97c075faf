"""Agents written with a real agent framework train unchanged through the rollout proxy: the
OpenAI Agents SDK example (examples/agent_calculator/agents_sdk_agent.py) under ``opentinker
train``, and one of its episodes, tool call and all, recorded token for token with no network."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml

pytest.importorskip("agents", reason="the OpenAI Agents SDK (openai-agents, in the workspace's dev group) is not installed")

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = ROOT / "examples" / "agent_calculator"


def opentinker(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "OPENTINKER_CACHE": str(cwd / "cache")}
    return subprocess.run([sys.executable, "-m", "tinker_client.cli", *args], capture_output=True, text=True, env=env, cwd=cwd, timeout=600)


def sdk_job(steps: int) -> dict:
    config = yaml.safe_load((EXAMPLE / "agents-sdk-agent.yaml").read_text())
    config["env"]["kwargs"]["path"] = "."
    config["algorithm"].update({"steps": steps, "eval_every": steps, "eval_size": 2})
    config["rollout"].update({"prompts_per_step": 2, "group_size": 2})
    config["logging"] = {"tensorboard": False, "plot": False, "rollouts": {"every": 1, "per_step": 4}}
    return config


def test_an_agents_sdk_agent_trains_with_opentinker_train(tmp_path: Path) -> None:
    shutil.copy(EXAMPLE / "agents_sdk_agent.py", tmp_path)
    (tmp_path / "job.yaml").write_text(yaml.safe_dump(sdk_job(2)))
    result = opentinker("train", "job.yaml", "--run-dir", "run", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert "completed: 2 steps" in result.stdout
    rows = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    steps = [r for r in rows if "agent/calls_mean" in r]
    assert len(steps) == 2 and all(r["rollout/episodes"] == 4 and r["rollout/error_rate"] == 0 for r in steps)
    assert all(r["agent/calls_mean"] >= 1 for r in steps)
    # the sampler's logprobs (recorded by the proxy) are the trainer's on the recorded tokens
    assert all(abs(r["kl/sample_train"]) < 1e-4 for r in steps)
    assert "eval/accuracy" in rows[-1]
    records = [json.loads(line) for line in (tmp_path / "run" / "rollouts.jsonl").read_text().splitlines()]
    train = [r for r in records if r["kind"] == "train"]
    assert train and all(r["turns"][0]["role"] == "policy" and r["turns"][0]["logprobs"] for r in train)


@pytest.fixture
def tiny_policy(tmp_path: Path) -> Any:
    from tinker_algos.model.models import PolicyModel, build_tiny_model

    return PolicyModel.load(build_tiny_model(tmp_path / "tiny", seed=0), device="cpu", precision="fp32")


def local_only(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """Refuse (and list) every connection to a host other than this one: the tracing exporter
    or any other network use at run time fails the test."""
    refused: list[Any] = []
    connect = socket.socket.connect

    def guarded(self: socket.socket, address: Any) -> Any:
        host = address[0] if isinstance(address, tuple) else address
        if self.family in (socket.AF_INET, socket.AF_INET6) and host not in ("127.0.0.1", "::1", "localhost"):
            refused.append(address)
            raise OSError(f"no network in this test: {address!r}")
        return connect(self, address)

    monkeypatch.setattr(socket.socket, "connect", guarded)
    return refused


@pytest.fixture
def traced() -> Any:
    """What the SDK traces while the test runs (its exporter stays registered, as by default)."""
    from agents import TracingProcessor, set_trace_processors
    from agents.tracing.processors import default_processor

    class Recorder(TracingProcessor):
        def __init__(self) -> None:
            self.seen: list[Any] = []

        def on_trace_start(self, trace: Any) -> None:
            self.seen.append(trace)

        def on_span_start(self, span: Any) -> None:
            self.seen.append(span)

        def on_trace_end(self, trace: Any) -> None: ...
        def on_span_end(self, span: Any) -> None: ...
        def shutdown(self) -> None: ...
        def force_flush(self) -> None: ...

    recorder = Recorder()
    set_trace_processors([default_processor(), recorder])
    yield recorder.seen
    set_trace_processors([default_processor()])


def test_an_agents_sdk_episode_is_recorded_token_for_token(tiny_policy: Any, traced: list[Any], monkeypatch: pytest.MonkeyPatch) -> None:
    """The SDK calls the add tool in two turns (scripted completions: a random model never writes
    one), sends its strict tool schema, the proxy's tool calls and the tool's results back (each
    call id unique, or the SDK drops the repeated call from its history), and answers; its three
    calls are one segment whose trained tokens are the sampled tokens, call by call. The agent
    runs from a thread that already runs an event loop, with tracing off and no network."""
    import openai

    from tinker_algos.model.prompts import PromptRenderer
    from tinker_algos.rollout.agent_calls import merge_calls
    from tinker_algos.sampling.sampler import SamplingParams
    from tinker_serve.proxy import RolloutProxy

    monkeypatch.syspath_prepend(str(EXAMPLE))
    import agents_sdk_agent

    class ScriptedProxy(RolloutProxy):
        script = ['<tool_call>\n{"name": "add", "arguments": {"a": 10, "b": 11}}\n</tool_call>',
                  '<tool_call>\n{"name": "add", "arguments": {"a": 11, "b": 10}}\n</tool_call>', "21"]

        async def _sample(self, ids, params, http):  # type: ignore[no-untyped-def, override]
            text = self.script.pop(0)
            tokens = list(self.served.policy.tokenizer.encode(text, add_special_tokens=False))
            return tokens, [-0.5] * len(tokens), text, "stop"

    refused = local_only(monkeypatch)
    renderer = PromptRenderer.from_config(tiny_policy.tokenizer, "auto")
    proxy = ScriptedProxy(tiny_policy, renderer, SamplingParams(max_new_tokens=64, temperature=1.0, seed=0))
    with proxy.running():
        key = proxy.open_episode("ep-sdk")
        client = openai.OpenAI(base_url=proxy.base_url, api_key=key, max_retries=0, timeout=60)

        async def host() -> float:  # an async host calling the sync agent: a loop already runs
            return agents_sdk_agent.run({"a": 10, "b": 11}, client)

        reward = asyncio.run(host())
        calls = proxy.close_episode("ep-sdk")
    assert reward == 1.0 and not refused and not traced  # nothing traced, nothing sent
    assert [c.finish_reason for c in calls] == ["tool_calls", "tool_calls", "stop"]
    prompt = tiny_policy.tokenizer.decode(list(calls[0].prompt_ids))
    assert '"name": "add"' in prompt and '"strict": true' in prompt  # the SDK's strict schema, rendered as sent
    [traj] = merge_calls(calls, reward=reward)  # each call extends the last: one segment
    trained = np.zeros(len(traj.tokens_T), dtype=bool)
    for call in calls:
        at, end = len(call.prompt_ids), len(call.prompt_ids) + len(call.completion_ids)
        assert list(traj.tokens_T[:at]) == list(call.prompt_ids)
        assert list(traj.tokens_T[at:end]) == list(call.completion_ids)
        np.testing.assert_allclose(traj.sampler_logprobs_T[at:end], call.logprobs, rtol=0, atol=1e-6)
        trained[at:end] = True
    assert (traj.loss_mask_T > 0).tolist() == trained.tolist()
    assert "21" in tiny_policy.tokenizer.decode(list(calls[2].prompt_ids[len(calls[1].prompt_ids) + len(calls[1].completion_ids):]))


def test_the_guide_shows_the_agents_sdk_example_as_it_is() -> None:
    """The guide's section runs this code (integration-tests/test_docs.py executes the page's
    blocks); it must be the example's, docstring aside."""
    import re

    guide = (ROOT / "docs" / "guides" / "train-an-existing-agent.md").read_text(encoding="utf-8")
    section = guide.split("## 8. With the OpenAI Agents SDK", 1)[1].split("\n## ", 1)[0]
    [block] = re.findall(r"```python\n(.*?)```", section, flags=re.S)
    code = (EXAMPLE / "agents_sdk_agent.py").read_text(encoding="utf-8").split('"""\n\n', 1)[1]
    assert block == code, "copy examples/agent_calculator/agents_sdk_agent.py (after its docstring) into the guide's section 8"
