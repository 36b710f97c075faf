"""``opentinker job fork JOB_ID[@STEP] [KEY.PATH=VALUE ...]``: fork a scheduler job there.

:func:`fork_on_scheduler` sends JobService ``Fork``: the scheduler makes the new job's run dir
from the parent job's checkpoint (as a local fork does, ``lineage.json`` naming the parent) and
queues it. The command prints the new job's id and follows it like ``submit --watch``. No torch.
tinker-algos' ``opentinker fork JOB_ID --scheduler ADDR`` runs this command (found on the root
command line at run time: tinker-algos may not import tinker-client); without ``--scheduler`` it
forks a run dir in its own process.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from tinker_client.console import fail
from tinker_client.scheduler_options import ApiKeyOpt, SchedulerOpt, TlsCaOpt, scheduler_client
from tinker_core.config.overrides import OverrideError, parse_override


def parse_job_spec(spec: str) -> tuple[str, int | None]:
    """``"job-1@200"`` -> ``("job-1", 200)``; ``"job-1"`` -> ``("job-1", None)``."""
    head, sep, tail = spec.rpartition("@")
    if sep and tail.isdigit() and head:
        return head, int(tail)
    return spec, None


def fork_on_scheduler(spec: str, overrides: list[str], scheduler: str | None, api_key: str | None,
                      tls_ca: Path | None, *, watch: bool = True) -> int:
    """Fork job ``JOB_ID[@STEP]`` on the scheduler with ``overrides``; print the new job's id and
    (``watch``) follow it. Returns the exit code (0: the fork succeeded, or was queued)."""
    from tinker_client.watch import follow

    job_id, step = parse_job_spec(spec)
    if "/" in job_id:
        fail(f"{job_id} is not a job id (it has a '/')",
             "with --scheduler, fork JOB_ID[@STEP] of a job on the scheduler; without it, RUN[@STEP] is a run dir here")
    try:  # a malformed override is refused here, before the round trip
        for text in overrides:
            parse_override(text)
    except OverrideError as e:
        fail(str(e))
    with scheduler_client(scheduler, api_key, tls_ca) as client:
        job = client.fork(job_id, overrides, step=step)
        typer.echo(job.id)
        return (follow(client, job.id) or 0) if watch else 0


def job_fork(
    job: Annotated[str, typer.Argument(help="The job id to fork; JOB_ID@STEP forks its checkpoint at STEP (default: its newest).", metavar="JOB_ID[@STEP]")],
    overrides: Annotated[list[str] | None, typer.Argument(help="KEY.PATH=VALUE overrides of the fork's config.", metavar="[KEY.PATH=VALUE]...")] = None,
    scheduler: SchedulerOpt = None,
    api_key: ApiKeyOpt = None,
    tls_ca: TlsCaOpt = None,
) -> None:
    """Fork a job on the scheduler from its checkpoint with overrides; print the new job's id and follow it."""
    raise typer.Exit(fork_on_scheduler(job, list(overrides or []), scheduler, api_key, tls_ca))


def register(job_app: typer.Typer) -> None:
    """Add ``fork`` to the ``opentinker job`` group ``job_app``."""
    job_app.command("fork")(job_fork)
