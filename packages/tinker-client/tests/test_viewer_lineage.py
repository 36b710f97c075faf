"""The viewer's lineage: which served run was forked from which (``lineage.json``), in the JSON
API (links only between served runs, never a file outside them read, untrusted records skipped
with a warning) and on the page (a fork's line in the run list, its parent's curve dashed under
it and a mark at the step it was forked from)."""

from __future__ import annotations

import json
import os

import pytest
from fastapi.testclient import TestClient
from test_viewer_page import browser_page  # noqa: F401  (the fixture)
from viewer_runs import write_lineage, write_run

from tinker_client.viewer.app import create_app, load_runs
from tinker_client.viewer.command import running
from tinker_client.viewer.lineage import MAX_LINEAGE_BYTES, MAX_OVERRIDES


def runs_of(*dirs):
    client = TestClient(create_app(load_runs(list(dirs))))
    return client, client.get("/api/runs").json()


def test_a_fork_links_to_its_served_parent_and_a_fork_of_the_fork(tmp_path):
    parent = write_run(tmp_path / "arith", steps=5)
    fork = write_lineage(write_run(tmp_path / "arith-fork-3", steps=5), parent, 3, ("stages.0.optimizer.lr=1e-4",))
    grand = write_lineage(write_run(tmp_path / "deeper", steps=6), "../arith-fork-3", 4)  # relative: from the fork's dir
    client, runs = runs_of(parent, fork, grand)
    assert [r["lineage"]["depth"] for r in runs] == [0, 1, 2]
    assert runs[0]["lineage"]["parent"] is None and runs[0]["lineage"]["forks"] == [{"id": 1, "step": 3}]
    link = runs[1]["lineage"]
    assert link["parent"] == {"id": 0, "name": "arith", "run_dir": str(parent), "step": 3, "served": True,
                              "config_hash": "a" * 64}
    assert link["overrides"] == ["stages.0.optimizer.lr=1e-4"] and link["config_hash"] == "b" * 64
    assert link["forks"] == [{"id": 2, "step": 4}]
    assert runs[2]["lineage"]["parent"]["id"] == 1 and runs[2]["lineage"]["parent"]["name"] == "arith-fork-3"
    assert client.get("/api/runs/1/lineage").json() == link
    assert client.get("/api/runs/7/lineage").status_code == 404
    assert all(r["warnings"] == [] for r in runs)


@pytest.mark.timeout(60)
def test_a_parent_that_is_not_served_is_named_but_never_read(tmp_path):
    elsewhere = tmp_path / "elsewhere" / "secret-run"
    elsewhere.mkdir(parents=True)
    for name in ("metrics.jsonl", "lineage.json", "config.json", "result.json"):
        os.mkfifo(elsewhere / name)  # opened for reading, any of them would block: the test would time out
    fork = write_lineage(write_run(tmp_path / "served" / "fork", steps=3), elsewhere, 2)
    _, [run] = runs_of(fork)
    assert run["lineage"]["parent"] == {"id": None, "name": "secret-run", "run_dir": str(elsewhere), "step": 2,
                                        "served": False, "config_hash": "a" * 64}
    assert run["lineage"]["depth"] == 0 and run["warnings"] == []


