"""tinker-client's ``opentinker`` plugin: the ``viewer`` HTTP front the scheduler mounts per job and
the ``grpc`` job client ``compare --scheduler`` uses, found through the real entry point."""

from __future__ import annotations

from importlib import metadata

from fastapi.testclient import TestClient
from viewer_runs import write_run

import tinker_core.registry
from tinker_client import plugin
from tinker_client.jobs import JobClient


def test_the_plugin_is_an_opentinker_entry_point_that_registers_the_viewer_and_the_job_client():
    entry = next(e for e in metadata.entry_points(group="opentinker") if e.name == "client")
    assert entry.value == "tinker_client.plugin" and entry.load() is plugin
    tinker_core.registry.reset_plugins()
    viewer = tinker_core.registry.get_http_front("viewer")
    grpc = tinker_core.registry.get_job_client("grpc")
    assert (viewer.obj, viewer.distribution) == (plugin.viewer_front, "tinker-client")
    assert (grpc.obj, grpc.distribution) == (plugin.grpc_job_client, "tinker-client")


def test_the_viewer_front_serves_the_run_dirs_it_is_given_under_their_names(tmp_path):
    run_dir = write_run(tmp_path / "arith", steps=3)
    with TestClient(plugin.viewer_front([(run_dir, "job-1")])) as client:
        runs = client.get("/api/runs").json()
        assert [(r["name"], r["metrics_rows"]) for r in runs] == [("job-1", 3)]
        assert client.get("/").status_code == 200
    with TestClient(plugin.viewer_front([])) as page_only:  # the page and its static files, no run
        assert page_only.get("/").status_code == 200 and page_only.get("/api/runs").json() == []


def test_the_grpc_job_client_is_the_sdks_job_client():
    with plugin.grpc_job_client("127.0.0.1:1", "otk_x") as client:
        assert isinstance(client, JobClient) and client.address == "127.0.0.1:1"
