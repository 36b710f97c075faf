"""``opentinker trace RUN_DIR``: where a run's step time goes, phase by phase.

Reads the run's ``trace.json`` (written while it trains, ``logging.trace``) with
:func:`tinker_core.traces.read_trace` and prints :func:`tinker_core.traces.summarise` as a table:
per phase its count, mean, p50 and p95 in milliseconds and its share of the summed step time.
Phases nest (``sample`` and ``env`` lie inside ``rollout``, everything inside ``step``), so the
shares do not add up to 100%. No torch: it works on a laptop with only tinker-client.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table

from tinker_client.console import fail
from tinker_core.traces import TRACE_FILE, PhaseStats, read_trace, summarise


def _ms(v: float) -> str:
    return "-" if math.isnan(v) else f"{v:,.1f}"


def phase_table(stats: list[PhaseStats], title: str) -> Table:
    """The phase table ``opentinker trace`` prints."""
    table = Table(title=title)
    table.add_column("phase")
    # the memory columns where the trace measured it (peak resident set, peak CUDA allocation)
    memory = [(k, label) for k, label in (("peak_rss_gib", "peak RSS GiB"), ("peak_cuda_gib", "peak CUDA GiB"))
              if any(getattr(s, k) is not None for s in stats)]
    for col in ("count", "mean ms", "p50 ms", "p95 ms", "share of step", *(label for _k, label in memory)):
        table.add_column(col, justify="right")
    for s in stats:
        share = "-" if math.isnan(s.share) else f"{100 * s.share:.1f}%"
        gib = [("-" if getattr(s, k) is None else f"{getattr(s, k):.2f}") for k, _label in memory]
        table.add_row(s.name, str(s.count), _ms(s.mean_ms), _ms(s.p50_ms), _ms(s.p95_ms), share, *gib)
    return table


def register(app: typer.Typer) -> None:
    """Add the ``trace`` command to the ``opentinker`` app."""

    @app.command("trace")
    def trace(
        run_dir: Annotated[Path, typer.Argument(help=f"A run directory (its {TRACE_FILE}) or a trace file.")],
        stage: Annotated[str | None, typer.Option("--stage", help="Only the steps of this stage (its name).")] = None,
        as_json: Annotated[bool, typer.Option("--json", help="Print the summary as JSON instead of a table.")] = False,
    ) -> None:
        """Summarise a run's per-phase trace: mean, p50, p95, share of the step and peak memory per phase.

        The trace itself opens in ui.perfetto.dev (or chrome://tracing).
        """
        path = run_dir / TRACE_FILE if run_dir.is_dir() else run_dir
        if not path.is_file():
            fail(f"no trace at {path}", "train with logging.trace: true (the default) to write one")
        try:
            stats = summarise(read_trace(path), stage=stage)
        except (ValueError, OSError) as e:
            fail(str(e))
        if not stats:
            fail(f"{path} holds no step phases" + (f" of stage {stage!r}" if stage else ""), "is the run past its first step?")
        if as_json:
            typer.echo(json.dumps([s.to_dict() for s in stats], indent=1))
            return
        Console(highlight=False).print(phase_table(stats, f"{path} ({stats[0].count} steps)" if stats[0].name == "step" else str(path)))
        typer.echo(f"open {path} in https://ui.perfetto.dev for the timeline")
