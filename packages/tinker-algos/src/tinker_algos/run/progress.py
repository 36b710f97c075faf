"""The progress display of ``opentinker train``: a status line from the first second, then a bar.

:class:`ProgressCallbacks` is the callbacks object (see :func:`tinker_algos.train`) the command
passes to the run. On a terminal it shows what the run is doing before the first step (importing
torch, loading the model and its size, the first step) as time-stamped lines above a live bar,
then steps done, elapsed time, time left and the headline metrics; the job's log lines (a
``hint:`` in yellow) print above the bar. Piped, whole unwrapped lines and a summary at the end. Hugging Face's
own progress bars ("Loading weights", "Writing model shards") are switched off
(:func:`quiet_third_party_progress`): the status line says what is loading.

Importing this module is cheap (no torch).
"""

from __future__ import annotations

import os
import sys
import time
from typing import TYPE_CHECKING

from rich.console import Console
from rich.text import Text

from tinker_core.progress import (
    StepTimes,
    format_duration,
    headline,
    is_quiet,
    is_verbose,
    log_style,
    progress_bar,
)

if TYPE_CHECKING:
    from tinker_algos.model.models import PolicyModel


def quiet_third_party_progress() -> None:
    """Switch off the tqdm bars of Hugging Face libraries in this process (loading and saving
    models would otherwise draw their own bars through ours)."""
    os.environ["HF_HUB_DISABLE_PROGRESS_BARS"] = "1"  # read when huggingface_hub is imported
    if "huggingface_hub" in sys.modules:  # already imported: switch them off now (transformers reads this)
        from huggingface_hub.utils import disable_progress_bars

        disable_progress_bars()
    if "transformers" in sys.modules:
        from transformers.utils import logging as hf_logging

        hf_logging.disable_progress_bar()


def describe_model(policy: PolicyModel) -> str:
    """``1.2M parameters, 4.6 MB float32 on cpu`` for a loaded :class:`~tinker_algos.model.models.PolicyModel`."""
    params = list(policy.model.parameters())
    count = sum(p.numel() for p in params)
    size = sum(p.numel() * p.element_size() for p in params)
    dtype = str(params[0].dtype).removeprefix("torch.") if params else "?"
    return f"{_count(count).rstrip()} parameters, {_count(size)}B {dtype} on {policy.spec.device}"


def _count(n: float) -> str:
    """``1234567`` -> ``1.23 M``; ``999`` -> ``999 ``."""
    prefix = ""
    for bigger in ("K", "M", "G", "T"):
        if n < 1000:
            break
        n, prefix = n / 1000, bigger
    return f"{n:.3g} {prefix}" if prefix else f"{n:.0f} "


class ProgressCallbacks:
    """Training callbacks drawing the status lines and a rich progress bar on ``console``
    (stderr by default).

    On a terminal: time-stamped status lines above a live bar. Off a terminal (piped, a log
    file): no bar, only whole lines that never wrap -- the job's log lines, checkpoints and, at
    the end, one summary line (steps, elapsed time, headline metrics; no time left). ``-v``
    (:func:`~tinker_core.progress.is_verbose`) adds the status lines there too; ``-q``
    (:func:`~tinker_core.progress.is_quiet`) keeps only hints and warnings."""

    def __init__(self, total_steps: int, console: Console | None = None) -> None:
        self.console = console or Console(stderr=True, highlight=False)
        self.live = self.console.is_terminal and not is_quiet()
        self.progress = progress_bar(self.console, transient=False)
        self.task = self.progress.add_task("starting", total=total_steps, eta="", summary="")
        self.total = total_steps
        self.times = StepTimes()
        self.last: dict[str, float] = {}
        self.step = 0
        self.started = time.perf_counter()
        self.discarded = False

    def __enter__(self) -> ProgressCallbacks:
        if self.live:
            self.progress.start()
        return self

    def __exit__(self, *exc: object) -> None:
        if self.live:
            self.progress.update(self.task, eta="")  # the bar that stays says what was, not what is left
            self.progress.stop()
        elif not is_quiet() and not self.discarded:
            elapsed = format_duration(time.perf_counter() - self.started)
            summary = headline(self.last)
            self._line(Text(f"training: {self.step}/{self.total} steps in {elapsed}" + (f"  {summary}" if summary else "")))

    def discard(self) -> None:
        """Leave no progress bar behind when the run stops (a bad-input error is all that shows)."""
        self.discarded = True
        self.progress.live.transient = True

    def _line(self, text: Text) -> None:
        """One whole line above the bar (on a terminal) or on its own (never wrapped off one)."""
        (self.progress.console if self.live else self.console).print(text, soft_wrap=not self.live)

    def on_status(self, text: str, short: str | None = None) -> None:
        """What the run is doing now: a time-stamped line above the bar (on a terminal, or with
        ``-v``) and ``short`` (default: ``text`` up to its first ':', at most 32 characters) beside the spinner."""
        if self.live or (is_verbose() and not is_quiet()):
            elapsed = time.perf_counter() - self.started
            self._line(Text.assemble((f"{elapsed:6.1f}s", "dim"), "  ", text))
        if self.live:
            self.progress.update(self.task, description=(short or text.split(":", 1)[0])[:32])
            self.progress.refresh()

    def on_metrics(self, step: int, metrics: dict[str, float]) -> None:
        self.last.update(metrics)
        self.times.add(metrics)
        self.step = step
        if self.live:
            self.progress.update(
                self.task, completed=step, description="training", eta=self.times.eta(step, self.total), summary=headline(self.last)
            )
            self.progress.refresh()

    def on_log(self, line: str) -> None:
        style = log_style(line)
        if style or not is_quiet():  # -q keeps hints and warnings
            self._line(Text(line, style=style or ""))  # a Text: the style stays off the bar

    def on_checkpoint(self, step: int, path: str) -> None:
        if not is_quiet():
            self._line(Text(f"checkpoint at step {step}: {path}"))
