"""A viewer safe to open (issue 43): text from a run is shown as text (a run named like an HTML
tag runs nothing, in a real headless Chromium); only the expected Host names are answered (DNS
rebinding); a report.json cannot point the viewer at dirs it was not given (test_viewer_api);
corrupt files are skipped with a warning, never a 500; links out of a run dir are not followed;
a huge unterminated line is neither held nor read again on every poll."""

from __future__ import annotations

import json
import os
import time
import tracemalloc
from pathlib import Path

import httpx
from fastapi.testclient import TestClient
from test_viewer_page import browser_page  # noqa: F401 - the headless Chromium fixture
from viewer_runs import write_run

from tinker_client.viewer.app import PAGE_HEADERS, create_app, load_runs
from tinker_client.viewer.command import running
from tinker_client.viewer.data import JsonLines
from tinker_client.viewer.hosts import host_allowlist

XSS = "<img src=x onerror=window.__xss=1>"

ROUTES = ["/api/runs", "/api/runs/0/metrics", "/api/runs/0/rollouts/index", "/api/runs/0/rollouts", "/api/runs/0/rollouts?q=x",
          "/api/runs/0/rollouts?step=2", "/api/runs/0/config", "/api/runs/0/checkpoints", "/api/runs/0/trace", "/api/runs/0/report"]


def test_a_run_named_like_html_runs_no_script(tmp_path, browser_page):  # noqa: F811
    """The finding: the chart's tooltip put the run name into innerHTML (stored XSS). The page is
    loaded with its CSP bypassed, so the escaping alone is what is tested; the CSP is checked too."""
    page = browser_page
    evil = write_run(tmp_path / XSS, steps=4)
    (evil / "result.json").write_text(json.dumps({"status": "<b>done</b><script>window.__xss=2</script>", "step": 4}))
    with running([evil, write_run(tmp_path / "plain", steps=2)]) as url:
        assert httpx.get(url).headers["content-security-policy"] == PAGE_HEADERS["Content-Security-Policy"]
        page.goto(url)
        page.wait_for_selector("body[data-ready='1']")
        page.select_option("#metric", "losses/total")
        box = page.locator("#chart").bounding_box()
        for fraction in (0.3, 0.5, 0.8):  # hover the chart: the tooltip names each run
            page.mouse.move(box["x"] + box["width"] * fraction, box["y"] + box["height"] / 2)
            page.wait_for_selector("#tip:not([hidden])")
        assert XSS in page.inner_text("#tip")
        assert page.locator("#tip img, #runs img, #legend img").count() == 0
        page.click("#tabs [data-tab=config]")
        page.wait_for_function("document.querySelector('#result').textContent.includes('<script>')")
        page.wait_for_timeout(300)  # an onerror would have fired by now
        assert page.evaluate("window.__xss") is None
        assert XSS in page.inner_text("#runs")


def raw_get(url: str, host: str) -> httpx.Response:
    return httpx.get(url, headers={"Host": host}, timeout=30)


def test_only_the_expected_host_names_are_answered(tmp_path):
    """The finding: no Host check, so a page whose name rebinds to 127.0.0.1 read every run."""
    run = write_run(tmp_path / "r", steps=1)
    with running([run]) as url:
        port = url.rsplit(":", 1)[1].rstrip("/")
        api = f"{url}api/runs"
        for good in (f"127.0.0.1:{port}", f"localhost:{port}", "LOCALHOST", f"[::1]:{port}"):
            assert raw_get(api, good).status_code == 200, good
        refused = raw_get(api, f"rebind.attacker.example:{port}")
        assert refused.status_code == 421 and "--allow-host" in refused.json()["detail"]
        assert raw_get(url, "rebind.attacker.example").status_code == 421  # the page too
    with running([run], allow_hosts=["viewer.lan"]) as url:
        assert raw_get(f"{url}api/runs", "viewer.lan:80").status_code == 200
    wide = host_allowlist("0.0.0.0")  # bound to every interface: addresses yes, other names no
    from tinker_client.viewer.hosts import HostCheck

    check = HostCheck(None, wide)
    assert check.allows("192.168.1.20:8765") and check.allows("[fe80::1]:8765") and not check.allows("evil.example")


