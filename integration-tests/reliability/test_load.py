"""Load at full size on a real scheduler process: 50 concurrent clients, 1,000 queued jobs, 20
Watch streams, Get and List meanwhile, then every job cancelled (the load of
``bench/bench_load.py``, which reports the latencies; this test checks behaviour only).
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))

import bench_load  # noqa: E402

from tinker_core.proto import jobs_pb2  # noqa: E402

SHAPE = bench_load.LoadShape(clients=50, jobs=1000, watchers=20, tenants=5)


@pytest.mark.slow
def test_fifty_clients_a_thousand_queued_jobs_and_twenty_watch_streams(tmp_path, processes):
    scheduler, keys, blocker = bench_load.start_scheduler(tmp_path, SHAPE.tenants)
    processes.append(scheduler)
    result = bench_load.run_load(scheduler.address, keys, SHAPE)

    assert dict(result.calls.errors) == {}
    ids = [job_id for tenant_ids in result.submitted.values() for job_id in tenant_ids]
    assert len(ids) == SHAPE.jobs and len(set(ids)) == SHAPE.jobs and all(ids)  # every submit got its own job
    assert result.queued_at_peak == SHAPE.jobs  # none started: the blocker holds the only CPU
    assert blocker not in ids
    for tenant, tenant_ids in result.submitted.items():  # each job listed once, for its tenant only
        listed = result.listed[tenant]
        assert len(listed) == len(set(listed)) and sorted(listed) == sorted(tenant_ids)
    assert len(result.watched) == SHAPE.watchers
    for events in result.watched:  # every stream saw the job queued, then cancelled, and ended
        states = [state for kind, state in events if kind == "state_change"]
        assert states[0] == jobs_pb2.JOB_STATE_QUEUED and states[-1] == jobs_pb2.JOB_STATE_CANCELLED
    calls = {method: len(latencies) for method, latencies in result.calls.latencies.items()}
    assert calls["Submit"] == calls["Get"] == calls["Cancel"] == SHAPE.jobs
    assert calls["List"] == SHAPE.jobs // SHAPE.list_every
