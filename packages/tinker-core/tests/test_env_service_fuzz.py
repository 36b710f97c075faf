"""Fuzzing the EnvService over a real gRPC channel (issue 12's reliability suite): sequences of
random requests -- unknown env ids, bad JSON, huge seeds, stray session ids, odd actions, calls
in the wrong order -- each get an answer or a clear status, never UNKNOWN or INTERNAL (an
unhandled server error), and the server still serves a normal episode afterwards. Bounded: a
fixed number of examples, localhost only."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import grpc
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

pytest.importorskip("tinker_env_echo", reason="serves the echo envs of tinker-env-echo (a dev dependency)")

from tinker_core.proto import env_pb2, env_pb2_grpc  # noqa: E402
from tinker_core.remote import serve_env  # noqa: E402

ENVS = ("echo/echo-v0", "echo/call-response-v0")
CLEAR = {
    grpc.StatusCode.INVALID_ARGUMENT, grpc.StatusCode.NOT_FOUND, grpc.StatusCode.FAILED_PRECONDITION,
    grpc.StatusCode.RESOURCE_EXHAUSTED, grpc.StatusCode.OUT_OF_RANGE,
}
WAIT_S = 30.0

json_texts = st.one_of(
    st.just(""), st.just("{}"), st.just("[1, 2]"), st.just('{"words": ["a"]}'), st.just('{"nope": 1}'),
    st.just("{not json"), st.text(max_size=30),
)
texts = st.one_of(st.text(max_size=60), st.sampled_from(["", "1", "42", "player_0", "\x00", "é" * 10]))
session_refs = st.one_of(st.integers(min_value=0, max_value=3), st.text(max_size=12))  # an index: a created session
ops = st.one_of(
    st.tuples(st.just("create"), st.one_of(st.sampled_from(ENVS), st.text(max_size=20)), json_texts),
    st.tuples(st.just("reset"), session_refs, st.one_of(st.none(), st.integers(min_value=0, max_value=2**64 - 1)), json_texts),
    st.tuples(st.just("step"), session_refs, texts),
    st.tuples(st.just("observe"), session_refs, texts),
    st.tuples(st.just("last"), session_refs),
    st.tuples(st.just("agent_selection"), session_refs),
    st.tuples(st.just("close"), session_refs),
)


@pytest.fixture(scope="module")
def stub() -> Iterator[Any]:
    server = serve_env(list(ENVS), max_sessions=16, idle_timeout_s=60.0)
    channel = grpc.insecure_channel(server.address)
    try:
        yield env_pb2_grpc.EnvServiceStub(channel)
    finally:
        channel.close()
        server.stop(grace=0)


def _call(method: Any, request: Any) -> Any:
    try:
        return method(request, timeout=WAIT_S)
    except grpc.RpcError as e:
        assert e.code() in CLEAR, f"{type(request).__name__}: {e.code()} {e.details()}"
        assert e.details(), f"{type(request).__name__}: {e.code()} with no message"
        return None


def _run(stub: Any, sequence: list[tuple[Any, ...]]) -> None:
    created: list[str] = []

    def sid(ref: Any) -> str:
        return created[ref % len(created)] if isinstance(ref, int) and created else str(ref)

    try:
        for op, *args in sequence:
            if op == "create":
                r = _call(stub.CreateSession, env_pb2.CreateEnvSessionRequest(env_id=args[0], kwargs_json=args[1]))
                if r is not None:
                    created.append(r.session_id)
            elif op == "reset":
                request = env_pb2.ResetRequest(session_id=sid(args[0]), options_json=args[2])
                if args[1] is not None:
                    request.seed = args[1]
                _call(stub.Reset, request)
            elif op == "step":
                _call(stub.Step, env_pb2.StepRequest(session_id=sid(args[0]), action=args[1]))
            elif op == "observe":
                _call(stub.Observe, env_pb2.ObserveRequest(session_id=sid(args[0]), role=args[1]))
            elif op == "last":
                _call(stub.Last, env_pb2.LastRequest(session_id=sid(args[0])))
            elif op == "agent_selection":
                _call(stub.AgentSelection, env_pb2.AgentSelectionRequest(session_id=sid(args[0])))
            else:
                _call(stub.CloseSession, env_pb2.CloseEnvSessionRequest(session_id=sid(args[0])))
    finally:
        for s in created:
            _call(stub.CloseSession, env_pb2.CloseEnvSessionRequest(session_id=s))


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(st.lists(ops, min_size=1, max_size=12))
def test_random_request_sequences_get_an_answer_or_a_clear_status(stub: Any, sequence: list[tuple[Any, ...]]) -> None:
    _run(stub, sequence)
    # and the server still plays a normal episode
    sid = stub.CreateSession(env_pb2.CreateEnvSessionRequest(env_id="echo/echo-v0"), timeout=WAIT_S).session_id
    try:
        stub.Reset(env_pb2.ResetRequest(session_id=sid, seed=1), timeout=WAIT_S)
        stub.Step(env_pb2.StepRequest(session_id=sid, action="hello"), timeout=WAIT_S)
    finally:
        stub.CloseSession(env_pb2.CloseEnvSessionRequest(session_id=sid), timeout=WAIT_S)
