"""The scheduler's serve route (``scheduler start --serve-port``) without Ray: which models a tenant
sees and the OpenAI-shaped errors for other tenants' jobs, unfinished jobs, full fine-tuning
jobs, bad keys, and ``tinker://`` sampler-weights names."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("tinker_serve", reason="the Tinker gateway and the serve route need tinker-scheduler's http extra (tinker-serve)")

from fastapi.testclient import TestClient  # noqa: E402

from tinker_core.registry import get_http_front  # noqa: E402
from tinker_scheduler.auth import AuthMode  # noqa: E402
from tinker_scheduler.errors import StatusError  # noqa: E402
from tinker_scheduler.serve_route import SchedulerModels  # noqa: E402
from tinker_scheduler.store import JobState, JobStore, NewJob  # noqa: E402


def add_job(store: JobStore, tenant: str, state: JobState, *, lora: bool = True, model: str = "tiny") -> str:
    config = {"name": "j", "model": {"name": model}, "algorithm": {"name": "sft"}, **({"lora": {"rank": 8}} if lora else {})}
    job, _ = store.submit(NewJob(tenant=tenant, name="j", priority=0, config_text=json.dumps(config), config_format=1,
                                 config_json=json.dumps(config), cpus=1, gpus=0, memory_gb=0, runs_dir="/nonexistent"))
    if state != JobState.QUEUED:
        store.transition(job.id, state, "completed 2 steps" if state == JobState.SUCCEEDED else "test")
    return job.id


class FakeTinker:
    """The two gateway ``Models`` methods the route uses: alice owns one sampler-weights path."""

    def __init__(self, weights: str) -> None:
        self.weights = weights

    def resolve(self, tenant: str, path: str, kind: str) -> str:
        if tenant != "alice" or path != "tinker://m1/sampler_weights/w1":
            raise StatusError("NOT_FOUND", f"model_id: no model {path!r}")
        return self.weights

    def weights_info(self, tenant: str, path: str) -> dict:
        return {"base_model": "tiny", "is_lora": True, "lora_rank": 8}


@pytest.fixture
def world(tmp_path):
    store = JobStore(tmp_path / "s.db")
    keys = {t: store.add_tenant(t) for t in ("alice", "bob")}
    jobs = {
        "done": add_job(store, "alice", JobState.SUCCEEDED),
        "running": add_job(store, "alice", JobState.RUNNING),
        "full": add_job(store, "alice", JobState.SUCCEEDED, lora=False),
        "bobs": add_job(store, "bob", JobState.SUCCEEDED, model="other-base"),
    }
    (tmp_path / "empty").mkdir()
    models = SchedulerModels(store, AuthMode.AUTO, tinker=FakeTinker(str(tmp_path / "empty")))
    with TestClient(get_http_front("openai").obj(models), raise_server_exceptions=False) as client:
        yield client, keys, jobs
    store.close()


def post(client, key: str, model: str):
    return client.post("/v1/completions", json={"model": model, "prompt": "1+1=", "max_tokens": 2},
                       headers={"Authorization": f"Bearer {key}"})


def test_a_tenant_sees_its_own_succeeded_lora_jobs_and_their_base(world):
    client, keys, jobs = world
    listed = client.get("/v1/models", headers={"Authorization": f"Bearer {keys['alice']}"}).json()["data"]
    assert [(m["id"], m["parent"]) for m in listed] == [("tiny", None), (jobs["done"], "tiny")]
    tml = client.get("/v1/models", headers={"Authorization": f"Bearer tml-{keys['bob']}"}).json()["data"]
    assert [m["id"] for m in tml] == ["other-base", jobs["bobs"]]


def test_other_tenants_unfinished_and_full_jobs_get_openai_shaped_errors(world):
    client, keys, jobs = world
    r = post(client, keys["alice"], jobs["bobs"])
    assert r.status_code == 404 and r.json()["error"]["code"] == "model_not_found"
    assert post(client, keys["bob"], jobs["done"]).status_code == 404
    assert post(client, keys["bob"], "tiny").status_code == 404  # not a base of bob's jobs
    r = post(client, keys["alice"], jobs["running"])
    assert r.status_code == 409 and "RUNNING" in r.json()["error"]["message"]
    r = post(client, keys["alice"], jobs["full"])
    assert r.status_code == 400 and r.json()["error"]["code"] == "model_not_lora"
    r = post(client, "otk_wrong", jobs["done"])
    assert r.status_code == 401 and r.json()["error"]["type"] == "invalid_request_error"
    assert client.post("/v1/completions", json={"model": "tiny", "prompt": "x"}).status_code == 401
    assert client.post("/v1/load_lora_adapter", json={"lora_name": "x", "lora_path": "/"},
                       headers={"Authorization": f"Bearer {keys['alice']}"}).status_code == 404


def test_tinker_sampler_weights_names_resolve_only_for_their_owner(world):
    client, keys, _ = world
    path = "tinker://m1/sampler_weights/w1"
    r = post(client, keys["bob"], path)
    assert r.status_code == 404 and r.json()["error"]["code"] == "model_not_found"
    r = post(client, keys["alice"], path)  # alice's path, but the weights hold no adapter
    assert r.status_code == 400 and r.json()["error"]["code"] == "model_not_lora"


def test_without_the_gateway_tinker_names_are_not_found(tmp_path):
    store = JobStore(tmp_path / "s.db")
    with TestClient(get_http_front("openai").obj(SchedulerModels(store, AuthMode.NONE))) as client:
        r = post(client, "", "tinker://m1/sampler_weights/w1")
    assert r.status_code == 404 and "--tinker-port" in r.json()["error"]["message"]
    store.close()


def test_start_with_serve_port_serves_the_openai_route(tmp_path):
    import re
    import time

    import httpx

    from tinker_scheduler.testing import SchedulerProcess

    process = SchedulerProcess(tmp_path, "serve", "--num-cpus", "1", "--serve-port", "0")
    try:
        url = None
        end = time.monotonic() + 60  # a safety limit only
        while url is None and time.monotonic() < end:
            match = re.search(r"OpenAI API at (\S+)", process.log.read_text())
            url = match.group(1) if match else time.sleep(0.1)
        assert url, process.log.read_text()
        assert httpx.get(f"{url}/models").json() == {"object": "list", "data": []}  # auth auto, no tenant yet
        r = httpx.post(f"{url}/completions", json={"model": "job-000000000000", "prompt": "x"})
        assert r.status_code == 404 and r.json()["error"]["code"] == "model_not_found"
        assert process.terminate() == 0
    finally:
        process.cleanup()


def test_start_refuses_a_bad_serve_port(tmp_path):
    from typer.testing import CliRunner

    from tinker_scheduler.cli import app

    result = CliRunner().invoke(app, ["start", "--db", str(tmp_path / "s.db"), "--serve-port", "70000"])
    assert result.exit_code == 2 and "--serve-port: 70000 is not a port number" in result.stderr
