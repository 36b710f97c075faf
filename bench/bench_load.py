"""Load on a real scheduler: 50 concurrent clients submit 1,000 jobs while 20 Watch streams follow
jobs and the clients Get and List; latency percentiles and errors per method.

The scheduler is ``python -m tinker_scheduler start`` in its own process (SQLite job store, gRPC,
its own local Ray with ``--num-cpus 1``, the ``sleep_train`` test workload, default options:
64 gRPC threads, a 0.1 s scheduling loop). Five tenants with API keys; one "blocker" job holds
the only CPU, so every submitted job stays QUEUED and the scheduling loop looks at the whole
queue each tick. Then:

1. ``--clients`` threads (each its own channel, tenant ``client % --tenants``) submit
   ``--jobs`` jobs in all (each with its own ``client_request_id``), each submit followed by a
   Get of one of the client's jobs, and every 5th by a List of the first page (100 summaries) of
   the tenant's jobs;
2. meanwhile ``--watchers`` Watch streams each follow the first job of one client;
3. when all have submitted: the queue is counted (List of QUEUED jobs, every page) and each
   tenant lists all its jobs once (every job must be there exactly once);
4. the clients cancel their jobs (Cancel); each Watch stream must end on the CANCELLED state
   change (the time from sending the Cancel to that event is ``Watch: cancel -> event``).

Latency is client-side wall time per call (``time.perf_counter``), so it includes this
process's Python overhead (70 threads, one GIL); ``Watch: first event`` is the time from opening
the stream to its first event. Every error is counted by method and gRPC status, none retried.
The table shows p50/p95/p99/max; the JSON adds the submit rate, the scheduler process's CPU time
and peak memory, and the load average before and after.

    uv run --no-sync python bench/bench_load.py [--quick] [--clients 50 --jobs 1000 --watchers 20]

``integration-tests/reliability/test_load.py`` runs the same load (:func:`run_load`) and checks
behaviour only.
"""

from __future__ import annotations

import dataclasses
import random
import statistics
import sys
import tempfile
import threading
import time
from collections import Counter, defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

# as a script this directory is on sys.path; imported by the reliability test, we put it there
sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import BenchArgs, parse_args, print_table, write_results  # noqa: E402

CALL_TIMEOUT_S = 60.0
WATCH_TIMEOUT_S = 600.0
LIST_PAGE = 100


@dataclass(frozen=True)
class LoadShape:
    """How much load :func:`run_load` applies."""

    clients: int = 50
    jobs: int = 1000
    watchers: int = 20
    tenants: int = 5
    list_every: int = 5  # a client lists a page every N submits


