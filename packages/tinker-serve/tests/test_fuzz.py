"""Fuzzing ``opentinker serve``'s routes (issue 34): hypothesis-generated bodies, typed (the
OpenAI fields, each with a value of any JSON type) and untyped (any JSON, raw bytes), sent to a
real server on 127.0.0.1 with the tiny model. No answer may be a 5xx or a traceback, and the
server completes a normal request afterwards. The hypothesis profile is ``fixed`` (conftest.py).
"""

from __future__ import annotations

import collections

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tinker_serve.app import create_app
from tinker_serve.served import ServedModels

EXAMPLES = 120
STATUSES: collections.Counter[int] = collections.Counter()
ROUTES = ["completions", "chat/completions", "responses", "load_lora_adapter", "unload_lora_adapter"]

scalars = st.one_of(st.none(), st.booleans(), st.integers(min_value=-(2**70), max_value=2**70),
                    st.floats(allow_nan=False, allow_infinity=False), st.text(max_size=12),
                    st.sampled_from(["tiny", "", "\n", "/etc/passwd", "../..", "user", "assistant"]))
json_values = st.recursive(scalars, lambda inner: st.lists(inner, max_size=4)
                           | st.dictionaries(st.text(max_size=8), inner, max_size=4), max_leaves=10)
small_tokens = st.sampled_from([-1, 0, 1, 2, 4, 1024, 2**31, 10**12, None, "4", 2.5])


@st.composite
def typed_bodies(draw) -> dict:
    body: dict = {"model": draw(st.sampled_from(["tiny", "nope", 3, None]))}
    fields = ["prompt", "messages", "max_tokens", "max_completion_tokens", "n", "temperature", "top_p", "top_k",
              "stop", "logprobs", "top_logprobs", "seed", "stream", "echo", "lora_name", "lora_path",
              "presence_penalty", "frequency_penalty", "logit_bias", "stream_options", "ignore_eos", "response_format",
              "tool_choice", "tools", "input", "instructions", "text", "max_output_tokens"]
    for name in draw(st.lists(st.sampled_from(fields), max_size=6, unique=True)):
        body[name] = draw(json_values)
    body["max_tokens"] = draw(small_tokens)
    if draw(st.booleans()):
        body["prompt"] = draw(st.one_of(st.text(max_size=20), st.lists(st.integers(-3, 200), max_size=6)))
    if draw(st.booleans()):
        body["messages"] = [{"role": draw(st.sampled_from(["user", "system", "robot", 1])), "content": draw(json_values)}]
    return body


@st.composite
def near_valid_bodies(draw) -> dict:
    """A valid completion or chat body with one field given any value (most reach generation)."""
    body: dict = {"model": "tiny", "max_tokens": 2}
    if draw(st.booleans()):
        body["prompt"] = "1+1="
    else:
        body["messages"] = [{"role": "user", "content": "1+1="}]
    name = draw(st.sampled_from(["n", "temperature", "top_p", "top_k", "stop", "logprobs", "top_logprobs", "seed",
                                 "stream", "max_tokens", "ignore_eos", "stream_options", "prompt", "messages",
                                 "response_format", "frequency_penalty", "presence_penalty"]))
    body[name] = draw(st.one_of(json_values, small_tokens))
    return body


@pytest.fixture(scope="module")
def url(tiny_dir, helpers):
    from tinker_algos.model.models import PolicyModel

    served = ServedModels(PolicyModel.load(tiny_dir, device="cpu", precision="fp32"), "tiny", max_batch=8)
    with helpers.live_server(create_app(served)) as base, httpx.Client(base_url=base, timeout=120) as client:
        yield client


def check(r: httpx.Response) -> None:
    STATUSES[r.status_code] += 1
    assert r.status_code < 500, (r.status_code, r.text[:500])
    assert "Traceback" not in r.text and "internal_server_error" not in r.text, r.text[:500]


@settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                        HealthCheck.too_slow])
@given(route=st.sampled_from(ROUTES), body=st.one_of(typed_bodies(), near_valid_bodies(), json_values))
def test_serve_routes_answer_4xx_never_5xx(url, route, body) -> None:
    check(url.post(f"/v1/{route}", json=body))


@settings(max_examples=EXAMPLES // 2, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                             HealthCheck.too_slow])
@given(route=st.sampled_from(["completions", "chat/completions"]), body=near_valid_bodies(),
       value=st.sampled_from([0, 1, 2, 0.5, "x", ["x"], True]))
def test_near_valid_requests_generate_or_answer_4xx(url, route, body, value) -> None:
    body.setdefault("seed", value if isinstance(value, int) and not isinstance(value, bool) else 0)
    check(url.post(f"/v1/{route}", json=body))


@settings(max_examples=EXAMPLES // 3, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(route=st.sampled_from(ROUTES), raw=st.binary(max_size=200))
def test_raw_bodies_answer_4xx_never_5xx(url, route, raw) -> None:
    check(url.post(f"/v1/{route}", content=raw, headers={"content-type": "application/json"}))


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(route=st.sampled_from(["/", "/health", "/v1/models", "/v1/completions", "/v1/nope", "/v1/models/tiny"]),
       method=st.sampled_from(["GET", "DELETE", "PUT", "PATCH"]))
def test_other_routes_and_methods_answer_4xx_never_5xx(url, route, method) -> None:
    check(url.request(method, route))


def test_the_server_is_live_after_the_fuzzing(url) -> None:
    assert url.get("/health").status_code == 200
    r = url.post("/v1/completions", json={"model": "tiny", "prompt": "1+1=", "max_tokens": 3})
    assert r.status_code == 200, r.text
    print("serve fuzz statuses:", dict(sorted(STATUSES.items())))
