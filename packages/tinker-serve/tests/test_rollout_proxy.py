"""The rollout proxy with the official ``openai`` client: what each call records, how an episode's
calls become one token-exact trajectory, that concurrent agents never mix, and that agent-program
episodes that crash, hang or return nothing fail alone (tinker_serve.proxy, tinker_algos.rollout.agent_program)."""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

import numpy as np
import openai
import pytest

from tinker_algos.model.prompts import PromptRenderer
from tinker_algos.rollout.agent_calls import ProxyCall, merge_calls
from tinker_algos.rollout.agent_program import AgentProgramEnv, agent_rollout
from tinker_algos.sampling.sampler import SamplingParams
from tinker_serve.proxy import RolloutProxy

CALC = {"type": "function", "function": {"name": "calculator", "description": "Evaluate an arithmetic expression.",
                                         "parameters": {"type": "object", "properties": {"expression": {"type": "string"}},
                                                        "required": ["expression"]}}}


def proxy_for(policy: Any, renderer: PromptRenderer | None = None, **params: Any) -> RolloutProxy:
    renderer = renderer or PromptRenderer.from_config(policy.tokenizer, "auto")
    return RolloutProxy(policy, renderer, SamplingParams(**{"max_new_tokens": 8, "temperature": 1.0, "seed": 3, **params}))


def client(proxy: RolloutProxy, key: str) -> openai.OpenAI:
    """An agent's client: the episode's key (from ``open_episode``) as its API key."""
    return openai.OpenAI(base_url=proxy.base_url, api_key=key, max_retries=0, timeout=60)


def three_turn_agent(c: openai.OpenAI, marker: str, tools: bool = True) -> list[Any]:
    """A chat agent: ask, answer each reply with a tool result (or a user turn), three calls."""
    messages: list[Any] = [{"role": "system", "content": "You add."}, {"role": "user", "content": f"{marker}: 12+30?"}]
    answers = []
    for turn in range(3):
        kwargs = {"tools": [CALC]} if tools else {}
        out = c.chat.completions.create(model="agent", messages=messages, **kwargs)
        msg = out.choices[0].message
        answers.append(out)
        messages.append(msg.model_dump(exclude_none=True))
        if tools:
            messages.append({"role": "tool", "tool_call_id": f"call_{turn}", "name": "calculator", "content": f"{42 + turn}"})
        else:
            messages.append({"role": "user", "content": f"{marker} again {turn}"})
    return answers


def assert_token_exact(calls: list[ProxyCall], traj: Any) -> None:
    """Each call's prompt is the trajectory up to its completion; its completion sits in the
    trajectory as sampled, with the sampler's logprobs; the mask is 1 on those tokens only."""
    at = 0
    trained = np.zeros(len(traj.tokens_T), dtype=bool)
    for call in calls:
        assert list(traj.tokens_T[: len(call.prompt_ids)]) == list(call.prompt_ids)
        at = len(call.prompt_ids)
        end = at + len(call.completion_ids)
        assert list(traj.tokens_T[at:end]) == list(call.completion_ids)
        np.testing.assert_allclose(traj.sampler_logprobs_T[at:end], call.logprobs, rtol=0, atol=1e-6)
        trained[at:end] = True
    assert (traj.loss_mask_T > 0).tolist() == trained.tolist()
    assert len(traj.tokens_T) == at + len(calls[-1].completion_ids)


def test_training_tokens_equal_the_sampled_tokens_call_by_call(policy: Any) -> None:
    proxy = proxy_for(policy)
    with proxy.running():
        key = proxy.open_episode("ep-a")
        answers = three_turn_agent(client(proxy, key), "A", tools=False)
        calls = proxy.close_episode("ep-a")
    assert len(calls) == 3
    for call, out in zip(calls, answers, strict=True):
        assert out.choices[0].message.content == call.text
        assert out.usage.completion_tokens == len(call.completion_ids)
        assert out.usage.prompt_tokens == len(call.prompt_ids)
        assert out.choices[0].finish_reason == call.finish_reason
        assert all(lp <= 0 for lp in call.logprobs)
    [traj] = merge_calls(calls, reward=1.0)
    assert_token_exact(calls, traj)
    assert traj.turn_rewards == [0.0, 0.0, 1.0]


