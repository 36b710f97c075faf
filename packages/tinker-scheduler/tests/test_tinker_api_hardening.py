"""Hostile requests to the Tinker gateway (issue 34's probes, one test each): the gateway keeps
answering every tenant while they are in flight, refuses them with a 4xx naming the field, and
closes connections that never finish sending.

The gateway is the real one (uvicorn on 127.0.0.1, a scheduler with a local host backend); the
probes are raw httpx requests or sockets. The only timing bounds are liveness checks: a health
check or heartbeat must be *answered while* a large request is in flight (generous bounds).
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import struct
import threading
import time

import pytest

httpx = pytest.importorskip("httpx")
pytest.importorskip("fastapi")
pytest.importorskip("uvicorn")
pytest.importorskip("tinker_serve", reason="the Tinker gateway and the serve route need tinker-scheduler's http extra (tinker-serve)")

from tinker_scheduler.tinker_api import serve  # noqa: E402

os.environ.setdefault("TINKER_TELEMETRY", "0")
PROTOBUF = {"content-type": "application/x-protobuf"}
#: Liveness bound: a health check answered within this while a large request is in flight.
ANSWERED_WITHIN_S = 5.0


# ---- a protobuf writer for ForwardBackwardRequest bodies (the reader's field numbers) ----------
def _varint(n: int) -> bytes:
    out = bytearray()
    while True:
        b, n = n & 0x7F, n >> 7
        out.append(b | 0x80 if n else b)
        if not n:
            return bytes(out)


def _len(number: int, payload: bytes) -> bytes:
    return _varint(number << 3 | 2) + _varint(len(payload)) + payload


def _datum(tokens: int) -> bytes:
    ids = struct.pack(f"<{tokens}i", *range(tokens))
    model_input = _len(1, _len(1, _len(1, ids)))
    targets = _len(2, _len(1, b"target_tokens") + _len(2, _len(1, ids) + _varint(3 << 3) + _varint(3)))
    return _len(3, model_input + targets)


def fb_body(data: int, tokens: int = 1, model_id: str = "cs-nope:train:0") -> bytes:
    one = _datum(tokens)
    return _len(1, model_id.encode()) + one * data + _len(4, b"cross_entropy")


@pytest.fixture(scope="module")
def gateway(ray_session, tmp_path_factory):
    from tinker_scheduler import Scheduler
    from tinker_scheduler.testing import SLEEP_TRAIN

    tmp = tmp_path_factory.mktemp("tinker-hardening")
    scheduler = Scheduler(port=0, db=tmp / "s.db", runs_dir=tmp / "runs", runner=SLEEP_TRAIN, paused=True,
                          training_host_backend="local", http_header_timeout_s=1.0, http_body_timeout_s=1.0).start()
    key = "tml-" + scheduler.store.add_tenant("alice")
    gw = serve(scheduler)
    gw.scheduler = scheduler
    yield gw, {"X-API-Key": key}
    gw.stop()
    scheduler.stop()


def post(gw, route: str, key: dict, **kwargs) -> httpx.Response:
    return httpx.post(f"{gw.url}/api/v1/{route}", headers={**key, **kwargs.pop("headers", {})}, timeout=120, **kwargs)


def in_flight(gw, key: dict, fn) -> tuple[object, list[float]]:
    """``fn()`` in a thread while health checks and heartbeats go on: its result and the seconds
    each health check or heartbeat took to be answered."""
    sid = post(gw, "create_session", key, json={}).json()["session_id"]
    result: list[object] = []
    worker = threading.Thread(target=lambda: result.append(fn()))
    worker.start()
    waits: list[float] = []
    with httpx.Client(timeout=60) as client:
        while worker.is_alive() or not waits:
            t0 = time.monotonic()
            assert client.get(f"{gw.url}/api/v1/healthz").status_code == 200
            r = client.post(f"{gw.url}/api/v1/session_heartbeat", headers=key, json={"session_id": sid})
            assert r.status_code == 200, r.text
            waits.append(time.monotonic() - t0)
            if len(waits) > 10_000:
                break
    worker.join(timeout=120)
    print(f"in flight: {len(waits)} health checks + heartbeats, slowest {max(waits) * 1000:.0f} ms")
    return result[0], waits


def test_health_and_heartbeats_are_answered_while_a_52mb_forward_backward_is_in_flight(gateway) -> None:
    gw, key = gateway
    body = fb_body(1_200_000)  # the probe: 1.2M data in a body under the 64 MiB cap
    assert 40_000_000 < len(body) < 64 * 1024 * 1024
    r, waits = in_flight(gw, key, lambda: post(gw, "forward_backward", key, content=body, headers=PROTOBUF))
    assert r.status_code == 400 and "max_data_per_request" in r.json()["detail"], r.text
    assert max(waits) < ANSWERED_WITHIN_S, waits


def test_health_is_answered_while_the_largest_allowed_forward_backward_is_in_flight(gateway) -> None:
    gw, key = gateway
    body = fb_body(1024, 63)  # 1,024 data, 65,536 tokens with their last targets: the default limits
    r, waits = in_flight(gw, key, lambda: post(gw, "forward_backward", key, content=body, headers=PROTOBUF))
    assert r.status_code == 404 and "no model" in r.json()["detail"], r.text  # decoded and checked: no such model
    assert max(waits) < ANSWERED_WITHIN_S, waits


@pytest.mark.parametrize(("body", "words"), [
    (fb_body(1, 70_000), "max_tokens_per_request"),
    (_len(1, b"m") + _len(5, _len(1, b"clip") + _len(2, b"\x00\x00\x00")), "loss_fn_config.clip"),  # a 3-byte double
    (_varint(1 << 3) + _varint(1 << 62), "model_id"),  # a varint where a string goes (would allocate 2^62 bytes)
    (_len(1, b"\xff\xfe"), "model_id: is not valid UTF-8"),
    (_varint(2 << 3 | 1) + b"\x01\x02", "truncated"),
    (_len(3, _len(1, _len(1, _len(1, b"\x01\x02\x03")))), "whole number"),  # tokens not whole int32s
], ids=["tokens-over-limit", "short-double", "varint-for-string", "bad-utf8", "truncated-fixed64", "ragged-tokens"])
def test_malformed_forward_backward_fields_are_400_naming_the_field(gateway, body, words) -> None:
    gw, key = gateway
    r = post(gw, "forward_backward", key, content=body, headers=PROTOBUF)
    assert r.status_code == 400 and words in r.json()["detail"], r.text


@pytest.mark.parametrize(("n", "words"), [(10_000_000, "max_data_per_request"), (-5, ">= 1"), (0, ">= 1"),
                                          ("3", "whole number"), (2.5, "whole number")])
def test_asample_num_samples_is_bounded_before_any_work(gateway, n, words) -> None:
    gw, key = gateway
    r = post(gw, "asample", key, json={"num_samples": n, "sampling_session_id": "ss-nope"})
    assert r.status_code == 400 and words in r.json()["detail"], r.text
    assert len(r.content) < 1000


@pytest.mark.parametrize(("route", "depth"), [("create_session", 200_000), ("retrieve_future", 5_000),
                                              ("asample", 100)])
def test_deeply_nested_json_is_400(gateway, route, depth) -> None:
    gw, key = gateway
    body = b'{"a": ' + b"[" * depth + b"]" * depth + b"}"
    r = post(gw, route, key, content=body, headers={"content-type": "application/json"})
    assert r.status_code == 400 and "levels deep" in r.json()["detail"], r.text


def test_a_json_body_over_its_limit_is_413(gateway) -> None:
    gw, key = gateway
    r = post(gw, "create_session", key, content=b'{"pad": "' + b"x" * (9 * 1024 * 1024) + b'"}',
             headers={"content-type": "application/json"})
    assert r.status_code == 413 and "tinker_max_json_bytes" in r.json()["detail"], r.text


def test_half_sent_requests_are_closed_after_the_header_timeout(gateway) -> None:
    gw, key = gateway
    socks = []
    for _ in range(200):
        s = socket.create_connection(("127.0.0.1", gw.port), timeout=30)
        s.sendall(b"POST /api/v1/create_session HTTP/1.1\r\nHost: x\r\n")  # headers never finished
        socks.append(s)
    try:
        for s in socks:  # the server closes each one (1 s header timeout): recv sees the end
            with contextlib.suppress(ConnectionResetError):
                assert s.recv(1024) == b""
        r = post(gw, "create_session", key, json={})
        assert r.status_code == 200, r.text  # and serves others meanwhile and after
    finally:
        for s in socks:
            s.close()


def test_a_body_that_stops_arriving_is_408(gateway) -> None:
    gw, key = gateway
    with socket.create_connection(("127.0.0.1", gw.port), timeout=30) as s:
        s.sendall(b"POST /api/v1/create_session HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                  b"X-API-Key: " + key["X-API-Key"].encode() + b"\r\nContent-Length: 100\r\n\r\n{\"a\": ")
        answer = s.recv(4096)
    assert answer.startswith(b"HTTP/1.1 408"), answer
    assert post(gw, "create_session", key, json={}).status_code == 200


# ---- user mistakes on a live model: 4xx (or category "user") naming the field -----------------
def result(gw, key: dict, request_id: str) -> httpx.Response:
    """The answer of a future (polling ``try_again`` at most 60 times)."""
    for _ in range(60):
        r = post(gw, "retrieve_future", key, json={"request_id": request_id})
        if r.headers.get("content-type", "").startswith("application/json") and r.json().get("type") == "try_again":
            continue
        return r
    raise AssertionError(f"{request_id} never finished")


@pytest.fixture(scope="module")
def live_model(gateway) -> str:
    gw, key = gateway
    sid = post(gw, "create_session", key, json={}).json()["session_id"]
    r = post(gw, "create_model", key, json={"session_id": sid, "model_seq_id": 0, "base_model": "tiny",
                                            "lora_config": {"rank": 4}})
    answer = result(gw, key, r.json()["request_id"]).json()
    assert answer.get("model_id"), answer
    return answer["model_id"]


@pytest.mark.parametrize(("body", "field"), [
    ({"lora_config": [1]}, "lora_config"), ({"lora_config": "x"}, "lora_config"),
    ({"lora_config": {"rank": "four"}}, "lora_config.rank"), ({"user_metadata": "x"}, "user_metadata"),
    ({"user_metadata": [1, 2]}, "user_metadata"), ({"model_seq_id": [0]}, "model_seq_id"),
], ids=["lora-list", "lora-str", "rank-str", "metadata-str", "metadata-list", "seq-list"])
def test_wrong_typed_create_model_fields_are_400(gateway, body, field) -> None:
    gw, key = gateway
    sid = post(gw, "create_session", key, json={}).json()["session_id"]
    r = post(gw, "create_model", key, json={"session_id": sid, "base_model": "tiny", **body})
    assert r.status_code == 400 and r.json()["detail"].startswith(field + ":"), r.text


@pytest.mark.parametrize(("adam", "field"), [("x", "adam_params"), ([1], "adam_params"),
                                             ({"learning_rate": "big"}, "adam_params.learning_rate"),
                                             ({"beta1": float("nan")}, "adam_params.beta1")],
                         ids=["str", "list", "lr-str", "nan"])
def test_wrong_typed_adam_params_are_400(gateway, live_model, adam, field) -> None:
    gw, key = gateway
    content = json.dumps({"model_id": live_model, "adam_params": adam}).encode()  # NaN as JSON's NaN
    r = post(gw, "optim_step", key, content=content, headers={"content-type": "application/json"})
    assert r.status_code == 400 and r.json()["detail"].startswith(field + ":"), r.text


def test_a_prompt_token_outside_the_vocabulary_is_a_user_error(gateway) -> None:
    gw, key = gateway
    ss = post(gw, "create_sampling_session", key, json={"base_model": "tiny"})
    assert ss.status_code == 200, ss.text
    r = post(gw, "asample", key, json={"sampling_session_id": ss.json()["sampling_session_id"], "num_samples": 1,
                                       "prompt": {"chunks": [{"tokens": [1, 10**6]}]}, "sampling_params": {"max_tokens": 2}})
    assert r.status_code == 200, r.text
    answer = result(gw, key, r.json()["request_id"]).json()
    assert answer["category"] == "user" and "outside the model's vocabulary" in answer["error"], answer


@pytest.mark.parametrize("prompt", [{"chunks": "x"}, {"chunks": [1]}, {"chunks": [{"tokens": "abc"}]},
                                    {"chunks": [{"tokens": [1.5]}]}, [1, 2]],
                         ids=["chunks-str", "chunk-int", "tokens-str", "token-fraction", "prompt-list"])
def test_wrong_typed_prompts_are_400(gateway, prompt) -> None:
    gw, key = gateway
    r = post(gw, "asample", key, json={"sampling_session_id": "ss-nope", "prompt": prompt,
                                       "sampling_params": {"max_tokens": 2}})
    assert r.status_code == 400 and r.json()["detail"].startswith("prompt"), r.text


def test_too_many_stop_strings_are_400(gateway) -> None:
    gw, key = gateway
    r = post(gw, "asample", key, json={"sampling_session_id": "ss-nope", "prompt": {"chunks": [{"tokens": [1]}]},
                                       "sampling_params": {"max_tokens": 2, "stop": ["a"] * 1000}})
    assert r.status_code == 400 and "sampling_params.stop" in r.json()["detail"], r.text


@pytest.mark.parametrize("name", ["ckpt\n", "ckpt\r", "ck\x00pt", "ck/pt"])
def test_a_checkpoint_name_with_a_control_character_is_refused(gateway, live_model, tmp_path, name) -> None:
    gw, key = gateway
    r = post(gw, "save_weights", key, json={"model_id": live_model, "path": name})
    answer = result(gw, key, r.json()["request_id"]).json() if r.status_code == 200 else r.json()
    assert "not a valid name" in (answer.get("error") or answer.get("detail")), answer
    assert answer.get("category", "user") == "user"


def test_names_ending_in_a_newline_are_refused_everywhere(gateway) -> None:
    """``$`` matches before a final newline: every name pattern is matched whole."""
    from tinker_algos.model.models import check_adapter_name
    from tinker_core.env import parse_env_id
    from tinker_scheduler.store import StoreError

    gw, _ = gateway
    with pytest.raises(ValueError):
        parse_env_id("echo/echo-v0\n")
    with pytest.raises(ValueError):
        check_adapter_name("adapter\n")
    with pytest.raises(StoreError):
        gw.scheduler.store.add_tenant("bob\n")


def test_the_metrics_server_closes_half_sent_requests(make_scheduler) -> None:
    scheduler = make_scheduler(metrics_port=0, http_header_timeout_s=1.0, paused=True)
    socks = [socket.create_connection(("127.0.0.1", scheduler.metrics_port), timeout=30) for _ in range(20)]
    try:
        for s in socks:
            s.sendall(b"GET /metrics HTTP/1.1\r\n")  # headers never finished
        for s in socks:
            with contextlib.suppress(ConnectionResetError):
                assert s.recv(1024) == b""
        r = httpx.get(f"http://127.0.0.1:{scheduler.metrics_port}/metrics", timeout=30)
        assert r.status_code == 200 and "opentinker" in r.text
    finally:
        for s in socks:
            s.close()


@pytest.mark.parametrize(("route", "body", "field"), [
    ("asample", {"model_path": {"": None}}, "model_path"), ("asample", {"base_model": [1]}, "base_model"),
    ("create_sampling_session", {"model_path": 5}, "model_path"), ("asample", {"sampling_session_id": [1]}, "sampling_session_id"),
], ids=["asample-model-path-dict", "asample-base-model-list", "session-model-path-int", "session-id-list"])
def test_wrong_typed_sampling_fields_are_400(gateway, route, body, field) -> None:  # found by the fuzz test
    gw, key = gateway
    r = post(gw, route, key, json=body)
    assert r.status_code == 400 and r.json()["detail"].startswith(field + ":"), r.text
