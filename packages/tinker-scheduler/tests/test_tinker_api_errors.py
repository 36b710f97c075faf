"""Bad input to the Tinker gateway: one probe per case, each the HTTP status the SDK expects and a
JSON ``{"detail": ..., "code": ...}`` body, never a 500 or a traceback.

The SDK retries 408, 409, 429 and every 5xx; anything retrying cannot fix must be another 4xx.
The probes use httpx directly (the SDK would hide the status behind its retries and exception
types); one SDK check confirms a 4xx reaches the caller at once as the matching exception.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

httpx = pytest.importorskip("httpx")
pytest.importorskip("fastapi")
pytest.importorskip("uvicorn")
pytest.importorskip("tinker_serve", reason="the Tinker gateway and the serve route need tinker-scheduler's http extra (tinker-serve)")

from tinker_scheduler.tinker_api import serve  # noqa: E402

os.environ.setdefault("TINKER_TELEMETRY", "0")
LIMIT = 4096
MODEL = "cs-alice0000000:train:0"
STATE = f"tinker://{MODEL}/weights/ckpt"


@pytest.fixture(scope="module")
def gateway(ray_session, tmp_path_factory):
    """A gateway with a small body limit; alice has a recorded model with one saved state (files
    only: no model is loaded) and a finished future; bob has nothing."""
    from tinker_scheduler import Scheduler
    from tinker_scheduler.testing import SLEEP_TRAIN

    tmp = tmp_path_factory.mktemp("tinker-errors")
    scheduler = Scheduler(port=0, db=tmp / "s.db", runs_dir=tmp / "runs", runner=SLEEP_TRAIN, paused=True,
                          training_host_backend="local", tinker_max_request_bytes=LIMIT).start()
    keys = {name: "tml-" + scheduler.store.add_tenant(name) for name in ("alice", "bob")}
    gw = serve(scheduler)
    records = gw.app.state.futures.records
    directory = Path(scheduler.runs_dir) / "alice" / "sessions" / "ts-000000000000"
    (directory / "states" / "ckpt").mkdir(parents=True)
    (directory / "states" / "ckpt" / "adapter.pt").write_bytes(b"x")
    records.add_model(MODEL, "alice", "cs-alice0000000", "ts-000000000000", "tiny", 4, directory)
    records.add_checkpoint("alice", MODEL, "weights", "ckpt", str(directory / "states" / "ckpt"))
    future = gw.app.state.futures.submit("alice", "q", lambda: {"ok": True})
    yield gw, keys, future
    gw.stop()
    scheduler.stop()


def call(gw, method: str, route: str, key: str | None, **kwargs) -> httpx.Response:
    headers = {"X-API-Key": key} if key else {}
    return httpx.request(method, f"{gw.url}/api/v1/{route}", headers={**headers, **kwargs.pop("headers", {})},
                         timeout=30, **kwargs)


def oversize_stream():
    yield b'{"pad": "'
    for _ in range(LIMIT // 512 + 1):
        yield b"x" * 512
    yield b'"}'


JSON = {"content-type": "application/json"}
# (id, method, route, who ("alice"/"bob"/"none"/a literal key), request kwargs, status, words in detail)
PROBES = [
    ("unknown-route", "POST", "no_such_route", "alice", {"json": {}}, 404, "Not Found"),
    ("unknown-method", "GET", "forward_backward", "alice", {}, 405, "Method Not Allowed"),
    ("unknown-method-delete", "DELETE", "training_runs", "alice", {}, 405, "Method Not Allowed"),
    ("malformed-json", "POST", "create_session", "alice", {"content": b"{", "headers": JSON}, 400, "not valid JSON"),
    ("json-not-object", "POST", "create_session", "alice", {"json": [1]}, 400, "JSON object"),
    ("malformed-json-typed-route", "POST", "get_info", "alice", {"content": b"[1", "headers": JSON}, 400, ""),
    ("protobuf-garbage", "POST", "forward_backward", "alice",
     {"content": b"\xff\xff\xff", "headers": {"content-type": "application/x-protobuf"}}, 400, "protobuf"),
    ("forward-backward-as-json", "POST", "forward_backward", "alice", {"json": {}}, 400, "x-protobuf"),
    ("key-without-tml-prefix", "POST", "create_session", "otk_abc_def", {"json": {}}, 401, "tml-"),
    ("unknown-key", "POST", "create_session", "tml-otk_wrong_key", {"json": {}}, 401, ""),
    ("no-key", "POST", "create_session", "none", {"json": {}}, 401, ""),
    ("future-that-does-not-exist", "POST", "retrieve_future", "alice", {"json": {"request_id": "req-nope"}}, 404,
     "no request"),
    ("another-tenants-future", "POST", "retrieve_future", "bob", {"json": {"request_id": "FUTURE"}}, 404, "no request"),
    ("another-tenants-path", "POST", "weights_info", "bob", {"json": {"tinker_path": STATE}}, 404, "no checkpoint"),
    ("path-not-tinker", "POST", "weights_info", "alice", {"json": {"tinker_path": "/etc/passwd"}}, 400, "tinker://"),
    ("path-escaping", "POST", "weights_info", "alice", {"json": {"tinker_path": f"tinker://{MODEL}/weights/.."}},
     400, "tinker://"),
    ("model-that-does-not-exist", "POST", "optim_step", "alice", {"json": {"model_id": "cs-x:train:0"}}, 404,
     "no model"),
    ("another-tenants-run", "GET", f"training_runs/{MODEL}", "bob", {}, 404, "no model"),
    ("another-tenants-checkpoints", "GET", f"training_runs/{MODEL}/checkpoints", "bob", {}, 404, "no training run"),
    ("delete-another-tenants-checkpoint", "DELETE", f"training_runs/{MODEL}/checkpoints/weights/ckpt", "bob", {},
     404, "no checkpoint"),
    ("listing-bad-limit", "GET", "training_runs?limit=0", "alice", {}, 400, "limit"),
    ("listing-limit-not-a-number", "GET", "checkpoints?limit=many", "alice", {}, 400, "limit"),
    ("oversize-by-length", "POST", "create_session", "alice", {"content": b"{}" + b" " * LIMIT, "headers": JSON},
     413, "tinker_max_request_bytes"),
    ("oversize-streamed", "POST", "create_session", "alice", {"content": "STREAM", "headers": JSON}, 413,
     "tinker_max_request_bytes"),
    ("unknown-session", "POST", "session_heartbeat", "alice", {"json": {"session_id": "cs-nope"}}, 404, "no session"),
]


@pytest.mark.parametrize(("method", "route", "who", "kwargs", "status", "words"), [p[1:] for p in PROBES],
                         ids=[p[0] for p in PROBES])
def test_bad_input_gets_the_status_the_sdk_expects(gateway, method, route, who, kwargs, status, words) -> None:
    gw, keys, future = gateway
    key = {"none": None, **keys}.get(who, who)
    kwargs = dict(kwargs)
    if kwargs.get("json") == {"request_id": "FUTURE"}:
        kwargs["json"] = {"request_id": future}
    if kwargs.get("content") == "STREAM":
        kwargs["content"] = oversize_stream()  # chunked: no Content-Length to refuse it by
    r = call(gw, method, route, key, **kwargs)
    assert r.status_code == status, r.text
    body = r.json()
    assert set(body) == {"detail", "code"} and words in body["detail"], body
    assert "Traceback" not in r.text


def test_the_owner_gets_what_the_probes_are_refused(gateway) -> None:
    gw, keys, future = gateway
    assert call(gw, "POST", "weights_info", keys["alice"], json={"tinker_path": STATE}).json()["lora_rank"] == 4
    assert call(gw, "POST", "retrieve_future", keys["alice"], json={"request_id": future}).json() == {"ok": True}
    assert call(gw, "GET", f"training_runs/{MODEL}/checkpoints", keys["alice"]).json()["checkpoints"][0][
        "tinker_path"] == STATE


def test_the_sdk_raises_a_4xx_at_once_without_retrying(gateway) -> None:
    tinker = pytest.importorskip("tinker")
    gw, keys, _ = gateway
    rest = tinker.RestClient(base_url=gw.url, api_key=keys["bob"])
    with pytest.raises(tinker.NotFoundError, match="no checkpoint"):
        rest.get_weights_info_by_tinker_path(STATE).result()


@pytest.mark.parametrize("options", [{"tinker_session_timeout_s": 0}, {"tinker_max_request_bytes": 0}])
def test_the_gateway_limits_refuse_nonsense(options) -> None:
    from tinker_scheduler import SchedulerConfig

    with pytest.raises(ValueError, match=next(iter(options))):
        SchedulerConfig(**options)
