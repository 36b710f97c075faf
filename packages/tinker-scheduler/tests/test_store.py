"""The SQLite job store: jobs, idempotent submits, events with gap-free cursors, tenants and keys."""

from __future__ import annotations

import threading

import pytest

from tinker_core.proto import jobs_pb2
from tinker_scheduler.store import JobState, JobStore, NewJob, PendingEvent, StoreError


def new_job(tenant: str = "alice", *, request_id: str = "", config: str = "algorithm: {name: sft}\n",
            priority: int = 0) -> NewJob:
    return NewJob(
        tenant=tenant, name="job", priority=priority, config_text=config, config_format=1, config_json="{}",
        cpus=1.0, gpus=0.0, memory_gb=0.0, runs_dir="/runs", client_request_id=request_id,
    )


@pytest.fixture
def store(tmp_path):
    s = JobStore(tmp_path / "jobs.db")
    yield s
    s.close()


def test_job_states_match_the_wire_enum():
    assert {s.name: int(s) for s in JobState} == {
        name.removeprefix("JOB_STATE_"): value for name, value in jobs_pb2.JobState.items()
    }


def test_the_store_uses_wal_mode(store):
    assert store.journal_mode() == "wal"


def test_submit_queues_a_job_with_its_first_event(store):
    job, created = store.submit(new_job())
    assert created and job.state == JobState.QUEUED and job.id.startswith("job-")
    assert job.run_dir == f"/runs/alice/{job.id}"
    [event] = store.events_after(job.id, 0)
    assert (event.cursor, event.kind) == (1, "state")
    assert event.payload == {"previous": 0, "state": int(JobState.QUEUED), "reason": "submitted"}


def test_a_retried_submit_with_the_same_request_id_returns_the_same_job(store):
    first, created1 = store.submit(new_job(request_id="r-1"))
    second, created2 = store.submit(new_job(request_id="r-1"))
    assert (created1, created2) == (True, False)
    assert second.id == first.id
    assert len(store.list_jobs("alice")) == 1
    assert len(store.events_after(first.id, 0)) == 1  # no second "submitted" event


def test_request_ids_are_per_tenant(store):
    a, _ = store.submit(new_job("alice", request_id="same"))
    b, created = store.submit(new_job("bob", request_id="same"))
    assert created and a.id != b.id


def test_reusing_a_request_id_for_a_different_config_is_refused(store):
    store.submit(new_job(request_id="r-1", config="a: 1\n"))
    with pytest.raises(StoreError) as info:
        store.submit(new_job(request_id="r-1", config="a: 2\n"))
    assert info.value.field == "client_request_id"


