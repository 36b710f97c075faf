"""Running the jobs of a compare on a scheduler: all submitted at once, each watched, resumable.

The JobService client is the one the plugin registry names ``grpc`` (tinker-client's
:class:`~tinker_client.jobs.JobClient`, registered through ``opentinker_register_job_clients``):
tinker-algos may not import tinker-client, and a second copy of its SDK (reconnecting watches,
retries, TLS) would drift. A job's metrics are the ``Watch`` stream's metrics events (the
steps its run logged, the same rows as the scheduler's ``metrics.jsonl``), so the scheduler's
run dirs need not be readable here. Each job's ``job.json`` records its id as soon as it is
submitted: a rerun watches the jobs still queued or running, keeps the ones that succeeded, and
submits again only the ones that failed, were cancelled or are unknown to the scheduler.
"""

from __future__ import annotations

import json
import threading
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tinker_algos.compare.runner import JOB_RECORD, Outcome, ProgressLine, config_json, job_dir
from tinker_algos.compare.spec import CompareError, JobSpec
from tinker_core.run_files import METRICS_FILE, read_metrics

if TYPE_CHECKING:
    import grpc

    from tinker_core.proto.job_service import JobServiceClient


class SchedulerError(CompareError):
    """The scheduler could not be reached or refused a request; ``exit_code`` 1 or 2."""

    def __init__(self, message: str, exit_code: int) -> None:
        super().__init__(message)
        self.exit_code = exit_code


