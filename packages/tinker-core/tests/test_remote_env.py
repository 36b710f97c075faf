"""Environments served over gRPC behave exactly like in-process ones, per isolated session.

Every server here listens on 127.0.0.1 with an ephemeral port.
"""

from __future__ import annotations

import functools
import threading
import time
import types
from typing import Any

import grpc
import numpy as np
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

import tinker_core
import tinker_core.registry
from tinker_core import EnvSpec, TextEnv, UnknownNameError, hookimpl
from tinker_core.proto import env_pb2, env_pb2_grpc
from tinker_core.remote import (
    SERVICE_NAME,
    RemoteEnv,
    RemoteEnvError,
    RemoteEnvInvalidArgument,
    RemoteEnvNotFound,
    RemoteMultiAgentEnv,
    serve_env,
)
from tinker_core.testing import check_env, check_multi_agent_env

pytest.importorskip("tinker_env_echo", reason="the echo envs (tinker-env-echo, a dev dependency) are not installed")

SEEDS = range(12)


@pytest.fixture(autouse=True)
def only_the_echo_plugin(monkeypatch: pytest.MonkeyPatch):
    """Load only tinker-env-echo (and plugins a test registers), whatever else is installed."""
    monkeypatch.setenv("OPENTINKER_LOAD_PLUGINS", "tinker-env-echo")
    tinker_core.registry.reset_plugins()


@pytest.fixture(scope="module")
def server():
    with serve_env() as handle:  # every registered env
        yield handle


@pytest.fixture
def stub(server):
    with grpc.insecure_channel(server.address) as channel:
        yield env_pb2_grpc.EnvServiceStub(channel)


# ---- driving envs the same way locally and remotely --------------------------------------


def echo_policy(seed: int):
    """Echo the word on even seeds, a wrong word on odd ones."""
    def policy(obs: str, step: int) -> str:
        word = obs.removeprefix("Say: ").strip()
        return word if seed % 2 == 0 else word + "x"
    return policy


def countdown_policy(seed: int):
    """Count down correctly, except one mistake at step ``seed % 4`` for seeds divisible by 3."""
    state = {"n": None}

    def policy(obs: str, step: int) -> str:
        numbers = [int(line) for line in obs.splitlines() if line.strip().isdigit()]
        if numbers:
            state["n"] = numbers[-1]
        if seed % 3 == 0 and step == seed % 4:
            return "banana"
        return str(state["n"] - 1)
    return policy


def play(env: Any, seed: int, policy, max_steps: int = 20) -> list[Any]:
    """The whole trace of one episode: the reset, then every step."""
    obs, info = env.reset(seed=seed)
    trace: list[Any] = [("reset", obs, info)]
    for step in range(max_steps):
        action = policy(obs, step)
        obs, reward, terminated, truncated, info = env.step(action)
        trace.append((action, obs, reward, terminated, truncated, info))
        if terminated or truncated:
            break
    return trace


def play_multi(env: Any, seed: int, actions: list[str]) -> list[Any]:
    """One call-response episode, recording every piece of AEC state after each move."""
    env.reset(seed=seed)

    def snapshot(label: str) -> tuple[Any, ...]:
        return (
            label,
            env.agent_selection,
            list(env.agents),
            {a: env.observe(a) for a in env.possible_agents},
            dict(env.rewards),
            dict(env._cumulative_rewards),
            dict(env.terminations),
            dict(env.truncations),
            dict(env.infos),
            env.last(),
            env.done,
        )

    trace = [snapshot("reset")]
    for action in actions:
        if env.done:
            break
        env.step(action)
        trace.append(snapshot(action))
    return trace


def multi_actions(seed: int) -> list[str]:
    word = ["apple", "river", "stone"][seed % 3]
    return [word, word if seed % 2 == 0 else "nope"]


# ---- equality with the local env ---------------------------------------------------------


