"""``opentinker fork JOB_ID[@STEP] [KEY.PATH=VALUE ...] --scheduler ADDR``: fork a scheduler job there.

The ``fork`` command is tinker-algos's (without ``--scheduler`` it forks a run dir in this
process); with ``--scheduler`` it calls :func:`fork_on_scheduler`, which sends JobService
``Fork``: the scheduler makes the new job's run dir from the parent job's checkpoint (as a local
fork does, ``lineage.json`` naming the parent) and queues it. The command prints the new job's
id and follows it like ``submit --watch``. No torch.
"""

from __future__ import annotations

from pathlib import Path

import typer

from tinker_client.console import fail
from tinker_client.scheduler_options import scheduler_client
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
