"""What every client of the scheduler's JobService shares: the job states by name
(``jobs_pb2.JobState`` without its ``JOB_STATE_`` prefix) and :class:`JobServiceClient`, the calls
a client registered through ``opentinker_register_job_clients`` offers (tinker-client's
:class:`~tinker_client.jobs.JobClient`; tinker-algos' ``compare --scheduler`` uses it). Needs protobuf."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, Protocol

from tinker_core.proto import jobs_pb2 as pb

TERMINAL = frozenset({pb.JOB_STATE_SUCCEEDED, pb.JOB_STATE_FAILED, pb.JOB_STATE_CANCELLED})
"""The states a job does not leave."""
STATE_NAMES = {v: k.removeprefix("JOB_STATE_") for k, v in pb.JobState.items()}


def state_name(state: int) -> str:
    """``pb.JOB_STATE_RUNNING`` -> ``"RUNNING"`` (an unknown number as itself)."""
    return STATE_NAMES.get(state, str(state))


def parse_state(name: str) -> int:
    """``"running"`` -> ``pb.JOB_STATE_RUNNING``; an unknown name is a ValueError listing the states."""
    key = f"JOB_STATE_{name.strip().upper()}"
    if key == "JOB_STATE_UNSPECIFIED" or key not in set(pb.JobState.keys()):
        allowed = ", ".join(n.lower() for n in STATE_NAMES.values() if n != "UNSPECIFIED")
        raise ValueError(f"unknown job state {name!r}; states are {allowed}")
    return int(pb.JobState.Value(key))


class JobServiceClient(Protocol):
    """A connected client of a scheduler's JobService; gRPC failures raise ``grpc.RpcError``."""

    address: str

    def submit(self, config_text: str, *, request_id: str | None = None) -> pb.Job:
        """Queue a job; retried with the same ``request_id``, it is created once."""
        ...

    def get(self, job_id: str) -> pb.Job: ...

    def watch(self, job_id: str) -> Iterator[pb.JobEvent]:
        """The job's events to its end, reconnecting by itself (each event once)."""
        ...

    def close(self) -> None: ...

    def __enter__(self) -> Any: ...

    def __exit__(self, *exc: object) -> Any: ...