@pytest.mark.parametrize(
    ("env_id", "kwargs", "make_policy"),
    [
        ("echo/echo-v0", {}, echo_policy),
        ("echo/echo-v0", {"words": ["alpha", "beta", "gamma"]}, echo_policy),
        ("echo/countdown-v0", {}, countdown_policy),
        ("echo/countdown-v0", {"max_start": 9}, countdown_policy),
    ],
)
def test_remote_env_equals_local_env_over_seeds(server, env_id, kwargs, make_policy):
    local = tinker_core.make_env(env_id, **kwargs)
    with RemoteEnv(server.address, env_id, **kwargs) as remote:
        assert remote.env_spec == local.env_spec
        assert isinstance(remote, TextEnv)
        for seed in SEEDS:
            expected = play(local, seed, make_policy(seed))
            got = play(remote, seed, make_policy(seed))
            assert got == expected, f"seed {seed}"


def test_remote_multi_agent_env_equals_local_env_over_seeds(server):
    local = tinker_core.make_env("echo/call-response-v0")
    with RemoteMultiAgentEnv(server.address, "echo/call-response-v0") as remote:
        assert remote.env_spec == local.env_spec
        assert remote.possible_agents == local.possible_agents == ["caller", "responder"]
        for seed in SEEDS:
            assert play_multi(remote, seed, multi_actions(seed)) == play_multi(local, seed, multi_actions(seed))
        # AgentSelection re-reads the same state from the server
        before = (remote.agent_selection, dict(remote.rewards), dict(remote.terminations))
        remote.refresh()
        assert (remote.agent_selection, dict(remote.rewards), dict(remote.terminations)) == before


def test_remote_envs_pass_the_conformance_kit(server):
    check_env(functools.partial(RemoteEnv, server.address, "echo/echo-v0"))
    check_env(functools.partial(RemoteEnv, server.address, "echo/countdown-v0"))
    check_multi_agent_env(functools.partial(RemoteMultiAgentEnv, server.address, "echo/call-response-v0"))
    assert server.num_sessions == 0  # the kit closes the envs it builds


# ---- sessions are isolated ---------------------------------------------------------------


def test_interleaved_sessions_do_not_see_each_other(server):
    local_a = tinker_core.make_env("echo/countdown-v0", max_start=9)
    local_b = tinker_core.make_env("echo/countdown-v0", max_start=9)
    remote_a = RemoteEnv(server.address, "echo/countdown-v0", max_start=9)
    remote_b = RemoteEnv(server.address, "echo/countdown-v0", max_start=9)
    try:
        assert remote_a.session_id != remote_b.session_id
        assert remote_a.reset(seed=1) == local_a.reset(seed=1)
        assert remote_b.reset(seed=4) == local_b.reset(seed=4)
        for action in ["8", "7", "6", "0"]:  # steps alternate between the two sessions
            assert remote_a.step(action) == local_a.step(action)
            assert remote_b.step(action) == local_b.step(action)
    finally:
        remote_a.close()
        remote_b.close()


def test_concurrent_sessions_from_threads_are_isolated(server):
    env_ids = ["echo/echo-v0", "echo/countdown-v0"]
    expected = {
        (env_id, seed): play(tinker_core.make_env(env_id), seed, policy(seed))
        for env_id, policy in zip(env_ids, [echo_policy, countdown_policy], strict=True)
        for seed in SEEDS
    }
    results: dict[tuple[str, int, int], list[Any]] = {}
    errors: list[BaseException] = []
    start = threading.Barrier(8)

    def worker(index: int) -> None:
        env_id = env_ids[index % 2]
        policy = echo_policy if env_id == "echo/echo-v0" else countdown_policy
        try:
            with RemoteEnv(server.address, env_id) as env:
                start.wait()
                for seed in SEEDS:  # each thread visits the seeds in its own order
                    seed = (seed * 5 + index) % len(SEEDS)
                    results[(env_id, seed, index)] = play(env, seed, policy(seed))
        except BaseException as e:  # reported below
            errors.append(e)
            start.abort()

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    assert len(results) == 8 * len(SEEDS)
    for (env_id, seed, _), trace in results.items():
        assert trace == expected[(env_id, seed)]
    assert server.num_sessions == 0


