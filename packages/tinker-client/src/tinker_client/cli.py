"""The ``opentinker`` command line.

Built-in commands live here; other packages add theirs through the
``opentinker_register_commands(cli)`` hook. Exit codes: 0 success, 1 failure at run time,
2 bad input (with a one-line reason on stderr, and a hint).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated, Any, NoReturn

import typer
from rich.console import Console
from rich.table import Table

from tinker_core.errors import ConfigError, OpenTinkerError

EXIT_BAD_INPUT = 2

app = typer.Typer(
    name="opentinker",
    help="OpenTinker: reinforcement learning for LLM agents, from a laptop CPU to a Ray cluster.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
config_app = typer.Typer(help="Validate job configs and print their schema.", no_args_is_help=True)
env_app = typer.Typer(help="Work with environments.", no_args_is_help=True)
app.add_typer(config_app, name="config")
app.add_typer(env_app, name="env")

err_console = Console(stderr=True, highlight=False, soft_wrap=True)


def fail(reason: str, hint: str | None = None, code: int = EXIT_BAD_INPUT) -> NoReturn:
    """Print a one-line reason (and a hint) on stderr and exit with ``code``."""
    err_console.print(f"[bold red]error:[/] {reason}", markup=True)
    if hint:
        err_console.print(f"[dim]hint:[/] {hint}", markup=True)
    raise typer.Exit(code)


# ---- plugins ------------------------------------------------------------------------------


@app.command()
def plugins(
    as_json: Annotated[bool, typer.Option("--json", help="Print a JSON list instead of a table.")] = False,
) -> None:
    """List installed plugins: distribution, version and what each registers."""
    from tinker_core.registry import list_plugins

    try:
        infos = list_plugins()
    except OpenTinkerError as e:
        fail(str(e), "check OPENTINKER_LOAD_PLUGINS, or reinstall the plugin named above")
    if as_json:
        typer.echo(json.dumps([i.to_dict() for i in infos], indent=2))
        return
    table = Table(title="OpenTinker plugins")
    for col in ("distribution", "version", "plugin", "registers"):
        table.add_column(col)
    for info in sorted(infos, key=lambda i: (i.distribution, i.name)):
        registers = "\n".join(
            f"{kind.replace('_', ' ')}: {', '.join(sorted(names))}" for kind, names in sorted(info.registers.items())
        )
        table.add_row(info.distribution, info.version or "-", info.name, registers or "-")
    Console().print(table)


# ---- config -------------------------------------------------------------------------------


@config_app.command("validate")
def config_validate(
    file: Annotated[Path, typer.Argument(help="A job config in YAML.")],
    no_plugins: Annotated[
        bool, typer.Option("--no-plugins", help="Check only the schema, not env/estimator/loss/optimizer names.")
    ] = False,
) -> None:
    """Check a job config; exit 2 listing every problem (field path, bad value, what is allowed)."""
    from tinker_core.config import load_config

    try:
        config = load_config(file, check_plugins=not no_plugins)
    except ConfigError as e:
        err_console.print(f"[bold red]error:[/] {file}: {len(e.problems)} problem(s)", markup=True)
        for p in e.problems:
            err_console.print(f"  - {p}", markup=False)
        err_console.print("[dim]hint:[/] 'opentinker config schema' prints every allowed key", markup=True)
        raise typer.Exit(EXIT_BAD_INPUT) from None
    except OpenTinkerError as e:
        fail(str(e))
    stages = ", ".join(f"{s.name} ({s.algorithm.steps} steps)" for s in config.resolved_stages())
    typer.echo(f"{file}: valid; stages: {stages}")


@config_app.command("schema")
def config_schema() -> None:
    """Print the JSON schema of job configs."""
    from tinker_core.config import json_schema

    typer.echo(json.dumps(json_schema(), indent=2))


# ---- plugin commands and entry --------------------------------------------------------------


def _register_plugin_commands(cli: typer.Typer) -> None:
    from tinker_core.registry import plugin_system

    system = plugin_system()
    system.ensure_loaded()
    system.pm.hook.opentinker_register_commands(cli=cli)


def build_app() -> typer.Typer:
    """The root app with every plugin's commands added."""
    _register_plugin_commands(app)
    return app


def main(argv: list[str] | None = None) -> Any:
    try:
        cli = build_app()
    except OpenTinkerError as e:
        err_console.print(f"[bold red]error:[/] {e}", markup=True)
        return sys.exit(EXIT_BAD_INPUT)
    try:
        return cli(args=argv, prog_name="opentinker", standalone_mode=True)
    except OpenTinkerError as e:  # a command let one through: still one line and exit 2
        err_console.print(f"[bold red]error:[/] {e}", markup=True)
        sys.exit(EXIT_BAD_INPUT)


if __name__ == "__main__":  # pragma: no cover
    main()
