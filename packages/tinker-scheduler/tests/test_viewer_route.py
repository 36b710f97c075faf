"""The run viewer of each tenant's jobs on the scheduler's serve route (``/viewer/jobs/<id>/``), over
a real HTTP server and job store: the page, the API with the tenant's key, another tenant's job
answered as a missing one, the serve route still answering beside it, and a real scheduler's
serve route viewing the run dir of a job it ran."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from pathlib import Path

import pytest

pytest.importorskip("tinker_serve", reason="the serve route needs tinker-scheduler's http extra (tinker-serve)")
pytest.importorskip("tinker_client.viewer.app", reason="the viewer is tinker-client[view]'s")

from tinker_client.viewer.sample import SampleRun  # noqa: E402
from tinker_core.registry import get_http_front  # noqa: E402
from tinker_scheduler.auth import AuthMode  # noqa: E402
from tinker_scheduler.http_thread import HttpServer  # noqa: E402
from tinker_scheduler.serve_route import SchedulerModels  # noqa: E402
from tinker_scheduler.store import JobStore, NewJob  # noqa: E402
from tinker_scheduler.viewer_route import PREFIX, ViewerFront  # noqa: E402


def submit(store: JobStore, tenant: str, runs_dir) -> str:
    config = {"name": "j", "model": {"name": "tiny"}, "algorithm": {"name": "grpo"}}
    job, _ = store.submit(NewJob(tenant=tenant, name="j", priority=0, config_text=json.dumps(config), config_format=1,
                                 config_json=json.dumps(config), cpus=1, gpus=0, memory_gb=0, runs_dir=str(runs_dir)))
    return job.id


def get(url: str, key: str | None = None) -> tuple[int, dict | str, dict]:
    request = urllib.request.Request(url, headers={"Authorization": f"Bearer {key}"} if key else {})
    try:
        with urllib.request.urlopen(request, timeout=30) as r:
            body = r.read().decode()
            status, headers = r.status, dict(r.headers)
    except urllib.error.HTTPError as e:
        body, status, headers = e.read().decode(), e.code, dict(e.headers)
    try:
        return status, json.loads(body), headers
    except ValueError:
        return status, body, headers


@pytest.fixture
def world(tmp_path):
    store = JobStore(tmp_path / "s.db")
    keys = {t: store.add_tenant(t) for t in ("alice", "bob")}
    jobs = {"alice": submit(store, "alice", tmp_path / "runs"), "bob": submit(store, "bob", tmp_path / "runs")}
    SampleRun(store.get(jobs["alice"]).run_dir, per_step=8, group_size=4, eval_every=2, eval_size=3).write(3)
    front = ViewerFront(store, AuthMode.AUTO, fallback=get_http_front("openai").obj(SchedulerModels(store, AuthMode.AUTO)))
    server = HttpServer(front, "127.0.0.1", 0, name="test-viewer-route")
    try:
        yield server.url, keys, jobs
    finally:
        server.stop()
        store.close()


def test_a_tenant_views_its_jobs_run_dir_through_the_api(world):
    url, keys, jobs = world
    base = f"{url}{PREFIX}{jobs['alice']}/"
    status, page, headers = get(base)  # the page: no data, no key
    assert status == 200 and "<script" in page and 'src="static/app.js"' in page
    assert get(base + "static/app.js")[0] == 200
    status, _, headers = get(f"{url}{PREFIX}{jobs['alice']}")  # no trailing slash: to the page
    assert status == 200 or headers.get("location", "").endswith(f"{jobs['alice']}/")
    status, runs, _ = get(base + "api/runs", keys["alice"])
    assert status == 200 and [(r["name"], r["metrics_rows"], r["last_step"]) for r in runs] == [(jobs["alice"], 3, 3)]
    metrics = get(base + "api/runs/0/metrics", keys["alice"])[1]
    assert metrics["steps"] == [1, 2, 3] and "env/reward_mean" in metrics["series"]
    step = get(base + "api/runs/0/rollouts?step=2", keys["alice"])[1]
    assert step["total"] == 8 and all(r["step"] == 2 and r["turns"][0]["token_texts"] for r in step["items"])
    assert get(base + "api/runs/0/trace", keys["alice"])[1]["steps"] == 3
    assert get(base + "api/runs/0/rollouts?step=2", "tml-" + keys["alice"])[0] == 200  # the Tinker SDK's prefix


def test_another_tenants_job_reads_as_a_missing_one_and_a_key_is_required(world):
    url, keys, jobs = world
    theirs = get(f"{url}{PREFIX}{jobs['alice']}/api/runs", keys["bob"])
    missing = get(f"{url}{PREFIX}job-000000000000/api/runs", keys["bob"])
    assert theirs[0] == missing[0] == 404
    assert theirs[1]["detail"].replace(jobs["alice"], "ID") == missing[1]["detail"].replace("job-000000000000", "ID")
    status, body, _ = get(f"{url}{PREFIX}{jobs['alice']}/api/runs")
    assert status == 401 and "API key" in body["detail"]
    assert get(f"{url}{PREFIX}{jobs['alice']}/api/runs", "otk_wrong")[0] == 401
    # bob's own job has no files yet: an empty run, not an error
    status, runs, _ = get(f"{url}{PREFIX}{jobs['bob']}/api/runs", keys["bob"])
    assert status == 200 and runs[0]["metrics_rows"] == 0


def test_the_serve_route_still_answers_beside_the_viewer(world):
    url, keys, _ = world
    status, listed, _ = get(f"{url}/v1/models", keys["alice"])
    assert status == 200 and listed["object"] == "list"


def test_a_real_schedulers_serve_route_views_the_job_it_ran(make_scheduler):
    from tinker_scheduler import serve_route
    from tinker_scheduler.testing import JobStub, job_config_text

    scheduler = make_scheduler()
    alice, bob = scheduler.store.add_tenant("alice"), scheduler.store.add_tenant("bob")
    with JobStub(scheduler.address, api_key=alice) as jobs:
        job = jobs.submit(job_config_text(steps=3))
        final = jobs.wait(job.id)
    rows = [json.loads(line) for line in (Path(final.run_dir) / "metrics.jsonl").read_text().splitlines()]
    route = serve_route.serve(scheduler)
    try:
        base = f"{route.url}{PREFIX}{job.id}/"
        status, metrics, _ = get(base + "api/runs/0/metrics", alice)
        assert status == 200 and metrics["steps"] == [r["step"] for r in rows] and metrics["steps"][:3] == [1, 2, 3]
        assert metrics["series"]["losses/policy"] == [r.get("losses/policy") for r in rows]
        assert get(base + "api/runs/0/metrics", bob)[0] == 404
        assert get(base)[0] == 200
    finally:
        route.stop()


def test_a_tenants_corrupt_run_dir_is_a_warning_and_the_page_runs_no_inline_script(world, tmp_path):
    """Issue 43: the scheduler's viewer keeps the tenant's key in the page, so its page runs only
    its own script (CSP) and shows text as text; a job's corrupt file is a warning, not a 500."""
    url, keys, jobs = world
    base = f"{url}{PREFIX}{jobs['alice']}/"
    status, _, headers = get(base)
    csp = {k.lower(): v for k, v in headers.items()}["content-security-policy"]
    assert status == 200 and "script-src 'self'" in csp and "frame-ancestors 'none'" in csp
    status, runs, _ = get(base + "api/runs", keys["alice"])
    run_dir = Path(runs[0]["path"])
    (run_dir / "result.json").write_text("[" * 200_000)
    (run_dir / "config.json").write_text("[1]")
    assert get(base + "api/runs/0/config", keys["alice"])[0] == 200
    status, runs, _ = get(base + "api/runs", keys["alice"])
    assert status == 200 and runs[0]["warnings"] == ["config.json: a JSON list, not an object; ignored",
                                                     "result.json: nested too deeply to parse; ignored"]