@pytest.fixture(scope="module")
def chat_policy(chat_dir: Path) -> Any:
    """The conftest's small chat model (SmolLM2's tokenizer and template), loaded once here."""
    from tinker_algos.model.models import PolicyModel

    return PolicyModel.load(chat_dir, device="cpu", precision="fp32")


def test_a_chat_template_tool_episode_is_token_exact(chat_policy: Any) -> None:
    """SmolLM2's real ChatML template, tools and tool messages: the agent sends back the proxy's
    own replies (as the openai client returns them), so every call extends the last exactly."""
    proxy = proxy_for(chat_policy, max_new_tokens=12)
    with proxy.running():
        key = proxy.open_episode("ep-chat")
        three_turn_agent(client(proxy, key), "C", tools=True)
        calls = proxy.close_episode("ep-chat")
    trajs = merge_calls(calls, reward=0.5)
    assert len(trajs) == 1, "a conversation that only appends is one segment"
    assert_token_exact(calls, trajs[0])
    tok = chat_policy.tokenizer
    assert "<|im_start|>tool" in tok.decode(list(calls[1].prompt_ids)) or "<tool_response>" in tok.decode(list(calls[1].prompt_ids))
    assert '"calculator"' in tok.decode(list(calls[0].prompt_ids)), "the tools are rendered into the prompt"


def test_two_agents_at_once_never_mix_their_calls(policy: Any) -> None:
    proxy = proxy_for(policy)
    done: dict[str, list[Any]] = {}
    with proxy.running():
        keys = {ep: proxy.open_episode(ep) for ep in ("ep-x", "ep-y")}

        def agent(ep: str, marker: str) -> None:
            done[ep] = three_turn_agent(client(proxy, keys[ep]), marker, tools=False)

        threads = [threading.Thread(target=agent, args=(ep, m)) for ep, m in (("ep-x", "XXXX"), ("ep-y", "YYYY"))]
        for t in threads:
            t.start()
        for t in threads:
            t.join(120)
        calls = {ep: proxy.close_episode(ep) for ep in ("ep-x", "ep-y")}
    tok = policy.tokenizer
    for ep, mine, other in (("ep-x", "XXXX", "YYYY"), ("ep-y", "YYYY", "XXXX")):
        assert len(calls[ep]) == 3
        for call in calls[ep]:
            text = tok.decode(list(call.prompt_ids))
            assert mine in text and other not in text
        [traj] = merge_calls(calls[ep], reward=0.0)
        assert_token_exact(calls[ep], traj)


def test_a_closed_episodes_key_takes_no_more_calls(policy: Any) -> None:
    proxy = proxy_for(policy)
    msgs = [{"role": "user", "content": "hi"}]
    with proxy.running():
        key = proxy.open_episode("ep-h")
        client(proxy, key).chat.completions.create(model="m", messages=msgs)
        assert len(proxy.close_episode("ep-h")) == 1
        with pytest.raises(openai.AuthenticationError, match="revoked"):
            client(proxy, key).chat.completions.create(model="m", messages=msgs)


