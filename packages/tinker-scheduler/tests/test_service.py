"""JobService over a real in-process gRPC server: validation, idempotence, tenants, auth, TLS, health.

Most tests use a *paused* scheduler (it accepts and stores jobs but starts none), so job states
stay where the test puts them.
"""

from __future__ import annotations

import base64
import json
import shutil
import subprocess

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from tinker_core.config import MAX_CONFIG_BYTES
from tinker_core.proto import jobs_pb2
from tinker_scheduler.job_service import MAX_PAGE_BYTES
from tinker_scheduler.store import JobState, NewJob
from tinker_scheduler.testing import JobStub, job_config_text

QUEUED = jobs_pb2.JOB_STATE_QUEUED
CANCELLED = jobs_pb2.JOB_STATE_CANCELLED


def code_of(call, *args, **kwargs) -> tuple[grpc.StatusCode, str]:
    with pytest.raises(grpc.RpcError) as info:
        result = call(*args, **kwargs)
        if hasattr(result, "__next__"):
            list(result)
    return info.value.code(), info.value.details()


def test_health_reports_serving(make_scheduler):
    scheduler = make_scheduler(paused=True)
    with grpc.insecure_channel(scheduler.address) as channel:
        stub = health_pb2_grpc.HealthStub(channel)
        for service in ("", "opentinker.v1.JobService"):
            response = stub.Check(health_pb2.HealthCheckRequest(service=service), timeout=10)
            assert response.status == health_pb2.HealthCheckResponse.SERVING


def test_submit_returns_a_queued_job_with_what_was_sent(make_scheduler):
    scheduler = make_scheduler(paused=True)
    text = job_config_text(name="hello", priority=3)
    with JobStub(scheduler.address) as client:
        job = client.submit(text, request_id="req-1")
    assert job.state == QUEUED and job.name == "hello" and job.priority == 3
    assert job.tenant == "local" and job.config_text == text and job.client_request_id == "req-1"
    assert job.config_format == jobs_pb2.CONFIG_FORMAT_YAML
    assert job.run_dir == str(scheduler.runs_dir / "local" / job.id)
    assert job.HasField("created_at") and not job.HasField("started_at") and not job.HasField("finished_at")


def test_a_json_config_is_detected_and_the_priority_override_wins(make_scheduler):
    scheduler = make_scheduler(paused=True)
    text = json.dumps({"name": "j", "algorithm": {"name": "sft", "steps": 2}, "priority": 1})
    with JobStub(scheduler.address) as client:
        job = client.submit(text, priority=-7)
    assert job.config_format == jobs_pb2.CONFIG_FORMAT_JSON and job.priority == -7


def test_a_bad_config_is_invalid_argument_naming_every_field(make_scheduler):
    scheduler = make_scheduler(paused=True)
    text = "algorithm: {name: sft, stpes: 3}\noptimizer: {lr: fast}\nresources: {cpus: -1}\n"
    with JobStub(scheduler.address) as client:
        code, details = code_of(client.submit, text)
        assert code == grpc.StatusCode.INVALID_ARGUMENT
        assert "algorithm.stpes: unknown key; did you mean 'steps'?" in details
        assert "optimizer.lr" in details and "resources.cpus" in details
        assert client.list().jobs == []  # nothing was stored


@pytest.mark.parametrize(
    ("text", "field"),
    [
        ("", "config_text: is empty"),
        ("algorithm: [unclosed", "config_text: not valid YAML"),
        ("- just\n- a list\n", "(top level): expected a mapping"),
        ("algorithm: {name: sft}\nresources: {cpus: 64}\n", "resources.cpus = 64 but the cluster has 2 in total"),
        ("algorithm: {name: sft}\noptimizer: {name: adamm}\n", "optimizer.name: unknown optimizer 'adamm'"),
    ],
)
def test_submit_validation_names_the_field(make_scheduler, text, field):
    scheduler = make_scheduler(paused=True)
    with JobStub(scheduler.address) as client:
        code, details = code_of(client.submit, text)
    assert code == grpc.StatusCode.INVALID_ARGUMENT
    assert field in details


def test_a_priority_override_out_of_range_is_invalid(make_scheduler):
    scheduler = make_scheduler(paused=True)
    with JobStub(scheduler.address) as client:
        code, details = code_of(client.submit, job_config_text(), priority=1000)
    assert code == grpc.StatusCode.INVALID_ARGUMENT and details.startswith("priority:")


