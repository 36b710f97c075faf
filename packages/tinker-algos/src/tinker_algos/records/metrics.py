"""Where metrics go: ``metrics.jsonl``, the experiment trackers, and the learning-curve PNG.

Keys are namespaced (``env/reward_mean``, ``losses/policy``, ``optim/grad_norm``,
``rollout/tokens_per_s``, ``kl/sample_train``, ``eval/accuracy``). Keys under ``time/`` and keys
ending in ``_per_s`` measure wall-clock time, keys under ``memory/`` peak memory
(:mod:`tinker_algos.records.memory`); every other value is deterministic under a seed.
Trackers (TensorBoard, W&B, MLflow, trackio) are in :mod:`tinker_algos.records.trackers`; matplotlib is
optional: without it :func:`plot_curves` warns once and draws nothing. ``metrics.jsonl`` is read
with :func:`tinker_core.run_files.read_metrics` (re-exported here as :func:`read_metrics`).
"""

from __future__ import annotations

import json
import math
import re
from pathlib import Path
from typing import Any

from tinker_algos.records.trackers import (
    Tracker,
    close_all,
    log_table_to,
    log_to,
    open_trackers,
    warn_once,
)
from tinker_core.config import JobConfig, LoggingConfig
from tinker_core.run_files import METRICS_FILE, read_metrics

__all__ = ["CURVES", "KL_NEGLIGIBLE", "MetricsLog", "curve_panels", "is_timing", "plot_curves", "read_metrics"]

CURVES = (
    ("reward", ("env/reward_mean",)),
    ("held-out accuracy", ("eval/accuracy",)),
    ("KL", ("kl/policy_ref", "kl/sample_train")),
    ("loss", ("losses/total",)),
    ("held-out win rate by seat", ("eval/seat1/win_rate", "eval/seat2/win_rate")),
    ("held-out Elo", ("eval/elo",)),
)
"""The candidate panels of the learning curve: title and the keys drawn in it."""
ROLE_REWARD = re.compile(r"^eval/(?:vs/(?P<opponent>[^/]+)/)?(?P<role>[^/]+)/reward_mean$")
"""A multi-agent held-out evaluation's per-role reward (``eval/<role>/reward_mean``, and per
opponent ``eval/vs/<opponent>/<role>/reward_mean``): a panel of each role's curve, per opponent."""
KL_NEGLIGIBLE = 1e-6
"""A KL panel whose values all stay below this (in absolute value) is left out of the plot."""


def is_timing(key: str) -> bool:
    """Whether ``key`` measures the machine (wall time under ``time/`` or ``*_per_s``, peak memory
    under ``memory/``) rather than the run: such values differ between runs of the same seed."""
    return key.startswith(("time/", "memory/")) or key.endswith("_per_s")


class MetricsLog:
    """Appends one JSON object per logged step and sends it to the trackers; on resume, drops
    lines after the checkpoint. ``tensorboard=True`` with no ``trackers`` given is the default
    TensorBoard output (skipped with one warning when tensorboard is not installed)."""

    def __init__(
        self, run_dir: Path, *, jsonl: bool = True, tensorboard: bool = True, resume_step: int = 0,
        trackers: dict[str, Tracker] | None = None,
    ) -> None:
        self.path = run_dir / METRICS_FILE
        self.jsonl = jsonl
        self.rows: list[dict[str, Any]] = []
        if self.path.exists():
            kept = [r for r in read_metrics(self.path) if r["step"] <= resume_step]
            self.rows = kept
            self.path.write_text("".join(json.dumps(r, sort_keys=True) + "\n" for r in kept), encoding="utf-8")
        if trackers is None:
            trackers = open_trackers(run_dir, LoggingConfig(tensorboard=tensorboard), resume_step=resume_step)
        self.trackers = trackers

    @classmethod
    def for_job(cls, run_dir: Path, job: JobConfig, *, resume_step: int = 0) -> MetricsLog:
        """The log ``job.logging`` asks for: JSONL and the trackers of ``logging.report_to``."""
        trackers = open_trackers(
            run_dir, job.logging, name=job.name, config=job.model_dump(mode="json"), resume_step=resume_step
        )
        return cls(run_dir, jsonl=job.logging.jsonl, resume_step=resume_step, trackers=trackers)

    def log(self, step: int, stage: str, metrics: dict[str, float]) -> None:
        row = {"step": step, "stage": stage, **{k: float(v) for k, v in metrics.items()}}
        self.rows.append(row)
        if self.jsonl:
            with self.path.open("a", encoding="utf-8") as f:
                f.write(json.dumps(row, sort_keys=True) + "\n")
        log_to(self.trackers, step, metrics)

    def log_rollouts(self, step: int, records: list[Any]) -> None:
        """Recorded episodes (:class:`tinker_core.episodes.RolloutRecord`) as a ``rollouts``
        table, to the trackers that take tables (wandb, mlflow, trackio)."""
        from tinker_algos.records.recording import TABLE_COLUMNS, table_rows

        log_table_to(self.trackers, step, "rollouts", list(TABLE_COLUMNS), table_rows(records))

    def close(self) -> None:
        close_all(self.trackers)


