"""``opentinker fork JOB_ID --scheduler ADDR``: the fork command tinker-algos registers, running
tinker-client's ``opentinker job fork`` (found on the root command line at run time) -- both
packages installed, so it lives here."""

from __future__ import annotations


def steer_cli():
    from tinker_client.cli import build_app

    return build_app()


def test_fork_with_a_scheduler_forks_the_job_there_and_follows_the_new_one():
    """``opentinker fork JOB_ID@STEP K=V --scheduler ADDR`` sends JobService Fork (a stand-in
    server here; tinker-scheduler's tests fork through a real one) and follows the new job."""
    from concurrent import futures

    import grpc
    from typer.testing import CliRunner

    from tinker_core.proto import jobs_pb2, jobs_pb2_grpc

    class Forks(jobs_pb2_grpc.JobServiceServicer):
        def __init__(self) -> None:
            self.requests: list = []

        def Fork(self, request, context):
            self.requests.append(request)
            if request.job_id != "job-1":
                context.abort(grpc.StatusCode.NOT_FOUND, f"job_id: no job {request.job_id!r}")
            return jobs_pb2.Job(id="job-2", state=jobs_pb2.JOB_STATE_QUEUED)

        def Watch(self, request, context):
            yield jobs_pb2.JobEvent(cursor=1, job_id="job-2", state_change=jobs_pb2.JobStateChange(state=jobs_pb2.JOB_STATE_SUCCEEDED))

        def Get(self, request, context):
            return jobs_pb2.Job(id="job-2", state=jobs_pb2.JOB_STATE_SUCCEEDED, run_dir="/runs/local/job-2")

    servicer = Forks()
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
    jobs_pb2_grpc.add_JobServiceServicer_to_server(servicer, server)
    address = f"127.0.0.1:{server.add_insecure_port('127.0.0.1:0')}"
    server.start()
    try:
        out = CliRunner().invoke(steer_cli(), ["fork", "job-1@4", "optimizer.lr=0.01", "--scheduler", address])
        assert out.exit_code == 0, out.output
        assert out.stdout.splitlines()[0] == "job-2" and "[SUCCEEDED]" in out.stdout
        (request,) = servicer.requests
        assert (request.job_id, request.step, list(request.overrides)) == ("job-1", 4, ["optimizer.lr=0.01"])
        assert CliRunner().invoke(steer_cli(), ["fork", "job-1", "--scheduler", address]).exit_code == 0
        assert not servicer.requests[1].HasField("step")  # no @STEP: the newest checkpoint
        missing = CliRunner().invoke(steer_cli(), ["fork", "job-9", "--scheduler", address])
        assert missing.exit_code == 2 and "NOT_FOUND: job_id: no job 'job-9'" in missing.output
        run_dir = CliRunner().invoke(steer_cli(), ["fork", "job-1", "--run-dir", "x", "--scheduler", address])
        assert run_dir.exit_code == 2 and "leave --run-dir out" in run_dir.output
        path = CliRunner().invoke(steer_cli(), ["fork", "runs/x@2", "--scheduler", address])
        assert path.exit_code == 2 and "is not a job id" in path.output
        assert len(servicer.requests) == 3
    finally:
        server.stop(grace=None)


def test_fork_with_a_scheduler_without_the_clients_job_group_names_tinker_client():
    import typer
    from typer.testing import CliRunner

    from tinker_algos import plugin

    cli = typer.Typer(add_completion=False)  # a root without tinker-client's commands
    plugin.opentinker_register_commands(cli=cli)
    out = CliRunner().invoke(cli, ["fork", "job-1", "--scheduler", "127.0.0.1:1"])
    assert out.exit_code == 2 and "'opentinker job fork', which is not installed" in out.output
    assert "pip install tinker-client" in out.output