def test_a_retried_submit_returns_the_same_job_never_two(make_scheduler):
    scheduler = make_scheduler(paused=True)
    text = job_config_text()
    with JobStub(scheduler.address) as client:
        first = client.submit(text, request_id="retry-me")
        second = client.submit(text, request_id="retry-me")
        assert second.id == first.id
        assert [j.id for j in client.list().jobs] == [first.id]
        code, details = code_of(client.submit, job_config_text(steps=9), request_id="retry-me")
        assert code == grpc.StatusCode.INVALID_ARGUMENT and details.startswith("client_request_id:")
        assert client.submit(text).id != first.id  # no request id: a new job each time


def test_get_and_unknown_ids_with_a_did_you_mean(make_scheduler):
    scheduler = make_scheduler(paused=True)
    with JobStub(scheduler.address) as client:
        job = client.submit(job_config_text())
        assert client.get(job.id).id == job.id
        code, details = code_of(client.get, job.id[:-1] + "x")
        assert code == grpc.StatusCode.NOT_FOUND and f"did you mean {job.id!r}" in details
        code, _ = code_of(client.get, "")
        assert code == grpc.StatusCode.INVALID_ARGUMENT


def test_list_filters_by_state_and_pages_newest_first(make_scheduler):
    scheduler = make_scheduler(paused=True)
    with JobStub(scheduler.address) as client:
        jobs = [client.submit(job_config_text(name=f"j{i}")) for i in range(5)]
        client.cancel(jobs[1].id)
        client.cancel(jobs[3].id)
        assert [j.id for j in client.list([CANCELLED]).jobs] == [jobs[3].id, jobs[1].id]
        assert [j.id for j in client.list([QUEUED]).jobs] == [jobs[4].id, jobs[2].id, jobs[0].id]
        seen, token = [], ""
        while True:
            page = client.list(page_size=2, page_token=token)
            seen += [j.id for j in page.jobs]
            token = page.next_page_token
            if not token:
                break
        assert seen == [j.id for j in reversed(jobs)]
        assert code_of(client.list, page_token="garbage")[0] == grpc.StatusCode.INVALID_ARGUMENT
        assert code_of(client.list, page_size=-1)[0] == grpc.StatusCode.INVALID_ARGUMENT
        assert code_of(client.list, states=[42])[0] == grpc.StatusCode.INVALID_ARGUMENT


def _store_job(store, tenant: str, *, config_text: str = "name: old\n", name: str = "old"):
    """A job written straight into the store, as one stored before today's limits would be."""
    job, _ = store.submit(NewJob(tenant=tenant, name=name, priority=0, config_text=config_text, config_format=1,
                                 config_json="{}", cpus=1, gpus=0, memory_gb=0, runs_dir="/tmp/runs"))
    return job


def test_list_answers_are_summaries_and_get_returns_the_config(make_scheduler):
    scheduler = make_scheduler(paused=True)
    text = job_config_text(name="summary")
    with JobStub(scheduler.address) as client:
        job = client.submit(text)
        (listed,) = client.list().jobs
        assert listed.config_text == "" and client.get(job.id).config_text == text
        expected = jobs_pb2.Job()
        expected.CopyFrom(job)
        expected.config_text = ""
        assert listed == expected  # every other field as Submit returned it


def test_old_multi_megabyte_configs_do_not_break_listing_with_a_default_client(make_scheduler):
    """The probe: 3 MB configs stored earlier made every List page exceed a client's 4 MiB limit."""
    scheduler = make_scheduler(paused=True)
    big = "name: big\n#" + "x" * (3 * 1024 * 1024) + "\n"
    old = [_store_job(scheduler.store, "local", config_text=big) for _ in range(2)]
    with JobStub(scheduler.address) as client:  # grpc's default 4 MiB receive limit
        page = client.list()
        assert [j.id for j in page.jobs] == [old[1].id, old[0].id] and page.next_page_token == ""
        assert all(j.config_text == "" for j in page.jobs)
        assert client.get(old[0].id).config_text == big  # Get still returns it (3 MB < 4 MiB)


def test_a_page_stays_under_a_mebibyte_whatever_the_summaries_weigh(make_scheduler):
    scheduler = make_scheduler(paused=True)
    made = [_store_job(scheduler.store, "local") for _ in range(6)]
    for job in made:  # a long reason (e.g. an error text) makes a summary heavy
        scheduler.store.update(job.id, reason="r" * 400_000)
    with JobStub(scheduler.address) as client:
        seen, token, pages = [], "", 0
        while True:
            page = client.list(page_size=1000, page_token=token)
            assert page.ByteSize() <= MAX_PAGE_BYTES + 1000
            seen += [j.id for j in page.jobs]
            pages += 1
            token = page.next_page_token
            if not token:
                break
    assert seen == [j.id for j in reversed(made)] and pages == 3


