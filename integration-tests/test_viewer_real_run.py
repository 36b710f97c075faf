"""``opentinker view`` over a run dir that training wrote (not the synthetic fixtures of the unit
tests): a few GRPO steps of the tiny model, then the viewer's JSON API and its page, checked
against the run's own files read by tinker-core's readers (metrics.jsonl, rollouts.jsonl with
tinker_core.run_files.read_rollouts, trace.json with tinker_core.traces)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest

from tinker_client.viewer.command import running
from tinker_core.run_files import read_rollouts
from tinker_core.traces import STEP, read_trace, summarise

JOB = """
name: viewer-real
seed: 0
model: {name: tiny}
env: {id: math/arithmetic-v0, kwargs: {digits: 1, ops: ["+"]}}
stages:
  - {name: grpo, algorithm: {name: grpo, steps: 3, eval_every: 2, eval_size: 4}}
rollout: {prompts_per_step: 2, group_size: 2, max_new_tokens: 3}
logging: {tensorboard: false}
"""
CHROMIUM = Path("/usr/bin/chromium")


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory) -> Path:
    work = tmp_path_factory.mktemp("viewer-real")
    (work / "job.yaml").write_text(JOB)
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "OPENTINKER_CACHE": str(work / "cache")}
    result = subprocess.run([sys.executable, "-m", "tinker_client.cli", "train", "job.yaml", "--run-dir", "run"],
                            capture_output=True, text=True, env=env, cwd=work, timeout=600)
    assert result.returncode == 0, result.stderr
    return work / "run"


def get(url: str):
    with urllib.request.urlopen(url, timeout=30) as r:
        return json.load(r)


def test_the_api_serves_what_training_wrote(run_dir):
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines() if line.strip()]
    records = read_rollouts(run_dir)
    events = read_trace(run_dir)
    assert [r["step"] for r in rows] == [1, 2, 3] and records and events  # training wrote all three
    with running([run_dir]) as url:
        [run] = get(url + "api/runs")
        assert (run["status"], run["metrics_rows"], run["last_step"], run["stages"]) == ("completed", 3, 3, ["grpo"])

        # curves: every metric of metrics.jsonl, by step
        metrics = get(url + "api/runs/0/metrics")
        assert metrics["steps"] == [1, 2, 3]
        assert set(metrics["series"]) == {k for r in rows for k in r} - {"stage", "step"}
        for key in ("env/reward_mean", "losses/total", "eval/accuracy"):
            assert metrics["series"][key] == [r.get(key) for r in rows]

        # the index and a step's episodes: rewards, sampled tokens and their logprobs, the outcome
        index = get(url + "api/runs/0/rollouts/index")
        train_steps = sorted({r.step for r in records if r.kind == "train"})
        eval_steps = sorted({r.step for r in records if r.kind == "eval"})
        assert index["steps"] == {"train": train_steps, "eval": eval_steps} and index["count"] == len(records)
        for kind, step in (("train", 2), ("eval", eval_steps[0])):
            page = get(url + f"api/runs/0/rollouts?kind={kind}&step={step}")
            expected = [r for r in records if r.kind == kind and r.step == step]
            assert page["total"] == len(expected) > 0
            for got, want in zip(page["items"], expected, strict=True):
                assert (got["group"], got["episode"], got["reward"], got["stop_reason"]) == \
                    (want.group, want.episode, want.reward, want.stop_reason)
                assert (got["success"], got["truncated"], got["error"]) == (want.success, want.truncated, want.error)
                policy = [t for t in got["turns"] if t["role"] == "policy"]
                assert [t["token_texts"] for t in policy] == [t.token_texts for t in want.turns if t.role == "policy"]
                assert [t["logprobs"] for t in policy] == [t.logprobs for t in want.turns if t.role == "policy"]
                assert all(len(t["token_texts"]) == len(t["logprobs"]) > 0 for t in policy)

        # the phase table: tinker_core.traces.summarise of trace.json, shares of the step time
        trace = get(url + "api/runs/0/trace")
        stats = summarise(events)
        assert trace["present"] and trace["steps"] == 3
        assert trace["step_total_ms"] == pytest.approx(sum(s.total_ms for s in stats if s.name == STEP))
        assert {p["name"]: p["share"] for p in trace["phases"]} == pytest.approx(
            {s.name: s.share for s in stats if s.name != STEP})
        assert {"rollout", "forward_backward", "optim_step"} <= {p["name"] for p in trace["phases"]}

        assert get(url + "api/runs/0/config")["config"]["name"] == "viewer-real"
        assert [c["step"] for c in get(url + "api/runs/0/checkpoints")] == [3]


def test_the_page_shows_the_real_run(run_dir):
    if not CHROMIUM.is_file():
        pytest.fail(f"{CHROMIUM} is missing: install Debian's chromium package (apt-get install chromium) to run the browser tests")
    from playwright.sync_api import sync_playwright

    records = [r for r in read_rollouts(run_dir) if r.kind == "train" and r.step == 3]
    with running([run_dir]) as url, sync_playwright() as p:
        browser = p.chromium.launch(executable_path=str(CHROMIUM), headless=True, args=["--no-sandbox", "--disable-gpu"])
        try:
            page = browser.new_page(viewport={"width": 1280, "height": 900})
            errors: list[str] = []
            page.on("pageerror", lambda e: errors.append(str(e)))
            page.goto(url)
            page.wait_for_selector("body[data-ready='1']")
            page.select_option("#metric", "env/reward_mean")
            assert page.get_attribute("#chart path.series[data-run='0']", "data-points") == "3"
            page.click("#tabs [data-tab=rollouts]")
            page.wait_for_selector("#rollouts .episode")
            assert page.inner_text("#rollouts .step-label") == "3"
            assert page.locator("#rollouts .episodes .episode").count() == len(records)
            tokens = page.eval_on_selector_all("#rollouts .episodes .episode >> nth=0 >> .tok", "ts => ts.map(t => t.textContent)")
            assert tokens == records[0].turns[0].token_texts
            outcome = "success" if records[0].success else "no success"
            assert outcome in page.inner_text("#rollouts .episodes .episode >> nth=0 >> .card-head")
            page.click("#tabs [data-tab=trace]")
            page.wait_for_selector("#trace-body table")
            assert "forward_backward" in page.inner_text("#trace-body table")
            assert errors == [], errors
        finally:
            browser.close()