def test_concurrent_retries_create_exactly_one_job(store):
    results = []

    def submit():
        results.append(store.submit(new_job(request_id="race"))[0].id)

    threads = [threading.Thread(target=submit) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(set(results)) == 1 and len(store.list_jobs("alice")) == 1


def test_transitions_append_events_with_consecutive_cursors(store):
    job, _ = store.submit(new_job())
    assert store.transition(job.id, JobState.RUNNING, "started", expect=[JobState.QUEUED], started_at=5.0)
    store.append_events(job.id, [PendingEvent("log", {"source": "stdout", "level": "", "text": "hi"})])
    done = store.transition(job.id, JobState.SUCCEEDED, "completed", expect=[JobState.RUNNING])
    assert done is not None and done.finished_at is not None and done.started_at == 5.0
    events = store.events_after(job.id, 0)
    assert [e.cursor for e in events] == [1, 2, 3, 4]
    assert [e.kind for e in events] == ["state", "state", "log", "state"]
    assert done.last_cursor == 4


def test_a_transition_from_an_unexpected_state_changes_nothing(store):
    job, _ = store.submit(new_job())
    assert store.transition(job.id, JobState.SUCCEEDED, "x", expect=[JobState.RUNNING]) is None
    assert store.get(job.id).state == JobState.QUEUED
    assert len(store.events_after(job.id, 0)) == 1


def test_events_after_a_cursor_are_exactly_the_later_ones(store):
    job, _ = store.submit(new_job())
    store.append_events(job.id, [PendingEvent("log", {"text": str(i)}) for i in range(10)])
    assert [e.cursor for e in store.events_after(job.id, 4)] == list(range(5, 12))
    assert [e.cursor for e in store.events_after(job.id, 4, limit=3)] == [5, 6, 7]
    assert store.events_after(job.id, 11) == []


def test_metrics_of_steps_already_reported_are_dropped_after_a_resume(store):
    job, _ = store.submit(new_job())
    store.append_events(job.id, [PendingEvent("metrics", {"step": s, "values": {"x": s}}) for s in (1, 2, 3)])
    # resumed from the checkpoint at step 1: steps 2 and 3 are reported again, then 4
    kept = store.append_events(job.id, [PendingEvent("metrics", {"step": s, "values": {"x": s}}) for s in (2, 3, 4)])
    assert kept == 1
    steps = [e.payload["step"] for e in store.events_after(job.id, 0) if e.kind == "metrics"]
    assert steps == [1, 2, 3, 4]


def test_everything_survives_reopening_the_file(tmp_path):
    path = tmp_path / "jobs.db"
    store = JobStore(path)
    key = store.add_tenant("alice")
    job, _ = store.submit(new_job(request_id="r"))
    store.transition(job.id, JobState.RUNNING, "started")
    store.update(job.id, checkpoint_path="/runs/ckpt", checkpoint_step=7)
    store.close()
    again = JobStore(path)
    reopened = again.get(job.id)
    assert reopened.state == JobState.RUNNING and reopened.checkpoint_step == 7
    assert reopened.checkpoint_path == "/runs/ckpt" and reopened.client_request_id == "r"
    assert [e.cursor for e in again.events_after(job.id, 0)] == [1, 2]
    assert again.authenticate(key) == "alice"
    assert again.submit(new_job(request_id="r"))[0].id == job.id
    again.close()


def test_cancel_a_queued_job_at_once_and_flag_a_running_one(store):
    queued, _ = store.submit(new_job())
    assert store.request_cancel(queued.id, "no longer needed").state == JobState.CANCELLED
    running, _ = store.submit(new_job())
    store.transition(running.id, JobState.RUNNING, "started")
    flagged = store.request_cancel(running.id, "stop it")
    assert flagged.state == JobState.RUNNING and flagged.cancel_reason == "stop it"
    finished, _ = store.submit(new_job())
    store.transition(finished.id, JobState.FAILED, "boom")
    assert store.request_cancel(finished.id, "late").reason == "boom"


def test_list_is_newest_first_filtered_and_paged(store):
    made = [store.submit(new_job())[0] for _ in range(5)]
    store.transition(made[1].id, JobState.RUNNING, "started")
    assert [j.id for j in store.list_jobs("alice")] == [j.id for j in reversed(made)]
    assert [j.id for j in store.list_jobs("alice", [JobState.RUNNING])] == [made[1].id]
    page = store.list_jobs("alice", limit=2, before_seq=made[3].seq)
    assert [j.id for j in page] == [made[2].id, made[1].id]
    assert store.list_jobs("bob") == []


def test_wait_for_events_returns_once_something_is_appended(store):
    job, _ = store.submit(new_job())
    version = store.version
    appender = threading.Timer(0.05, lambda: store.append_events(job.id, [PendingEvent("log", {"text": "x"})]))
    appender.start()
    assert store.wait_for_events(version, timeout=30) != version
    appender.join()


def test_api_keys_authenticate_their_tenant_and_are_stored_hashed(store, tmp_path):
    key = store.add_tenant("alice")
    other = store.add_tenant("alice")  # a second key for the same tenant
    assert key.startswith("otk_") and key != other
    assert store.authenticate(key) == "alice" and store.authenticate(other) == "alice"
    assert store.tenants() == ["alice"]
    secret = key.split("_", 2)[2]
    assert secret.encode() not in (tmp_path / "jobs.db").read_bytes()
    for wal in tmp_path.glob("jobs.db-wal"):
        assert secret.encode() not in wal.read_bytes()


@pytest.mark.parametrize("bad", ["", "nonsense", "otk_000000000000_wrong", "otk__", "Bearer x"])
def test_wrong_keys_do_not_authenticate(store, bad):
    key = store.add_tenant("alice")
    assert store.authenticate(bad) is None
    assert store.authenticate(key[:-1] + ("A" if key[-1] != "A" else "B")) is None


@pytest.mark.parametrize("name", ["", "Alice", "a b", "../etc", "x" * 64])
def test_tenant_names_must_be_safe_directory_names(store, name):
    with pytest.raises(StoreError, match="tenant name"):
        store.add_tenant(name)


# ---- the store file: private, checked at open ---------------------------------------------------
def test_a_new_store_file_is_private_and_so_is_a_directory_it_creates(tmp_path):
    store = JobStore(tmp_path / "home" / "jobs.db")
    store.add_tenant("alice")  # a write: the WAL and shared-memory files exist now
    assert (tmp_path / "home").stat().st_mode & 0o777 == 0o700
    for name in ("jobs.db", "jobs.db-wal", "jobs.db-shm"):
        assert (tmp_path / "home" / name).stat().st_mode & 0o777 == 0o600, name
    store.close()


def _one_line_naming(error: StoreError, path) -> str:
    message = str(error)
    assert "\n" not in message and str(path) in message
    assert message.startswith("db: ") and "restore it from a backup, or move it away" in message
    return message


def test_a_file_that_is_not_sqlite_is_one_error_naming_it(tmp_path):
    path = tmp_path / "jobs.db"
    path.write_bytes(b"not a database, just some bytes\n" * 300)
    with pytest.raises(StoreError) as caught:
        JobStore(path)
    assert "file is not a database" in _one_line_naming(caught.value, path)


def test_a_damaged_page_is_found_by_the_check_at_open(tmp_path):
    path = tmp_path / "jobs.db"
    store = JobStore(path)
    for i in range(100):  # enough rows for several pages
        store.submit(new_job(request_id=f"r{i}", config="x" * 1000))
    store.close()  # checkpoints the WAL into the file
    data = bytearray(path.read_bytes())
    page = 4096
    assert len(data) > 8 * page
    data[6 * page : 7 * page] = bytes(page)  # a zeroed b-tree page; the header stays intact
    path.write_bytes(bytes(data))
    with pytest.raises(StoreError) as caught:
        JobStore(path)
    assert "quick_check" in _one_line_naming(caught.value, path)


def test_the_queue_can_be_read_without_configs(store):
    # the scheduling loop reads the queue every tick: summaries keep a long queue of big
    # configs from being re-read each time (a job's config is read when it starts)
    big = "# " + "x" * 100_000 + "\nalgorithm: {name: sft}\n"
    first, _ = store.submit(new_job(config=big))
    second, _ = store.submit(new_job(config=big, request_id="r2"))
    summaries = store.in_state(JobState.QUEUED, with_config=False)
    assert [j.id for j in summaries] == [first.id, second.id]
    assert all(j.config_text == "" and j.config_json == "" for j in summaries)
    assert [j.config_text for j in store.in_state(JobState.QUEUED)] == [big, big]


def test_jobs_version_moves_with_job_rows_not_with_events(store):
    # the scheduling loop re-plans the queue only when this moves (or resources change)
    v0 = store.jobs_version
    job, _ = store.submit(new_job())
    v1 = store.jobs_version
    assert v1 > v0
    store.append_events(job.id, [PendingEvent("log", {"text": "hello"})])
    assert store.jobs_version == v1
    store.transition(job.id, JobState.RUNNING, "started")
    assert store.jobs_version > v1
