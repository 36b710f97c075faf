"""The Tinker API gateway driven by the unmodified official ``tinker`` SDK, as a user would.

A real in-process scheduler (model hosts in the test process, the tiny model) serves the
gateway on a free port; the SDK trains a LoRA with ``cross_entropy`` (the loss falls), samples
from saved weights, runs the RL losses on its own samples, and another tenant's key can touch
neither the model nor its ``tinker://`` paths.
"""

from __future__ import annotations

import os

import pytest

pytest.importorskip("torch")
tinker = pytest.importorskip("tinker")
httpx = pytest.importorskip("httpx")
pytest.importorskip("tinker_serve", reason="the Tinker gateway and the serve route need tinker-scheduler's http extra (tinker-serve)")

from tinker import types  # noqa: E402

from tinker_scheduler.tinker_api import serve  # noqa: E402

os.environ.setdefault("TINKER_TELEMETRY", "0")
SEQ = [1, 20, 21, 22, 30, 31, 2]


@pytest.fixture
def gateway(make_scheduler):
    scheduler = make_scheduler(paused=True, training_host_backend="local")
    keys = {name: "tml-" + scheduler.store.add_tenant(name) for name in ("alice", "bob")}
    gw = serve(scheduler)
    yield gw, keys
    gw.stop()


def sft_datum() -> types.Datum:
    return types.Datum(model_input=types.ModelInput.from_ints(SEQ[:-1]),
                       loss_fn_inputs={"target_tokens": SEQ[1:], "weights": [0.0, 0.0, 1.0, 1.0, 1.0, 1.0]})


def test_sdk_trains_samples_and_isolates_tenants(gateway) -> None:
    gw, keys = gateway
    service = tinker.ServiceClient(base_url=gw.url, api_key=keys["alice"])
    training = service.create_lora_training_client(base_model="tiny", rank=4).result()

    # supervised learning: the cross-entropy loss falls step by step
    losses = []
    for _ in range(3):
        out = training.forward_backward([sft_datum()], "cross_entropy").result()
        training.optim_step(types.AdamParams(learning_rate=1e-2)).result()
        losses.append(out.metrics["loss:sum"])
        assert len(out.loss_fn_outputs[0]["logprobs"].tolist()) == len(SEQ) - 1
    assert losses[0] > losses[1] > losses[2], losses

    # sampling from the trained weights
    sampler = training.save_weights_and_get_sampling_client().result()
    prompt = types.ModelInput.from_ints(SEQ[:3])
    result = sampler.sample(prompt, num_samples=2, sampling_params=types.SamplingParams(max_tokens=4, temperature=1.0)).result()
    assert len(result.sequences) == 2
    for s in result.sequences:
        assert 1 <= len(s.tokens) <= 4 and len(s.logprobs) == len(s.tokens)

    # RL on its own samples: importance_sampling, ppo and cispo take advantages and sampling logprobs
    s = result.sequences[0]
    full = SEQ[:3] + list(s.tokens)
    n_prompt = len(SEQ[:3]) - 1
    rl = types.Datum(model_input=types.ModelInput.from_ints(full[:-1]), loss_fn_inputs={
        "target_tokens": full[1:], "logprobs": [0.0] * n_prompt + list(s.logprobs),
        "advantages": [0.0] * n_prompt + [1.0] * len(s.tokens)})
    for loss in ("importance_sampling", "ppo", "cispo"):
        out = training.forward_backward([rl], loss).result()
        assert "loss:sum" in out.metrics
    training.optim_step(types.AdamParams(learning_rate=1e-3)).result()

    # named sampler weights and a saved state, as tinker:// paths of this model
    path = training.save_weights_for_sampler("s1").result().path
    assert path == f"tinker://{training.model_id}/sampler_weights/s1"
    again = service.create_sampling_client(model_path=path).result()
    assert again.sample(prompt, num_samples=1, sampling_params=types.SamplingParams(max_tokens=2)).result().sequences

    # save_state, then a new training client from it (weights and Adam state): same logprobs
    state = training.save_state("ckpt").result().path
    assert state == f"tinker://{training.model_id}/weights/ckpt"
    restored = service.create_training_client_from_state_with_optimizer(state).result()
    assert restored.model_id != training.model_id
    before = training.forward([sft_datum()], "cross_entropy").result().loss_fn_outputs[0]["logprobs"].tolist()
    after = restored.forward([sft_datum()], "cross_entropy").result().loss_fn_outputs[0]["logprobs"].tolist()
    assert after == pytest.approx(before, abs=1e-5)

    # another tenant: the same "not found" as for nothing
    with pytest.raises(tinker.NotFoundError):
        other_state = tinker.ServiceClient(base_url=gw.url, api_key=keys["bob"])
        other_state.create_training_client_from_state(state).result()
    other = tinker.ServiceClient(base_url=gw.url, api_key=keys["bob"])
    with pytest.raises(tinker.NotFoundError):
        other.create_sampling_client(model_path=path).result()
    raw = httpx.post(f"{gw.url}/api/v1/get_info", json={"model_id": training.model_id}, headers={"X-API-Key": keys["bob"]})
    assert raw.status_code == 404 and "no model" in raw.json()["detail"]
    bad = httpx.post(f"{gw.url}/api/v1/get_info", json={"model_id": training.model_id},
                     headers={"X-API-Key": keys["alice"].removeprefix("tml-")})
    assert bad.status_code == 401 and "tml-" in bad.json()["detail"]