# ---- session lifecycle -------------------------------------------------------------------


def test_close_ends_the_session_and_is_idempotent(server):
    before = server.num_sessions
    env = RemoteEnv(server.address, "echo/echo-v0")
    assert server.num_sessions == before + 1 and env.session_id in server.session_ids()
    env.close()
    env.close()
    assert server.num_sessions == before
    with pytest.raises(RemoteEnvError, match="after close"):
        env.reset(seed=0)
    with RemoteMultiAgentEnv(server.address, "echo/call-response-v0") as multi:
        assert server.num_sessions == before + 1
        multi.reset(seed=0)
    assert server.num_sessions == before


def test_session_cap_refuses_with_resource_exhausted():
    with serve_env("echo/echo-v0", max_sessions=2) as capped:
        first = RemoteEnv(capped.address, "echo/echo-v0")
        second = RemoteEnv(capped.address, "echo/echo-v0")
        with pytest.raises(RemoteEnvError, match=r"maximum of 2 sessions \(max_sessions=2\)") as info:
            RemoteEnv(capped.address, "echo/echo-v0")
        assert info.value.code == grpc.StatusCode.RESOURCE_EXHAUSTED
        assert capped.num_sessions == 2
        first.close()
        third = RemoteEnv(capped.address, "echo/echo-v0")  # room again
        assert third.reset(seed=0) == tinker_core.make_env("echo/echo-v0").reset(seed=0)
        second.close()
        third.close()


def test_idle_sessions_are_reaped():
    with serve_env("echo/countdown-v0", idle_timeout_s=60) as srv:
        env = RemoteEnv(srv.address, "echo/countdown-v0")
        kept = RemoteEnv(srv.address, "echo/countdown-v0")
        env.reset(seed=0)
        assert srv.reap_idle() == 0  # just used
        kept_id = kept.session_id
        # as seen 61 s from now, both are idle; a call on one afterwards finds it gone
        assert srv.reap_idle(now=time.monotonic() + 61) == 2
        assert srv.num_sessions == 0 and kept_id not in srv.session_ids()
        with pytest.raises(RemoteEnvNotFound, match="without a call") as info:
            env.step("1")
        assert info.value.code == grpc.StatusCode.NOT_FOUND
        env.close()  # closing a reaped session is fine
        kept.close()


def test_the_background_reaper_closes_idle_sessions():
    with serve_env("echo/echo-v0", idle_timeout_s=0.05) as srv:
        env = RemoteEnv(srv.address, "echo/echo-v0")
        deadline = time.monotonic() + 30  # a bound on waiting, not an assertion on timing
        while srv.num_sessions and time.monotonic() < deadline:
            time.sleep(0.02)
        assert srv.num_sessions == 0
        with pytest.raises(RemoteEnvNotFound):
            env.reset(seed=0)
        env.close()


def test_wait_for_termination_returns_once_stopped():
    srv = serve_env("echo/echo-v0")
    assert srv.wait_for_termination(timeout=0.01) is False  # still serving
    stopper = threading.Thread(target=srv.stop)
    stopper.start()
    assert srv.wait_for_termination(timeout=30) is True
    stopper.join()
    assert srv.stopped
    srv.stop()  # idempotent


# ---- errors ------------------------------------------------------------------------------


def rpc_error(call, request) -> grpc.RpcError:
    with pytest.raises(grpc.RpcError) as info:
        call(request)
    return info.value


