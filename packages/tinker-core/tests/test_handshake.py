"""The version handshake on a real gRPC server: answers, refusals naming both versions and the fix,
and calls without a handshake served as before."""

from __future__ import annotations

from concurrent import futures

import grpc
import pytest
from grpc_health.v1 import health, health_pb2, health_pb2_grpc

from tinker_core import handshake
from tinker_core.handshake import (
    VERSION_KEY,
    WIRE_KEY,
    WIRE_VERSION,
    IncompatiblePeer,
    Peer,
    ServerHandshake,
    handshake_channel,
    refusal,
)


@pytest.fixture
def served():
    """A gRPC server with the handshake and the standard health service on 127.0.0.1."""
    interceptor = ServerHandshake("env server", "tinker-core")
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2), interceptors=[interceptor])
    servicer = health.HealthServicer()
    servicer.set("", health_pb2.HealthCheckResponse.SERVING)
    health_pb2_grpc.add_HealthServicer_to_server(servicer, server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    yield interceptor, f"127.0.0.1:{port}"
    server.stop(0)


def check(address: str, metadata: list[tuple[str, str]] | None):
    with grpc.insecure_channel(address) as channel:
        return health_pb2_grpc.HealthStub(channel).Check.with_call(health_pb2.HealthCheckRequest(), metadata=metadata, timeout=10)


def test_the_server_answers_every_call_with_its_versions(served):
    _, address = served
    client = Peer("client", "tinker-client", "0.1.0", WIRE_VERSION)
    response, call = check(address, client.metadata())
    assert response.status == health_pb2.HealthCheckResponse.SERVING
    answer = dict(call.initial_metadata())
    assert answer[WIRE_KEY] == WIRE_VERSION
    assert answer[VERSION_KEY] == f"tinker-core {handshake.package_version('tinker-core')}"


def test_a_call_without_a_handshake_is_served_as_before(served):
    _, address = served
    response, _ = check(address, None)  # grpcurl, a Kubernetes probe, a client older than the handshake
    assert response.status == health_pb2.HealthCheckResponse.SERVING


@pytest.mark.parametrize(("wire", "upgrade"), [("2.0", "upgrade the env server"), ("0.3", "upgrade the client"),
                                                ("x", "upgrade the client")])
def test_a_client_of_another_wire_major_is_refused_naming_both_versions_and_what_to_upgrade(served, wire, upgrade):
    _, address = served
    with pytest.raises(grpc.RpcError) as caught:
        check(address, Peer("client", "tinker-client", "9.9.9", wire).metadata())
    assert caught.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    message = caught.value.details()
    assert "\n" not in message
    assert f"client tinker-client 9.9.9 (wire {wire})" in message
    assert f"env server tinker-core {handshake.package_version('tinker-core')} (wire {WIRE_VERSION})" in message
    assert upgrade in message and "pip install -U" in message


def test_a_newer_minor_is_compatible():
    major = WIRE_VERSION.split(".")[0]
    ours = Peer("scheduler", "tinker-scheduler", "0.1.0", f"{major}.0")
    assert refusal(ours, Peer("client", "tinker-client", "0.2.0", f"{major}.7")) is None


def test_the_client_interceptor_sends_its_versions_and_learns_the_servers(served):
    _, address = served
    channel = handshake_channel(grpc.insecure_channel(address), "tinker-client", "env server")
    with channel:
        health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(), timeout=10)
        server = channel.handshake.server
    assert server is not None and server.role == "env server" and server.wire == WIRE_VERSION


def test_a_client_refuses_a_server_that_answers_with_another_wire_major(served):
    """A server older than the refusal (it answers but does not check) is refused by the client."""
    interceptor, address = served
    interceptor._answer = Peer("env server", "tinker-core", "7.0.0", "7.0").metadata()
    channel = handshake_channel(grpc.insecure_channel(address), "tinker-client", "env server")
    with channel, pytest.raises(IncompatiblePeer) as caught:
        health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(), timeout=10)
    assert caught.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert "env server tinker-core 7.0.0 (wire 7.0)" in str(caught.value)
    assert "upgrade the client (pip install -U 'tinker-client>=7.0.0')" in str(caught.value)


def test_a_remote_env_against_an_incompatible_env_server_fails_with_the_one_line(monkeypatch):
    """The real env server (serve_env) and RemoteEnv: the env server is of wire 2.0."""
    pytest.importorskip("tinker_env_echo", reason="the echo envs (tinker-env-echo, a dev dependency) are not installed")
    import tinker_core.registry
    from tinker_core.remote import RemoteEnv, RemoteEnvError, serve_env

    monkeypatch.setenv("OPENTINKER_LOAD_PLUGINS", "tinker-env-echo")
    tinker_core.registry.reset_plugins()
    monkeypatch.setattr(handshake, "WIRE_VERSION", "2.0")
    with serve_env() as server:
        monkeypatch.setattr(handshake, "WIRE_VERSION", "1.0")
        with pytest.raises((RemoteEnvError, grpc.RpcError)) as caught:
            env = RemoteEnv(server.address, "echo/echo-v0")
            env.reset(seed=0)
    text = str(caught.value)
    assert "(wire 2.0)" in text and "(wire 1.0)" in text and "upgrade the client" in text
