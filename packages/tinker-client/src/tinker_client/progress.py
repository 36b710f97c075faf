"""A rich progress bar fed by the training callbacks (see ``tinker_algos.train``)."""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

SHOWN = ("env/reward_mean", "eval/accuracy", "losses/total", "kl/sample_train")


class ProgressCallbacks:
    """Shows steps done, a few headline metrics, and the job's log lines above the bar."""

    def __init__(self, total_steps: int, console: Console | None = None) -> None:
        self.console = console or Console(stderr=True)
        self.progress = Progress(
            TextColumn("[bold]training"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            TextColumn("{task.fields[summary]}"),
            console=self.console,
            transient=False,
        )
        self.task = self.progress.add_task("train", total=total_steps, summary="")
        self.last: dict[str, float] = {}

    def __enter__(self) -> ProgressCallbacks:
        self.progress.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.progress.stop()

    def on_metrics(self, step: int, metrics: dict[str, float]) -> None:
        self.last.update(metrics)
        summary = "  ".join(f"{k.split('/')[-1]}={self.last[k]:.3g}" for k in SHOWN if k in self.last)
        self.progress.update(self.task, completed=step, summary=summary)

    def on_log(self, line: str) -> None:
        self.progress.console.print(line, markup=False, highlight=False)

    def on_checkpoint(self, step: int, path: str) -> None:
        self.progress.console.print(f"checkpoint at step {step}: {path}", markup=False, highlight=False)
