"""``opentinker view`` on a 10,000-step run: how long the API and the page take to load.

A synthetic run dir (:class:`tinker_client.viewer.sample.SampleRun`: 10,000 GRPO steps of 16
episodes in groups of 4, 16 held-out episodes every 10 steps, a metrics row and six trace events
a step; ``--quick``: 1,000 steps) is written to a temporary directory, then measured:

* **API, cold**: on a fresh server (which starts indexing the episodes and the trace in a
  background thread), the requests the page makes on load, each over HTTP to the real uvicorn
  server: ``/api/runs`` and ``/metrics`` (they read ``metrics.jsonl`` only), ``/rollouts/index``
  (it waits for the index), a page of the last step's rollouts; the seconds from start to every
  file indexed and the resident memory the index costs; the index built alone in one thread
  (wall and CPU seconds: on a shared machine the CPU seconds are what it costs);
* **API, warm**: the poll the page repeats (``/api/runs``, nothing changed), a step's rollouts,
  reward 0 over all steps, a text search over every episode (capped at the scan limit), the
  phase table (median of repeats);
* **page**: headless Chromium (Debian's ``/usr/bin/chromium``, playwright) from navigation to
  the curve drawn, on a fresh (cold) server and again on a warm one; opening the rollout tab.

    uv run --no-sync python bench/bench_viewer.py [--quick]
"""

from __future__ import annotations

import os
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx
from _common import parse_args, print_table, time_calls, write_results

from tinker_client.viewer.command import running
from tinker_client.viewer.data import RunDir
from tinker_client.viewer.sample import SampleRun

CHROMIUM = "/usr/bin/chromium"
ARGS = ["--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-background-networking"]


def rss_mb() -> float:
    """This process's resident memory (VmRSS) in MB."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def get(url: str, **params: Any) -> tuple[float, int]:
    """Seconds for one GET and the response's size in bytes."""
    t0 = time.perf_counter()
    response = httpx.get(url, params=params, timeout=600)
    response.raise_for_status()
    return time.perf_counter() - t0, len(response.content)


def page_load(url: str) -> dict[str, float]:
    """Seconds from navigation to the first curve drawn, then to the rollout tab's episodes
    (NaN, with a note, where there is no Chromium to drive)."""
    if not Path(CHROMIUM).is_file():
        print(f"no {CHROMIUM} (apt-get install chromium): the page load is not measured", flush=True)
        return {"to_curves_s": float("nan"), "rollouts_tab_s": float("nan")}
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, headless=True, args=ARGS)
        page = browser.new_page(viewport={"width": 1280, "height": 900})
        t0 = time.perf_counter()
        page.goto(url, timeout=600_000)
        page.wait_for_selector("#chart path.series", timeout=600_000)
        curves = time.perf_counter() - t0
        t1 = time.perf_counter()
        page.click("#tabs [data-tab=rollouts]")
        page.wait_for_selector("#rollouts .episode", timeout=600_000)
        rollouts = time.perf_counter() - t1
        browser.close()
    return {"to_curves_s": curves, "rollouts_tab_s": rollouts}


def main() -> None:
    args = parse_args(__doc__.splitlines()[0])
    steps = 1_000 if args.quick else 10_000
    repeats = 3 if args.quick else 7
    with tempfile.TemporaryDirectory() as tmp:
        run = Path(tmp) / "run-10k"
        t0 = time.perf_counter()
        SampleRun(run, per_step=16, group_size=4, eval_every=10, eval_size=16).write(steps)
        written_s = time.perf_counter() - t0
        sizes = {p.name: p.stat().st_size for p in run.iterdir() if p.is_file()}
        print(f"wrote {steps} steps in {written_s:.1f} s: " + ", ".join(f"{k} {v / 1e6:.1f} MB" for k, v in sizes.items()), flush=True)

        rss0, started = rss_mb(), time.perf_counter()
        with running([run]) as url:  # cold: the server indexes the episodes and trace in the background
            cold = {"runs": get(url + "api/runs")}
            cold["metrics"] = get(url + "api/runs/0/metrics")
            cold["rollouts_index"] = get(url + "api/runs/0/rollouts/index")  # waits for the background index
            indexed_s = time.perf_counter() - started
            rss_index = rss_mb() - rss0
            cold["rollouts_last_step"] = get(url + "api/runs/0/rollouts", step=steps, limit=20)
            warm_cases = {
                "poll (/api/runs, nothing new)": lambda: get(url + "api/runs"),
                "a step's rollouts (20 of 16)": lambda: get(url + "api/runs/0/rollouts", step=steps // 2, limit=20),
                "reward 0, all steps (page of 50)": lambda: get(url + "api/runs/0/rollouts", max_reward=0, limit=50),
                "text search, all steps": lambda: get(url + "api/runs/0/rollouts", q="what is 99 + 99", limit=50),
                "phase table (/trace)": lambda: get(url + "api/runs/0/trace"),
            }
            warm = {name: time_calls(fn, warmup=1, repeats=repeats).summary() for name, fn in warm_cases.items()}
            page_warm = page_load(url)
        with running([run]) as url:  # a fresh server: the page's load includes the indexing
            page_cold = page_load(url)
        c0, t0 = time.process_time(), time.perf_counter()
        RunDir(run, "alone").refresh()  # the index alone, in this thread: its CPU cost
        index_alone = {"wall_s": time.perf_counter() - t0, "cpu_s": time.process_time() - c0}

    rows = [[f"cold {k}", v[0], v[1] / 1e3] for k, v in cold.items()]
    rows += [[k, v["median_s"], float("nan")] for k, v in warm.items()]
    print_table(f"Viewer API, {steps:,} steps ({sum(sizes.values()) / 1e6:.0f} MB of run files)", ["request", "seconds", "kB"], rows)
    print(f"server start to every file indexed: {indexed_s:.2f} s; the index holds {rss_index:.0f} MB; "
          f"indexing alone: {index_alone['wall_s']:.2f} s wall, {index_alone['cpu_s']:.2f} s CPU", flush=True)
    print_table("Viewer page (headless Chromium)", ["case", "to curves (s)", "rollouts tab (s)"],
                [["cold server", page_cold["to_curves_s"], page_cold["rollouts_tab_s"]],
                 ["warm server", page_warm["to_curves_s"], page_warm["rollouts_tab_s"]]])
    write_results(args, "viewer", {
        "steps": steps, "episodes_per_step": 16, "file_bytes": sizes, "write_s": written_s,
        "api_cold": {k: {"seconds": v[0], "bytes": v[1]} for k, v in cold.items()},
        "indexed_s": indexed_s, "index_alone": index_alone, "index_rss_mb": rss_index, "api_warm": warm, "page_cold": page_cold, "page_warm": page_warm,
        "cpus": os.cpu_count(),
    }, with_torch=False)


if __name__ == "__main__":
    main()
