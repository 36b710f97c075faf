"""Jobs executed on Ray through the scheduler, with the sleep_train test workload.

Covers: events and run directories, Watch resume without gaps or duplicates, cancel of a running
job (via should_stop), actor death and retries, job failure, placement by resources, backfill on
the real cluster, graceful stop and resume, and the Prometheus endpoint.
"""

from __future__ import annotations

import json
import urllib.request
from pathlib import Path

from tinker_core.proto import jobs_pb2
from tinker_scheduler.store import JobState, JobStore
from tinker_scheduler.testing import JobStub, job_config_text

S = jobs_pb2


def states_of(events) -> list[int]:
    return [e.state_change.state for e in events if e.WhichOneof("event") == "state_change"]


def wait_for(client: JobStub, job_id: str, predicate, after_cursor: int = 0) -> int:
    """Follow the job's events until ``predicate(event)``; return that event's cursor."""
    for event in client.watch(job_id, after_cursor=after_cursor):
        if predicate(event):
            return event.cursor
    raise AssertionError(f"job {job_id} ended before the awaited event")


def is_state(state: int):
    return lambda e: e.WhichOneof("event") == "state_change" and e.state_change.state == state


def attempts(run_dir: str) -> list[int]:
    path = Path(run_dir) / "attempts.jsonl"
    return [json.loads(line)["start_step"] for line in path.read_text().splitlines()]


def test_a_job_runs_to_success_and_reports_everything(make_scheduler):
    scheduler = make_scheduler()
    with JobStub(scheduler.address) as client:
        job = client.submit(job_config_text(steps=4))
        events = list(client.watch(job.id))
        final = client.get(job.id)
    assert [e.cursor for e in events] == list(range(1, len(events) + 1))  # no gaps
    assert states_of(events) == [S.JOB_STATE_QUEUED, S.JOB_STATE_RUNNING, S.JOB_STATE_SUCCEEDED]
    steps = [e.metrics.step for e in events if e.WhichOneof("event") == "metrics"]
    assert steps == [1, 2, 3, 4, 4]  # four steps, then the final evaluation
    assert events[-1].state_change.reason == "completed 4 steps"
    logs = [(e.log.source, e.log.text) for e in events if e.WhichOneof("event") == "log"]
    assert ("stdout", "sleep_train: starting at step 0 of 4") in logs  # captured print()
    assert ("stdout", "step 4/4") in logs  # callbacks.on_log
    assert any(src == "scheduler" and text.startswith("checkpoint at step 4") for src, text in logs)
    assert final.state == S.JOB_STATE_SUCCEEDED and final.HasField("started_at") and final.HasField("finished_at")
    run_dir = Path(final.run_dir)
    assert run_dir == scheduler.runs_dir / "local" / job.id
    assert final.checkpoint_path == str(run_dir / "checkpoints" / "step-000004.json")
    assert (run_dir / "completions.txt").read_text().splitlines() == ["4"]


def test_watch_resumes_from_any_cursor_without_gaps_or_duplicates(make_scheduler):
    scheduler = make_scheduler()
    with JobStub(scheduler.address) as client:
        job = client.submit(job_config_text(steps=6))
        # read part of the stream while the job runs, drop the stream, resume from the cursor
        stream = client.watch(job.id)
        first = [next(stream) for _ in range(4)]
        stream.cancel()
        rest = list(client.watch(job.id, after_cursor=first[-1].cursor))
        full = list(client.watch(job.id))
    assert [e.cursor for e in first + rest] == [e.cursor for e in full] == list(range(1, len(full) + 1))
    assert [e.SerializeToString() for e in first + rest] == [e.SerializeToString() for e in full]
    for cursor in (0, 3, len(full) - 1):
        assert [e.cursor for e in client_watch(scheduler, job.id, cursor)] == list(range(cursor + 1, len(full) + 1))


def client_watch(scheduler, job_id: str, cursor: int):
    with JobStub(scheduler.address) as client:
        return list(client.watch(job_id, after_cursor=cursor))


