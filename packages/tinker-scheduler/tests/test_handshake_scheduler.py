"""The scheduler's side of the version handshake (tinker_core.handshake), on a real scheduler."""

from __future__ import annotations

import grpc
import pytest

from tinker_core.handshake import VERSION_KEY, WIRE_KEY, WIRE_VERSION, Peer, package_version
from tinker_core.proto import jobs_pb2, jobs_pb2_grpc


def list_jobs(address: str, metadata):
    with grpc.insecure_channel(address) as channel:
        return jobs_pb2_grpc.JobServiceStub(channel).List.with_call(jobs_pb2.ListJobsRequest(), metadata=metadata, timeout=10)


def test_the_scheduler_answers_with_its_versions_and_refuses_a_client_of_another_wire(make_scheduler):
    scheduler = make_scheduler()
    _, call = list_jobs(scheduler.address, Peer("client", "tinker-client", "0.1.0", WIRE_VERSION).metadata())
    answer = dict(call.initial_metadata())
    assert answer[VERSION_KEY] == f"tinker-scheduler {package_version('tinker-scheduler')}"
    assert answer[WIRE_KEY] == WIRE_VERSION
    list_jobs(scheduler.address, None)  # no handshake (grpcurl, an old client): served
    with pytest.raises(grpc.RpcError) as caught:
        list_jobs(scheduler.address, Peer("client", "tinker-client", "3.0.0", "3.0").metadata())
    assert caught.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert caught.value.details() == (
        f"client tinker-client 3.0.0 (wire 3.0) and scheduler tinker-scheduler {package_version('tinker-scheduler')} "
        f"(wire {WIRE_VERSION}) speak incompatible wire protocols: upgrade the scheduler "
        "(pip install -U 'tinker-scheduler>=3.0.0'), or use a client of the scheduler's version")
