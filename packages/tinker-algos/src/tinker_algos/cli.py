"""``opentinker train CONFIG``: run a job in this process, or on a scheduler with ``--scheduler``.

Added to the ``opentinker`` CLI by :mod:`tinker_algos.plugin`. Importing this module is cheap:
torch loads only when a job runs. With ``--scheduler`` the command is ``submit --watch``: it runs
the CLI's own ``submit`` command, so the gRPC client stays in tinker-client.
Exit codes: 0 success, 1 failure at run time, 2 bad input (a one-line reason, and a hint).
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, NoReturn

import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from tinker_core.errors import ConfigError

EXIT_BAD_INPUT = 2
RUNS = Path("runs")
"""The default run directory is ``runs/<config name>`` (relative to the current directory)."""
SHOWN = ("env/reward_mean", "eval/accuracy", "losses/total", "kl/sample_train")
"""The metrics the progress bar shows (by their last part)."""

err_console = Console(stderr=True, highlight=False, soft_wrap=True)


def _fail(reason: str, hint: str | None = None) -> NoReturn:
    err_console.print(f"[bold red]error:[/] {reason}", markup=True)
    if hint:
        err_console.print(f"[dim]hint:[/] {hint}", markup=True)
    raise typer.Exit(EXIT_BAD_INPUT)


class ProgressCallbacks:
    """Training callbacks (see :func:`tinker_algos.train`) drawing a rich progress bar: steps
    done, a few headline metrics, and the job's log lines above the bar."""

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

    def discard(self) -> None:
        """Leave no progress bar behind when the run stops (a bad-input error is all that shows)."""
        self.progress.live.transient = True

    def on_metrics(self, step: int, metrics: dict[str, float]) -> None:
        self.last.update(metrics)
        summary = "  ".join(f"{k.split('/')[-1]}={self.last[k]:.3g}" for k in SHOWN if k in self.last)
        self.progress.update(self.task, completed=step, summary=summary)

    def on_log(self, line: str) -> None:
        self.progress.console.print(line, markup=False, highlight=False)

    def on_checkpoint(self, step: int, path: str) -> None:
        self.progress.console.print(f"checkpoint at step {step}: {path}", markup=False, highlight=False)


def _submit_and_watch(ctx: typer.Context, file: Path, options: dict[str, object]) -> NoReturn:
    """Run the CLI's ``submit FILE --watch`` with ``options`` (``--name``: value, None left out)
    and exit with its exit code."""
    root = ctx.find_root()
    get_command = getattr(root.command, "get_command", None)
    submit = get_command(root, "submit") if get_command else None
    if submit is None:
        _fail("--scheduler needs the 'submit' command of tinker-client", "install tinker-client")
    args = [str(file), "--watch", *(f"{k}={v}" for k, v in options.items() if v is not None)]
    code = submit.main(args, prog_name=f"{root.info_name} submit", standalone_mode=False, parent=root)
    raise typer.Exit(code or 0)


def train(
    ctx: typer.Context,
    file: Annotated[Path, typer.Argument(help="A job config in YAML.")],
    scheduler: Annotated[
        str | None,
        typer.Option("--scheduler", "-s", help="Scheduler address host:port (default $OPENTINKER_SCHEDULER or localhost:50051)."),
    ] = None,
    api_key: Annotated[str | None, typer.Option("--api-key", help="Tenant API key (default $OPENTINKER_API_KEY).", show_default=False)] = None,
    tls_ca: Annotated[Path | None, typer.Option("--tls-ca", help="PEM certificate to trust for a TLS scheduler.")] = None,
    run_dir: Annotated[Path | None, typer.Option("--run-dir", help="Where metrics, checkpoints and plots go (default runs/<name>).")] = None,
    fresh: Annotated[bool, typer.Option("--fresh", help="Start over: remove the run dir first (only one opentinker created: it holds a .opentinker-run marker).")] = False,
) -> None:
    """Run a job: embedded, in this process, unless --scheduler is given (then submit and watch)."""
    if scheduler:
        _submit_and_watch(ctx, file, {"--scheduler": scheduler, "--api-key": api_key, "--tls-ca": tls_ca})
    from tinker_core.config import load_config

    try:
        config = load_config(file)
    except ConfigError as e:
        head, *problems = e.report_lines(file)
        err_console.print(f"[bold red]error:[/] {head}", markup=True)
        for line in problems:
            err_console.print(line, markup=False)
        raise typer.Exit(EXIT_BAD_INPUT) from None
    from tinker_algos.checkpoint import CheckpointError
    from tinker_algos.device import DeviceError
    from tinker_algos.model_files import ModelLoadError
    from tinker_algos.run import train as run_training
    from tinker_algos.run_dir import RunDirError, check_inside, remove_run_dir

    target = run_dir or RUNS / config.name
    try:
        if run_dir is None:
            check_inside(target, RUNS)  # the name is a safe slug; a symbolic link could still lead out
        if fresh:
            remove_run_dir(target, within=None if run_dir is not None else RUNS)
    except RunDirError as e:
        _fail(str(e))
    with ProgressCallbacks(total_steps=config.total_steps) as callbacks:
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


def register(cli: typer.Typer) -> None:
    """Add ``train`` to the ``opentinker`` app ``cli``."""
    cli.command()(train)