def test_start_with_tinker_port_serves_the_gateway_beside_grpc(tmp_path) -> None:
    import re
    import time

    from tinker_scheduler.testing import SchedulerProcess

    process = SchedulerProcess(tmp_path, "tinker", "--num-cpus", "1", "--tinker-port", "0")
    try:
        url = None
        end = time.monotonic() + 60  # a safety limit only
        while url is None and time.monotonic() < end:
            match = re.search(r"tinker API at (\S+)", process.log.read_text())
            url = match.group(1) if match else time.sleep(0.1)
        assert url, process.log.read_text()
        assert httpx.get(f"{url}/api/v1/healthz").json() == {"status": "ok"}
        caps = tinker.ServiceClient(base_url=url, api_key="tml-local").get_server_capabilities()
        assert "tiny" in [m.model_name for m in caps.supported_models]
        assert process.terminate() == 0
    finally:
        process.cleanup()


def test_start_refuses_a_bad_tinker_port(tmp_path) -> None:
    from typer.testing import CliRunner

    from tinker_scheduler.cli import app

    result = CliRunner().invoke(app, ["start", "--db", str(tmp_path / "s.db"), "--tinker-port", "70000"])
    assert result.exit_code == 2 and "--tinker-port: 70000 is not a port number" in result.stderr


@pytest.mark.parametrize(("flag", "value", "message"), [
    ("--tinker-session-timeout", "0", "--tinker-session-timeout: must be > 0 seconds"),
    ("--tinker-max-request-bytes", "0", "--tinker-max-request-bytes: must be >= 1"),
])
def test_start_refuses_bad_gateway_limits(tmp_path, flag, value, message) -> None:
    from typer.testing import CliRunner

    from tinker_scheduler.cli import app

    result = CliRunner().invoke(app, ["start", "--db", str(tmp_path / "s.db"), "--tinker-port", "0", flag, value])
    assert result.exit_code == 2 and message in result.stderr


def test_bad_requests_get_the_status_the_sdk_expects_never_a_500(gateway) -> None:
    gw, keys = gateway
    key = {"X-API-Key": keys["alice"]}

    def post(route: str, **kwargs):
        return httpx.post(f"{gw.url}/api/v1/{route}", **kwargs)

    assert post("no_such_route", json={}, headers=key).status_code == 404
    assert post("retrieve_future", json={"request_id": "req-nope"}, headers=key).status_code == 404
    assert post("create_session", content=b"{", headers=key).status_code == 400
    assert post("get_info", content=b"[1", headers={**key, "content-type": "application/json"}).status_code == 400
    garbage = post("forward_backward", content=b"\xff\xff\xff", headers={**key, "content-type": "application/x-protobuf"})
    assert garbage.status_code == 400 and "protobuf" in garbage.json()["detail"]
    assert post("create_session", json={}, headers={"X-API-Key": "tml-otk_wrong"}).status_code == 401
    assert post("create_session", json={}).status_code == 401  # tenants exist: a key is required
    assert post("optim_step", json={"model_id": "cs-x:train:0"}, headers=key).status_code == 404


def test_an_optim_step_sent_again_with_its_idempotency_key_steps_once(gateway) -> None:
    """The SDK's retry of a call (same ``X-Idempotency-Key``) after the gateway had already queued
    it: the retry answers the first request's id, so the step runs once on the accumulated
    gradients instead of a second time on none ("no gradients accumulated")."""
    gw, keys = gateway
    training = tinker.ServiceClient(base_url=gw.url, api_key=keys["alice"]).create_lora_training_client(
        base_model="tiny", rank=4).result()
    training.forward_backward([sft_datum()], "cross_entropy").result()

    def post(route: str, body: dict, key: str | None = None) -> dict:
        headers = {"X-API-Key": keys["alice"], **({"X-Idempotency-Key": key} if key else {})}
        r = httpx.post(f"{gw.url}/api/v1/{route}", json=body, headers=headers, timeout=60)
        assert r.status_code == 200, r.text
        return r.json()

    step = {"model_id": training.model_id, "seq_id": 3, "adam_params": {"learning_rate": 1e-3}}
    first = post("optim_step", step, key="stainless-python-retry-1")["request_id"]
    assert post("optim_step", step, key="stainless-python-retry-1")["request_id"] == first

    def answer(request_id: str) -> dict:
        for _ in range(60):
            got = post("retrieve_future", {"request_id": request_id})
            if got.get("type") != "try_again":
                return got
        raise AssertionError(f"{request_id} never finished")

    assert "error" not in answer(first)
    unkeyed = post("optim_step", step)["request_id"]  # a request without a key is a new request
    assert unkeyed != first and "no gradients" in answer(unkeyed)["error"]