def corrupt_run(root: Path) -> Path:
    run = write_run(root / "corrupt", steps=3)
    deep = "[" * 200_000
    (run / "result.json").write_text("[1, 2]")  # a list, not an object
    (run / "config.json").write_text(deep)
    (run / "overrides.json").write_text('{"x": ' + "[" * 100_000 + "]" * 100_000 + "}")
    with (run / "metrics.jsonl").open("a") as f:
        f.write('{"stage": "grpo", "step": 1e400, "losses/total": 1e400}\n')
        f.write(deep + "\n")
        f.write('{"stage": "grpo", "step": 9, "env/reward_mean": NaN}\n')
    with (run / "rollouts.jsonl").open("a") as f:
        f.write('{"kind": "train", "step": 1e400, "group": 1e400, "reward": 1e400, "new_tokens": 1e400, "prompt": "x"}\n')
        f.write('{"kind": "train", "step": 2, "prompt": ' + "[" * 100_000 + "]" * 100_000 + "}\n")
        f.write("[3]\n")
    with (run / "trace.json").open("a") as f:
        f.write(deep)
    (run / "report.json").write_text(deep)
    return run


def test_corrupt_files_are_skipped_with_a_warning_not_a_500(tmp_path):
    """The finding: one corrupt file (200k-deep JSON, a list result.json, a step of 1e400) made
    every route answer 500."""
    client = TestClient(create_app(load_runs([corrupt_run(tmp_path)])), raise_server_exceptions=False)
    for route in ROUTES:
        response = client.get(route)
        assert response.status_code == 200, (route, response.text[:300])
    [run] = client.get("/api/runs").json()
    warnings = "\n".join(run["warnings"])
    assert "result.json: a JSON list, not an object; ignored" in warnings
    assert "config.json: nested too deeply to parse; ignored" in warnings
    assert "metrics.jsonl: 1 line skipped" in warnings  # the deep line; the 1e400 and NaN rows are kept, as nulls
    assert "rollouts.jsonl: 2 lines skipped" in warnings and "trace.json:" in warnings
    assert run["status"] == "running" and run["metrics_rows"] == 5
    metrics = client.get("/api/runs/0/metrics").json()
    assert metrics["steps"][-2:] == [None, 9] and metrics["series"]["env/reward_mean"][-1] is None
    assert client.get("/api/runs/0/config").json()["config"] is None


def test_links_out_of_the_run_dir_are_not_followed(tmp_path):
    """The finding: a checkpoint symlinked to /usr was walked on every request (11.7 s)."""
    run = write_run(tmp_path / "linked", steps=2)
    (run / "checkpoints" / "step-000009").symlink_to("/usr")
    secret = tmp_path / "secret.json"
    secret.write_text(json.dumps({"name": "secret"}))
    (run / "config.json").unlink()
    (run / "config.json").symlink_to(secret)
    (run / "rollouts.jsonl").rename(tmp_path / "rollouts.jsonl")
    (run / "rollouts.jsonl").symlink_to(tmp_path / "rollouts.jsonl")
    inner = run / "checkpoints" / "step-000005" / "manifest.json"
    os.symlink("/usr/bin", run / "checkpoints" / "step-000005" / "bin")  # a link inside a checkpoint: not walked
    client = TestClient(create_app(load_runs([run])))
    t0 = time.monotonic()
    names = [c["name"] for c in client.get("/api/runs/0/checkpoints").json()]
    assert time.monotonic() - t0 < 2 and names == ["step-000005"]
    [checkpoint] = client.get("/api/runs/0/checkpoints").json()
    assert checkpoint["files"] == 1 and checkpoint["bytes"] == inner.stat().st_size
    assert client.get("/api/runs/0/config").json()["config"] is None
    assert client.get("/api/runs/0/rollouts/index").json()["count"] == 0
    warnings = "\n".join(client.get("/api/runs").json()[0]["warnings"])
    assert "checkpoints: step-000009: a link out of the run dir" in warnings
    assert "config.json: a link out of the run dir" in warnings and "rollouts.jsonl: a link out of the run dir" in warnings


def test_a_huge_unterminated_line_is_not_held_nor_read_again_on_every_poll(tmp_path):
    """The finding: a 150 MB line without its newline was read whole on every poll."""
    path = tmp_path / "metrics.jsonl"
    with path.open("wb") as f:
        f.write(b'{"step": 1}\n')
        f.write(b'{"step": 2, "x": "' + b"x" * (150 << 20))
    lines = JsonLines(path)
    tracemalloc.start()
    try:
        lines.refresh()
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert [r["step"] for r in lines.items] == [1] and peak < 64 << 20, f"peak {peak >> 20} MiB"
    t0 = time.monotonic()
    for _ in range(20):  # the page polls: nothing changed, nothing is read
        assert not lines.refresh()
    assert time.monotonic() - t0 < 0.5
    with path.open("ab") as f:
        f.write(b'"}\n{"step": 3}\n')
    assert lines.refresh() and [r["step"] for r in lines.items] == [1, 3]
    assert lines.warning() == "1 line skipped (not a JSON object, unreadable or over 32 MiB)"
