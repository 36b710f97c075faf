"""``opentinker train CONFIG``: run a job in this process, or on a scheduler with ``--scheduler``.

Added to the ``opentinker`` CLI by :mod:`tinker_algos.plugin`. Importing this module is cheap:
torch loads only when a job runs. With ``--scheduler`` the command is ``submit --watch``: it runs
the CLI's own ``submit`` command, so the gRPC client stays in tinker-client.
Exit codes: 0 success, 1 failure at run time, 2 bad input (a one-line reason, and a hint).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated, NoReturn

import typer
from rich.console import Console
from rich.markup import escape

from tinker_algos.run.progress import ProgressCallbacks, quiet_third_party_progress
from tinker_core.errors import ConfigError

if TYPE_CHECKING:
    from tinker_core.config import JobConfig

EXIT_BAD_INPUT = 2
RUNS = Path("runs")
"""The default run directory is ``runs/<config name>`` (relative to the current directory)."""

err_console = Console(stderr=True, highlight=False, soft_wrap=True)


def _fail(reason: str, hint: str | None = None) -> NoReturn:
    """The reason is plain text (a ``[...]`` in it, such as a list value, is shown as it is); the hint is markup."""
    err_console.print(f"[bold red]error:[/] {escape(reason)}", markup=True)
    if hint:
        err_console.print(f"[dim]hint:[/] {hint}", markup=True)
    raise typer.Exit(EXIT_BAD_INPUT)


OverridesArg = Annotated[
    list[str] | None,
    typer.Argument(help="Config overrides KEY.PATH=VALUE (values as YAML, list items by index: stages.1.optimizer.lr=3e-4).", metavar="[KEY.PATH=VALUE]...", show_default=False),
]
OVERRIDES_FILE = "overrides.json"
"""Where a run dir records the command-line overrides its config.json was made with."""


def _submit_and_watch(ctx: typer.Context, file: Path, overrides: list[str], options: dict[str, object]) -> NoReturn:
    """Run the CLI's ``submit FILE [OVERRIDES] --watch`` with ``options`` (``--name``: value,
    None left out) and exit with its exit code."""
    root = ctx.find_root()
    get_command = getattr(root.command, "get_command", None)
    submit = get_command(root, "submit") if get_command else None
    if submit is None:
        _fail("--scheduler needs the 'submit' command of tinker-client", "install tinker-client")
    args = [str(file), *overrides, "--watch", *(f"{k}={v}" for k, v in options.items() if v is not None)]
    code = submit.main(args, prog_name=f"{root.info_name} submit", standalone_mode=False, parent=root)
    raise typer.Exit(code or 0)


def train(
    ctx: typer.Context,
    file: Annotated[Path, typer.Argument(help="A job config in YAML.")],
    overrides: OverridesArg = None,
    scheduler: Annotated[
        str | None,
        typer.Option("--scheduler", "-s", help="Scheduler address host:port (default $OPENTINKER_SCHEDULER or localhost:50051)."),
    ] = None,
    api_key: Annotated[str | None, typer.Option("--api-key", help="Tenant API key (default $OPENTINKER_API_KEY).", show_default=False)] = None,
    tls_ca: Annotated[Path | None, typer.Option("--tls-ca", help="PEM certificate to trust for a TLS scheduler.")] = None,
    run_dir: Annotated[Path | None, typer.Option("--run-dir", help="Where metrics, checkpoints and plots go (default runs/<name>).")] = None,
    fresh: Annotated[bool, typer.Option("--fresh", help="Start over: remove the run dir first (only one opentinker created: it holds a .opentinker-run marker).")] = False,
) -> None:
    """Run a job: embedded, in this process, unless --scheduler is given (then submit and watch).

    KEY.PATH=VALUE arguments after the file override its settings (see docs/reference/cli.md).
    """
    overrides = list(overrides or [])
    if scheduler:
        _submit_and_watch(ctx, file, overrides, {"--scheduler": scheduler, "--api-key": api_key, "--tls-ca": tls_ca})
    config = load_job(file, overrides)
    from tinker_algos.records.run_dir import RunDirError, check_inside, make_run_dir, remove_run_dir

    target = run_dir or RUNS / config.name
    try:
        if run_dir is None:
            check_inside(target, RUNS)  # the name is a safe slug; a symbolic link could still lead out
        if fresh:
            remove_run_dir(target, within=None if run_dir is not None else RUNS)
    except RunDirError as e:
        _fail(str(e))
    record_overrides(make_run_dir(target), file, overrides)
    run_and_report(config, target)


def run_and_report(config: JobConfig, target: Path) -> None:
    """Train ``config`` in run dir ``target`` with a progress bar; print the result (bad input exits 2)."""
    quiet_third_party_progress()
    with ProgressCallbacks(total_steps=config.total_steps) as callbacks:
        callbacks.on_status("importing torch and transformers", short="importing")
        from tinker_algos.model.device import DeviceError
        from tinker_algos.model.model_files import ModelLoadError
        from tinker_algos.run.job import train as run_training
        from tinker_algos.training.checkpoint import CheckpointError

        try:
            result = run_training(config, run_dir=target, callbacks=callbacks)
        except (ConfigError, CheckpointError, DeviceError, ModelLoadError) as e:
            callbacks.discard()
            _fail(str(e))
    typer.echo(f"{result.status}: {result.step} steps; run dir: {result.run_dir}")
    for k, v in sorted((result.eval or {}).items()):
        typer.echo(f"  {k} = {v:.4g}")
    if result.plot:
        typer.echo(f"learning curve: {result.plot}")


def load_job(file: Path, overrides: list[str]) -> JobConfig:
    """The job config ``file`` with ``overrides`` applied; bad input exits 2 (every problem of
    the config one per line; a bad override in one line)."""
    from tinker_core.config import OverrideError, load_config

    try:
        return load_config(file, overrides=overrides)
    except OverrideError as e:
        _fail(str(e))
    except ConfigError as e:
        report_config_error(e, file)


def report_config_error(e: ConfigError, file: object) -> NoReturn:
    """Every problem of a config one per line under ``FILE: N problem(s)``; exit 2."""
    head, *problems = e.report_lines(file)
    err_console.print(f"[bold red]error:[/] {escape(head)}", markup=True)
    for line in problems:
        err_console.print(line, markup=False)
    raise typer.Exit(EXIT_BAD_INPUT) from None


def record_overrides(run_dir: Path, file: Path, overrides: list[str]) -> None:
    """Write ``overrides.json`` (the config file and the overrides, in order) into ``run_dir``;
    its ``config.json`` is the config with them applied. Without overrides, an old record goes."""
    import json

    target = run_dir / OVERRIDES_FILE
    if overrides:
        target.write_text(json.dumps({"config_file": str(file), "overrides": overrides}, indent=1) + "\n", encoding="utf-8")
    else:
        target.unlink(missing_ok=True)


def register(cli: typer.Typer) -> None:
    """Add ``train`` to the ``opentinker`` app ``cli``."""
    cli.command()(train)
