"""How ``opentinker watch`` (and ``submit --watch``, ``logs``) shows a job's events.

On a terminal: a live progress bar (state, steps done of the job's total, elapsed time, time
left, headline metrics) with the job's state changes and log lines printed above it, word-wrapped.
Piped or redirected: one plain line per event (``[RUNNING] ...``, ``step 3: ...``, log lines), as
scripts and logs expect.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

import typer
from rich.console import Console
from rich.text import Text

from tinker_core.progress import (
    HEADLINE_METRICS,
    StepTimes,
    headline,
    is_quiet,
    log_style,
    progress_bar,
)

if TYPE_CHECKING:
    from tinker_client.jobs import JobClient


def total_steps(config_text: str) -> int | None:
    """The steps of all stages of a job's config, or None when it cannot be read here."""
    from tinker_core.config import load_config

    try:
        return load_config(config_text, check_plugins=False).total_steps
    except Exception:  # a config the scheduler accepted but this client cannot parse: no total
        return None


class WatchDisplay:
    """A live progress display of one job on ``console`` (a terminal)."""

    def __init__(self, total: int | None, console: Console) -> None:
        self.console = console
        self.progress = progress_bar(console)
        self.task = self.progress.add_task("waiting", total=total, eta="", summary="")
        self.total = total
        self.times = StepTimes()
        self.last: dict[str, float] = {}

    def __enter__(self) -> WatchDisplay:
        self.progress.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.progress.update(self.task, eta="")  # the bar that stays says what was, not what is left
        self.progress.stop()

    def state(self, name: str, reason: str) -> None:
        self.progress.console.print(f"[{name}] {reason}".rstrip(), markup=False, highlight=False)
        self.progress.update(self.task, description=name.lower())
        self.progress.refresh()

    def log(self, text: str) -> None:
        self.progress.console.print(Text(text, style=log_style(text) or ""))  # a Text: the style stays off the bar

    def metrics(self, step: int, values: dict[str, float]) -> None:
        self.last.update(values)
        self.times.add(values)
        self.progress.update(
            self.task, completed=step, description="training", eta=self.times.eta(step, self.total), summary=headline(self.last)
        )
        self.progress.refresh()


def plain_metrics_line(step: int, values: Mapping[str, float]) -> str:
    keys = [k for k in HEADLINE_METRICS if k in values] or sorted(values)[:6]
    return f"step {step}: " + "  ".join(f"{k}={values[k]:.4g}" for k in keys)


def follow(client: JobClient, job_id: str, *, logs_only: bool = False, console: Console | None = None) -> int | None:
    """Show a job's events until it ends; the exit code follows its final state (None with
    ``logs_only``: printing the logs succeeds whatever the job's end)."""
    from tinker_client.jobs import pb, state_name

    console = console or Console(highlight=False)
    final = None
    quiet = is_quiet() and not logs_only  # -q: only the result line (the logs are what `logs` prints)
    if logs_only or quiet or not console.is_terminal:
        for event in client.watch(job_id):
            kind = event.WhichOneof("event")
            if kind == "log":
                if not quiet:
                    typer.echo(event.log.text)
            elif logs_only:
                pass
            elif kind == "state_change":
                if not quiet:
                    typer.echo(f"[{state_name(event.state_change.state)}] {event.state_change.reason}".rstrip())
                final = event.state_change.state
            elif kind == "metrics" and not quiet:
                typer.echo(plain_metrics_line(event.metrics.step, event.metrics.values))
        if logs_only:
            return None
    else:
        with WatchDisplay(total_steps(client.get(job_id).config_text), console) as display:
            for event in client.watch(job_id):
                kind = event.WhichOneof("event")
                if kind == "log":
                    display.log(event.log.text)
                elif kind == "state_change":
                    display.state(state_name(event.state_change.state), event.state_change.reason)
                    final = event.state_change.state
                elif kind == "metrics":
                    display.metrics(event.metrics.step, dict(event.metrics.values))
    job = client.get(job_id)
    final = job.state if final is None else final
    typer.echo(f"job {job.id} {state_name(job.state)}; run dir: {job.run_dir}")
    if job.run_dir:
        typer.echo(f"learning curve: {Path(job.run_dir) / 'curve.png'}")
    return 0 if final == pb.JOB_STATE_SUCCEEDED else 1
