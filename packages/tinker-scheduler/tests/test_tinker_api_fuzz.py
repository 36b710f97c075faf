"""Fuzzing the Tinker gateway's routes (issue 34): hypothesis-generated bodies, typed (the fields a
route reads, each with a value of any JSON type) and untyped (any JSON, protobuf-ish bytes), sent
to every route of a real gateway on 127.0.0.1. No answer may be a 5xx, a traceback or a future
failed with ``category: server``, and the gateway answers a health check and a normal call
afterwards. The hypothesis profile is the test folder's ``fixed`` one (conftest.py).
"""

from __future__ import annotations

import collections
import os

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

httpx = pytest.importorskip("httpx")
pytest.importorskip("fastapi")
pytest.importorskip("tinker_serve", reason="the Tinker gateway and the serve route need tinker-scheduler's http extra (tinker-serve)")

from tinker_scheduler.tinker_api import serve  # noqa: E402

os.environ.setdefault("TINKER_TELEMETRY", "0")
EXAMPLES = 150
STATUSES: collections.Counter[int] = collections.Counter()

JSON_ROUTES = ["create_session", "session_heartbeat", "create_model", "get_info", "unload_model", "optim_step",
               "save_weights", "save_weights_for_sampler", "load_weights", "create_sampling_session", "asample",
               "weights_info", "retrieve_future", "client/config", "telemetry", "save_weights_external"]
FIELDS = ["session_id", "model_id", "model_seq_id", "base_model", "lora_config", "user_metadata", "adam_params",
          "path", "optimizer", "model_path", "sampling_session_id", "num_samples", "prompt", "sampling_params",
          "prompt_logprobs", "topk_prompt_logprobs", "topk_sample_logprobs", "prompt_logprobs_last_n", "request_id",
          "tinker_path", "ttl_seconds", "age_encryption_recipients", "display_name"]
GET_ROUTES = ["healthz", "get_server_capabilities", "training_runs", "training_runs/x", "training_runs/x/checkpoints",
              "checkpoints", "samplers/ss-x", "training_runs?limit=-1", "checkpoints?offset=abc",
              "sessions", "sessions/cs-x", "sessions?access_scope=all", "sessions?limit=0",
              "training_runs/x/checkpoints/external_weights/y/external_weights_urls",
              "training_runs/x/checkpoints/weights/y/external_weights_urls", "training_runs/x/checkpoints/weights/y/ttl",
              "external_weights/x/y/z?expires=1&signature=ab", "external_weights/x/y/..%2F..%2Fs.db?expires=abc",
              "external_weights/x/y/z"]

scalars = st.one_of(st.none(), st.booleans(), st.integers(min_value=-(2**70), max_value=2**70),
                    st.floats(allow_nan=False, allow_infinity=False), st.text(max_size=20),
                    st.sampled_from(["tiny", "tinker://x/weights/y", "\n", "../..", "cs-x:train:0"]))
json_values = st.recursive(scalars, lambda inner: st.lists(inner, max_size=4)
                           | st.dictionaries(st.text(max_size=8), inner, max_size=4), max_leaves=12)


@st.composite
def typed_bodies(draw) -> dict:
    body = draw(st.dictionaries(st.sampled_from(FIELDS), json_values, max_size=6))
    if draw(st.booleans()):
        body["prompt"] = {"chunks": [{"tokens": draw(st.lists(st.integers(-5, 2**40), max_size=5))}]}
        body["sampling_params"] = {"max_tokens": draw(st.integers(-3, 20)), "stop": draw(json_values)}
    return body


@pytest.fixture(scope="module")
def gateway(ray_session, tmp_path_factory):
    from tinker_scheduler import Scheduler
    from tinker_scheduler.testing import SLEEP_TRAIN

    tmp = tmp_path_factory.mktemp("tinker-fuzz")
    scheduler = Scheduler(port=0, db=tmp / "s.db", runs_dir=tmp / "runs", runner=SLEEP_TRAIN, paused=True,
                          training_host_backend="local", max_new_tokens_per_sample=16,
                          tinker_max_request_bytes=1 << 20).start()
    key = {"X-API-Key": "tml-" + scheduler.store.add_tenant("alice")}
    gw = serve(scheduler)
    client = httpx.Client(base_url=f"{gw.url}/api/v1", headers=key, timeout=60)
    yield gw, client
    client.close()
    gw.stop()
    scheduler.stop()


def check(r: httpx.Response, client: httpx.Client) -> None:
    STATUSES[r.status_code] += 1
    assert r.status_code < 500, (r.status_code, r.text[:500])
    assert "Traceback" not in r.text
    if r.status_code == 200 and r.headers.get("content-type", "").startswith("application/json"):
        answer = r.json()
        if isinstance(answer, dict) and "request_id" in answer and answer.get("type") != "try_again":
            done = client.post("retrieve_future", json={"request_id": answer["request_id"]})
            assert done.status_code < 500, done.text
            if done.headers.get("content-type", "").startswith("application/json"):
                assert done.json().get("category") != "server", done.text


@settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                        HealthCheck.too_slow])
@given(route=st.sampled_from(JSON_ROUTES), body=st.one_of(typed_bodies(), json_values))
def test_json_routes_answer_4xx_never_5xx(gateway, route, body) -> None:
    _, client = gateway
    check(client.post(route, json=body), client)


@settings(max_examples=EXAMPLES // 2, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                             HealthCheck.too_slow])
@given(route=st.sampled_from(JSON_ROUTES + ["forward_backward"]), raw=st.binary(max_size=300),
       media=st.sampled_from(["application/json", "application/x-protobuf", "text/plain"]))
def test_raw_bodies_answer_4xx_never_5xx(gateway, route, raw, media) -> None:
    _, client = gateway
    check(client.post(route, content=raw, headers={"content-type": media}), client)


@settings(max_examples=EXAMPLES // 3, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(route=st.sampled_from(GET_ROUTES), method=st.sampled_from(["GET", "DELETE", "PUT"]))
def test_other_routes_and_methods_answer_4xx_never_5xx(gateway, route, method) -> None:
    _, client = gateway
    check(client.request(method, route), client)


def test_the_gateway_is_live_after_the_fuzzing(gateway) -> None:
    _, client = gateway
    assert client.get("healthz").status_code == 200
    sid = client.post("create_session", json={}).json()["session_id"]
    assert client.post("session_heartbeat", json={"session_id": sid}).status_code == 200
    print("gateway fuzz statuses:", dict(sorted(STATUSES.items())))
