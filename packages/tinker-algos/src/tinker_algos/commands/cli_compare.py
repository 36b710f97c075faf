"""``opentinker compare FILE``: run a base job's variants over several seeds and report them.

Added to the ``opentinker`` CLI by :mod:`tinker_algos.plugin`; the work is in
:mod:`tinker_algos.compare`. Importing this module is cheap: torch loads only when an embedded
job runs. Exit codes: 0 every job completed and the report is written, 1 a job failed or the
scheduler is unreachable (a rerun continues), 2 bad input (one ``error:`` line, before any job starts).
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.markup import escape

from tinker_algos.commands.cli import _fail, err_console


def compare_command(
    file: Annotated[Path, typer.Argument(help="A compare file: base, variants, seeds (docs/guides/compare.md).")],
    scheduler: Annotated[str | None, typer.Option("--scheduler", "-s", help="Run every job on this scheduler (host:port), in parallel; default: embedded, one after another.")] = None,
    api_key: Annotated[str | None, typer.Option("--api-key", help="Tenant API key (default $OPENTINKER_API_KEY).", show_default=False)] = None,
    tls_ca: Annotated[Path | None, typer.Option("--tls-ca", help="PEM certificate to trust for a TLS scheduler.")] = None,
    output: Annotated[Path | None, typer.Option("--output", "-o", help="Report directory (default: the file's output:, else runs/compare-<file stem>).")] = None,
    jobs_at_once: Annotated[int, typer.Option("--jobs", "-j", help="Embedded: run this many jobs at once, each in its own process (give the jobs model.threads so that jobs x threads <= cores).")] = 1,
) -> None:
    """Run every (variant, seed) job of FILE not completed yet, then write report.md, report.json and curves.png."""
    from tinker_algos.compare.report import check_output, report_of, write_report
    from tinker_algos.compare.runner import check_not_stale, run_embedded
    from tinker_algos.compare.spec import CompareError, expand, load_spec

    if jobs_at_once < 1:
        _fail(f"--jobs must be at least 1, got {jobs_at_once}")
    if scheduler and jobs_at_once != 1:
        _fail("--jobs runs embedded jobs in parallel; with --scheduler every job is already submitted at once: drop one of them")
    try:
        spec = load_spec(file, output=output)
        jobs = expand(spec)
        check_not_stale(spec.output, jobs)
        check_output(spec.output)  # before any job runs: never overwrite report files it did not write
    except CompareError as e:
        _fail(str(e))
    typer.echo(f"compare {file}: {len(spec.variants)} variant(s) x {len(spec.seeds)} seed(s) = {len(jobs)} jobs; output: {spec.output}")
    try:
        if scheduler:
            from tinker_algos.compare.scheduler import SchedulerError, run_on_scheduler

            try:
                outcomes = run_on_scheduler(jobs, spec.output, typer.echo, address=scheduler, api_key=api_key, tls_ca=tls_ca)
            except SchedulerError as e:
                err_console.print(f"[bold red]error:[/] {escape(str(e))}", markup=True)
                raise typer.Exit(e.exit_code) from None
        else:
            outcomes = run_embedded(jobs, spec.output, typer.echo, workers=jobs_at_once)
    except CompareError as e:
        _fail(str(e))
    for o in outcomes:
        typer.echo(f"  {o.job.key}: {o.status}; run dir: {o.run_dir}" + (f" (job {o.job_id})" if o.job_id else ""))
    failed = [o for o in outcomes if o.status != "completed"]
    if failed:
        for o in failed:
            err_console.print(f"[bold red]failed:[/] {escape(f'{o.job.key}: {o.error}')}", markup=True)
        err_console.print(f"{len(failed)} of {len(outcomes)} job(s) failed; no report. Rerun to retry them (finished jobs are kept).", markup=False)
        raise typer.Exit(1)
    try:
        report = report_of(spec, outcomes)
    except ValueError as e:  # e.g. no held-out metric logged (logging.every skipping the eval steps)
        err_console.print(f"[bold red]error:[/] no report: {escape(str(e))}", markup=True)
        raise typer.Exit(1) from None
    written = write_report(report, spec.output)
    typer.echo(f"report: {written['md']}  (numbers: {written['json']}" + (f", curves: {written['png']})" if "png" in written else ")"))


def register(cli: typer.Typer) -> None:
    """Add ``compare`` to the ``opentinker`` app ``cli``."""
    cli.command("compare")(compare_command)