def test_cancel_a_running_job_stops_it_at_a_checkpoint(make_scheduler):
    scheduler = make_scheduler()
    with JobStub(scheduler.address) as client:
        job = client.submit(job_config_text(steps=100_000, step_s=0.02))
        wait_for(client, job.id, lambda e: e.WhichOneof("event") == "metrics" and e.metrics.step >= 2)
        reply = client.cancel(job.id, reason="enough")
        assert reply.state in (S.JOB_STATE_RUNNING, S.JOB_STATE_CANCELLED)
        final = client.wait(job.id)
        events = list(client.watch(job.id))
    assert final.state == S.JOB_STATE_CANCELLED and final.reason == "enough"
    assert states_of(events)[-1] == S.JOB_STATE_CANCELLED
    texts = [e.log.text for e in events if e.WhichOneof("event") == "log"]
    assert any(t.startswith("cancel requested (enough)") for t in texts)
    assert any(t.startswith("stopping at step") for t in texts)  # should_stop() was honoured
    assert not (Path(final.run_dir) / "completions.txt").exists()
    assert final.checkpoint_path  # the interrupted run checkpointed


def test_a_dead_actor_is_restarted_from_its_checkpoint(make_scheduler):
    scheduler = make_scheduler(max_retries=2)
    with JobStub(scheduler.address) as client:
        job = client.submit(job_config_text(steps=4, crash_at_step=3, crash_times=1))
        final = client.wait(job.id)
        events = list(client.watch(job.id))
    assert final.state == S.JOB_STATE_SUCCEEDED
    assert states_of(events) == [
        S.JOB_STATE_QUEUED, S.JOB_STATE_RUNNING, S.JOB_STATE_QUEUED, S.JOB_STATE_RUNNING, S.JOB_STATE_SUCCEEDED,
    ]
    requeue = [e.state_change.reason for e in events if e.WhichOneof("event") == "state_change"][2]
    assert "actor died" in requeue and "restart 1 of 2" in requeue and "newest checkpoint" in requeue
    assert attempts(final.run_dir) == [0, 2]  # the second attempt resumed after step 2
    steps = [e.metrics.step for e in events if e.WhichOneof("event") == "metrics"]
    assert steps == [1, 2, 3, 4, 4]
    assert scheduler.store.get(job.id).restarts == 1
    assert (Path(final.run_dir) / "completions.txt").read_text().splitlines() == ["4"]


def test_an_actor_that_keeps_dying_fails_after_max_retries(make_scheduler):
    scheduler = make_scheduler(max_retries=1)
    with JobStub(scheduler.address) as client:
        job = client.submit(job_config_text(steps=3, crash_at_step=2, crash_times=99))
        final = client.wait(job.id)
    assert final.state == S.JOB_STATE_FAILED
    assert "actor died" in final.reason and "gave up after 1 restart(s) (max_retries=1)" in final.reason
    assert attempts(final.run_dir) == [0, 1]


def test_a_job_that_raises_fails_with_the_error_and_is_not_retried(make_scheduler):
    scheduler = make_scheduler(max_retries=3)
    with JobStub(scheduler.address) as client:
        job = client.submit(job_config_text(steps=5, fail_at_step=2))
        final = client.wait(job.id)
        events = list(client.watch(job.id))
    assert final.state == S.JOB_STATE_FAILED
    assert final.reason == "RuntimeError: sleep_train was told to fail at step 2"
    assert attempts(final.run_dir) == [0]
    stderr = [e.log.text for e in events if e.WhichOneof("event") == "log" and e.log.source == "stderr"]
    assert any("RuntimeError" in line for line in stderr)  # the traceback is in the log