def test_page_tokens_work_only_for_their_tenant_and_states(make_scheduler):
    scheduler = make_scheduler(paused=True)
    alice_key = scheduler.store.add_tenant("alice")
    bob_key = scheduler.store.add_tenant("bob")
    mine, theirs = [], []
    for i in range(5):  # interleaved, so bob's jobs sit between alice's in the table
        mine.append(_store_job(scheduler.store, "alice", name=f"a{i}"))
        theirs.append(_store_job(scheduler.store, "bob", name=f"b{i}"))
    with JobStub(scheduler.address, alice_key) as alice, JobStub(scheduler.address, bob_key) as bob:
        seen, token = [], ""
        while True:
            page = alice.list(page_size=2, page_token=token)
            seen += [j.id for j in page.jobs]
            token = page.next_page_token
            if not token:
                break
        assert seen == [j.id for j in reversed(mine)]
        alices_token = alice.list(page_size=2).next_page_token
        code, foreign = code_of(bob.list, page_size=2, page_token=alices_token)
        assert code == grpc.StatusCode.INVALID_ARGUMENT and foreign.startswith("page_token:")
        assert "alice" not in foreign  # never a hint at who the token belonged to
        assert code_of(bob.list, page_token="garbage") == (code, foreign)  # the same answer as garbage
        code, details = code_of(alice.list, states=[QUEUED], page_token=alices_token)
        assert code == grpc.StatusCode.INVALID_ARGUMENT and "states filter" in details
        forged = [
            "!!!", "before:3", base64.urlsafe_b64encode(b"before:3").decode(),
            base64.urlsafe_b64encode(b"[1, 2]").decode(),
            base64.urlsafe_b64encode(b'{"tenant": "alice", "states": [], "before": "3"}').decode(),
            base64.urlsafe_b64encode(b'{"tenant": "alice", "before": 3}').decode(),
        ]
        for token in forged:
            assert code_of(alice.list, page_token=token)[0] == grpc.StatusCode.INVALID_ARGUMENT, token


def test_a_config_over_one_mebibyte_is_refused_naming_the_limit(make_scheduler):
    scheduler = make_scheduler(paused=True)
    head = job_config_text(name="padded") + "#"
    at_limit = head + "x" * (MAX_CONFIG_BYTES - len(head) - 1) + "\n"
    assert len(at_limit.encode()) == MAX_CONFIG_BYTES
    with JobStub(scheduler.address) as client:
        code, details = code_of(client.submit, at_limit.replace("#", "#x", 1))
        assert code == grpc.StatusCode.INVALID_ARGUMENT
        assert details.startswith("config_text: the config is 1,048,577 bytes") and "1 MiB" in details
        assert client.list().jobs == []
        assert client.submit(at_limit).config_text == at_limit  # the limit itself is allowed


def test_cancel_a_queued_job_records_the_reason_and_ends_its_watch(make_scheduler):
    scheduler = make_scheduler(paused=True)
    with JobStub(scheduler.address) as client:
        job = client.submit(job_config_text())
        cancelled = client.cancel(job.id, reason="changed my mind")
        assert cancelled.state == CANCELLED and cancelled.reason == "changed my mind"
        assert cancelled.HasField("finished_at")
        again = client.cancel(job.id, reason="twice")  # already finished: unchanged, not an error
        assert again.state == CANCELLED and again.reason == "changed my mind"
        events = list(client.watch(job.id))
        assert [(e.cursor, e.state_change.state) for e in events] == [(1, QUEUED), (2, CANCELLED)]
        assert list(client.watch(job.id, after_cursor=2)) == []


# ---- tenants and auth ------------------------------------------------------------------------


def test_tenants_cannot_see_watch_or_cancel_each_others_jobs(make_scheduler):
    scheduler = make_scheduler(paused=True)
    alice_key = scheduler.store.add_tenant("alice")
    bob_key = scheduler.store.add_tenant("bob")
    with JobStub(scheduler.address, alice_key) as alice, JobStub(scheduler.address, bob_key) as bob:
        job = alice.submit(job_config_text())
        assert job.tenant == "alice" and job.run_dir.endswith(f"/alice/{job.id}")
        for call in (bob.get, bob.cancel, bob.watch):
            code, details = code_of(call, job.id)
            assert code == grpc.StatusCode.NOT_FOUND, call
            assert "did you mean" not in details  # never a hint at another tenant's ids
        assert bob.list().jobs == []
        assert [j.id for j in alice.list().jobs] == [job.id]
        assert alice.get(job.id).state == QUEUED  # bob's cancel did nothing