@pytest.fixture
def only_the_scheduler_plugin(monkeypatch):
    """The plugin registry as a scheduler without tinker-serve and tinker-client sees it."""
    from tinker_core.registry import reset_plugins

    monkeypatch.setenv("OPENTINKER_LOAD_PLUGINS", "tinker-scheduler")
    reset_plugins()
    yield
    monkeypatch.delenv("OPENTINKER_LOAD_PLUGINS")
    reset_plugins()


def test_without_the_viewer_front_the_route_answers_501_naming_the_package(tmp_path, only_the_scheduler_plugin):
    store = JobStore(tmp_path / "s.db")
    key = store.add_tenant("alice")
    job = submit(store, "alice", tmp_path / "runs")
    server = HttpServer(ViewerFront(store, AuthMode.AUTO), "127.0.0.1", 0, name="test-viewer-501")
    try:
        for url in (f"{server.url}{PREFIX}{job}/", f"{server.url}{PREFIX}{job}/api/runs"):
            status, body, _ = get(url, key)
            assert status == 501 and "install tinker-client[view]" in body["detail"], body
    finally:
        server.stop()
        store.close()


def test_without_the_openai_front_serve_names_tinker_serve(only_the_scheduler_plugin):
    from tinker_scheduler import serve_route

    with pytest.raises(serve_route.FrontMissing, match="tinker-serve is not installed"):
        serve_route.serve(scheduler=None)
