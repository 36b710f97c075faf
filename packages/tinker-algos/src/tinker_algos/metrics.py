"""Where metrics go: ``metrics.jsonl``, TensorBoard, and the learning-curve PNG.

Keys are namespaced (``env/reward_mean``, ``losses/policy``, ``optim/grad_norm``,
``rollout/tokens_per_s``, ``kl/sample_train``, ``eval/accuracy``). Keys under ``time/`` and keys
ending in ``_per_s`` measure wall-clock time; every other value is deterministic under a seed.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

CURVES = (
    ("reward", ("env/reward_mean",)),
    ("held-out accuracy", ("eval/accuracy",)),
    ("KL", ("kl/policy_ref", "kl/sample_train")),
    ("loss", ("losses/total",)),
)


def is_timing(key: str) -> bool:
    return key.startswith("time/") or key.endswith("_per_s")


class MetricsLog:
    """Appends one JSON object per logged step; on resume, drops lines after the checkpoint."""

    def __init__(self, run_dir: Path, *, jsonl: bool = True, tensorboard: bool = True, resume_step: int = 0) -> None:
        self.path = run_dir / "metrics.jsonl"
        self.jsonl = jsonl
        self.rows: list[dict[str, Any]] = []
        if self.path.exists():
            kept = [r for r in read_metrics(self.path) if r["step"] <= resume_step]
            self.rows = kept
            self.path.write_text("".join(json.dumps(r, sort_keys=True) + "\n" for r in kept), encoding="utf-8")
        self.writer: Any = None
        if tensorboard:
            from torch.utils.tensorboard import SummaryWriter

            self.writer = SummaryWriter(log_dir=str(run_dir / "tensorboard"), purge_step=resume_step + 1)

    def log(self, step: int, stage: str, metrics: dict[str, float]) -> None:
        row = {"step": step, "stage": stage, **{k: float(v) for k, v in metrics.items()}}
        self.rows.append(row)
        if self.jsonl:
            with self.path.open("a", encoding="utf-8") as f:
                f.write(json.dumps(row, sort_keys=True) + "\n")
        if self.writer is not None:
            for k, v in metrics.items():
                if math.isfinite(float(v)):
                    self.writer.add_scalar(k, float(v), step)

    def close(self) -> None:
        if self.writer is not None:
            self.writer.flush()
            self.writer.close()


def read_metrics(path: str | Path) -> list[dict[str, Any]]:
    out = []
    for line in Path(path).read_text(encoding="utf-8").splitlines():
        if line.strip():
            try:
                out.append(json.loads(line))
            except json.JSONDecodeError:
                break  # a line cut by a crash: everything after it is gone too
    return out


def plot_curves(rows: list[dict[str, Any]], path: Path, title: str = "") -> Path | None:
    """A 2x2 learning-curve PNG (reward, held-out accuracy, KL, loss against step)."""
    if not rows:
        return None
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(2, 2, figsize=(10, 7))
    boundaries = [rows[i]["step"] for i in range(1, len(rows)) if rows[i]["stage"] != rows[i - 1]["stage"]]
    for ax, (label, keys) in zip(axes.flat, CURVES, strict=True):
        drawn = False
        for key in keys:
            pts = [(r["step"], r[key]) for r in rows if key in r and math.isfinite(r[key])]
            if pts:
                xs, ys = zip(*pts, strict=True)
                ax.plot(xs, ys, marker="o" if len(pts) < 30 else None, markersize=3, label=key)
                drawn = True
        for b in boundaries:
            ax.axvline(b - 0.5, color="grey", linestyle=":", linewidth=1)
        ax.set_title(label)
        ax.set_xlabel("step")
        if drawn:
            ax.legend(fontsize=7)
        else:
            ax.text(0.5, 0.5, "not logged", ha="center", va="center", transform=ax.transAxes, color="grey")
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path
