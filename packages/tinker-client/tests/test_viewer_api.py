"""The viewer's JSON API over run dirs written in the recorded formats (FastAPI's TestClient),
its bounds (paging, path traversal, unknown runs), the real server's header deadline, and the
``opentinker view`` command's errors."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time

import pytest
from fastapi.testclient import TestClient
from viewer_runs import GROUP_SIZE, GROUPS, append_step, write_run

from tinker_client.viewer.app import MAX_PAGE, create_app, load_runs
from tinker_client.viewer.command import running


@pytest.fixture
def run_dir(tmp_path):
    return write_run(tmp_path / "arith", steps=5)


@pytest.fixture
def client(run_dir):
    return TestClient(create_app(load_runs([run_dir])))


def rollouts(client, **query):
    response = client.get("/api/runs/0/rollouts", params=query)
    assert response.status_code == 200, response.text
    return response.json()


def test_runs_metrics_config_checkpoints_and_trace(client, run_dir):
    [run] = client.get("/api/runs").json()
    assert run["name"] == "arith" and run["metrics_rows"] == 5 and run["last_step"] == 5
    assert run["rollouts_bytes"] == (run_dir / "rollouts.jsonl").stat().st_size and run["status"] == "running"
    assert client.get("/api/runs/0/rollouts/index").json()["count"] == 5 * GROUPS * GROUP_SIZE + 2 * GROUPS
    [run] = client.get("/api/runs").json()  # the counts of what is indexed
    assert run["rollouts"] == 5 * GROUPS * GROUP_SIZE + 2 * GROUPS and run["eval_rollouts"] == 2 * GROUPS
    metrics = client.get("/api/runs/0/metrics").json()
    assert metrics["steps"] == [1, 2, 3, 4, 5] and metrics["next"] == 5
    assert metrics["series"]["eval/accuracy"] == [None, 0.02, None, 0.04, None]
    assert client.get("/api/runs/0/metrics", params={"since": 3}).json()["steps"] == [4, 5]
    assert client.get("/api/runs/0/config").json()["config"]["name"] == "arith"
    [checkpoint] = client.get("/api/runs/0/checkpoints").json()
    assert checkpoint["name"] == "step-000005" and checkpoint["step"] == 5 and checkpoint["files"] == 1
    trace = client.get("/api/runs/0/trace").json()
    assert trace["present"] and trace["steps"] == 5
    assert {p["name"]: round(p["share"], 3) for p in trace["phases"]} == {"rollout": 0.6, "forward_backward": 0.3}
    (run_dir / "result.json").write_text(json.dumps({"status": "completed", "step": 5}))
    assert client.get("/api/runs").json()[0]["status"] == "completed"


def test_rollouts_filter_by_step_reward_stop_reason_length_and_text(client):
    step3 = rollouts(client, step=3)
    assert step3["total"] == GROUPS * GROUP_SIZE and {r["step"] for r in step3["items"]} == {3}
    item = step3["items"][0]
    assert item["prompt"] == "What is 10 + 3?" and item["turns"][0]["token_texts"] == ["1", "3", "\n"]
    zero = rollouts(client, step=3, max_reward=0)
    assert zero["total"] == 6 and all(r["reward"] == 0 for r in zero["items"])
    assert rollouts(client, step=3, min_reward=1)["total"] == 6
    cut = rollouts(client, stop_reason="length")
    assert cut["total"] == 5 * GROUPS and all(r["episode"] == 3 for r in cut["items"])
    assert rollouts(client, step=3, min_tokens=4)["total"] == GROUPS  # the 4-token ones are the cut ones
    assert rollouts(client, step=3, max_tokens=3)["total"] == GROUPS * (GROUP_SIZE - 1)
    found = rollouts(client, q="what is 12 + 5")  # b = step + episode = 5
    assert {(r["step"], r["group"], r["episode"]) for r in found["items"]} == {(5, 2, 0), (4, 2, 1), (3, 2, 2), (2, 2, 3)}
    assert found["total"] == 4 and found["search_complete"]
    assert rollouts(client, q="WRONG", step=1)["total"] == 6
    group = rollouts(client, step=2, group=1)
    assert [r["episode"] for r in group["items"]] == list(range(GROUP_SIZE))
    evals = rollouts(client, kind="eval")
    assert evals["total"] == 2 * GROUPS and {r["step"] for r in evals["items"]} == {2, 4}
    index = client.get("/api/runs/0/rollouts/index").json()
    assert index["steps"] == {"train": [1, 2, 3, 4, 5], "eval": [2, 4]} and index["max_new_tokens"] == 4


def test_rollouts_are_paged_with_a_bounded_limit(client):
    first = rollouts(client, limit=7)
    second = rollouts(client, limit=7, offset=7)
    assert first["total"] == second["total"] == 5 * GROUPS * GROUP_SIZE
    assert len(first["items"]) == len(second["items"]) == 7
    assert first["items"][-1]["index"] + 1 == second["items"][0]["index"]
    assert client.get("/api/runs/0/rollouts", params={"limit": MAX_PAGE + 1}).status_code == 422
    assert client.get("/api/runs/0/rollouts", params={"q": "x" * 201}).status_code == 422
    assert client.get("/api/runs/0/rollouts", params={"offset": -1}).status_code == 422


def test_only_the_given_run_dirs_and_page_files_are_served(client):
    assert client.get("/api/runs/1/metrics").status_code == 404
    assert client.get("/api/runs/-1/config").status_code == 404
    for path in ("/static/data.py", "/static/..%2Fdata.py", "/static/%2e%2e%2fapp.py", "/api/runs/0/../../etc/passwd"):
        assert client.get(path).status_code == 404, path
    page = client.get("/")
    assert page.status_code == 200 and "run viewer" in page.text and "https://" not in page.text
    script = client.get("/static/app.js").text
    assert "/api/runs" in script and "http://" not in script.replace("http://www.w3.org/2000/svg", "")


def test_a_run_that_keeps_writing_is_followed(client, run_dir):
    with (run_dir / "metrics.jsonl").open("a") as f:
        f.write('{"stage": "grpo", "step": 6, "losses/t')  # half a line: not yet a row
    assert client.get("/api/runs").json()[0]["metrics_rows"] == 5
    with (run_dir / "metrics.jsonl").open("a") as f:
        f.write('otal": 0.5}\n')
    append_step(run_dir, 7)
    [run] = client.get("/api/runs").json()
    assert run["metrics_rows"] == 7 and run["last_step"] == 7
    assert client.get("/api/runs/0/metrics", params={"since": 5}).json()["steps"] == [6, 7]
    assert rollouts(client, step=7)["total"] == GROUPS * GROUP_SIZE


def test_a_compare_report_dir_brings_its_jobs_run_dirs_inside_it_only(tmp_path):
    """A report.json names its jobs' run dirs; the viewer serves those inside the report dir (as
    written, or in compare's layout wherever the report was moved) and names the others in a
    warning: a report cannot point the viewer at dirs it was not given (issue 43)."""
    report = tmp_path / "compare-x"
    a = write_run(report / "jobs" / "a" / "seed-0", steps=2)
    elsewhere = write_run(tmp_path / "elsewhere" / "b-s0", steps=3)
    moved = write_run(report / "jobs" / "d" / "seed-1", steps=1)  # compare's layout, its run_dir not found as written
    jobs = [{"variant": "a", "seed": 0, "run_dir": "compare-x/jobs/a/seed-0"}, {"variant": "b", "seed": 0, "run_dir": str(elsewhere)},
            {"variant": "c", "seed": 0, "run_dir": str(tmp_path / "gone")},
            {"variant": "d", "seed": 1, "run_dir": "old/place/jobs/d/seed-1"}, {"variant": "e", "seed": 0, "run_dir": "../elsewhere/b-s0"}]
    (report / "report.json").write_text(json.dumps({"variants": {}, "jobs": jobs}))
    (report / "report.md").write_text("# Compare x\n")
    client = TestClient(create_app(load_runs([report])))
    runs = client.get("/api/runs").json()
    assert [(r["name"], r["report"]) for r in runs] == [("compare-x", True), ("a/seed-0", False), ("d/seed-1", False)]
    assert runs[1]["path"] == str(a.resolve()) and runs[2]["path"] == str(moved.resolve())
    [warning] = runs[0]["warnings"]
    assert "2 run dir(s) outside this report dir, not served" in warning and str(elsewhere) in warning
    assert client.get("/api/runs/0/report").json()["markdown"] == "# Compare x\n"
    assert client.get("/api/runs/1/metrics").json()["steps"] == [1, 2]


def test_load_runs_names_a_dir_that_is_not_a_run_dir(tmp_path):
    with pytest.raises(ValueError, match="is not a run dir: it does not exist"):
        load_runs([tmp_path / "missing"])
    with pytest.raises(ValueError, match="holds no metrics.jsonl"):
        load_runs([tmp_path])


def test_the_server_closes_a_connection_whose_headers_do_not_come(run_dir):
    with running([run_dir], header_timeout_s=0.5) as url:
        port = int(url.rstrip("/").rsplit(":", 1)[1])
        with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
            sock.sendall(b"GET /api/runs HTTP/1.1\r\nHost: x\r\n")  # the headers never end
            start = time.monotonic()
            assert sock.recv(1024) == b""  # closed by the server
            assert time.monotonic() - start < 5
        import httpx

        assert httpx.get(url + "api/runs", timeout=10).json()[0]["name"] == "arith"
        assert httpx.post(url + "api/runs", content=b"x" * 20_000, timeout=10).status_code == 413


def view(*args: str, pre: str = "") -> subprocess.CompletedProcess[str]:
    code = f"import sys; {pre}from tinker_client.cli import main; sys.argv = ['opentinker', *sys.argv[1:]]; main()"
    return subprocess.run([sys.executable, "-c", code, "view", *args, "--no-browser"],
                          capture_output=True, text=True, timeout=120)


def test_view_refuses_a_dir_that_is_not_a_run_dir_in_one_line(tmp_path):
    result = view(str(tmp_path / "nope"))
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "is not a run dir" in lines[0] and "nope" in lines[0]


def test_view_without_the_extra_names_the_install_command(run_dir):
    result = view(str(run_dir), pre="sys.modules['fastapi'] = None; ")  # as if FastAPI were not installed
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "pip install 'tinker-client[view]'" in lines[0]