def test_a_rewritten_history_starts_a_new_segment_and_completions_record_too(policy: Any) -> None:
    proxy = proxy_for(policy)
    with proxy.running():
        key = proxy.open_episode("ep-r")
        c = client(proxy, key)
        first = c.completions.create(model="m", prompt="Q: 1+1=", max_tokens=4)
        # the agent continues its own text exactly: the same segment
        second = list(c.completions.create(model="m", prompt="Q: 1+1=" + first.choices[0].text + "\nQ: 2+2=", max_tokens=4, stream=True))
        # ... then summarises its history: a new segment
        streamed = list(c.chat.completions.create(model="m", messages=[{"role": "user", "content": "summary"}], stream=True))
        calls = proxy.close_episode("ep-r")
    assert [c.route for c in calls] == ["completion", "completion", "chat"]
    assert first.choices[0].text == calls[0].text and "".join(ch.choices[0].text for ch in second) == calls[1].text
    assert streamed[-1].choices[0].finish_reason == calls[-1].finish_reason
    assert "".join(ch.choices[0].delta.content or "" for ch in streamed if ch.choices) == calls[-1].text
    trajs = merge_calls(calls, reward=1.0)
    if calls[1].prompt_ids[: len(calls[0].prompt_ids) + len(calls[0].completion_ids)] == calls[0].prompt_ids + calls[0].completion_ids:
        assert len(trajs) == 2 and trajs[1].info["segment"] == 1
        assert_token_exact(calls[:2], trajs[0])
    else:  # the first completion ended on an end-of-turn token its text does not show: the text does not extend it
        assert calls[0].completion_ids and len(trajs) == 3
    assert_token_exact(calls[-1:], trajs[-1])
    assert all(t.reward == 1.0 for t in trajs)


# ---- agent-program episodes ------------------------------------------------------------------
def good_agent(task: dict[str, Any], c: openai.OpenAI) -> float:
    out = c.chat.completions.create(model="m", messages=[{"role": "user", "content": task["q"]}], max_tokens=4)
    return 1.0 if task["a"] in (out.choices[0].message.content or "") else 0.25


def crashing_agent(task: dict[str, Any], c: openai.OpenAI) -> float:
    c.chat.completions.create(model="m", messages=[{"role": "user", "content": task["q"]}], max_tokens=2)
    raise ValueError("the agent broke")


def hanging_agent(task: dict[str, Any], c: openai.OpenAI) -> float:
    time.sleep(30)
    return 1.0


def silent_agent(task: dict[str, Any], c: openai.OpenAI) -> str:
    c.chat.completions.create(model="m", messages=[{"role": "user", "content": task["q"]}], max_tokens=2)
    return "no reward here"


def program(entry: str, **kwargs: Any) -> AgentProgramEnv:
    return AgentProgramEnv(entry=f"{__name__}:{entry}", tasks=[{"q": "1+1=", "a": "2"}, {"q": "2+2=", "a": "4"}], **kwargs)


def test_agent_episodes_become_groups_of_trajectories(policy: Any) -> None:
    params = SamplingParams(max_new_tokens=4, temperature=1.0, seed=0)
    result = agent_rollout(policy, program("good_agent"), [0, 1], params, group_size=3)
    assert [e.group for e in result.episodes] == [0, 0, 0, 1, 1, 1]
    assert all(e.error is None and e.trajectory is not None for e in result.episodes)
    assert [len(g.trajectories) for g in result.groups] == [3, 3]
    batch = result.batch()
    assert batch.tokens_B_T.shape[0] == 6 and set(np.unique(batch.loss_mask_B_T)) <= {0.0, 1.0}
    m = result.metrics()
    assert m["agent/calls_mean"] == 1.0 and m["rollout/episodes"] == 6.0 and m["agent/segments_rewritten"] == 0.0
    again = agent_rollout(policy, program("good_agent"), [0, 1], params, group_size=3)  # same seed, same episodes
    assert [t.tokens_T.tolist() for t in again.trajectories] == [t.tokens_T.tolist() for t in result.trajectories]


def test_a_crashing_hanging_or_silent_agent_is_a_failed_episode_not_a_crashed_job(policy: Any) -> None:
    params = SamplingParams(max_new_tokens=2, temperature=1.0, seed=0)
    crash = agent_rollout(policy, program("crashing_agent"), [0], params, group_size=2)
    assert [e.error for e in crash.episodes] == ["agent_error", "agent_error"]
    assert crash.errors["agent_error"] == 2 and "ValueError: the agent broke" in crash.failures[0]
    assert crash.metrics()["rollout/errors/agent_error"] == 2.0 and crash.trajectories == []
    t0 = time.monotonic()
    hang = agent_rollout(policy, program("hanging_agent", timeout_s=1.0), [0], params)
    assert time.monotonic() - t0 < 10 and [e.error for e in hang.episodes] == ["agent_timeout"]
    silent = agent_rollout(policy, program("silent_agent"), [0], params)
    assert [e.error for e in silent.episodes] == ["agent_bad_result"] and "not a reward" in silent.failures[0]
    from tinker_algos.rollout.episodes import RolloutError

    with pytest.raises(RolloutError, match="agent_error"):
        agent_rollout(policy, program("crashing_agent"), [0], params, max_error_rate=0.5)