def test_required_auth_rejects_missing_and_wrong_keys(make_scheduler):
    scheduler = make_scheduler(paused=True, auth="required")
    with JobStub(scheduler.address) as anonymous:
        code, details = code_of(anonymous.list)
        assert code == grpc.StatusCode.UNAUTHENTICATED and "add-tenant" in details
    key = scheduler.store.add_tenant("alice")
    with JobStub(scheduler.address) as anonymous:
        code, details = code_of(anonymous.submit, job_config_text())
        assert code == grpc.StatusCode.UNAUTHENTICATED and "authorization: Bearer" in details
    with JobStub(scheduler.address, key + "x") as wrong:
        assert code_of(wrong.list)[0] == grpc.StatusCode.UNAUTHENTICATED
    with grpc.insecure_channel(scheduler.address) as channel:  # the x-api-key form
        from tinker_core.proto import jobs_pb2_grpc

        stub = jobs_pb2_grpc.JobServiceStub(channel)
        response = stub.List(jobs_pb2.ListJobsRequest(), metadata=(("x-api-key", key),), timeout=10)
        assert response.jobs == []


def test_auto_auth_is_open_until_the_first_tenant_exists(make_scheduler):
    scheduler = make_scheduler(paused=True)  # auth="auto"
    with JobStub(scheduler.address) as anonymous:
        local_job = anonymous.submit(job_config_text())
        assert local_job.tenant == "local"
        key = scheduler.store.add_tenant("alice")
        code, _ = code_of(anonymous.list)
        assert code == grpc.StatusCode.UNAUTHENTICATED
    with JobStub(scheduler.address, key) as alice:
        assert alice.list().jobs == []  # the local tenant's job is not alice's
        assert code_of(alice.get, local_job.id)[0] == grpc.StatusCode.NOT_FOUND


def test_auth_none_ignores_keys(make_scheduler):
    scheduler = make_scheduler(paused=True, auth="none")
    scheduler.store.add_tenant("alice")
    with JobStub(scheduler.address) as anonymous, JobStub(scheduler.address, "otk_bogus_key") as other:
        job = anonymous.submit(job_config_text())
        assert job.tenant == "local" and other.get(job.id).id == job.id


# ---- TLS -------------------------------------------------------------------------------------


@pytest.mark.skipif(shutil.which("openssl") is None, reason="needs the openssl command to make a test certificate")
def test_tls_serves_only_tls_clients(make_scheduler, tmp_path):
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", "/CN=localhost",
         "-addext", "subjectAltName=DNS:localhost,IP:127.0.0.1", "-keyout", str(key), "-out", str(cert)],
        check=True, capture_output=True,
    )
    scheduler = make_scheduler(paused=True, tls_cert=cert, tls_key=key)
    with JobStub(scheduler.address, root_certificates=cert.read_bytes()) as client:
        assert client.submit(job_config_text()).state == QUEUED
    with JobStub(scheduler.address) as plaintext:
        assert code_of(plaintext.list)[0] == grpc.StatusCode.UNAVAILABLE


def test_paused_scheduler_keeps_jobs_queued_in_the_store(make_scheduler):
    scheduler = make_scheduler(paused=True)
    with JobStub(scheduler.address) as client:
        job = client.submit(job_config_text())
    assert scheduler.store.get(job.id).state == JobState.QUEUED
    assert scheduler.running_job_ids() == []


def test_a_second_scheduler_on_the_same_job_store_is_refused(make_scheduler, tmp_path):
    first = make_scheduler(paused=True)
    with pytest.raises(OSError, match="another scheduler is using the job store"):
        make_scheduler(paused=True, db=first.db_path)


def test_a_port_in_use_is_a_clear_error(make_scheduler):
    first = make_scheduler(paused=True)
    with pytest.raises(OSError, match="could not bind the gRPC server"):
        make_scheduler(paused=True, port=first.port)
    with JobStub(first.address) as client:  # the first one is unaffected
        assert client.list().jobs == []


def test_a_runner_that_cannot_be_imported_fails_the_start(make_scheduler):
    with pytest.raises(ValueError, match="runner 'no_such_module:train' cannot be used"):
        make_scheduler(runner="no_such_module:train")
