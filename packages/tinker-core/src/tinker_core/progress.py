"""What a progress display shows of a run: the headline metrics and the time left.

Shared by ``opentinker train`` (tinker-algos) and ``opentinker watch`` (tinker-client), so both
show the same numbers the same way, in the same bar (:func:`progress_bar`). The bar is drawn with
rich, which tinker-core does not depend on (an env package never draws one): it is the
``tinker-core[progress]`` extra, and the two packages that call :func:`progress_bar` depend on
rich themselves. Importing this module never imports rich.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from rich.console import Console
    from rich.progress import Progress

HEADLINE_METRICS: dict[str, str] = {
    "env/reward_mean": "reward",
    "eval/accuracy": "eval acc",
    "losses/total": "loss",
    "optim/grad_norm": "grad",
    "kl/sample_train": "kl",
    "rollout/tokens_per_s": "tok/s",
}
"""The metrics a progress bar shows, in this order, with their short labels."""


HINT_STYLE = "yellow"
"""Log lines starting with ``hint:`` or ``warning:`` (e.g. the learning-signal hint) stand out in this style."""


def log_style(line: str) -> str | None:
    """The style of a job's log line above the bar: :data:`HINT_STYLE` for a hint or warning, else None."""
    return HINT_STYLE if line.startswith(("hint:", "warning:")) else None


def headline(metrics: Mapping[str, float], limit: int = 4) -> str:
    """The first ``limit`` headline metrics present in ``metrics``: ``reward 0.25  loss 1.2 ...``."""
    shown = [f"{label} {metrics[key]:.3g}" for key, label in HEADLINE_METRICS.items() if key in metrics]
    return "  ".join(shown[:limit])


def format_duration(seconds: float) -> str:
    """``75.2`` -> ``1:15``; ``3725`` -> ``1:02:05``."""
    s = max(0, round(seconds))
    h, rest = divmod(s, 3600)
    m, s = divmod(rest, 60)
    return f"{h}:{m:02d}:{s:02d}" if h else f"{m}:{s:02d}"


class StepTimes:
    """The time left, from the seconds each reported step took (``time/step_s`` plus
    ``time/eval_s``), averaged over the last ``window`` reports.

    Read from the metrics rather than the wall clock, so a watcher that replays a job's history
    (every report arriving at once) estimates the same as one that followed it live.
    """

    def __init__(self, window: int = 20) -> None:
        self.recent: deque[float] = deque(maxlen=window)

    def add(self, metrics: Mapping[str, float]) -> None:
        step_s = metrics.get("time/step_s")
        if step_s is not None:
            self.recent.append(float(step_s) + float(metrics.get("time/eval_s", 0.0)))

    def eta(self, done: int, total: int | None) -> str:
        """``eta 1:15`` for the steps left, or ``""`` before a step was timed (or without a total)."""
        if not self.recent or total is None:
            return ""
        left = max(total - done, 0) * sum(self.recent) / len(self.recent)
        return f"eta {format_duration(left)}"


def progress_bar(console: Console, *, transient: bool | None = None) -> Progress:
    """The rich progress bar of a run on ``console``: spinner and status, bar, steps done of the
    total, elapsed time, then the task's ``eta`` and ``summary`` fields (:meth:`StepTimes.eta`,
    :func:`headline`). Needs rich (``tinker-core[progress]``)."""
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        SpinnerColumn,
        TextColumn,
        TimeElapsedColumn,
    )

    options = {} if transient is None else {"transient": transient}
    return Progress(
        SpinnerColumn(),
        TextColumn("{task.description}"),
        BarColumn(bar_width=24),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        TextColumn("{task.fields[eta]}"),
        TextColumn("{task.fields[summary]}"),
        console=console,
        **options,
    )