def curve_panels(rows: list[dict[str, Any]]) -> list[tuple[str, list[str], str]]:
    """The panels worth drawing: ``(title, keys, y scale)`` for each of :data:`CURVES` that has
    finite values logged. KL is left out when every value is below :data:`KL_NEGLIGIBLE` (noise
    such as 1e-14 says nothing) and otherwise drawn on a log scale (symlog when it goes negative)."""
    panels = []
    for title, keys in CURVES:
        logged = [k for k in keys if any(k in r and math.isfinite(r[k]) for r in rows)]
        if not logged:
            continue
        scale = "linear"
        if title == "KL":
            values = [r[k] for r in rows for k in logged if k in r and math.isfinite(r[k])]
            if max(abs(v) for v in values) < KL_NEGLIGIBLE:
                continue
            scale = "log" if min(values) > 0 else "symlog"
        panels.append((title, logged, scale))
    return panels + role_reward_panels(rows)


def role_reward_panels(rows: list[dict[str, Any]]) -> list[tuple[str, list[str], str]]:
    """The per-seat curves of a multi-agent run: one panel of the roles' held-out rewards
    (:data:`ROLE_REWARD`) per evaluation opponent when it evaluates against several
    (``eval/vs/<opponent>/...``), else one of ``eval/<role>/reward_mean``."""
    by_opponent: dict[str | None, list[str]] = {}
    for key in sorted({k for r in rows for k, v in r.items() if isinstance(v, (int, float)) and math.isfinite(v)}):
        m = ROLE_REWARD.match(key)
        if m is not None and m["role"] != "vs":
            by_opponent.setdefault(m["opponent"], []).append(key)
    if any(o is not None for o in by_opponent):
        return [(f"held-out reward by role vs {o}", keys, "linear") for o, keys in by_opponent.items() if o is not None]
    return [("held-out reward by role", by_opponent[None], "linear")] if None in by_opponent else []


def plot_curves(rows: list[dict[str, Any]], path: Path, title: str = "") -> Path | None:
    """A learning-curve PNG with the panels of :func:`curve_panels` against step; None when there
    is nothing to draw or matplotlib is not installed (warned once)."""
    panels = curve_panels(rows)
    if not panels:
        return None
    try:
        import matplotlib
    except ImportError:
        warn_once("missing:matplotlib", "learning curve: needs the matplotlib package; pip install 'tinker-algos[plot]'; no curve.png")
        return None
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    cols = 1 if len(panels) == 1 else 2
    nrows = (len(panels) + 1) // 2
    fig, axes = plt.subplots(nrows, cols, figsize=(5 * cols, 3.5 * nrows), squeeze=False)
    boundaries = [rows[i]["step"] for i in range(1, len(rows)) if rows[i]["stage"] != rows[i - 1]["stage"]]
    for ax, (label, keys, scale) in zip(axes.flat, panels, strict=False):
        for key in keys:
            pts = [(r["step"], r[key]) for r in rows if key in r and math.isfinite(r[key])]
            xs, ys = zip(*pts, strict=True)
            ax.plot(xs, ys, marker="o" if len(pts) < 30 else None, markersize=3, label=key)
        for b in boundaries:
            ax.axvline(b - 0.5, color="grey", linestyle=":", linewidth=1)
        if scale == "symlog":
            ax.set_yscale("symlog", linthresh=KL_NEGLIGIBLE)
        elif scale == "log":
            ax.set_yscale("log")
        ax.set_title(label + (" (log scale)" if scale != "linear" else ""))
        ax.set_xlabel("step")
        ax.legend(fontsize=7)
    for ax in list(axes.flat)[len(panels):]:
        ax.set_visible(False)
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path