class ScriptedProxy(RolloutProxy):
    """The proxy with a policy that answers from a script (a random model never writes a tool
    call): each call's completion is the script's next text, encoded, with logprob 0."""

    script: list[str] = []

    async def _sample(self, ids, params, http):  # type: ignore[override]
        text = self.script.pop(0)
        tokens = list(self.served.policy.tokenizer.encode(text, add_special_tokens=False))
        return tokens, [0.0] * len(tokens), text, "stop"


def test_a_tool_call_round_trip_extends_the_episode_exactly(chat_policy: Any) -> None:
    """The model's <tool_call> reaches the client as tool_calls; the agent sends it back with the
    tool's result, and the next prompt is the last context + the template's delta, not a re-render."""
    renderer = PromptRenderer.from_config(chat_policy.tokenizer, "auto")
    proxy = ScriptedProxy(chat_policy, renderer, SamplingParams(max_new_tokens=32, temperature=1.0, seed=0))
    proxy.script = ['<tool_call>\n{"name": "calculator", "arguments": {"expression": "12+30"}}\n</tool_call>', "42"]
    with proxy.running():
        key = proxy.open_episode("ep-t")
        c = client(proxy, key)
        messages: list[Any] = [{"role": "user", "content": "12+30?"}]
        first = c.chat.completions.create(model="m", messages=messages, tools=[CALC])
        msg = first.choices[0].message
        assert first.choices[0].finish_reason == "tool_calls" and msg.tool_calls[0].function.name == "calculator"
        messages += [msg.model_dump(exclude_none=True), {"role": "tool", "tool_call_id": msg.tool_calls[0].id, "content": "42"}]
        second = c.chat.completions.create(model="m", messages=messages, tools=[CALC])
        calls = proxy.close_episode("ep-t")
    assert second.choices[0].message.content == "42"
    [traj] = merge_calls(calls, reward=1.0)
    assert_token_exact(calls, traj)
    delta = chat_policy.tokenizer.decode(list(calls[1].prompt_ids[len(calls[0].prompt_ids) + len(calls[0].completion_ids):]))
    assert "42" in delta and "12+30?" not in delta


def test_tool_call_ids_are_unique_in_an_episode(chat_policy: Any) -> None:
    """Each call's tool calls get ids of their own (``call_<call>_<block>``), as OpenAI's are: an
    agent framework that keys its history by call id (the OpenAI Agents SDK drops a repeated one)
    sends back every call, and the episode stays one token-exact segment."""
    renderer = PromptRenderer.from_config(chat_policy.tokenizer, "auto")
    proxy = ScriptedProxy(chat_policy, renderer, SamplingParams(max_new_tokens=32, temperature=1.0, seed=0))
    block = '<tool_call>\n{"name": "calculator", "arguments": {"expression": "%s"}}\n</tool_call>'
    proxy.script = [block % "12+30", f"{block % '1+1'}\n{block % '2+2'}", "42"]
    with proxy.running():
        key = proxy.open_episode("ep-ids")
        c = client(proxy, key)
        messages: list[Any] = [{"role": "user", "content": "12+30?"}]
        ids = []
        for _ in range(3):
            msg = c.chat.completions.create(model="m", messages=messages, tools=[CALC]).choices[0].message
            messages.append(msg.model_dump(exclude_none=True))
            ids += [t.id for t in msg.tool_calls or []]
            messages += [{"role": "tool", "tool_call_id": t.id, "content": "42"} for t in msg.tool_calls or []]
        calls = proxy.close_episode("ep-ids")
    assert ids == ["call_0_0", "call_1_0", "call_1_1"]
    [traj] = merge_calls(calls, reward=1.0)
    assert_token_exact(calls, traj)