def test_unknown_env_id_is_not_found_with_did_you_mean(server, stub):
    err = rpc_error(stub.CreateSession, env_pb2.CreateEnvSessionRequest(env_id="echo/ecoh-v0"))
    assert err.code() == grpc.StatusCode.NOT_FOUND
    assert "did you mean 'echo/echo-v0'?" in err.details()
    with pytest.raises(RemoteEnvNotFound, match="did you mean 'echo/countdown-v0'"):
        RemoteEnv(server.address, "echo/countdwn-v0")
    with (
        serve_env("echo/echo-v0") as only_echo,
        pytest.raises(RemoteEnvNotFound, match=r"not served here \(this server serves echo/echo-v0\)"),
    ):
        RemoteEnv(only_echo.address, "echo/countdown-v0")
    with pytest.raises(UnknownNameError, match="did you mean 'echo/echo-v0'"):
        serve_env("echo/ecoh-v0")


@pytest.mark.parametrize(
    ("kwargs_json", "message"),
    [
        ('{"max_start": 99}', "rejected kwargs {'max_start': 99}: ValueError: CountdownEnv: max_start"),
        ('{"nope": 1}', "rejected kwargs {'nope': 1}: TypeError"),
        ("[1, 2]", "kwargs_json must be a JSON object"),
        ("{bad", "kwargs_json is not valid JSON"),
    ],
)
def test_bad_kwargs_are_invalid_argument(stub, kwargs_json, message):
    request = env_pb2.CreateEnvSessionRequest(env_id="echo/countdown-v0", kwargs_json=kwargs_json)
    err = rpc_error(stub.CreateSession, request)
    assert err.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert message in err.details()


def test_client_maps_invalid_argument_to_value_error(server):
    with pytest.raises(ValueError, match="max_start must be in 1..10"):
        RemoteEnv(server.address, "echo/countdown-v0", max_start=99)
    with pytest.raises(TypeError, match="JSON-serialisable"):
        RemoteEnv(server.address, "echo/echo-v0", words=object())


def test_unknown_and_closed_sessions_are_not_found(stub):
    err = rpc_error(stub.Step, env_pb2.StepRequest(session_id="no-such-session", action="x"))
    assert err.code() == grpc.StatusCode.NOT_FOUND and "unknown env session 'no-such-session'" in err.details()
    err = rpc_error(stub.Reset, env_pb2.ResetRequest())
    assert err.code() == grpc.StatusCode.NOT_FOUND and "session_id is empty" in err.details()
    sid = stub.CreateSession(env_pb2.CreateEnvSessionRequest(env_id="echo/echo-v0")).session_id
    assert stub.CloseSession(env_pb2.CloseEnvSessionRequest(session_id=sid)).closed
    assert not stub.CloseSession(env_pb2.CloseEnvSessionRequest(session_id=sid)).closed
    err = rpc_error(stub.Reset, env_pb2.ResetRequest(session_id=sid))
    assert err.code() == grpc.StatusCode.NOT_FOUND and "closed by its client" in err.details()


def test_calls_in_the_wrong_state_are_failed_precondition(stub):
    created = stub.CreateSession(env_pb2.CreateEnvSessionRequest(env_id="echo/echo-v0"))
    sid = created.session_id
    assert not created.multi_agent and EnvSpec.from_json(created.env_spec_json).id == "echo/echo-v0"
    try:
        err = rpc_error(stub.Step, env_pb2.StepRequest(session_id=sid, action="x"))
        assert err.code() == grpc.StatusCode.FAILED_PRECONDITION and "call Reset first" in err.details()
        stub.Reset(env_pb2.ResetRequest(session_id=sid, seed=0))
        for call, request in [
            (stub.Observe, env_pb2.ObserveRequest(session_id=sid, role="caller")),
            (stub.Last, env_pb2.LastRequest(session_id=sid)),
            (stub.AgentSelection, env_pb2.AgentSelectionRequest(session_id=sid)),
        ]:
            err = rpc_error(call, request)
            assert err.code() == grpc.StatusCode.FAILED_PRECONDITION
            assert "single-agent env ('echo/echo-v0')" in err.details()
    finally:
        stub.CloseSession(env_pb2.CloseEnvSessionRequest(session_id=sid))


