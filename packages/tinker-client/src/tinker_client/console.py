"""How the ``opentinker`` commands report bad input (a one-line reason and a hint on stderr,
exit 2) and how much they say (``-q`` / ``-v`` / ``--log-level``, on every command)."""

from __future__ import annotations

import logging
from enum import StrEnum
from pathlib import Path
from typing import Annotated, Any, NoReturn

import typer
from rich.console import Console
from rich.markup import escape
from typer.core import TyperArgument, TyperGroup

from tinker_core.errors import ConfigError
from tinker_core.progress import set_verbosity

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


# ---- -q / -v / --log-level on every command --------------------------------------------------


class LogLevel(StrEnum):
    debug = "DEBUG"
    info = "INFO"
    warning = "WARNING"
    error = "ERROR"
    critical = "CRITICAL"


VERBOSITY_OPTIONS = ("quiet", "verbose", "log_level")
"""The parameter names of the output options every ``opentinker`` command takes."""


def _quiet(value: bool) -> None:
    if value:
        set_verbosity(logging.ERROR)


def _verbose(value: int) -> None:
    if value:
        set_verbosity(logging.INFO if value == 1 else logging.DEBUG)


def _log_level(value: LogLevel | None) -> None:
    if value is not None:
        set_verbosity(logging.getLevelName(LogLevel(value).value))


def _output_options(
    quiet: Annotated[bool, typer.Option("--quiet", "-q", callback=_quiet, rich_help_panel="Output",
                                        help="Say less: no progress or status lines (errors and results still print).")] = False,
    verbose: Annotated[int, typer.Option("--verbose", "-v", count=True, callback=_verbose, rich_help_panel="Output", metavar="", show_default=False,
                                         help="Say more: status lines off a terminal too, INFO logs (-vv: DEBUG).")] = 0,
    log_level: Annotated[LogLevel | None, typer.Option("--log-level", case_sensitive=False, callback=_log_level, rich_help_panel="Output", metavar="LEVEL",
                                                       help="The logging level (DEBUG, INFO, WARNING, ERROR, CRITICAL); the last of -q/-v/--log-level given wins.")] = None,
) -> None:
    """Only a carrier: typer builds the three options from this signature."""


def verbosity_params() -> list[Any]:
    """Fresh ``-q/--quiet``, ``-v/--verbose`` and ``--log-level`` parameters (built by typer from
    :func:`_output_options`), applied through :func:`tinker_core.progress.set_verbosity` and not
    passed to the command."""
    carrier = typer.Typer()
    carrier.command()(_output_options)
    params = [p for p in typer.main.get_command(carrier).params if p.name in VERBOSITY_OPTIONS]
    for param in params:
        param.expose_value = False
    return params


def add_verbosity_options(command: Any, params: list[Any] | None = None) -> Any:
    """Give ``command`` and every subcommand the output options (once); returns ``command``."""
    params = verbosity_params() if params is None else params
    if not any(getattr(p, "name", None) in VERBOSITY_OPTIONS for p in command.params):
        command.params.extend(params)
    for sub in getattr(command, "commands", {}).values():
        add_verbosity_options(sub, params)
    return command


class UsageArgument(TyperArgument):
    """An argument shown in usage lines the usual way: ``FILE``, ``[NAME]``, ``RUN_DIR...`` (typer
    writes a required one as ``{file}``)."""

    def _usage_display_name(self) -> str:
        name = self.display_name_raw
        if "[" in name or name.endswith("..."):  # a metavar that already says it all: [KEY.PATH=VALUE]...
            return name
        name = name if self.required else f"[{name}]"
        return name + ("..." if self.nargs != 1 else "")


def readable_usage(command: Any) -> Any:
    """Name the arguments of ``command`` and its subcommands in capitals (``FILE``, unless a
    metavar is set) and show them as :class:`UsageArgument` does; returns ``command``."""
    for param in command.params:
        if isinstance(param, TyperArgument):
            if param.metavar is None:
                param.metavar = (param.name or "arg").upper()
            param.__class__ = UsageArgument
    for sub in getattr(command, "commands", {}).values():
        readable_usage(sub)
    return command


class RootGroup(TyperGroup):
    """The ``opentinker`` group: every command, a plugin's included, takes ``-q``/``-v``/``--log-level``
    and has readable usage lines (:func:`readable_usage`)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        add_verbosity_options(self)
        readable_usage(self)