def test_jobs_are_placed_by_their_resources_and_small_ones_backfill(make_scheduler):
    """The README example on the 2-CPU test cluster: a small low-priority job runs, a big
    high-priority job waits for both CPUs, a second small job starts at once on the free CPU."""
    scheduler = make_scheduler()
    with JobStub(scheduler.address) as client:
        small1 = client.submit(job_config_text(name="small-low-1", steps=100_000, cpus=1, priority=0))
        wait_for(client, small1.id, is_state(S.JOB_STATE_RUNNING))
        big = client.submit(job_config_text(name="big-high", steps=2, cpus=2, priority=10))
        small2 = client.submit(job_config_text(name="small-low-2", steps=2, cpus=1, priority=0))
        assert client.wait(small2.id).state == S.JOB_STATE_SUCCEEDED  # ran while small1 held a CPU
        assert client.get(big.id).state == S.JOB_STATE_QUEUED  # small1 still holds a CPU
        client.cancel(small1.id)
        assert client.wait(big.id).state == S.JOB_STATE_SUCCEEDED
        big_logs = [e.log.text for e in client.watch(big.id) if e.WhichOneof("event") == "log"]
    assert any("job started (Ray node" in t and "'CPU': 2.0" in t for t in big_logs), big_logs
    rows = {j.name: j for j in (scheduler.store.get(i) for i in (small1.id, big.id, small2.id))}
    assert rows["big-high"].started_at >= rows["small-low-1"].finished_at


def test_graceful_stop_requeues_running_jobs_and_a_new_scheduler_resumes_them(make_scheduler, tmp_path):
    db = tmp_path / "shared.db"
    first = make_scheduler(db=db)
    with JobStub(first.address) as client:
        running = client.submit(job_config_text(steps=40, step_s=0.02))
        wait_for(client, running.id, lambda e: e.WhichOneof("event") == "metrics" and e.metrics.step >= 3)
    first.stop()
    store = JobStore(db)
    after_stop = store.get(running.id)
    store.close()
    assert after_stop.state == JobState.QUEUED and after_stop.reason.startswith("scheduler shutting down")
    assert after_stop.checkpoint_step is not None and after_stop.checkpoint_step >= 3
    second = make_scheduler(db=db)
    with JobStub(second.address) as client:
        final = client.wait(running.id)
        events = list(client.watch(running.id))
    assert final.state == S.JOB_STATE_SUCCEEDED
    assert states_of(events) == [
        S.JOB_STATE_QUEUED, S.JOB_STATE_RUNNING, S.JOB_STATE_QUEUED, S.JOB_STATE_RUNNING, S.JOB_STATE_SUCCEEDED,
    ]
    starts = attempts(final.run_dir)
    assert len(starts) == 2 and starts[1] >= 3  # resumed, did not start over
    assert (Path(final.run_dir) / "completions.txt").read_text().splitlines() == ["40"]
    steps = [e.metrics.step for e in events if e.WhichOneof("event") == "metrics"]
    assert steps == list(range(1, 41)) + [40]  # each step reported once


def test_the_prometheus_endpoint_reports_jobs_queue_and_steps(make_scheduler):
    scheduler = make_scheduler(metrics_port=0, max_retries=1)
    with JobStub(scheduler.address) as client:
        ok = client.submit(job_config_text(steps=3, rollout_errors=2))
        crashy = client.submit(job_config_text(steps=2, crash_at_step=1, crash_times=1))
        client.wait(ok.id)
        client.wait(crashy.id)
        cancelled = client.submit(job_config_text(cpus=2, steps=100_000))
        client.cancel(cancelled.id)
        client.wait(cancelled.id)
    text = urllib.request.urlopen(f"http://127.0.0.1:{scheduler.metrics_port}/metrics", timeout=10).read().decode()
    values = {
        line.rsplit(" ", 1)[0]: float(line.rsplit(" ", 1)[1])
        for line in text.splitlines()
        if line and not line.startswith("#")
    }
    assert values['opentinker_jobs{state="SUCCEEDED"}'] == 2
    assert values['opentinker_jobs{state="CANCELLED"}'] == 1
    assert values['opentinker_jobs{state="QUEUED"}'] == values["opentinker_queue_depth"] == 0
    assert values['opentinker_jobs_finished_total{state="SUCCEEDED"}'] == 2
    assert values["opentinker_actor_restarts_total"] == 1
    assert values["opentinker_queue_wait_seconds_count"] >= 3
    assert values["opentinker_step_seconds_count"] >= 2
    assert values['opentinker_rollout_errors_total{reason="env_error"}'] == 6  # 2 per step, 3 steps
    assert "opentinker_queue_depth" in values and "opentinker_tokens_per_second" in values
    assert values['opentinker_resources_free{resource="cpus"}'] <= 2
