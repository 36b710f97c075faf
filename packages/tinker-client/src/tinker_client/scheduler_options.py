"""What the ``opentinker`` commands that talk to a scheduler share: the ``--scheduler``,
``--api-key`` and ``--tls-ca`` options, a :class:`~tinker_client.jobs.JobClient` whose gRPC errors
become one-line reasons and exit codes, and the one-line form of a job. No torch."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path
from typing import Annotated, Any, NoReturn

import typer

from tinker_client.console import fail

SchedulerOpt = Annotated[
    str | None,
    typer.Option("--scheduler", "-s", help="Scheduler address host:port (default $OPENTINKER_SCHEDULER or localhost:50051)."),
]
ApiKeyOpt = Annotated[str | None, typer.Option("--api-key", help="Tenant API key (default $OPENTINKER_API_KEY).", show_default=False)]
TlsCaOpt = Annotated[Path | None, typer.Option("--tls-ca", help="PEM certificate to trust for a TLS scheduler.")]
JobIdArg = Annotated[str, typer.Argument(help="The job id that submit printed.")]


@contextlib.contextmanager
def scheduler_client(scheduler: str | None, api_key: str | None, tls_ca: Path | None) -> Iterator[Any]:
    """A JobClient; a gRPC error inside the block becomes a one-line reason and an exit code."""
    import grpc

    from tinker_client.connection import read_ca_file
    from tinker_client.jobs import JobClient

    if tls_ca is not None:
        try:
            read_ca_file(tls_ca, "--tls-ca")
        except ValueError as e:
            fail(str(e))
    client = JobClient(scheduler, api_key, tls_ca=tls_ca)
    try:
        yield client
    except grpc.RpcError as e:
        rpc_fail(e, client.address)
    finally:
        client.close()


def rpc_fail(e: Any, address: str) -> NoReturn:
    """Report a gRPC error: exit 1 for an unreachable scheduler or a failure at run time, 2 for
    bad input (a refused key, an invalid argument, an unknown job, a job in the wrong state)."""
    import grpc

    code = e.code()
    if code == grpc.StatusCode.UNAVAILABLE:
        fail(f"cannot reach a scheduler at {address}", "start one with 'opentinker scheduler start', or pass --scheduler HOST:PORT", code=1)
    if code == grpc.StatusCode.UNAUTHENTICATED:
        fail(f"the scheduler refused the API key: {e.details()}", "pass --api-key or set OPENTINKER_API_KEY")
    if code in (grpc.StatusCode.INVALID_ARGUMENT, grpc.StatusCode.NOT_FOUND, grpc.StatusCode.FAILED_PRECONDITION):
        fail(f"{code.name}: {e.details()}")
    fail(f"{code.name}: {e.details()}", code=1)


def print_job(job: Any) -> None:
    """One line: ``id  STATE  prio N  name  (reason)``."""
    from tinker_client.jobs import state_name

    line = f"{job.id}  {state_name(job.state):<9}  prio {job.priority:>3}  {job.name}"
    if job.reason:
        line += f"  ({job.reason})"
    typer.echo(line)
