"""verifiers environments as agent programs (tinker_env_adapters.verifiers_env), against the real
verifiers package: environment modules written as verifiers' docs write them (tests/verifiers_envs),
loaded through ``verifiers/env-v0``, their episodes played against a real OpenAI-compatible HTTP
endpoint (a stand-in server on ``http.server`` answering ``/v1/chat/completions`` deterministically:
the right sum for the key ``good``, a wrong one otherwise; with tools, it calls ``add`` first).

The same envs trained through tinker-serve's rollout proxy: integration-tests/test_env_adapters.py."""

from __future__ import annotations

import json
import re
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import openai
import pytest

import tinker_core
from tinker_env_adapters import AdapterError, VerifiersEnv

ENVS = str(Path(__file__).parent / "verifiers_envs")


class StandIn(BaseHTTPRequestHandler):
    """``POST /v1/chat/completions``: the sum asked in the last user message, as the policy would."""

    calls: list[dict[str, Any]]  # set on the server's handler class

    def log_message(self, *args: Any) -> None:
        pass

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        key = self.headers.get("Authorization", "").removeprefix("Bearer ")
        type(self).calls.append({"key": key, "path": self.path, **body})
        if self.path != "/v1/chat/completions" or key == "broken":
            return self._send(500, {"error": {"message": "stand-in: broken"}})
        messages = body["messages"]
        user = next(m["content"] for m in reversed(messages) if m["role"] == "user")
        a, b = map(int, re.findall(r"\d+", user)[:2])
        message: dict[str, Any] = {"role": "assistant"}
        if body.get("tools") and messages[-1]["role"] == "user":
            args = json.dumps({"a": a, "b": b})
            message.update(content=None, tool_calls=[{"id": "call_0", "type": "function",
                                                      "function": {"name": "add", "arguments": args}}])
            finish = "tool_calls"
        else:
            total = int(messages[-1]["content"]) if messages[-1]["role"] == "tool" else a + b
            message["content"] = f"<answer>{total if key == 'good' else total + 1}</answer>"
            finish = "stop"
        self._send(200, {"id": "cmpl-0", "object": "chat.completion", "created": 0, "model": body["model"],
                         "choices": [{"index": 0, "message": message, "finish_reason": finish}],
                         "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}})

    def _send(self, status: int, payload: dict[str, Any]) -> None:
        data = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


@pytest.fixture(scope="module")
def endpoint() -> Iterator[tuple[str, list[dict[str, Any]]]]:
    """The stand-in's base URL and the list of calls it received."""
    handler = type("Handler", (StandIn,), {"calls": []})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/v1", handler.calls
    server.shutdown()
    server.server_close()


def client(url: str, key: str) -> openai.OpenAI:
    """What an agent program's episode gets: a client with the episode's key as its API key."""
    return openai.OpenAI(base_url=url, api_key=key, max_retries=0)


def test_the_env_is_registered_as_an_agent_program(adapters_only: None) -> None:
    spec = tinker_core.env_spec("verifiers/env-v0")
    assert spec.agent_program and spec.reward_range == (0.0, 1.0)
    env = tinker_core.make_env("verifiers/env-v0", environment="vf-sums", path=ENVS)  # '-' reads as '_', as verifiers does
    assert isinstance(env, VerifiersEnv) and isinstance(env, tinker_core.AgentProgram)
    assert len(env.tasks) == 4 and env.tasks[1]["answer"] == "9"
    assert env.tasks[1]["prompt"][0] == {"role": "system", "content": "Answer inside <answer></answer>."}
    question, info = env.reset(seed=1)
    assert question == "What is 4 + 5?" and info["task"] is env.tasks[1]
    with pytest.raises(RuntimeError, match="played by its agent program"):
        env.step("<answer>9</answer>")


def test_a_single_turn_episode_is_verifiers_rollout_scored_by_its_rubric(endpoint) -> None:
    url, calls = endpoint
    env = VerifiersEnv("vf_sums", path=ENVS, sampling_args={"max_tokens": 16})
    calls.clear()
    good = env.run(env.task(2), client(url, "good"))
    bad = env.run(env.task(2), client(url, "ep-1-0"))
    assert env.score(env.task(2), good) == 1.0 and env.score(env.task(2), bad) == 0.0
    assert good["metrics"]["correct_answer"] == 1.0
    assert [c["key"] for c in calls] == ["good", "ep-1-0"]  # each call names its episode by the key
    first = calls[0]
    assert first["path"] == "/v1/chat/completions" and first["model"] == "policy"
    assert first["messages"][-1] == {"role": "user", "content": "What is 10 + 7?"}
    assert first["max_completion_tokens"] == 16 and first.get("n", 1) == 1  # what the rollout proxy accepts


def test_a_tool_env_calls_the_tool_and_continues_the_conversation(endpoint) -> None:
    url, calls = endpoint
    env = VerifiersEnv("vf_sums", env_args={"tools": True}, path=ENVS)
    calls.clear()
    out = env.run(env.task(0), client(url, "good"))
    assert out["reward"] == 1.0 and out["metrics"]["add_calls"] == 1.0
    assert len(calls) == 2 and calls[0]["tools"][0]["function"]["name"] == "add"
    second = calls[1]["messages"]
    assert second[-2]["tool_calls"][0]["function"]["name"] == "add"  # the reply, sent back as it came
    assert second[-1]["role"] == "tool" and second[-1]["content"] == "5"  # verifiers ran the tool


def test_episodes_run_at_once_from_many_threads(endpoint) -> None:
    url, _ = endpoint
    env = VerifiersEnv("vf_sums", path=ENVS)
    rewards: list[float] = [0.0] * 8

    def play(i: int) -> None:
        rewards[i] = env.score(None, env.run(env.task(i), client(url, "good" if i % 2 == 0 else f"ep-{i}")))

    threads = [threading.Thread(target=play, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert rewards == [1.0, 0.0] * 4
    env.close()


def test_the_eval_split_and_load_environment_kwargs(endpoint) -> None:
    env = VerifiersEnv("vf_sums", env_args={"num_examples": 2}, path=ENVS)
    assert [t["answer"] for t in env.tasks] == ["5", "9"]
    held_out = VerifiersEnv("vf_sums", split="eval", path=ENVS)
    assert [t["answer"] for t in held_out.tasks] == ["42"]
    assert len(VerifiersEnv("vf_sums", path=ENVS, max_tasks=3).tasks) == 3


def test_a_rollout_that_verifiers_ends_with_an_error_fails_the_episode(endpoint) -> None:
    url, _ = endpoint
    env = VerifiersEnv("vf_sums", path=ENVS)
    with pytest.raises(RuntimeError, match="verifiers ended the rollout of 'vf_sums' with an error"):
        env.run(env.task(0), client(url, "broken"))


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"environment": "no_such_env"}, r"no module 'no_such_env' can be imported; install the environment's package"),
    ({"environment": "not_an_env"}, r"module 'not_an_env' has no load_environment"),
    ({"environment": "vf_grouped", "env_args": {"nope": 1}},
     r"load_environment takes no argument\(s\) \['nope'\]; its parameters are \[\]"),
    ({"environment": "vf_judged"}, r"its rubric JudgeRubric asks a judge model \('judge-model' at http://127.0.0.1:9/v1/\).*"
                                   r"allow_judge: true"),
    ({"environment": "vf_grouped"}, r"its rubric scores rollouts as a group \(shortest\)"),
    ({"environment": "vf_sums", "split": "test"}, r"split must be 'train' or 'eval'"),
])
def test_what_cannot_map_is_one_error_naming_the_env_and_the_piece(kwargs, message) -> None:
    with pytest.raises(AdapterError, match=r"env 'verifiers/env-v0' \(verifiers environment '\w+'\): " + message):
        VerifiersEnv(path=ENVS, **kwargs)


def test_a_judge_rubric_may_call_its_own_endpoint_when_allowed() -> None:
    env = VerifiersEnv("vf_judged", path=ENVS, allow_judge=True)
    assert env.tasks[0]["answer"] == "7"


def test_an_env_that_downloads_its_dataset_offline_names_the_missing_network(monkeypatch) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    with pytest.raises(AdapterError, match=r"'vf_hub'\): load_environment\(\) failed: .*it downloads something at "
                                           r"start-up .* and there is no network"):
        VerifiersEnv("vf_hub", path=ENVS)


def test_on_a_scheduler_only_the_modules_its_operator_allowed_are_imported(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.syspath_prepend(ENVS)  # importable, as an installed environment package is
    with tinker_core.enforced(tinker_core.ImportPolicy(("vf_sums",))):  # what a scheduler's worker enforces
        assert VerifiersEnv("vf-sums").tasks
        with pytest.raises(tinker_core.ImportRefused, match=r"^env.kwargs.environment: 'vf_judged:load_environment' is not"):
            VerifiersEnv("vf_judged")
        with pytest.raises(tinker_core.ImportRefused, match=r"^env.kwargs.path: .*installed packages only"):
            VerifiersEnv("vf_sums", path=ENVS)
