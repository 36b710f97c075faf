"""A thin client of the scheduler's ``JobService`` (no torch): submit, follow, pause, resume,
steer, fork and cancel jobs.

Example::

    from tinker_client.jobs import JobClient

    with JobClient("localhost:50051", api_key=None) as jobs:
        job = jobs.submit(open("examples/arithmetic.yaml").read())
        for event in jobs.watch(job.id):
            print(event)

``watch`` reconnects by itself when the stream breaks, resuming after the last cursor it saw,
so a caller sees every event exactly once. ``list`` yields job summaries (``config_text`` is
empty; ``get`` returns it) and fetches the pages as the caller iterates.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from typing import Any, Unpack, cast

import grpc

from tinker_client.connection import (
    RETRY_CODES,
    UNREACHABLE,
    ConnectionOptions,
    SchedulerConnection,
    backoff_s,
    call_with_retry,
)
from tinker_core.config import check_config_size
from tinker_core.proto import jobs_pb2 as pb
from tinker_core.proto import jobs_pb2_grpc as pb_grpc
from tinker_core.proto import message_size_options
from tinker_core.proto.job_service import STATE_NAMES, TERMINAL, parse_state, state_name

__all__ = ["STATE_NAMES", "TERMINAL", "JobClient", "parse_state", "pb", "state_name"]

# Tries of a call (or a watch that has not yet reached the scheduler) while it is UNAVAILABLE,
# 0.2 s apart and doubling: about 6 s before an unreachable scheduler is reported.
_CONNECT_ATTEMPTS = 5


class JobClient(SchedulerConnection):
    """Submit, follow and cancel jobs on a scheduler.

    ``address``, ``api_key``, ``tls`` and ``tls_ca`` as for :class:`SchedulerConnection`.
    """

    def __init__(
        self,
        address: str | None = None,
        api_key: str | None = None,
        *,
        timeout_s: float = 30.0,
        **connection: Unpack[ConnectionOptions],
    ) -> None:
        # Get returns a job's whole config; a large one stored before the limit still comes back.
        super().__init__(address, api_key, options=message_size_options(), **connection)
        self.timeout_s = timeout_s
        self.stub = pb_grpc.JobServiceStub(self.channel)

    def submit(
        self, config_text: str, *, request_id: str | None = None, priority: int | None = None
    ) -> pb.Job:
        """Queue a job; retried with the same ``request_id``, it is created once.

        A config over ``tinker_core.config.MAX_CONFIG_BYTES`` (1 MiB) raises
        :class:`~tinker_core.errors.ConfigError` before anything is sent (the scheduler refuses it too).
        """
        check_config_size(len(config_text.encode("utf-8")), "config_text")
        req = pb.SubmitJobRequest(
            config_text=config_text,
            client_request_id=request_id or uuid.uuid4().hex,
        )
        if priority is not None:
            req.priority = priority
        return self._call_with_retry(self.stub.Submit, req)

    def get(self, job_id: str) -> pb.Job:
        return self.stub.Get(pb.GetJobRequest(job_id=job_id), metadata=self.metadata, timeout=self.timeout_s)

    def list(
        self, states: list[int] | None = None, page_size: int = 1000, *, limit: int | None = None
    ) -> Iterator[pb.Job]:
        """This tenant's jobs as summaries (no ``config_text``), newest first, at most ``limit``.

        Pages of ``page_size`` (by default the scheduler's maximum, 1000; 0: the scheduler's
        default, 50) are fetched as the caller iterates.
        """
        if limit is not None and limit <= 0:
            return
        token = ""
        seen = 0
        while True:
            size = page_size if limit is None else min(page_size or limit, limit - seen)
            resp = self.stub.List(
                pb.ListJobsRequest(states=cast(Any, states or []), page_size=size, page_token=token),
                metadata=self.metadata,
                timeout=self.timeout_s,
            )
            for job in resp.jobs:
                yield job
                seen += 1
                if limit is not None and seen >= limit:
                    return
            token = resp.next_page_token
            if not token:
                return

    def cancel(self, job_id: str, reason: str = "cancelled by the user") -> pb.Job:
        return self.stub.Cancel(pb.CancelJobRequest(job_id=job_id, reason=reason), metadata=self.metadata, timeout=self.timeout_s)

    def pause(self, job_id: str, reason: str = "paused by the user") -> pb.Job:
        """Pause a job: a queued one at once, a running one at its next step boundary (it
        checkpoints and frees its worker); it stays PAUSED until :meth:`resume`."""
        return self.stub.Pause(pb.PauseJobRequest(job_id=job_id, reason=reason), metadata=self.metadata, timeout=self.timeout_s)

    def resume(self, job_id: str) -> pb.Job:
        """Put a paused job back in the queue; it continues from its checkpoint."""
        return self.stub.Resume(pb.ResumeJobRequest(job_id=job_id), metadata=self.metadata, timeout=self.timeout_s)

    def set_settings(self, job_id: str, settings: list[str]) -> pb.SetJobSettingsResponse:
        """Change live settings (``KEY.PATH=VALUE``) of a job; it applies them at its next step boundary."""
        request = pb.SetJobSettingsRequest(job_id=job_id, settings=settings)
        return self.stub.SetSettings(request, metadata=self.metadata, timeout=self.timeout_s)

    def fork(
        self, job_id: str, overrides: list[str] | None = None, *, step: int | None = None, request_id: str | None = None
    ) -> pb.Job:
        """Queue a new job from job ``job_id``'s checkpoint at ``step`` (default: its newest) with
        ``overrides``; retried with the same ``request_id``, it is created once."""
        req = pb.ForkJobRequest(job_id=job_id, overrides=overrides or [], client_request_id=request_id or uuid.uuid4().hex)
        if step is not None:
            req.step = step
        return self._call_with_retry(self.stub.Fork, req)

    def watch(self, job_id: str, after_cursor: int = 0, *, max_reconnects: int = 20) -> Iterator[pb.JobEvent]:
        """Events after ``after_cursor`` until the job ends; reconnects without gaps or duplicates.

        A stream that has delivered events reconnects up to ``max_reconnects`` times in a row (a
        scheduler restarting); one that never reached the scheduler gives up after as many tries
        as a unary call (about 6 s), so an unreachable address is reported at once.
        """
        cursor = after_cursor
        failures = 0
        connected = False
        while True:
            try:
                for event in self.stub.Watch(pb.WatchJobRequest(job_id=job_id, after_cursor=cursor), metadata=self.metadata):
                    failures = 0
                    connected = True
                    cursor = event.cursor
                    yield event
                return
            except grpc.RpcError as e:
                budget = max_reconnects if connected else min(max_reconnects, _CONNECT_ATTEMPTS - 1)
                if e.code() not in RETRY_CODES or failures >= budget:
                    raise
                failures += 1
                time.sleep(backoff_s(failures + 1))

    def _call_with_retry(self, method: Any, request: Any, attempts: int = _CONNECT_ATTEMPTS) -> Any:
        # only UNAVAILABLE: a call past its deadline may have created the job
        return call_with_retry(method, request, attempts=attempts, codes=UNREACHABLE, metadata=self.metadata, timeout=self.timeout_s)