def test_unknown_role_is_invalid_argument(stub):
    created = stub.CreateSession(env_pb2.CreateEnvSessionRequest(env_id="echo/call-response-v0"))
    sid = created.session_id
    assert created.multi_agent and list(created.possible_agents) == ["caller", "responder"]
    try:
        reset = stub.Reset(env_pb2.ResetRequest(session_id=sid, seed=3))
        assert not reset.HasField("observation") and reset.agent_state.agent_selection == "caller"
        err = rpc_error(stub.Observe, env_pb2.ObserveRequest(session_id=sid, role="referee"))
        assert err.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert "no role 'referee'; roles are caller, responder" in err.details()
    finally:
        stub.CloseSession(env_pb2.CloseEnvSessionRequest(session_id=sid))


def test_client_picks_the_right_class_for_the_env_kind(server):
    before = server.num_sessions
    with pytest.raises(TypeError, match="multi-agent env .*use RemoteMultiAgentEnv"):
        RemoteEnv(server.address, "echo/call-response-v0")
    with pytest.raises(TypeError, match="single-agent env; use RemoteEnv"):
        RemoteMultiAgentEnv(server.address, "echo/echo-v0")
    assert server.num_sessions == before  # the refused sessions were closed


def test_a_retried_step_with_the_same_request_id_is_applied_once(stub):
    sid = stub.CreateSession(env_pb2.CreateEnvSessionRequest(env_id="echo/countdown-v0", kwargs_json='{"max_start": 9}')).session_id
    local = tinker_core.make_env("echo/countdown-v0", max_start=9)
    try:
        reset = stub.Reset(env_pb2.ResetRequest(session_id=sid, seed=1, request_id="r0"))
        obs, _ = local.reset(seed=1)
        assert reset.observation.text == obs
        start = int(obs.splitlines()[-1])
        first = stub.Step(env_pb2.StepRequest(session_id=sid, action=str(start - 1), request_id="r1"))
        again = stub.Step(env_pb2.StepRequest(session_id=sid, action=str(start - 1), request_id="r1"))
        assert again == first and first.reward == 1.0
        # the env moved once: the next number down is start - 2
        nxt = stub.Step(env_pb2.StepRequest(session_id=sid, action=str(start - 2), request_id="r2"))
        local.step(str(start - 1))
        assert (nxt.reward, nxt.observation.text) == local.step(str(start - 2))[1::-1]
        err = rpc_error(stub.Reset, env_pb2.ResetRequest(session_id=sid, request_id="r2"))
        assert err.code() == grpc.StatusCode.INVALID_ARGUMENT and "already used" in err.details()
    finally:
        stub.CloseSession(env_pb2.CloseEnvSessionRequest(session_id=sid))


def test_unreachable_server_says_so():
    with serve_env("echo/echo-v0") as srv:
        address = srv.address
    with pytest.raises(RemoteEnvError, match="UNAVAILABLE.*is the env server running") as info:
        RemoteEnv(address, "echo/echo-v0")
    assert info.value.code == grpc.StatusCode.UNAVAILABLE


def test_serve_env_validates_its_arguments():
    with pytest.raises(ValueError, match="max_sessions must be >= 1"):
        serve_env("echo/echo-v0", max_sessions=0)
    with pytest.raises(ValueError, match="idle_timeout_s must be a positive number"):
        serve_env("echo/echo-v0", idle_timeout_s=0)
    with pytest.raises(ValueError, match="max_workers must be >= 1"):
        serve_env("echo/echo-v0", max_workers=0)


# ---- health --------------------------------------------------------------------------------


def test_health_service_reports_serving(server):
    with grpc.insecure_channel(server.address) as channel:
        health = health_pb2_grpc.HealthStub(channel)
        for service in ("", SERVICE_NAME):
            response = health.Check(health_pb2.HealthCheckRequest(service=service))
            assert response.status == health_pb2.HealthCheckResponse.SERVING
        with pytest.raises(grpc.RpcError) as info:
            health.Check(health_pb2.HealthCheckRequest(service="no.such.Service"))
        assert info.value.code() == grpc.StatusCode.NOT_FOUND


