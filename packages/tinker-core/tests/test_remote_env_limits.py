"""The env server cannot be frozen: size limits before any work, env calls it can abandon, a
stop that returns while an env hangs, and retries keyed by id, method and arguments (issue 12).

No test waits on a clock: a stuck env blocks on an Event the test releases, and every wait is
bounded so a regression fails instead of hanging.
"""

from __future__ import annotations

import threading
import time
import types
from collections.abc import Callable, Iterator
from concurrent.futures import Future
from typing import Any

import grpc
import pytest

import tinker_core.registry
from tinker_core import EnvSpec, TextEnv, hookimpl
from tinker_core.proto import env_pb2, env_pb2_grpc
from tinker_core.remote import EnvServer, RemoteEnv, RemoteEnvError, serve_env

STALL_SPEC = EnvSpec(id="testing/stall-v0", description="test env: 'stall' blocks until released", max_turns=100)
WAIT_S = 30.0  # the most any bounded wait in these tests may take before it fails


class Probe:
    """What one test's stall envs share (a fresh one per test, so a call a previous test
    abandoned, ending late, counts there)."""

    def __init__(self) -> None:
        self.entered = threading.Event()
        self.release = threading.Event()
        self.steps = 0
        self.closed = 0


class StallEnv(TextEnv):
    """Echoes; the action 'stall' blocks until ``probe.release`` is set; 'big:N' answers N bytes."""

    env_spec = STALL_SPEC
    probe = Probe()

    def __init__(self) -> None:
        self.probe = type(self).probe

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        return "ready", {}

    def step(self, action):
        if action == "stall":
            self.probe.entered.set()
            self.probe.release.wait()
        self.probe.steps += 1
        text = "x" * int(action[4:]) if action.startswith("big:") else action[:20]
        return text, 1.0, False, False, {"steps": self.probe.steps}

    def close(self):
        self.probe.closed += 1