@dataclass
class Recorder:
    """One thread's call latencies (seconds) and errors (method -> gRPC status name -> count)."""

    latencies: dict[str, list[float]] = field(default_factory=lambda: defaultdict(list))
    errors: dict[str, Counter[str]] = field(default_factory=lambda: defaultdict(Counter))

    def call(self, method: str, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """``fn(*args, **kwargs)`` timed; a gRPC error is counted and gives None."""
        import grpc

        start = time.perf_counter()
        try:
            result = fn(*args, **kwargs)
        except grpc.RpcError as e:
            self.errors[method][e.code().name] += 1
            return None
        self.latencies[method].append(time.perf_counter() - start)
        return result

    def merge(self, other: Recorder) -> None:
        for method, values in other.latencies.items():
            self.latencies[method].extend(values)
        for method, codes in other.errors.items():
            self.errors[method].update(codes)


@dataclass
class LoadResult:
    """What :func:`run_load` saw."""

    calls: Recorder
    submitted: dict[str, list[str]]  # tenant -> the job ids its clients got back
    listed: dict[str, list[str]]  # tenant -> the job ids one full listing returned at the end
    queued_at_peak: int  # jobs QUEUED once every submit returned (all tenants)
    watched: list[list[tuple[str, int]]]  # per stream: (event kind, state; 0 for other kinds)
    seconds: dict[str, float]  # phase -> wall time

    def error_count(self) -> int:
        return sum(sum(codes.values()) for codes in self.calls.errors.values())


def tenant_name(i: int) -> str:
    return f"tenant-{i}"


def job_text(name: str, *, steps: int = 1, step_s: float = 0.02) -> str:
    from tinker_scheduler.testing import job_config_text

    return job_config_text(name=name, steps=steps, step_s=step_s, cpus=1, checkpoint_every=0)


def start_scheduler(directory: Path, tenants: int) -> tuple[Any, list[str], str]:
    """A scheduler process on a new job store with ``tenants`` tenants, its only CPU held by a
    running blocker job of tenant 0. Returns the :class:`SchedulerProcess`, the API keys and the
    blocker's job id."""
    from tinker_core.proto import jobs_pb2
    from tinker_scheduler.store import JobStore
    from tinker_scheduler.testing import SLEEP_TRAIN, JobStub, SchedulerProcess

    db = directory / "scheduler.db"
    store = JobStore(db)
    keys = [store.add_tenant(tenant_name(i)) for i in range(tenants)]
    store.close()
    scheduler = SchedulerProcess(directory, "scheduler", "--num-cpus", "1", runner=SLEEP_TRAIN, db=db)
    try:
        with JobStub(scheduler.address, keys[0]) as client:
            blocker = client.submit(job_text("blocker", steps=1_000_000, step_s=1.0), request_id="blocker")
            for event in client.watch(blocker.id, timeout=120):
                if event.WhichOneof("event") == "state_change" and event.state_change.state == jobs_pb2.JOB_STATE_RUNNING:
                    break
    except BaseException:
        scheduler.cleanup()
        raise
    return scheduler, keys, blocker.id


def run_load(address: str, keys: list[str], shape: LoadShape = LoadShape()) -> LoadResult:
    """Apply the load of the module doc to the scheduler at ``address`` (tenant ``i`` has key
    ``keys[i]``); every job it submits is cancelled before it returns."""
    from tinker_client.jobs import JobClient
    from tinker_core.proto import jobs_pb2 as pb

    if shape.watchers > shape.clients:
        raise ValueError("each watch stream follows one client's first job: watchers <= clients")
    tenants = min(shape.tenants, len(keys))
    share = [shape.jobs // shape.clients + (1 if c < shape.jobs % shape.clients else 0) for c in range(shape.clients)]
    recorders = [Recorder() for _ in range(shape.clients + shape.watchers + 1)]
    submitted: list[list[str]] = [[] for _ in range(shape.clients)]
    first_job = [threading.Event() for _ in range(shape.clients)]
    cancel_sent: dict[str, float] = {}  # job id -> when its Cancel was sent
    watched: list[list[tuple[str, int]]] = [[] for _ in range(shape.watchers)]
    start = threading.Barrier(shape.clients + 1)
    submitted_all = threading.Barrier(shape.clients + 1)
    cancel_now = threading.Event()

    def client(c: int) -> None:
        try:
            submit_then_cancel(c)
        except BaseException:
            start.abort()  # neither the main thread nor a watcher waits for this client forever
            submitted_all.abort()
            first_job[c].set()
            raise

    def submit_then_cancel(c: int) -> None:
        rec, rng = recorders[c], random.Random(c)
        with JobClient(address, keys[c % tenants]) as jobs:
            meta, stub = jobs.metadata, jobs.stub
            start.wait()
            for k in range(share[c]):
                request = pb.SubmitJobRequest(config_text=job_text(f"load-{c}-{k}"), client_request_id=f"load-{c}-{k}")
                job = rec.call("Submit", stub.Submit, request, metadata=meta, timeout=CALL_TIMEOUT_S)
                if job is not None:
                    submitted[c].append(job.id)
                    first_job[c].set()
                if submitted[c]:
                    get = pb.GetJobRequest(job_id=rng.choice(submitted[c]))
                    rec.call("Get", stub.Get, get, metadata=meta, timeout=CALL_TIMEOUT_S)
                if k % shape.list_every == shape.list_every - 1:
                    page = pb.ListJobsRequest(page_size=LIST_PAGE)
                    rec.call("List", stub.List, page, metadata=meta, timeout=CALL_TIMEOUT_S)
            first_job[c].set()  # (even when every submit failed: a watcher must not wait forever)
            submitted_all.wait()
            cancel_now.wait()
            for job_id in submitted[c]:
                cancel_sent[job_id] = time.perf_counter()
                request = pb.CancelJobRequest(job_id=job_id, reason="load test over")
                rec.call("Cancel", stub.Cancel, request, metadata=meta, timeout=CALL_TIMEOUT_S)

    def watcher(w: int) -> None:
        rec = recorders[shape.clients + w]
        first_job[w].wait()
        if not submitted[w]:
            return
        job_id = submitted[w][0]
        with JobClient(address, keys[w % tenants]) as jobs:
            opened = time.perf_counter()
            try:
                for event in jobs.stub.Watch(pb.WatchJobRequest(job_id=job_id), metadata=jobs.metadata, timeout=WATCH_TIMEOUT_S):
                    kind = event.WhichOneof("event")
                    now = time.perf_counter()
                    if not watched[w]:
                        rec.latencies["Watch: first event"].append(now - opened)
                    state = event.state_change.state if kind == "state_change" else 0
                    watched[w].append((kind, state))
                    if state == pb.JOB_STATE_CANCELLED and job_id in cancel_sent:
                        rec.latencies["Watch: cancel -> event"].append(now - cancel_sent[job_id])
            except Exception as e:  # noqa: BLE001 - a broken stream is an error to count
                code = e.code().name if hasattr(e, "code") else type(e).__name__
                rec.errors["Watch"][code] += 1

    threads = [threading.Thread(target=client, args=(c,), name=f"client-{c}", daemon=True) for c in range(shape.clients)]
    threads += [threading.Thread(target=watcher, args=(w,), name=f"watch-{w}", daemon=True) for w in range(shape.watchers)]
    for t in threads:
        t.start()
    seconds: dict[str, float] = {}
    t0 = time.perf_counter()
    start.wait()
    submitted_all.wait()
    seconds["submit phase"] = time.perf_counter() - t0

    # the queue at its peak, and one full listing per tenant
    rec = recorders[-1]
    listed: dict[str, list[str]] = {}
    queued = 0
    for i in range(tenants):
        with JobClient(address, keys[i]) as jobs:
            token = ""
            while True:
                page = rec.call("List (queued, all pages)", jobs.stub.List, pb.ListJobsRequest(
                    states=[pb.JOB_STATE_QUEUED], page_size=1000, page_token=token), metadata=jobs.metadata, timeout=CALL_TIMEOUT_S)
                if page is None:
                    break
                queued += len(page.jobs)
                if not (token := page.next_page_token):
                    break
            listed[tenant_name(i)] = [
                j.id for j in jobs.list(page_size=1000) if j.name != "blocker"
            ]

    t1 = time.perf_counter()
    cancel_now.set()
    for t in threads:
        t.join(timeout=WATCH_TIMEOUT_S)
    seconds["cancel phase"] = time.perf_counter() - t1
    calls = Recorder()
    for r in recorders:
        calls.merge(r)
    by_tenant: dict[str, list[str]] = defaultdict(list)
    for c, ids in enumerate(submitted):
        by_tenant[tenant_name(c % tenants)].extend(ids)
    return LoadResult(calls, dict(by_tenant), listed, queued, watched, seconds)


def percentiles(xs: list[float]) -> dict[str, float]:
    """p50/p95/p99/max in milliseconds."""
    if len(xs) < 2:
        value = xs[0] * 1e3 if xs else float("nan")
        return {"p50_ms": value, "p95_ms": value, "p99_ms": value, "max_ms": value}
    q = statistics.quantiles(xs, n=100, method="inclusive")
    return {"p50_ms": q[49] * 1e3, "p95_ms": q[94] * 1e3, "p99_ms": q[98] * 1e3, "max_ms": max(xs) * 1e3}


def process_usage(pid: int) -> dict[str, float]:
    """CPU seconds (user + system) and peak resident memory of process ``pid`` (Linux /proc)."""
    import os

    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        ticks = os.sysconf("SC_CLK_TCK")
        cpu = (int(fields[11]) + int(fields[12])) / ticks
        hwm = next(line for line in Path(f"/proc/{pid}/status").read_text().splitlines() if line.startswith("VmHWM"))
        return {"cpu_s": cpu, "peak_rss_mb": int(hwm.split()[1]) / 1024}
    except (OSError, StopIteration, IndexError, ValueError):
        return {}


def main(args: BenchArgs, shape: LoadShape) -> None:
    from tinker_client.jobs import JobClient
    from tinker_core.proto import jobs_pb2 as pb

    with tempfile.TemporaryDirectory(prefix="ot-load-") as tmp:
        started = time.perf_counter()
        scheduler, keys, blocker = start_scheduler(Path(tmp), shape.tenants)
        start_s = time.perf_counter() - started
        try:
            before = process_usage(scheduler.pid)
            result = run_load(scheduler.address, keys, shape)
            after = process_usage(scheduler.pid)
            with JobClient(scheduler.address, keys[0]) as client:
                client.cancel(blocker, "load test over")
        finally:
            scheduler.cleanup()
    jobs = sum(len(ids) for ids in result.submitted.values())
    listed_once = all(sorted(result.listed.get(t, [])) == sorted(ids) for t, ids in result.submitted.items())
    complete = sum(1 for events in result.watched if events and events[-1] == ("state_change", pb.JOB_STATE_CANCELLED))
    methods = {m: {"calls": len(xs), "errors": sum(result.calls.errors.get(m, Counter()).values()), **percentiles(xs)}
               for m, xs in sorted(result.calls.latencies.items())}
    for m, codes in result.calls.errors.items():
        methods.setdefault(m, {"calls": 0, "errors": sum(codes.values())})
    rows = [[m, v["calls"], v["errors"], *(v.get(k, float("nan")) for k in ("p50_ms", "p95_ms", "p99_ms", "max_ms"))]
            for m, v in methods.items()]
    print_table(
        f"{shape.clients} clients, {jobs} jobs queued, {shape.watchers} watch streams (ms)",
        ["method", "calls", "errors", "p50", "p95", "p99", "max"], rows,
    )
    submit_s = result.seconds["submit phase"]
    print(f"submit phase {submit_s:.1f} s ({jobs / submit_s:.0f} submits/s); queued at peak {result.queued_at_peak}; "
          f"listed once per tenant: {listed_once}; watch streams ending on CANCELLED: {complete}/{shape.watchers}; "
          f"errors: {result.error_count()}")
    write_results(args, "load", {
        "shape": dataclasses.asdict(shape),
        "scheduler_start_s": start_s,
        "methods": methods,
        "errors": {m: dict(codes) for m, codes in result.calls.errors.items()},
        "jobs_submitted": jobs,
        "queued_at_peak": result.queued_at_peak,
        "listed_once_per_tenant": listed_once,
        "watch_streams_complete": complete,
        "phases_s": result.seconds,
        "submits_per_s": jobs / submit_s,
        "scheduler_process": {"before": before, "after": after},
    }, with_torch=False)


def parse(argv: list[str] | None = None) -> tuple[BenchArgs, LoadShape]:
    """The common bench options plus the load shape (``--quick``: 10 clients, 100 jobs, 5 streams)."""
    import argparse

    own = argparse.ArgumentParser(add_help=False)
    own.add_argument("--clients", type=int, default=None)
    own.add_argument("--jobs", type=int, default=None)
    own.add_argument("--watchers", type=int, default=None)
    ns, rest = own.parse_known_args(argv)
    args = parse_args(__doc__.splitlines()[0], rest)
    base = LoadShape(clients=10, jobs=100, watchers=5) if args.quick else LoadShape()
    shape = LoadShape(
        clients=ns.clients or base.clients, jobs=ns.jobs or base.jobs, watchers=ns.watchers or base.watchers,
        tenants=base.tenants, list_every=base.list_every,
    )
    return args, shape


if __name__ == "__main__":
    main(*parse())