def test_an_untrusted_lineage_is_skipped_with_a_warning_never_a_500(tmp_path):
    base = write_run(tmp_path / "base", steps=2)
    cases = {
        "not-json": "{nope",
        "no-parent": json.dumps({"overrides": []}),
        "bad-step": json.dumps({"parent": {"run_dir": str(base), "step": -1}}),
        "bad-dir": json.dumps({"parent": {"run_dir": 7, "step": 1}}),
        "huge": json.dumps({"parent": {"run_dir": str(base), "step": 1}, "pad": "x" * MAX_LINEAGE_BYTES}),
    }
    dirs = [base]
    for name, text in cases.items():
        d = write_run(tmp_path / name, steps=1)
        (d / "lineage.json").write_text(text)
        dirs.append(d)
    many = write_lineage(write_run(tmp_path / "many", steps=1), base, 1, tuple(f"k{i}=1" for i in range(MAX_OVERRIDES + 7)))
    client, runs = runs_of(*dirs, many)
    for run in runs[1:-1]:
        assert run["lineage"]["parent"] is None
        [warning] = run["warnings"]
        assert warning.startswith("lineage.json: "), warning
    assert "not JSON" in runs[1]["warnings"][0] and "parent.step" in runs[3]["warnings"][0]
    assert "more than the viewer reads" in runs[5]["warnings"][0]
    assert len(runs[-1]["lineage"]["overrides"]) == MAX_OVERRIDES and runs[-1]["lineage"]["more_overrides"] == 7
    (dirs[1] / "lineage.json").write_text(json.dumps({"parent": {"run_dir": str(base), "step": 1}}))  # mended: read again
    assert client.get("/api/runs").json()[1]["warnings"] == []
    assert client.get("/api/runs/1/lineage").json()["parent"]["id"] == 0


def test_a_cycle_of_pointers_is_cut(tmp_path):
    a, b = write_run(tmp_path / "a", steps=1), write_run(tmp_path / "b", steps=1)
    write_lineage(a, b, 1)
    write_lineage(b, a, 1)
    _, runs = runs_of(a, b)
    assert runs[0]["lineage"]["parent"]["id"] is None and runs[1]["lineage"]["parent"]["id"] == 0
    assert [r["lineage"]["depth"] for r in runs] == [0, 1]


def test_the_page_shows_a_fork_over_its_parents_curve(tmp_path, browser_page):  # noqa: F811
    page = browser_page
    parent = write_run(tmp_path / "arith", steps=6)
    fork = write_lineage(write_run(tmp_path / "arith-fork-3", steps=5), parent, 3, ("stages.0.optimizer.lr=1e-4",))
    with running([parent, fork]) as url:
        page.goto(url)
        page.wait_for_selector("body[data-ready='1']")
        assert "fork of arith @ 3: stages.0.optimizer.lr=1e-4" in page.inner_text("#run-1")
        page.select_option("#metric", "losses/total")
        assert page.locator("#chart path.series").count() == 2 and page.locator("#chart path.parent").count() == 0
        mark = page.locator("#chart line.fork-mark")
        assert mark.count() == 1 and mark.get_attribute("data-step") == "3" and mark.get_attribute("data-run") == "1"
        page.uncheck("#runs input[aria-label='show arith']")  # the fork alone: its parent comes dashed beneath it
        dashed = page.locator("#chart path.parent")
        assert dashed.count() == 1 and dashed.get_attribute("data-parent-of") == "1"
        assert dashed.get_attribute("data-run") == "0" and dashed.get_attribute("data-points") == "6"
        assert "arith (parent of arith-fork-3, dashed)" in page.inner_text("#legend")
        # the legend says the last value logged (losses/total = 1/step), not the smoothed curve's end
        assert "arith-fork-3: 0.2 at step 5" in page.inner_text("#legend")
        page.uncheck("#runs input[aria-label='show arith-fork-3']")
        assert page.locator("#chart path").count() == 0


def test_a_live_setting_change_is_marked_at_its_step(tmp_path, browser_page):  # noqa: F811
    page = browser_page
    run = write_run(tmp_path / "steered", steps=5)
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    rows[3]["live/stages.0.optimizer.lr"] = 0.0001  # `opentinker job set` took effect at step 4
    (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    with running([run]) as url:
        page.goto(url)
        page.wait_for_selector("body[data-ready='1']")
        page.select_option("#metric", "losses/total")
        mark = page.locator("#chart line.live-mark")
        assert mark.count() == 1 and mark.get_attribute("data-step") == "4"
        assert mark.locator("title").text_content() == "steered: stages.0.optimizer.lr = 1.00e-4 from step 4"
        assert page.locator("#chart line.fork-mark").count() == 0
