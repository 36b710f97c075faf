"""``opentinker fork RUN[@STEP] [KEY=VALUE ...]`` and ``opentinker runs``: steer runs from the command line.

Added to the ``opentinker`` CLI by :mod:`tinker_algos.plugin`; importing this module is cheap
(torch loads only when a fork trains). ``fork`` is :func:`tinker_algos.run.forking.fork` with a progress
bar, or with ``--scheduler`` the fork of a job on a scheduler (tinker-client's ``opentinker job fork``,
found on the root command line at run time); ``runs`` draws the run directories under a folder as a tree, each fork under its parent
(:mod:`tinker_algos.run.lineage`). Exit codes: 0 success, 1 failure at run time, 2 bad input.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from tinker_algos.commands.cli import RUNS, OverridesArg, _fail, report_config_error, run_and_report
from tinker_core.errors import ConfigError


def fork(
    ctx: typer.Context,
    run: Annotated[str, typer.Argument(help="The run dir to fork (with --scheduler: a job id); RUN@STEP forks its checkpoint at STEP (default: its newest).", metavar="RUN[@STEP]")],
    overrides: OverridesArg = None,
    run_dir: Annotated[Path | None, typer.Option("--run-dir", help="The fork's run dir (default: RUN-fork-STEP beside RUN).")] = None,
    scheduler: Annotated[str | None, typer.Option("--scheduler", "-s", help="Fork job RUN on this scheduler (host:port) and follow the new job.")] = None,
    api_key: Annotated[str | None, typer.Option("--api-key", help="Tenant API key (default $OPENTINKER_API_KEY).", show_default=False)] = None,
    tls_ca: Annotated[Path | None, typer.Option("--tls-ca", help="PEM certificate to trust for a TLS scheduler.")] = None,
) -> None:
    """Start a new run from a checkpoint of RUN (weights, optimizer, RNG, data position) with overrides.

    The fork records its parent (run dir, step, overrides, config hashes) in its lineage.json;
    without overrides its metrics after STEP are exactly the parent's. Forking an earlier step
    is how a run is rolled back. `opentinker runs` shows the lineage tree. With --scheduler, RUN
    is a job id there: the scheduler forks it into a new job, whose id is printed and followed.
    """
    if scheduler:  # (before anything imports torch)
        if run_dir is not None:
            _fail("--run-dir: a job forked on a scheduler gets its run dir there; leave --run-dir out")
        raise typer.Exit(fork_on_scheduler(ctx, run, list(overrides or []), scheduler, api_key, tls_ca))
    from tinker_algos.run.forking import ForkError, prepare_fork
    from tinker_core.config import OverrideError

    try:
        config, target = prepare_fork(run, list(overrides or []), run_dir=run_dir)
    except ConfigError as e:
        report_config_error(e, f"fork of {run}")
    except (ForkError, OverrideError) as e:
        _fail(str(e))
    typer.echo(f"forking {run} into {target}")
    run_and_report(config, target)


def fork_on_scheduler(ctx: typer.Context, job: str, overrides: list[str], scheduler: str, api_key: str | None,
                      tls_ca: Path | None) -> int:
    """Run tinker-client's ``opentinker job fork`` (tinker-algos may not import the client, so the
    command is found on the root command line of ``ctx`` at run time); exit 2 naming tinker-client without it."""
    root = ctx.find_root()

    def sub(group: object, name: str) -> object:
        get = getattr(group, "get_command", None)  # a command group
        return get(root, name) if get is not None else None

    command = sub(sub(root.command, "job"), "fork")
    if command is None:
        _fail("fork --scheduler runs 'opentinker job fork', which is not installed", "pip install tinker-client")
    args = [job, *overrides, "--scheduler", scheduler, *(["--api-key", api_key] if api_key else []),
            *(["--tls-ca", str(tls_ca)] if tls_ca is not None else [])]
    return int(command.main(args, prog_name="opentinker fork", standalone_mode=False) or 0)  # type: ignore[attr-defined]


def runs(
    root: Annotated[Path, typer.Argument(help="A folder of run dirs (or one run dir).")] = RUNS,
) -> None:
    """List the runs under ROOT with their status and step, each fork under the run it came from."""
    from tinker_algos.run.lineage import render_tree, run_tree

    lines = render_tree(run_tree(root))
    if not lines:
        _fail(f"no run directories under {root}", "runs are made by 'opentinker train CONFIG' (under runs/) or 'opentinker fork'")
    for line in lines:
        typer.echo(line)


def register(cli: typer.Typer) -> None:
    """Add ``fork`` and ``runs`` to the ``opentinker`` app ``cli``."""
    cli.command("fork")(fork)
    cli.command("runs")(runs)
