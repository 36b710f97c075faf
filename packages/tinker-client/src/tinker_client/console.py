"""How the ``opentinker`` commands report bad input: a one-line reason and a hint on stderr, exit 2."""

from __future__ import annotations

from pathlib import Path
from typing import NoReturn

import typer
from rich.console import Console
from rich.markup import escape

from tinker_core.errors import ConfigError

EXIT_BAD_INPUT = 2

err_console = Console(stderr=True, highlight=False, soft_wrap=True)


def fail(reason: str, hint: str | None = None, code: int = EXIT_BAD_INPUT) -> NoReturn:
    """Print a one-line reason (and a hint) on stderr and exit with ``code``. The reason is
    plain text (a ``[...]`` in it, such as a list value, is shown as it is); the hint is markup."""
    err_console.print(f"[bold red]error:[/] {escape(reason)}", markup=True)
    if hint:
        err_console.print(f"[dim]hint:[/] {hint}", markup=True)
    raise typer.Exit(code)


def fail_config(file: Path, error: ConfigError, hint: str | None = None) -> NoReturn:
    """Report every problem of the config ``file`` (one per line) and exit 2."""
    head, *problems = error.report_lines(file)
    err_console.print(f"[bold red]error:[/] {head}", markup=True)
    for line in problems:
        err_console.print(line, markup=False)
    if hint:
        err_console.print(f"[dim]hint:[/] {hint}", markup=True)
    raise typer.Exit(EXIT_BAD_INPUT)
