"""The Tinker gateway's records across a scheduler restart, its REST listings, and session expiry.

A real in-process scheduler (model hosts in the test process, the tiny model) serves the gateway;
the unmodified ``tinker`` SDK trains, saves and lists; the scheduler stops and a new one starts on
the same store: finished futures still answer, an interrupted one says so, the old model is a 404
naming the restart, and its ``tinker://`` checkpoints load into a new model.
"""

from __future__ import annotations

import os
import time

import pytest

pytest.importorskip("torch")
tinker = pytest.importorskip("tinker")
httpx = pytest.importorskip("httpx")
pytest.importorskip("tinker_serve", reason="the Tinker gateway and the serve route need tinker-scheduler's http extra (tinker-serve)")

from tinker import types  # noqa: E402

from tinker_scheduler.tinker_api import serve  # noqa: E402
from tinker_scheduler.tinker_api.futures import RESTARTED  # noqa: E402

os.environ.setdefault("TINKER_TELEMETRY", "0")
SEQ = [1, 20, 21, 22, 30, 31, 2]


def sft_datum() -> types.Datum:
    return types.Datum(model_input=types.ModelInput.from_ints(SEQ[:-1]),
                       loss_fn_inputs={"target_tokens": SEQ[1:], "weights": [0.0, 0.0, 1.0, 1.0, 1.0, 1.0]})


def post(gw, key: str, route: str, body: dict) -> httpx.Response:
    return httpx.post(f"{gw.url}/api/v1/{route}", json=body, headers={"X-API-Key": key}, timeout=60)


def result(gw, key: str, request_id: str) -> httpx.Response:
    """Poll ``retrieve_future`` as the SDK does until it is not ``try_again``."""
    while True:
        r = post(gw, key, "retrieve_future", {"request_id": request_id})
        if r.headers["content-type"].startswith("application/json") and r.json().get("type") == "try_again":
            continue
        return r


def test_records_listings_and_checkpoints_survive_a_restart(make_scheduler, tmp_path) -> None:
    db = tmp_path / "restart.db"
    scheduler = make_scheduler(db=db, paused=True, training_host_backend="local")
    keys = {name: "tml-" + scheduler.store.add_tenant(name) for name in ("alice", "bob")}
    gw = serve(scheduler)
    alice = tinker.ServiceClient(base_url=gw.url, api_key=keys["alice"])
    training = alice.create_lora_training_client(base_model="tiny", rank=4).result()
    model_id = training.model_id
    training.forward_backward([sft_datum()], "cross_entropy").result()
    step = post(gw, keys["alice"], "optim_step", {"model_id": model_id, "adam_params": {"learning_rate": 1e-2}})
    step_answer = result(gw, keys["alice"], step.json()["request_id"]).json()
    state = training.save_state("ckpt").result().path
    sampler_path = training.save_weights_for_sampler("s1").result().path
    before = training.forward([sft_datum()], "cross_entropy").result().loss_fn_outputs[0]["logprobs"].tolist()
    prompt, params = types.ModelInput.from_ints(SEQ[:3]), types.SamplingParams(max_tokens=4, seed=7)

    def sampled(client) -> list[int]:
        return client.create_sampling_client(model_path=sampler_path).result().sample(prompt, 1, params).result().sequences[0].tokens

    sampled_before = sampled(alice)

    # the REST listings: the caller's own runs and checkpoints only
    rest = tinker.RestClient(base_url=gw.url, api_key=keys["alice"])
    runs = rest.list_training_runs().result()
    assert [r.training_run_id for r in runs.training_runs] == [model_id] and runs.cursor.total_count == 1
    run = rest.get_training_run(model_id).result()
    assert (run.base_model, run.model_owner, run.is_lora, run.lora_rank) == ("tiny", "alice", True, 4)
    assert run.last_checkpoint.tinker_path == state and run.last_sampler_checkpoint.tinker_path == sampler_path
    listed = rest.list_checkpoints(model_id).result().checkpoints
    assert {(c.checkpoint_type, c.checkpoint_id, c.tinker_path) for c in listed} == {
        ("training", "weights/ckpt", state), ("sampler", "sampler_weights/s1", sampler_path)}
    assert all(c.size_bytes for c in listed)
    assert len(rest.list_user_checkpoints().result().checkpoints) == 2
    bob = tinker.RestClient(base_url=gw.url, api_key=keys["bob"])
    assert bob.list_training_runs().result().training_runs == []
    assert bob.list_user_checkpoints().result().checkpoints == []
    with pytest.raises(tinker.NotFoundError):
        bob.get_training_run(model_id).result()
    with pytest.raises(tinker.NotFoundError):
        bob.list_checkpoints(model_id).result()
    with pytest.raises(tinker.NotFoundError):
        bob.delete_checkpoint_from_tinker_path(sampler_path).result()

    # a request the restart interrupts (as if the scheduler died while it ran)
    gw.app.state.futures.records.add_future("req-interrupted", "alice")
    session_id = model_id.split(":")[0]

    gw.stop()
    scheduler.stop()
    scheduler = make_scheduler(db=db, paused=True, training_host_backend="local")
    gw = serve(scheduler)

    # futures: the stored answer, or a user error saying what happened (never try_again forever)
    assert result(gw, keys["alice"], step.json()["request_id"]).json() == step_answer
    assert result(gw, keys["alice"], "req-interrupted").json() == RESTARTED
    assert post(gw, keys["bob"], "retrieve_future", {"request_id": "req-interrupted"}).status_code == 404
    # the live model is gone, and the 404 says why; its client session lives on
    gone = post(gw, keys["alice"], "get_info", {"model_id": model_id})
    assert gone.status_code == 404 and "restarted" in gone.json()["detail"]
    assert post(gw, keys["alice"], "session_heartbeat", {"session_id": session_id}).status_code == 200
    # its tinker:// paths still resolve: weights_info, listings, a new model from the saved state
    alice = tinker.ServiceClient(base_url=gw.url, api_key=keys["alice"])
    rest = tinker.RestClient(base_url=gw.url, api_key=keys["alice"])
    info = rest.get_weights_info_by_tinker_path(state).result()
    assert (info.base_model, info.lora_rank) == ("tiny", 4)
    restored = alice.create_training_client_from_state(state).result()
    after = restored.forward([sft_datum()], "cross_entropy").result().loss_fn_outputs[0]["logprobs"].tolist()
    assert after == pytest.approx(before, abs=1e-5)
    # its sampler weights still sample, the same tokens for the same seed (on the base model's host)
    assert sampled(alice) == sampled_before
    assert {r.training_run_id for r in rest.list_training_runs().result().training_runs} == {model_id, restored.model_id}
    # delete a checkpoint: gone from the listing and from disk; its path no longer resolves
    rest.delete_checkpoint_from_tinker_path(sampler_path).result()
    assert [c.tinker_path for c in rest.list_checkpoints(model_id).result().checkpoints] == [state]
    with pytest.raises(tinker.NotFoundError):
        alice.create_sampling_client(model_path=sampler_path).result()
    gw.stop()


