"""The ``opentinker`` plugin of tinker-client: what packages that may not import the client use
of it, found in the plugin registry at run time -- the ``viewer`` HTTP front (``opentinker
view``'s app, which the scheduler mounts per job) and the ``grpc`` job client
(:class:`tinker_client.jobs.JobClient`, which ``opentinker compare --scheduler`` submits and
watches with). The CLI's own commands are the client's, not a plugin's."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from tinker_core.hookspecs import HttpFrontRegister, JobClientRegister, hookimpl


def viewer_front(runs: Sequence[tuple[Path, str]]) -> Any:
    """The run viewer of ``opentinker view`` over ``(run directory, name)`` pairs (none: the page only)."""
    from tinker_client.viewer import app
    from tinker_client.viewer.data import RunDir

    return app.guarded(app.create_app([RunDir(Path(path), name) for path, name in runs], index_at_start=False))


def grpc_job_client(address: str | None, api_key: str | None, *, tls_ca: Path | None = None) -> Any:
    """The scheduler's JobService over gRPC (tinker_client.jobs.JobClient)."""
    from tinker_client.jobs import JobClient

    return JobClient(address, api_key, tls_ca=tls_ca)


@hookimpl
def opentinker_register_http_fronts(register: HttpFrontRegister) -> None:
    """Register ``viewer`` (:func:`viewer_front`)."""
    register("viewer", viewer_front)


@hookimpl
def opentinker_register_job_clients(register: JobClientRegister) -> None:
    """Register ``grpc`` (:func:`grpc_job_client`)."""
    register("grpc", grpc_job_client)
