"""The learning curve of a tinker-cookbook run against the OpenTinker gateway: its
``metrics.jsonl`` with the machine's load average beside each step, as JSON lines and a PNG.

    python bench/tinker_cookbook_curve.py LOG_PATH LOAD_LOG OUT_JSONL OUT_PNG [TITLE]

``LOAD_LOG`` has lines ``<unix time> <load1> <load5> <load15>`` (sampled every 30 s while the run
went, e.g. ``while true; do echo "$(date +%s) $(cut -d' ' -f1-3 /proc/loadavg)"; sleep 30; done``);
each step gets the mean 1-minute load over its own time span (the step's end is its metrics
row's time: ``metrics.jsonl``'s modification order, recovered from ``time/total``).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

KEYS = ("env/all/correct", "env/all/format", "env/all/reward/total", "optim/entropy", "time/total")


def main(log_path: str, load_log: str, out_jsonl: str, out_png: str, title: str = "") -> None:
    rows = [json.loads(line) for line in (Path(log_path) / "metrics.jsonl").read_text().splitlines()]
    steps = [r for r in rows if "env/all/correct" in r]
    loads = [tuple(map(float, line.split()[:2])) for line in Path(load_log).read_text().splitlines() if line.strip()]
    # the steps ran back to back up to the file's last write: walk back by their durations
    end = (Path(log_path) / "metrics.jsonl").stat().st_mtime
    spans = []
    for r in reversed(steps):
        spans.append((end - r["time/total"], end))
        end -= r["time/total"]
    spans.reverse()
    out = []
    for r, (t0, t1) in zip(steps, spans, strict=True):
        inside = [load for t, load in loads if t0 <= t <= t1] or [min(loads, key=lambda x: abs(x[0] - t1))[1]]
        out.append({"step": r["step"], "episodes": r.get("env/all/total_episodes"), **{k: r[k] for k in KEYS if k in r},
                    "loadavg_1m": round(sum(inside) / len(inside), 2)})
    Path(out_jsonl).write_text("".join(json.dumps(o) + "\n" for o in out))

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.4, 3.6), dpi=100)
    x = [o["step"] for o in out]
    n = out[0].get("episodes", "")
    ax.plot(x, [o["env/all/correct"] for o in out], "o-", label=f"correct (fraction of {n} samples)")
    ax.plot(x, [o["env/all/reward/total"] for o in out], "s-", label="reward (correct + 0.1 (format - 1))")
    ax.plot(x, [o["env/all/format"] for o in out], "^--", alpha=0.6, label="format (stopped at <|im_end|>)")
    ax.set_xlabel("step")
    ax.set_title(title or "tinker-cookbook RL on SmolLM2-135M-Instruct (LoRA) through the Tinker API gateway", fontsize=9)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(out_png)
    for o in out:
        print(o)


if __name__ == "__main__":
    main(*sys.argv[1:6])
