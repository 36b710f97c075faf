"""``opentinker env serve ENV_ID --protocol openenv``, driven by OpenEnv's own client
(``openenv.core.GenericEnvClient``, the client TRL's ``environment_factory`` users hold)."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator

import pytest

import tinker_core

pytest.importorskip("openenv", reason="needs tinker-client[openenv]")
from openenv.core import GenericEnvClient  # noqa: E402

PLUGINS = {"OPENTINKER_LOAD_PLUGINS": "tinker-env-echo,tinker-env-math"}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def served(env_id: str, *flags: str) -> Iterator[str]:
    """``opentinker env serve env_id --protocol openenv`` on a free port; yields its base URL
    once it answers /health, and stops it with SIGTERM on exit."""
    import httpx

    port = _free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "tinker_client.cli", "env", "serve", env_id, "--protocol", "openenv", "--port", str(port), *flags],
        stderr=subprocess.PIPE, text=True, env={**os.environ, **PLUGINS},
    )
    url = f"http://127.0.0.1:{port}"
    try:
        assert f"serving {env_id} (OpenEnv protocol)" in proc.stderr.readline()
        deadline = time.monotonic() + 60
        while True:
            try:
                if httpx.get(f"{url}/health", timeout=5).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            assert proc.poll() is None, "the server exited before it answered /health"
            assert time.monotonic() < deadline, "the server did not answer /health within 60 s"
            time.sleep(0.2)
        yield url
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            pytest.fail("the OpenEnv server did not stop within 30 s of SIGTERM")


def test_arithmetic_right_answer_earns_reward_1_and_ends_the_episode():
    local = tinker_core.make_env("math/arithmetic-v0")
    prompt, info = local.reset(seed=7)
    answer = str(info["answer"])
    with served("math/arithmetic-v0") as url, GenericEnvClient(base_url=url).sync() as env:
        result = env.reset(seed=7, episode_id="episode-7")
        assert result.observation["text"] == prompt
        assert result.observation["system_prompt"] == local.env_spec.system_prompt
        assert result.reward is None and result.done is False
        state = env.state()
        assert state["episode_id"] == "episode-7" and state["step_count"] == 0
        assert state["env_id"] == "math/arithmetic-v0"

        result = env.step({"text": answer})
        assert result.reward == 1.0 and result.done is True
        assert result.observation["info"]["correct"] is True and result.observation["info"]["terminated"] is True
        assert env.state()["step_count"] == 1

        # a new episode on the same session, answered wrong: reward 0, done
        result = env.reset(seed=8)
        assert result.done is False
        result = env.step({"text": "not a number"})
        assert result.reward == 0.0 and result.done is True


def test_echo_right_word_earns_reward_1():
    local = tinker_core.make_env("echo/echo-v0")
    prompt, info = local.reset(seed=3)
    with served("echo/echo-v0") as url, GenericEnvClient(base_url=url).sync() as env:
        result = env.reset(seed=3)
        assert result.observation["text"] == prompt and result.observation["messages"] == []
        result = env.step({"text": info["target"]})
        assert result.reward == 1.0 and result.done is True


def test_countdown_multi_turn_replies_match_the_env_in_process():
    local = tinker_core.make_env("echo/countdown-v0")
    prompt, info = local.reset(seed=11)
    start = info["start"]
    with served("echo/countdown-v0") as url, GenericEnvClient(base_url=url).sync() as env:
        result = env.reset(seed=11)
        assert result.observation["text"] == prompt
        for turn, number in enumerate(range(start - 1, -1, -1), start=1):
            obs, reward, terminated, truncated, _ = local.step(str(number))
            result = env.step({"text": str(number)})
            assert result.observation["text"] == obs
            assert result.reward == reward == 1.0
            assert result.done is (terminated or truncated)
            assert result.observation["info"]["expected"] == number
            assert env.state()["step_count"] == turn
        assert result.done is True


def test_stepping_an_ended_episode_is_an_error_naming_reset():
    local = tinker_core.make_env("math/arithmetic-v0")
    _, info = local.reset(seed=1)
    with served("math/arithmetic-v0") as url, GenericEnvClient(base_url=url).sync() as env:
        env.reset(seed=1)
        env.step({"text": str(info["answer"])})
        with pytest.raises(Exception, match="call reset"):
            env.step({"text": "again"})


def test_unknown_env_id_exits_2_with_one_clear_error():
    result = subprocess.run(
        [sys.executable, "-m", "tinker_client.cli", "env", "serve", "math/arithmetc-v0", "--protocol", "openenv", "--port", "0"],
        capture_output=True, text=True, timeout=120, env={**os.environ, **PLUGINS},
    )
    assert result.returncode == 2
    assert "did you mean 'math/arithmetic-v0'" in result.stderr
    assert "Traceback" not in result.stderr


def test_multi_agent_env_two_env_ids_or_a_bad_protocol_exit_2():
    for args, message in ((["echo/call-response-v0", "--protocol", "openenv"], "is a multi-agent env"),
                          (["echo/echo-v0", "math/arithmetic-v0", "--protocol", "openenv"], "serves one env id"),
                          (["echo/echo-v0", "--protocol", "http"], "--protocol must be grpc or openenv")):
        result = subprocess.run([sys.executable, "-m", "tinker_client.cli", "env", "serve", *args, "--port", "0"],
                                capture_output=True, text=True, timeout=120, env={**os.environ, **PLUGINS})
        assert result.returncode == 2, result.stderr
        assert message in result.stderr


def test_an_observation_over_the_limit_is_an_error_naming_the_flag():
    from tinker_client.openenv_server import running

    with (running("math/arithmetic-v0", max_observation_bytes=8) as url, GenericEnvClient(base_url=url).sync() as env,
          pytest.raises(Exception, match="--max-observation-bytes 8")):
        env.reset(seed=0)


def test_an_action_over_the_limit_is_refused_and_the_server_keeps_serving():
    from tinker_client.openenv_server import FRAMING_BYTES, running

    local = tinker_core.make_env("math/arithmetic-v0")
    _, info = local.reset(seed=2)
    with running("math/arithmetic-v0", max_action_bytes=1024) as url:
        with GenericEnvClient(base_url=url).sync() as env:
            env.reset(seed=2)
            with pytest.raises(Exception, match="message too big"):  # the server closes the WebSocket with 1009
                env.step({"text": "1" * (1024 + FRAMING_BYTES + 1)})
        with GenericEnvClient(base_url=url).sync() as env:  # a new session still works
            env.reset(seed=2)
            assert env.step({"text": str(info["answer"])}).reward == 1.0


def test_a_taken_port_exits_2_naming_it():
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = subprocess.run(
            [sys.executable, "-m", "tinker_client.cli", "env", "serve", "echo/echo-v0", "--protocol", "openenv", "--port", str(port)],
            capture_output=True, text=True, timeout=120, env={**os.environ, **PLUGINS},
        )
    assert result.returncode == 2
    assert f"cannot listen on 127.0.0.1:{port}" in result.stderr and "choose another --port" in result.stderr