# ---- chat observations, JSON infos, env errors (an in-process plugin) ------------------------

CHAT_SPEC = EnvSpec(id="testing/chat-v0", observation_type="chat", max_turns=2)


class ChatEnv(TextEnv):
    """Chat observations; infos with numpy values and tuples; refuses the action 'boom'."""

    env_spec = CHAT_SPEC

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.n = int(self.np_random.integers(100))
        self.info_value = (options or {}).get("info_value", np.int64(self.n))
        messages = [{"role": "system", "content": "be brief"}, {"role": "user", "content": f"n={self.n}"}]
        return messages, {"n": np.int64(self.n), "pair": (1, 2), "options": options}

    def step(self, action):
        if action == "boom":
            raise ValueError("ChatEnv: 'boom' is not a legal action")
        reward = np.float32(1.0 if action == str(self.n) else 0.0)
        return [{"role": "user", "content": "again"}], reward, True, False, {"v": self.info_value}


def chat_plugin() -> types.ModuleType:
    mod = types.ModuleType("chat_plugin")
    mod.opentinker_register_envs = hookimpl(lambda register: register(CHAT_SPEC, ChatEnv))
    return mod


def test_chat_observations_numpy_infos_and_env_errors_cross_the_wire():
    tinker_core.registry.register_plugin(chat_plugin(), distribution="testing")
    with serve_env("testing/chat-v0") as srv, RemoteEnv(srv.address, "testing/chat-v0") as env:
        local = ChatEnv()
        obs, info = env.reset(seed=5, options={"k": [1, "a"]})
        local_obs, _ = local.reset(seed=5)
        assert obs == local_obs and obs[1]["content"] == f"n={local.n}"
        assert info == {"n": local.n, "pair": [1, 2], "options": {"k": [1, "a"]}}  # JSON: tuples -> lists
        obs, reward, terminated, truncated, info = env.step(str(local.n))
        assert (obs, reward, terminated, truncated, info) == ([{"role": "user", "content": "again"}], 1.0, True, False, {"v": local.n})
        assert type(reward) is float
        with pytest.raises(RemoteEnvInvalidArgument, match="step\\(\\) raised ValueError: ChatEnv: 'boom' is not a legal action"):
            env.step("boom")
        env.reset(seed=5, options={"info_value": None})
        assert env.step("x")[4] == {"v": None}


def test_an_info_that_is_not_json_is_an_internal_error_naming_the_fix():
    tinker_core.registry.register_plugin(chat_plugin(), distribution="testing")
    with serve_env("testing/chat-v0") as srv, grpc.insecure_channel(srv.address) as channel:
        stub = env_pb2_grpc.EnvServiceStub(channel)
        sid = stub.CreateSession(env_pb2.CreateEnvSessionRequest(env_id="testing/chat-v0")).session_id
        stub.Reset(env_pb2.ResetRequest(session_id=sid, seed=0))
        # options travel as JSON, so make the env hold a non-JSON value itself
        srv._servicer.table.get(sid).env.info_value = object()
        err = rpc_error(stub.Step, env_pb2.StepRequest(session_id=sid, action="x"))
        assert err.code() == grpc.StatusCode.INTERNAL
        assert "not JSON-serialisable" in err.details() and "must use JSON types" in err.details()


def test_the_remote_package_keeps_its_public_names_and_uses_the_wire_constants():
    import tinker_core.proto
    import tinker_core.remote as remote

    for name in remote.__all__:
        assert getattr(remote, name) is not None, name
    assert remote.SERVICE_NAME == tinker_core.proto.ENV_SERVICE == "opentinker.v1.EnvService"
    assert remote.MAX_MESSAGE_BYTES == tinker_core.proto.MAX_MESSAGE_BYTES
    # imported from their submodule, not from the plugin-author surface of the package
    assert not {"RemoteEnv", "RemoteMultiAgentEnv", "serve_env"} & set(tinker_core.__all__)