def _record(d: Path) -> dict[str, Any]:
    try:
        data = json.loads((d / JOB_RECORD).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _write_record(d: Path, job: JobSpec, **fields: Any) -> None:
    d.mkdir(parents=True, exist_ok=True)
    record = {**_record(d), **fields, "config": config_json(job)}
    tmp = d / (JOB_RECORD + ".tmp")
    tmp.write_text(json.dumps(record, indent=1) + "\n", encoding="utf-8")
    tmp.replace(d / JOB_RECORD)


def _rpc_error(e: grpc.RpcError, address: str) -> SchedulerError:
    import grpc

    code = e.code()
    if code == grpc.StatusCode.UNAVAILABLE:
        return SchedulerError(f"cannot reach a scheduler at {address}; start one with 'opentinker scheduler start'", 1)
    if code in (grpc.StatusCode.INVALID_ARGUMENT, grpc.StatusCode.UNAUTHENTICATED, grpc.StatusCode.FAILED_PRECONDITION):
        return SchedulerError(f"the scheduler refused a job: {code.name}: {e.details()}", 2)
    return SchedulerError(f"{code.name}: {e.details()}", 1)


def _connect(address: str | None, api_key: str | None, tls_ca: Path | None) -> JobServiceClient:
    """The registered ``grpc`` job client, connected; a CompareError (exit 2) naming tinker-client without it."""
    from tinker_core.registry import get_registry

    clients = get_registry("job_clients")
    if "grpc" not in clients:
        raise CompareError("compare --scheduler needs a JobService client: pip install tinker-client "
                           "(the plugin that registers the 'grpc' job client)")
    return clients.get("grpc").obj(address, api_key, tls_ca=tls_ca)


def run_on_scheduler(
    jobs: list[JobSpec], out: Path, echo: Callable[[str], None], *, address: str | None, api_key: str | None, tls_ca: Path | None
) -> list[Outcome]:
    """Submit every job not finished yet, watch them all in parallel, and return their outcomes."""
    client = _connect(address, api_key, tls_ca)
    import grpc

    progress = ProgressLine(len(jobs), echo)
    outcomes: dict[str, Outcome] = {}
    try:
        to_watch, submitted_n = _submit_or_attach(client, jobs, out, outcomes)
    except grpc.RpcError as e:
        client.close()
        raise _rpc_error(e, client.address) from None
    skipped, attached = len(outcomes), len(to_watch) - submitted_n
    notes = [f"{skipped} already completed" if skipped else "", f"{submitted_n} submitted" if submitted_n else "",
             f"{attached} already on the scheduler" if attached else ""]
    progress.update(done=skipped, note=", ".join(n for n in notes if n))
    errors: list[BaseException] = []

    def follow(job: JobSpec, job_id: str) -> None:
        try:
            outcomes[job.key] = _follow(client, job, job_id, out, progress)
        except BaseException as e:  # noqa: BLE001 - reported after every thread ended
            errors.append(e)

    threads = [threading.Thread(target=follow, args=pair, daemon=True, name=f"compare-{pair[1]}") for pair in to_watch]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    client.close()
    if errors:
        e = errors[0]
        if isinstance(e, grpc.RpcError):
            raise _rpc_error(e, client.address)
        raise e
    return [outcomes[j.key] for j in jobs]


def _submit_or_attach(
    client: JobServiceClient, jobs: list[JobSpec], out: Path, outcomes: dict[str, Outcome]
) -> tuple[list[tuple[JobSpec, str]], int]:
    """Each job's state from its record: a job that succeeded goes into ``outcomes`` (skipped),
    one still queued or running is watched again, any other is submitted (again). Returns the
    ``(job, job id)`` pairs to watch and how many were submitted now."""
    import grpc

    from tinker_core.proto import jobs_pb2 as pb
    from tinker_core.proto.job_service import TERMINAL, state_name

    to_watch: list[tuple[JobSpec, str]] = []
    submitted_n = 0
    for job in jobs:
        d = job_dir(out, job)
        rec = _record(d)
        if rec.get("state") == "SUCCEEDED" and (d / METRICS_FILE).is_file():
            outcomes[job.key] = Outcome(job, "completed", rec.get("run_dir", ""), read_metrics(d / METRICS_FILE), rec.get("job_id"), skipped=True)
            continue
        job_id = rec.get("job_id")
        if job_id:
            try:
                state = client.get(job_id).state
            except grpc.RpcError as e:
                if e.code() != grpc.StatusCode.NOT_FOUND:
                    raise
                state = None
            if state is None or (state in TERMINAL and state != pb.JOB_STATE_SUCCEEDED):
                job_id = None  # failed, cancelled or forgotten: run it again
        if not job_id:
            submitted = client.submit(json.dumps(job.config, indent=1), request_id=uuid.uuid4().hex)
            job_id = submitted.id
            submitted_n += 1
            _write_record(d, job, job_id=job_id, state=state_name(submitted.state), run_dir=submitted.run_dir)
        to_watch.append((job, job_id))
    return to_watch, submitted_n


def _follow(client: JobServiceClient, job: JobSpec, job_id: str, out: Path, progress: ProgressLine) -> Outcome:
    """Watch one job to its end, collecting its metrics rows; record it and return its outcome."""
    from tinker_core.proto import jobs_pb2 as pb
    from tinker_core.proto.job_service import state_name

    d = job_dir(out, job)
    rows: dict[int, dict[str, Any]] = {}
    running = False
    for event in client.watch(job_id):
        kind = event.WhichOneof("event")
        if kind == "metrics":
            row = rows.setdefault(int(event.metrics.step), {"step": int(event.metrics.step)})
            row.update(dict(event.metrics.values))
        elif kind == "state_change" and event.state_change.state == pb.JOB_STATE_RUNNING and not running:
            running = True
            progress.update(running=1, note=f"{job.key}: running")
    final = client.get(job_id)
    state = state_name(final.state)
    _write_record(d, job, job_id=job_id, state=state, run_dir=final.run_dir)
    ordered = [rows[s] for s in sorted(rows)]
    if final.state == pb.JOB_STATE_SUCCEEDED:
        (d / METRICS_FILE).write_text("".join(json.dumps(r, sort_keys=True) + "\n" for r in ordered), encoding="utf-8")
        progress.update(running=-1 if running else 0, done=1, note=f"{job.key}: succeeded")
        return Outcome(job, "completed", final.run_dir, ordered, job_id)
    progress.update(running=-1 if running else 0, failed=1, note=f"{job.key}: {state.lower()}")
    return Outcome(job, "failed", final.run_dir, ordered, job_id, error=f"{state}: {final.reason}")
