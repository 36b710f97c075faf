"""How a policy's turn ended reaches the env (``Action.stop_reason``), locally and over the wire,
and an env spec's ``system_prompt`` round-trips (and stays out of the JSON when unset)."""

from __future__ import annotations

import pickle
import types
from typing import Any

import grpc
import pytest

import tinker_core
import tinker_core.registry
from tinker_core import Action, EnvSpec, TextEnv, hookimpl, turn_end_of
from tinker_core.proto import env_pb2, env_pb2_grpc
from tinker_core.remote import RemoteEnv, serve_env

SPEC = EnvSpec(id="testing/turn-end-v0", max_turns=3, system_prompt="Answer briefly.")


class TurnEndEnv(TextEnv):
    """Reports, in its info, how each turn it was given ended."""

    env_spec = SPEC

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[str, dict[str, Any]]:
        super().reset(seed=seed)
        return "go", {}

    def step(self, action: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        return "again", 0.0, False, False, {"turn_end": turn_end_of(action), "text": str(action)}


@pytest.fixture(autouse=True)
def only_test_plugins(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OPENTINKER_LOAD_PLUGINS", raising=False)
    monkeypatch.setenv("OPENTINKER_DISABLE_PLUGIN_AUTOLOAD", "1")
    tinker_core.registry.reset_plugins()
    mod = types.ModuleType("turn_end_plugin")
    mod.opentinker_register_envs = hookimpl(lambda register: register(SPEC, TurnEndEnv))  # type: ignore[attr-defined]
    tinker_core.registry.register_plugin(mod, distribution="testing")


def test_an_action_is_a_str_that_carries_how_the_turn_ended() -> None:
    a = Action("42", "length")
    assert a == "42" and isinstance(a, str) and a.strip() == "42"
    assert turn_end_of(a) == "length"
    assert turn_end_of("42") is None and turn_end_of(Action("42")) is None
    again = pickle.loads(pickle.dumps(a))
    assert again == "42" and turn_end_of(again) == "length"
    with pytest.raises(ValueError, match="end_of_turn, stop_string, length"):
        Action("42", "eos")  # type: ignore[arg-type]


def test_system_prompt_round_trips_and_is_left_out_of_the_json_when_unset() -> None:
    assert EnvSpec.from_json(SPEC.to_json()) == SPEC
    plain = EnvSpec(id="testing/plain-v0")
    assert "system_prompt" not in plain.to_dict()  # older readers refuse unknown fields
    assert EnvSpec.from_json(plain.to_json()) == plain and plain.system_prompt == ""


def test_the_turn_end_survives_the_remote_env_service() -> None:
    with serve_env("testing/turn-end-v0") as srv, RemoteEnv(srv.address, "testing/turn-end-v0") as env:
        assert env.env_spec.system_prompt == "Answer briefly."
        env.reset(seed=0)
        for reason in ("end_of_turn", "stop_string", "length"):
            info = env.step(Action("x", reason))[4]  # type: ignore[arg-type]
            assert info == {"turn_end": reason, "text": "x"}
        assert env.step("plain")[4] == {"turn_end": None, "text": "plain"}


def test_an_unknown_stop_reason_on_the_wire_is_invalid_argument() -> None:
    with serve_env("testing/turn-end-v0") as srv, grpc.insecure_channel(srv.address) as channel:
        stub = env_pb2_grpc.EnvServiceStub(channel)
        sid = stub.CreateSession(env_pb2.CreateEnvSessionRequest(env_id="testing/turn-end-v0")).session_id
        stub.Reset(env_pb2.ResetRequest(session_id=sid, seed=0))
        with pytest.raises(grpc.RpcError) as e:
            stub.Step(env_pb2.StepRequest(session_id=sid, action="x", stop_reason="finished"))
        assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert "stop_reason 'finished'" in (e.value.details() or "")
