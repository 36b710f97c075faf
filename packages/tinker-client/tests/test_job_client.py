"""JobClient and `opentinker list` against a stand-in JobService (a real gRPC server in this
process): pages are fetched transparently, ``--limit`` stops early, oversized configs never leave."""

from __future__ import annotations

from concurrent import futures

import grpc
import pytest
from typer.testing import CliRunner

from tinker_client.cli import app
from tinker_client.jobs import JobClient
from tinker_core.config import MAX_CONFIG_BYTES
from tinker_core.errors import ConfigError
from tinker_core.proto import jobs_pb2, jobs_pb2_grpc


class PagedJobs(jobs_pb2_grpc.JobServiceServicer):
    """``count`` jobs, newest first, in pages of the asked size (2 for 0) capped at :attr:`page_size`;
    records the requests."""

    def __init__(self, count: int) -> None:
        self.jobs = [jobs_pb2.Job(id=f"job-{i:03d}", name=f"n{i}", state=jobs_pb2.JOB_STATE_QUEUED)
                     for i in reversed(range(count))]
        self.requests: list[jobs_pb2.ListJobsRequest] = []
        self.page_size = 1000  # the most a page holds, whatever was asked

    def List(self, request, context):
        self.requests.append(request)
        start = int(request.page_token or 0)
        end = start + min(request.page_size or 2, self.page_size)
        token = str(end) if end < len(self.jobs) else ""
        return jobs_pb2.ListJobsResponse(jobs=self.jobs[start:end], next_page_token=token)

    def Submit(self, request, context):
        self.requests.append(request)
        return jobs_pb2.Job(id="job-new")


@pytest.fixture
def serve():
    """``serve(servicer)`` -> the address of a real gRPC server answering with ``servicer``."""
    servers = []

    def start(servicer: jobs_pb2_grpc.JobServiceServicer) -> str:
        server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
        jobs_pb2_grpc.add_JobServiceServicer_to_server(servicer, server)
        port = server.add_insecure_port("127.0.0.1:0")
        server.start()
        servers.append(server)
        return f"127.0.0.1:{port}"

    yield start
    for server in servers:
        server.stop(grace=None)


@pytest.fixture
def paged(serve):
    """``paged(count)`` -> ``(address, servicer)`` of a server with ``count`` jobs."""

    def start(count: int) -> tuple[str, PagedJobs]:
        servicer = PagedJobs(count)
        return serve(servicer), servicer

    return start


def test_list_iterates_every_page_in_order(paged):
    address, servicer = paged(7)
    with JobClient(address) as client:
        assert [j.id for j in client.list(page_size=0)] == [j.id for j in servicer.jobs]  # the server's default
    assert [r.page_token for r in servicer.requests] == ["", "2", "4", "6"]


def test_list_limit_asks_for_no_more_than_it_needs(paged):
    address, servicer = paged(7)
    with JobClient(address) as client:
        assert [j.id for j in client.list(limit=3)] == ["job-006", "job-005", "job-004"]
        assert [r.page_size for r in servicer.requests] == [3]
        servicer.requests.clear()
        assert len(list(client.list(page_size=2, limit=3))) == 3
        assert [r.page_size for r in servicer.requests] == [2, 1]


def test_the_list_command_prints_every_page_and_honours_limit(paged):
    address, servicer = paged(5)
    servicer.page_size = 2  # a server that answers in pages smaller than asked
    result = CliRunner().invoke(app, ["list", "--scheduler", address])
    assert result.exit_code == 0, result.output
    assert len(servicer.requests) == 3
    assert [line.split()[0] for line in result.stdout.splitlines()] == [f"job-{i:03d}" for i in (4, 3, 2, 1, 0)]
    result = CliRunner().invoke(app, ["list", "--limit", "2", "--scheduler", address])
    assert result.exit_code == 0 and len(result.stdout.splitlines()) == 2
    assert CliRunner().invoke(app, ["list", "--limit", "0", "--scheduler", address]).exit_code == 2


def test_a_config_over_the_limit_is_refused_before_it_is_sent(paged):
    address, servicer = paged(0)
    with JobClient(address) as client, pytest.raises(ConfigError, match=r"1,048,577 bytes; at most 1,048,576 \(1 MiB\)"):
        client.submit("#" * (MAX_CONFIG_BYTES + 1))
    assert servicer.requests == []


def test_a_missing_or_non_pem_tls_ca_is_a_value_error_naming_it(tmp_path):
    from tinker_client.connection import SchedulerConnection

    with pytest.raises(ValueError, match=r"^tls_ca: .*ca\.pem does not exist"):
        SchedulerConnection("127.0.0.1:1", tls_ca=tmp_path / "ca.pem")
    (tmp_path / "ca.pem").write_bytes(b"\x00binary")
    with pytest.raises(ValueError, match=r"^tls_ca: .*ca\.pem is not a PEM certificate"):
        SchedulerConnection("127.0.0.1:1", tls_ca=tmp_path / "ca.pem")


class FlakyWatch(jobs_pb2_grpc.JobServiceServicer):
    """Watch answers from a script, one entry per call: ``"down"`` aborts with UNAVAILABLE (a
    scheduler restarting), a list of cursors streams those log events, then UNAVAILABLE unless it
    is the last entry; records each call's ``after_cursor``."""

    def __init__(self, script: list) -> None:
        self.script = list(script)
        self.cursors: list[int] = []

    def Watch(self, request, context):
        self.cursors.append(request.after_cursor)
        entry = self.script.pop(0) if self.script else "down"
        if entry != "down":
            for cursor in entry:
                yield jobs_pb2.JobEvent(cursor=cursor, log=jobs_pb2.JobLogLine(text=f"line {cursor}"))
            if not self.script:
                return
        context.abort(grpc.StatusCode.UNAVAILABLE, "the scheduler is restarting")