@pytest.fixture(autouse=True)
def stall_plugin(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setenv("OPENTINKER_DISABLE_PLUGIN_AUTOLOAD", "1")
    tinker_core.registry.reset_plugins()
    plugin = types.ModuleType("stall_plugin")
    plugin.opentinker_register_envs = hookimpl(lambda register: register(STALL_SPEC, StallEnv))  # type: ignore[attr-defined]
    tinker_core.registry.register_plugin(plugin, distribution="testing")
    StallEnv.probe = Probe()
    yield
    StallEnv.probe.release.set()  # let abandoned calls end
    tinker_core.registry.reset_plugins()


@pytest.fixture
def serve() -> Iterator[Callable[..., tuple[EnvServer, Any]]]:
    """``serve(**serve_env_kwargs)`` -> (server, stub); stopped at teardown."""
    opened: list[tuple[EnvServer, grpc.Channel]] = []

    def start(**kwargs: Any) -> tuple[EnvServer, Any]:
        server = serve_env("testing/stall-v0", **kwargs)
        channel = grpc.insecure_channel(server.address)
        opened.append((server, channel))
        return server, env_pb2_grpc.EnvServiceStub(channel)

    yield start
    for server, channel in opened:
        channel.close()
        server.stop(grace=0)


def session(stub: Any, **kwargs: Any) -> str:
    sid: str = stub.CreateSession(env_pb2.CreateEnvSessionRequest(env_id="testing/stall-v0", **kwargs), timeout=WAIT_S).session_id
    stub.Reset(env_pb2.ResetRequest(session_id=sid, seed=0), timeout=WAIT_S)
    return sid


def rpc_error(call: Any, request: Any, **kwargs: Any) -> grpc.RpcError:
    with pytest.raises(grpc.RpcError) as info:
        call(request, **kwargs)
    return info.value


def in_thread(fn: Callable[[], Any]) -> Future[Any]:
    """Run ``fn`` in a daemon thread; its answer (or error) lands in the returned future."""
    future: Future[Any] = Future()

    def target() -> None:
        try:
            future.set_result(fn())
        except BaseException as e:  # noqa: BLE001 - handed to the test
            future.set_exception(e)

    threading.Thread(target=target, daemon=True).start()
    return future


def eventually(condition: Callable[[], bool]) -> None:
    """Wait (at most WAIT_S) for ``condition``; fail when it never holds."""
    deadline = time.monotonic() + WAIT_S
    while not condition():
        assert time.monotonic() < deadline, "condition never held"
        time.sleep(0.02)


def stall(stub: Any, sid: str, **kwargs: Any) -> Future[Any]:
    """Start a Step that blocks in the env; return once the env is inside it."""
    future = in_thread(lambda: stub.Step(env_pb2.StepRequest(session_id=sid, action="stall", **kwargs), timeout=WAIT_S))
    assert StallEnv.probe.entered.wait(WAIT_S)
    return future


# ---- sizes ---------------------------------------------------------------------------------


def test_an_action_over_the_limit_is_invalid_argument_before_the_env_sees_it(serve):
    _, stub = serve(max_action_bytes=1000)
    sid = session(stub)
    err = rpc_error(stub.Step, env_pb2.StepRequest(session_id=sid, action="\u00e9" * 501))  # 1,002 bytes
    assert err.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "the action is 1002 bytes, over this server's limit of 1000" in err.details()
    assert "--max-action-bytes" in err.details()
    assert StallEnv.probe.steps == 0
    assert stub.Step(env_pb2.StepRequest(session_id=sid, action="\u00e9" * 500)).reward == 1.0  # 1,000 bytes


def test_a_50_mb_numeric_action_is_refused_by_grpc_before_python_reads_it(serve):
    server, stub = serve()
    sid = session(stub)
    assert server.limits.max_action_bytes == 64 * 1024
    err = rpc_error(stub.Step, env_pb2.StepRequest(session_id=sid, action="7" * 100_000))  # parsed: named limit
    assert err.code() == grpc.StatusCode.INVALID_ARGUMENT and "over this server's limit of 65536" in err.details()
    err = rpc_error(stub.Step, env_pb2.StepRequest(session_id=sid, action="7" * 50_000_000), timeout=WAIT_S)
    assert err.code() == grpc.StatusCode.RESOURCE_EXHAUSTED and "larger than max" in err.details()
    assert StallEnv.probe.steps == 0
    with RemoteEnv(server.address, "testing/stall-v0") as env:  # the client names the flag
        env.reset()
        with pytest.raises(RemoteEnvError, match="RESOURCE_EXHAUSTED.*opentinker env serve --max-action-bytes"):
            env.step("7" * 50_000_000)


def test_options_and_kwargs_over_the_limit_are_invalid_argument(serve):
    _, stub = serve(max_action_bytes=100)
    sid = session(stub)
    err = rpc_error(stub.Reset, env_pb2.ResetRequest(session_id=sid, options_json='{"k": "' + "x" * 200 + '"}'))
    assert err.code() == grpc.StatusCode.INVALID_ARGUMENT and "options_json is 209 bytes" in err.details()
    err = rpc_error(stub.CreateSession, env_pb2.CreateEnvSessionRequest(env_id="testing/stall-v0", kwargs_json='{"k": "' + "x" * 200 + '"}'))
    assert err.code() == grpc.StatusCode.INVALID_ARGUMENT and "kwargs_json is 209 bytes" in err.details()


def test_a_response_over_the_limit_is_resource_exhausted_naming_the_limit(serve):
    _, stub = serve(max_observation_bytes=1000)
    sid = session(stub)
    assert len(stub.Step(env_pb2.StepRequest(session_id=sid, action="big:900")).observation.text) == 900
    err = rpc_error(stub.Step, env_pb2.StepRequest(session_id=sid, action="big:5000"))
    assert err.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert "over this server's limit of 1000 (max_observation_bytes" in err.details()


def test_serve_env_validates_its_limits():
    for kwargs, message in [
        ({"max_action_bytes": 0}, "max_action_bytes must be a positive number of bytes"),
        ({"max_observation_bytes": -1}, "max_observation_bytes must be a positive number of bytes"),
        ({"call_timeout_s": 0}, "call_timeout_s must be a positive number of seconds"),
        ({"call_timeout_s": float("inf")}, "call_timeout_s must be a positive number of seconds"),
    ]:
        with pytest.raises(ValueError, match=message):
            serve_env("testing/stall-v0", **kwargs)


# ---- time ----------------------------------------------------------------------------------


def test_other_sessions_answer_while_a_step_hangs(serve):
    _, stub = serve(call_timeout_s=None)
    stuck, other = session(stub), session(stub)
    pending = stall(stub, stuck)
    for _ in range(3):
        assert session(stub)
        assert stub.Step(env_pb2.StepRequest(session_id=other, action="hi"), timeout=WAIT_S).observation.text == "hi"
    assert not pending.done()
    StallEnv.probe.release.set()
    assert pending.result(WAIT_S).observation.text == "stall"


def test_stuck_sessions_cannot_take_every_server_thread(serve):
    server, stub = serve(call_timeout_s=None, max_sessions=5)
    pending = []
    for _ in range(4):  # four sessions (8 threads), each with a hung call and a retry behind it
        sid = session(stub)
        pending += [in_thread(lambda sid=sid: stub.Step(env_pb2.StepRequest(session_id=sid, action="stall", request_id="r"), timeout=WAIT_S)) for _ in range(2)]
        eventually(lambda sid=sid: server._servicer.table.get(sid).in_flight == 2)
    assert stub.Step(env_pb2.StepRequest(session_id=session(stub), action="hi"), timeout=WAIT_S).reward == 1.0
    StallEnv.probe.release.set()
    assert len({f.result(WAIT_S).observation.text for f in pending}) == 1


def test_a_step_over_the_call_timeout_is_deadline_exceeded_and_closes_its_session(serve):
    server, stub = serve(call_timeout_s=0.2)
    stuck, other = session(stub), session(stub)
    err = rpc_error(stub.Step, env_pb2.StepRequest(session_id=stuck, action="stall"), timeout=WAIT_S)
    assert err.code() == grpc.StatusCode.DEADLINE_EXCEEDED
    assert "step() took longer than the server's call timeout (0.2 s" in err.details()
    assert f"session {stuck!r} is closed" in err.details()
    assert stuck not in server.session_ids() and other in server.session_ids()
    err = rpc_error(stub.Step, env_pb2.StepRequest(session_id=stuck, action="again"))
    assert err.code() == grpc.StatusCode.NOT_FOUND and "call timeout" in err.details()
    assert stub.Step(env_pb2.StepRequest(session_id=other, action="ok")).reward == 1.0
    assert StallEnv.probe.closed == 0  # the abandoned call still runs in its env
    StallEnv.probe.release.set()
    eventually(lambda: StallEnv.probe.closed == 1)  # closed once that call ended


def test_the_client_deadline_abandons_the_call(serve):
    server, stub = serve(call_timeout_s=None)
    sid = session(stub)
    err = rpc_error(stub.Step, env_pb2.StepRequest(session_id=sid, action="stall"), timeout=0.5)
    assert err.code() == grpc.StatusCode.DEADLINE_EXCEEDED
    eventually(lambda: sid not in server.session_ids())
    err = rpc_error(stub.Step, env_pb2.StepRequest(session_id=sid, action="again"))
    assert err.code() == grpc.StatusCode.NOT_FOUND
    assert "did not answer within the client's deadline" in err.details() or "cancelled" in err.details()


def test_a_slow_env_construction_is_abandoned_too(serve, monkeypatch):
    probe = StallEnv.probe
    monkeypatch.setattr(StallEnv, "__init__", lambda self: probe.release.wait())
    server, stub = serve(call_timeout_s=0.2)
    err = rpc_error(stub.CreateSession, env_pb2.CreateEnvSessionRequest(env_id="testing/stall-v0"), timeout=WAIT_S)
    assert err.code() == grpc.StatusCode.DEADLINE_EXCEEDED and "construction took longer" in err.details()
    assert server.num_sessions == 0


def test_stop_returns_while_an_env_call_hangs(serve):
    server, stub = serve(call_timeout_s=None)
    pending = stall(stub, session(stub))
    stopper = threading.Thread(target=server.stop, kwargs={"grace": 0.5}, daemon=True)
    stopper.start()
    stopper.join(WAIT_S)
    assert not stopper.is_alive(), "EnvServer.stop() hung on a stuck env call"
    with pytest.raises(grpc.RpcError):
        pending.result(WAIT_S)
    assert server.stopped and server.num_sessions == 0


# ---- retries -------------------------------------------------------------------------------


def test_a_retry_while_the_first_attempt_runs_waits_for_it_and_acts_once(serve):
    server, stub = serve(call_timeout_s=None)
    sid = session(stub)
    first = stall(stub, sid, request_id="r1")
    retry = in_thread(lambda: stub.Step(env_pb2.StepRequest(session_id=sid, action="stall", request_id="r1"), timeout=WAIT_S))
    eventually(lambda: server._servicer.table.get(sid).in_flight == 2)  # the retry waits on the server
    err = rpc_error(stub.Step, env_pb2.StepRequest(session_id=sid, action="more"), timeout=WAIT_S)
    assert err.code() == grpc.StatusCode.RESOURCE_EXHAUSTED and "is busy" in err.details()  # a third call
    StallEnv.probe.release.set()
    assert first.result(WAIT_S) == retry.result(WAIT_S)
    assert StallEnv.probe.steps == 1


def test_a_reused_request_id_with_other_arguments_is_invalid_argument(serve):
    _, stub = serve()
    sid = session(stub)
    first = stub.Step(env_pb2.StepRequest(session_id=sid, action="a", request_id="r1"))
    assert stub.Step(env_pb2.StepRequest(session_id=sid, action="a", request_id="r1")) == first
    err = rpc_error(stub.Step, env_pb2.StepRequest(session_id=sid, action="b", request_id="r1"))
    assert err.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "request_id 'r1' was already used for another call" in err.details()
    assert StallEnv.probe.steps == 1


# ---- malformed requests (issue 34) ------------------------------------------------------------


@pytest.mark.parametrize("bad", [b"\xff\xfeabcdefghi", b"\xed\xa0\x80abcdefgh"], ids=["invalid-utf8", "surrogate"])
def test_an_action_that_is_not_utf8_is_invalid_argument(serve, bad):
    server, stub = serve()
    sid = session(stub)
    raw = env_pb2.StepRequest(session_id=sid, action="PLACEHOLDER").SerializeToString().replace(b"PLACEHOLDER", bad)
    with grpc.insecure_channel(server.address) as channel:
        step = channel.unary_unary("/opentinker.v1.EnvService/Step", request_serializer=None, response_deserializer=None)
        err = rpc_error(step, raw, timeout=WAIT_S)
    assert err.code() == grpc.StatusCode.INVALID_ARGUMENT and "StepRequest" in err.details() and "UTF-8" in err.details()
    assert stub.Step(env_pb2.StepRequest(session_id=sid, action="ok")).reward == 1.0  # still serving


def test_env_kwargs_nested_3000_deep_are_invalid_argument(serve):
    _, stub = serve()
    deep = '{"k": ' + "[" * 3000 + "]" * 3000 + "}"
    err = rpc_error(stub.CreateSession, env_pb2.CreateEnvSessionRequest(env_id="testing/stall-v0", kwargs_json=deep))
    assert err.code() == grpc.StatusCode.INVALID_ARGUMENT and "kwargs_json nests" in err.details()
    sid = session(stub)
    err = rpc_error(stub.Reset, env_pb2.ResetRequest(session_id=sid, options_json='{"o": ' + "{\"a\": " * 100 + "1" + "}" * 100 + "}"))
    assert err.code() == grpc.StatusCode.INVALID_ARGUMENT and "options_json nests" in err.details()
