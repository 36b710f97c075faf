"""Screenshots of ``opentinker view``'s main views for docs/guides/viewer.md, taken in headless
Chromium (Debian's ``/usr/bin/chromium``, driven by playwright, as the viewer's browser tests do).

It views a synthetic GRPO run (:class:`tinker_client.viewer.sample.SampleRun`: 300 steps,
16 episodes a step in groups of 4) beside a real run dir when one is given::

    uv run --locked opentinker train examples/arithmetic.yaml --run-dir /tmp/viewer-run   # optional
    uv run --locked python bench/viewer_screenshots.py [--real /tmp/viewer-run] [--out docs/images/viewer]

Not a benchmark (the nox bench session runs ``bench_*.py`` only).
"""

from __future__ import annotations

import argparse
import json
import math
import tempfile
from pathlib import Path

from playwright.sync_api import sync_playwright

from tinker_client.viewer.command import running
from tinker_client.viewer.sample import SampleRun

CHROMIUM = "/usr/bin/chromium"
ARGS = ["--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-background-networking"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--real", type=Path, help="a real run dir to view beside the synthetic one")
    parser.add_argument("--out", type=Path, default=Path("docs/images/viewer"), help="where the PNGs go")
    ns = parser.parse_args()
    ns.out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        demo = Path(tmp) / "grpo-demo"
        SampleRun(demo, seed=1).write(300)
        other = Path(tmp) / "grpo-demo-seed2"
        SampleRun(other, seed=2).write(240)
        dirs = [demo, other] + ([ns.real] if ns.real else [])
        with running(dirs) as url, sync_playwright() as p:
            browser = p.chromium.launch(executable_path=CHROMIUM, headless=True, args=ARGS)
            page = browser.new_page(viewport={"width": 1280, "height": 860}, bypass_csp=True)  # wait_for_function evaluates strings
            page.goto(url)
            page.wait_for_selector("body[data-ready='1']")
            page.select_option("#metric", "env/reward_mean")
            page.wait_for_selector("#chart path.series")
            shot(page, ns.out / "curves.png")
            page.click("#tabs [data-tab=rollouts]")
            page.wait_for_selector("#rollouts .episode")
            page.fill("#rollouts .max-reward", "0")
            page.wait_for_function("[...document.querySelectorAll('#rollouts .episodes .episode')].every(e => e.dataset.reward === '0')")
            page.click("#rollouts .episodes .episode >> nth=1 >> .group-link")
            page.wait_for_selector("#rollouts .group-view:not([hidden]) .episode")
            shot(page, ns.out / "rollouts.png")
            page.click("#tabs [data-tab=eval]")
            page.wait_for_selector("#eval .episode")
            shot(page, ns.out / "eval.png")
            page.click("#tabs [data-tab=trace]")
            page.wait_for_selector("#trace-body table")
            shot(page, ns.out / "phases.png")
            if ns.real:
                page.select_option("#current-run", str(len(dirs) - 1))
                page.click("#tabs [data-tab=checkpoints]")
                page.wait_for_selector("#checkpoint-table")
                shot(page, ns.out / "checkpoints.png")
            browser.close()
        lineage_shot(Path(tmp), ns.out)


class _ForkedFaster(SampleRun):
    """A fork at ``at`` whose setting change makes it learn faster from there on."""

    at = 150

    def skill(self, step: int) -> float:
        base = super().skill(step)
        return base if step <= self.at else min(0.97, base + 0.15 * (1 - math.exp(-(step - self.at) / 60)))


def lineage_shot(tmp: Path, out: Path) -> None:
    """lineage.png: a run and its fork at step 150 (the same seed, so equal up to there) with a
    live change at step 220, shown with only the fork ticked: the parent comes dashed beneath it."""
    parent = SampleRun(tmp / "arithmetic", seed=4).write(300).path
    fork = _ForkedFaster(tmp / "arithmetic-fork-150", seed=4).write(300).path
    (fork / "lineage.json").write_text(json.dumps({
        "parent": {"run_dir": str(parent), "step": 150, "checkpoint": str(parent / "checkpoints/step-000150")},
        "overrides": ["stages.0.optimizer.lr=2e-3"], "created_unix": 0.0}))
    rows = [json.loads(line) for line in (fork / "metrics.jsonl").read_text().splitlines()]
    for row in rows:
        if row["step"] == 220:
            row["live/stages.0.rollout.temperature"] = 0.7
    (fork / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    with running([parent, fork]) as url, sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, headless=True, args=ARGS)
        page = browser.new_page(viewport={"width": 1280, "height": 620})
        page.goto(url)
        page.wait_for_selector("body[data-ready='1']")
        page.select_option("#metric", "eval/accuracy")
        page.uncheck("#runs input[aria-label='show arithmetic']")
        page.wait_for_selector("#chart path.parent")
        shot(page, out / "lineage.png")
        browser.close()


def shot(page, path: Path) -> None:
    page.wait_for_timeout(300)
    page.screenshot(path=str(path), full_page=False)
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