@pytest.fixture
def flaky(serve, monkeypatch):
    """``flaky(script)`` -> ``(address, servicer)`` of a server whose Watch follows ``script``."""
    import tinker_client.jobs

    monkeypatch.setattr(tinker_client.jobs.time, "sleep", lambda s: None)  # the back-off, not the behaviour

    def start(script: list) -> tuple[str, FlakyWatch]:
        servicer = FlakyWatch(script)
        return serve(servicer), servicer

    return start


def test_a_watch_that_had_events_rides_out_a_long_restart_without_gaps_or_duplicates(flaky):
    address, servicer = flaky([[1, 2], *["down"] * 8, [3, 4]])
    client = JobClient(address)
    try:
        assert [e.cursor for e in client.watch("job-1")] == [1, 2, 3, 4]
    finally:
        client.close()
    assert servicer.cursors == [0] + [2] * 9


def test_a_watch_that_never_reaches_the_scheduler_gives_up_after_five_tries(flaky):
    address, servicer = flaky(["down"] * 50)
    client = JobClient(address)
    try:
        with pytest.raises(grpc.RpcError) as caught:
            list(client.watch("job-1"))
    finally:
        client.close()
    assert caught.value.code() == grpc.StatusCode.UNAVAILABLE
    assert servicer.cursors == [0] * 5


class SteeredJobs(jobs_pb2_grpc.JobServiceServicer):
    """Pause, Resume and SetSettings of one job ``job-1`` (others are NOT_FOUND); records the requests."""

    def __init__(self) -> None:
        self.requests: list = []
        self.job = jobs_pb2.Job(id="job-1", name="j", state=jobs_pb2.JOB_STATE_RUNNING, run_dir="/runs/local/job-1")

    def _known(self, request, context) -> None:
        self.requests.append(request)
        if request.job_id != "job-1":
            context.abort(grpc.StatusCode.NOT_FOUND, f"job_id: no job {request.job_id!r}")

    def Pause(self, request, context):
        self._known(request, context)
        return jobs_pb2.Job(id="job-1", name="j", state=jobs_pb2.JOB_STATE_RUNNING, reason=f"pausing: {request.reason}")

    def Resume(self, request, context):
        self._known(request, context)
        return jobs_pb2.Job(id="job-1", name="j", state=jobs_pb2.JOB_STATE_QUEUED, reason="resumed")

    def SetSettings(self, request, context):
        self._known(request, context)
        return jobs_pb2.SetJobSettingsResponse(job=self.job, request="0001-abc.json")


def test_pause_and_resume_commands_print_the_job_and_name_an_unknown_one(serve):
    servicer = SteeredJobs()
    address = serve(servicer)
    paused = CliRunner().invoke(app, ["pause", "job-1", "--scheduler", address])
    assert paused.exit_code == 0, paused.output
    assert paused.stdout.split()[:2] == ["job-1", "RUNNING"] and "(pausing: paused by the user)" in paused.stdout
    resumed = CliRunner().invoke(app, ["resume", "job-1", "--scheduler", address])
    assert resumed.exit_code == 0 and resumed.stdout.split()[:2] == ["job-1", "QUEUED"]
    missing = CliRunner().invoke(app, ["pause", "job-2", "--scheduler", address])
    assert missing.exit_code == 2 and "NOT_FOUND: job_id: no job 'job-2'" in missing.output
    assert [type(r).__name__ for r in servicer.requests] == ["PauseJobRequest", "ResumeJobRequest", "PauseJobRequest"]


def test_job_set_sends_a_job_id_to_the_scheduler_and_checks_the_setting_first(serve, tmp_path):
    servicer = SteeredJobs()
    address = serve(servicer)
    ok = CliRunner().invoke(app, ["job", "set", "job-1", "optimizer.lr=0.01", "stages.1.rollout.temperature=0.5",
                                  "--scheduler", address])
    assert ok.exit_code == 0, ok.output
    assert "requested optimizer.lr=0.01 stages.1.rollout.temperature=0.5 of job job-1 (0001-abc.json)" in ok.stdout
    assert "/runs/local/job-1/live.jsonl" in ok.stdout
    (request,) = servicer.requests
    assert (request.job_id, list(request.settings)) == ("job-1", ["optimizer.lr=0.01", "stages.1.rollout.temperature=0.5"])
    refused = CliRunner().invoke(app, ["job", "set", "job-1", "model.name=gpt2", "--scheduler", address])
    assert refused.exit_code == 2 and "model.name cannot change while a job runs" in " ".join(refused.output.split())
    assert len(servicer.requests) == 1  # refused before the round trip
    missing = CliRunner().invoke(app, ["job", "set", "job-2", "optimizer.lr=0.1", "--scheduler", address])
    assert missing.exit_code == 2 and "NOT_FOUND" in missing.output
    no_dir = CliRunner().invoke(app, ["job", "set", str(tmp_path / "runs" / "gone"), "optimizer.lr=0.1", "--scheduler", address])
    assert no_dir.exit_code == 2 and "is not a run directory (it does not exist)" in no_dir.output
    assert len(servicer.requests) == 2
