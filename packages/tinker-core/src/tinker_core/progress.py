"""What a progress display shows of a run: the headline metrics and the time left.

Shared by ``opentinker train`` (tinker-algos) and ``opentinker watch`` (tinker-client), so both
show the same numbers the same way, in the same bar (:func:`progress_bar`). The bar is drawn with
rich, which tinker-core does not depend on (an env package never draws one): it is the
``tinker-core[progress]`` extra, and the two packages that call :func:`progress_bar` depend on
rich themselves. Importing this module never imports rich.

How much the commands say is one setting, :func:`set_verbosity` (``-q`` / ``-v`` /
``--log-level`` of every ``opentinker`` command): a :mod:`logging` level that the root logger
takes and that progress displays read (:func:`is_quiet`, :func:`is_verbose`).
"""

from __future__ import annotations

import logging
import sys
from collections import deque
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
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


LOG_FORMAT = "%(levelname)s %(name)s: %(message)s"
_verbosity = logging.WARNING


def set_verbosity(level: int) -> None:
    """Make ``level`` (a :mod:`logging` level) how much this process says: the root logger's
    level (with a stderr handler when it has none) and what :func:`is_quiet` and
    :func:`is_verbose` report. ``WARNING`` is the default; ``ERROR`` and above is quiet (no
    progress, no status lines, errors still shown); ``INFO`` and below is verbose."""
    global _verbosity
    _verbosity = level
    root = logging.getLogger()
    root.setLevel(level)
    if not root.handlers:
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter(LOG_FORMAT))
        root.addHandler(handler)


def verbosity() -> int:
    """The level :func:`set_verbosity` set (``logging.WARNING`` when never called)."""
    return _verbosity


def is_quiet() -> bool:
    """True after ``-q`` (or ``--log-level ERROR``): show no progress and no status lines."""
    return _verbosity >= logging.ERROR


def is_verbose() -> bool:
    """True after ``-v`` (or ``--log-level INFO``/``DEBUG``): show status lines off a terminal too."""
    return _verbosity <= logging.INFO


@contextmanager
def status(console: Console, text: str) -> Iterator[None]:
    """Say what a command is doing while ``text`` (``loading model runs/x/final``) takes a while:
    a rich spinner on a terminal, one plain line otherwise, nothing when :func:`is_quiet`."""
    if is_quiet():
        yield
    elif console.is_terminal:
        with console.status(text):
            yield
    else:
        console.print(f"{text} ...", markup=False, highlight=False, soft_wrap=True)
        yield
