"""The rollout proxy keeps episodes apart and bounded (issue 43): an episode is named only by the
random key the proxy gave it, in ``Authorization: Bearer`` (an episode id, guessable, is no
credential; the old header and ``user`` forms are refused, saying where the key goes); a prompt
longer than the context can hold is refused before it is tokenized, quickly and without keeping
memory (tinker_serve.proxy)."""

from __future__ import annotations

import concurrent.futures
import time
from typing import Any

import httpx
import openai
import pytest

from tinker_algos.model.prompts import PromptRenderer
from tinker_algos.rollout.agent_program import AgentProgramEnv, agent_rollout
from tinker_algos.sampling.sampler import SamplingParams
from tinker_serve.proxy import RolloutProxy

MSGS = [{"role": "user", "content": "hi"}]


def proxy_for(policy: Any) -> RolloutProxy:
    renderer = PromptRenderer.from_config(policy.tokenizer, "auto")
    return RolloutProxy(policy, renderer, SamplingParams(max_new_tokens=2, temperature=1.0, seed=3))


def as_key(proxy: RolloutProxy, key: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=proxy.base_url, api_key=key, max_retries=0, timeout=60)


def test_episode_ids_are_not_credentials_only_the_episodes_key_is(policy: Any) -> None:
    """The finding: a sibling's id as the key, in the header or in ``user`` got a 200 and was
    trained on. Now each is a 401 naming the right place, and nothing is recorded."""
    proxy = proxy_for(policy)
    with proxy.running():
        mine, sibling = proxy.open_episode("ep-0-0"), proxy.open_episode("ep-0-1")
        assert mine != sibling and len(mine) >= 40 and "ep-" not in mine
        for attempt in (
            lambda c: c.chat.completions.create(model="m", messages=MSGS),  # Bearer ep-0-0
            lambda c: c.completions.create(model="m", prompt="hi", max_tokens=2),
        ):
            with pytest.raises(openai.AuthenticationError, match=r"Authorization: Bearer <key>"):
                attempt(as_key(proxy, "ep-0-0"))
        anon = as_key(proxy, "not-a-key")
        with pytest.raises(openai.AuthenticationError, match="X-OpenTinker-Episode header names no episode"):
            anon.chat.completions.create(model="m", messages=MSGS, extra_headers={"X-OpenTinker-Episode": "ep-0-0"})
        with pytest.raises(openai.AuthenticationError, match="not the 'user' field"):
            anon.chat.completions.create(model="m", messages=MSGS, user="ep-0-0")
        raw = httpx.post(f"{proxy.base_url}/chat/completions", json={"model": "m", "messages": MSGS})  # no key at all
        assert raw.status_code == 401 and raw.json()["error"]["code"] == "invalid_api_key"
        # the sibling's key records in the sibling's episode, never in mine
        as_key(proxy, sibling).chat.completions.create(model="m", messages=MSGS)
        as_key(proxy, mine).chat.completions.create(model="m", messages=MSGS)
        assert len(proxy.close_episode("ep-0-0")) == 1 and len(proxy.close_episode("ep-0-1")) == 1
        with pytest.raises(openai.AuthenticationError):  # revoked when the episode closed
            as_key(proxy, mine).chat.completions.create(model="m", messages=MSGS)


def test_a_call_without_a_key_is_refused_before_its_body_is_read(policy: Any) -> None:
    proxy = proxy_for(policy)
    with proxy.running():
        t0 = time.monotonic()
        r = httpx.post(f"{proxy.base_url}/completions", content=b'{"prompt": "' + b"x" * (7 << 20) + b'"}',
                       headers={"content-type": "application/json", "authorization": "Bearer ep-0-0"}, timeout=60)
        assert r.status_code == 401 and time.monotonic() - t0 < 10


def sibling_thief(task: Any, client: openai.OpenAI) -> float:
    """An agent that tries its sibling's id (what ``ep-<group>-<k>`` made guessable)."""
    thief = openai.OpenAI(base_url=str(client.base_url), api_key="ep-0-0", max_retries=0)
    thief.chat.completions.create(model="m", messages=MSGS, max_tokens=2)
    return 1.0


def test_an_agent_using_its_siblings_id_fails_its_own_episode(policy: Any) -> None:
    program = AgentProgramEnv(entry=f"{__name__}:sibling_thief", tasks=[{"q": "1+1="}])
    result = agent_rollout(policy, program, [0], SamplingParams(max_new_tokens=2, temperature=1.0, seed=0), group_size=2)
    assert [e.error for e in result.episodes] == ["agent_error", "agent_error"]
    assert "AuthenticationError" in result.failures[0] and result.trajectories == []


def _rss_mib() -> float:
    for line in open("/proc/self/status"):  # noqa: SIM115 - a two-line read
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise AssertionError("no VmRSS")


@pytest.mark.skipif(not __import__("os").path.exists("/proc/self/status"), reason="RSS is read from /proc (Linux)")
def test_a_prompt_longer_than_the_context_is_refused_fast_and_memory_returns(policy: Any) -> None:
    """The finding: a 7 MB prompt was tokenized (26-81 s, +2.8 GB) before the context check; two at
    once kept ~1.4 GB. Now both routes refuse it before tokenizing, naming the limits, and a batch
    of them (two at a time) leaves the process's memory where it was."""
    proxy = proxy_for(policy)
    bound = proxy.served.max_prompt_chars
    assert bound is not None and bound < 7_000_000
    big = "x" * 7_000_000
    with proxy.running():
        key = proxy.open_episode("ep-0-0")
        c = as_key(proxy, key)

        def refused(route: str) -> float:
            t0 = time.monotonic()
            with pytest.raises(openai.BadRequestError, match=f"more than {proxy.served.max_positions} tokens can hold") as e:
                if route == "chat":
                    c.chat.completions.create(model="m", messages=[{"role": "user", "content": big}])
                else:
                    c.completions.create(model="m", prompt=big)
            assert e.value.code == "context_length_exceeded"
            return time.monotonic() - t0

        refused("chat"), refused("completion")  # warm up the parsers and allocator
        before = _rss_mib()
        with concurrent.futures.ThreadPoolExecutor(2) as pool:
            seconds = list(pool.map(refused, ["chat", "completion"] * 4))
        after = _rss_mib()
        assert max(seconds) < 10, seconds
        assert after - before < 100, f"RSS grew {after - before:.0f} MiB over 8 refused 7 MB prompts"
        # a prompt of fewer characters but more tokens than the context: refused after tokenizing
        with pytest.raises(openai.BadRequestError, match="maximum context length"):
            c.completions.create(model="m", prompt=[1] * (proxy.served.max_positions + 1))
        assert proxy.close_episode("ep-0-0") == []