def create_model(gw, key: str, session_id: str) -> str:
    r = post(gw, key, "create_model", {"session_id": session_id, "model_seq_id": 0, "base_model": "tiny",
                                       "lora_config": {"rank": 2}})
    return result(gw, key, r.json()["request_id"]).json()["model_id"]


def new_session(gw, key: str) -> str:
    return post(gw, key, "create_session", {}).json()["session_id"]


def test_a_heartbeat_keeps_a_session_and_a_silent_one_expires_with_its_models(make_scheduler) -> None:
    scheduler = make_scheduler(paused=True, training_host_backend="local")
    key = "tml-" + scheduler.store.add_tenant("alice")
    gw = serve(scheduler)
    try:
        silent, beating = new_session(gw, key), new_session(gw, key)
        silent_model, beating_model = create_model(gw, key, silent), create_model(gw, key, beating)
        time.sleep(0.01)  # the heartbeat below comes strictly after both sessions' last contact
        cutoff = time.time()
        assert post(gw, key, "session_heartbeat", {"session_id": beating}).status_code == 200
        gw.app.state.expiry.expire(now=cutoff + scheduler.config.tinker_session_timeout_s)

        expired = post(gw, key, "get_info", {"model_id": silent_model})
        assert expired.status_code == 404 and "expired" in expired.json()["detail"]
        assert post(gw, key, "session_heartbeat", {"session_id": silent}).status_code == 410  # the SDK stops
        assert post(gw, key, "get_info", {"model_id": beating_model}).status_code == 200
        assert post(gw, key, "session_heartbeat", {"session_id": beating}).status_code == 200
        unloaded = post(gw, key, "unload_model", {"model_id": beating_model})
        assert result(gw, key, unloaded.json()["request_id"]).json()["type"] == "unload_model"
        gone = post(gw, key, "get_info", {"model_id": beating_model})
        assert gone.status_code == 404 and "was unloaded" in gone.json()["detail"]
    finally:
        gw.stop()


def test_the_expiry_thread_unloads_the_models_of_a_silent_session(make_scheduler) -> None:
    scheduler = make_scheduler(paused=True, training_host_backend="local", tinker_session_timeout_s=1.0)
    key = "tml-" + scheduler.store.add_tenant("alice")
    gw = serve(scheduler)
    try:
        model_id = create_model(gw, key, new_session(gw, key))
        end = time.monotonic() + 60  # a safety limit only
        while (r := post(gw, key, "get_info", {"model_id": model_id})).status_code == 200 and time.monotonic() < end:
            time.sleep(0.05)
        assert r.status_code == 404 and "expired" in r.json()["detail"]
    finally:
        gw.stop()
