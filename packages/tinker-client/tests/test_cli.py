"""The ``opentinker`` command, run as a user runs it (a real subprocess) where exit codes matter."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import textwrap

import pytest
from typer.testing import CliRunner

import tinker_core
import tinker_core.registry
from tinker_client.cli import app, build_app


def opentinker(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "tinker_client.cli", *args],
        capture_output=True,
        text=True,
        env={**os.environ, **(env or {})},
        timeout=120,
    )


@pytest.fixture(autouse=True)
def fresh_plugins():
    tinker_core.registry.reset_plugins()
    yield
    tinker_core.registry.reset_plugins()


def test_plugins_json_lists_the_echo_plugin_with_distribution_version_and_env_ids():
    result = opentinker("plugins", "--json")
    assert result.returncode == 0, result.stderr
    plugins = json.loads(result.stdout)
    echo = next(p for p in plugins if p["distribution"] == "tinker-env-echo")
    assert echo["version"] == "0.1.0"
    assert echo["registers"]["envs"] == ["echo/call-response-v0", "echo/countdown-v0", "echo/echo-v0"]


def test_plugins_table_shows_every_distribution():
    result = CliRunner().invoke(build_app(), ["plugins"])
    assert result.exit_code == 0
    assert "tinker-env-echo" in result.output
    assert "  echo/ call-response-v0, countdown-v0, echo-v0" in result.output.splitlines()


def test_plugins_respects_the_allowlist():
    result = opentinker("plugins", "--json", env={"OPENTINKER_LOAD_PLUGINS": "tinker-env-echo"})
    assert [p["distribution"] for p in json.loads(result.stdout)] == ["tinker-env-echo"]


def test_a_broken_allowlist_exits_2_with_one_line_reason():
    result = opentinker("plugins", env={"OPENTINKER_LOAD_PLUGINS": "no-such-dist"})
    assert result.returncode == 2
    assert "error:" in result.stderr and "no-such-dist" in result.stderr
    assert "Traceback" not in result.stderr


def test_config_validate_names_all_three_problems_and_exits_2(tmp_path):
    path = tmp_path / "bad.yaml"
    path.write_text(
        textwrap.dedent(
            """
            env: {id: echo/ehco-v0}
            algorithm: {name: sft, stpes: 3}
            optimizer: {lr: "fast"}
            """
        )
    )
    result = opentinker("config", "validate", str(path))
    assert result.returncode == 2
    err = result.stderr
    assert "3 problem(s)" in err
    assert "algorithm.stpes: unknown key; did you mean 'steps'?" in err  # misspelled key
    assert "optimizer.lr: Input should be a valid number" in err  # wrong type
    assert "env.id: unknown env 'echo/ehco-v0'; did you mean 'echo/echo-v0'?" in err  # unknown env id
    assert "Traceback" not in err


def test_config_validate_accepts_a_good_file(tmp_path):
    path = tmp_path / "good.yaml"
    path.write_text("env: {id: echo/echo-v0}\nalgorithm: {name: sft, steps: 3}\n")
    result = CliRunner().invoke(app, ["config", "validate", str(path), "--no-plugins"])
    assert result.exit_code == 0, result.output
    assert "valid" in result.output and "sft (3 steps)" in result.output


def test_config_validate_missing_file_exits_2(tmp_path):
    result = opentinker("config", "validate", str(tmp_path / "nope.yaml"))
    assert result.returncode == 2 and "does not exist" in result.stderr


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("optimizer:\n  params:\n    a0: &a0 [x, x, x, x, x, x, x, x, x]\n"
         + "".join(f"    a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * 9) + "]\n" for i in range(1, 7)),
         "  - its YAML aliases expand to over 1,000 values"),
        ("optimizer: {params: {x: " + "[" * 300 + "]" * 300 + "}}\n", "  - nested deeper than 64 levels; "),
    ],
    ids=["alias-bomb", "300-deep"],
)
def test_config_validate_refuses_an_alias_bomb_or_deep_nesting_in_one_line_and_exits_2(tmp_path, text, problem):
    """Both were reported valid (and ``train`` then wrote a 94 MB config.json, or failed with a traceback)."""
    path = tmp_path / "job.yaml"
    path.write_text("algorithm: {name: sft, steps: 2}\n" + text)
    result = opentinker("config", "validate", str(path), "--no-plugins")
    assert result.returncode == 2, result.stdout
    assert f"{path}: 1 problem(s)" in result.stderr and problem in result.stderr
    assert "Traceback" not in result.stderr


def test_config_schema_prints_json_schema():
    result = CliRunner().invoke(app, ["config", "schema"])
    assert result.exit_code == 0
    schema = json.loads(result.output)
    assert schema["title"] == "JobConfig" and "algorithm" in schema["properties"]


def test_unknown_command_exits_2():
    result = opentinker("no-such-command")
    assert result.returncode == 2


@pytest.mark.parametrize(("command", "distribution"), [("train", "tinker-algos"), ("scheduler", "tinker-scheduler"), ("compare", "tinker-algos")])
def test_a_command_of_a_missing_package_names_the_package_and_exits_2(command, distribution):
    result = opentinker(command, "job.yaml", "--fresh", env={"OPENTINKER_LOAD_PLUGINS": "tinker-env-echo"})
    assert result.returncode == 2
    assert f"'opentinker {command}' needs {distribution}" in result.stderr
    assert f"hint: pip install {distribution}" in result.stderr and "Traceback" not in result.stderr


def test_train_on_a_scheduler_needs_no_trainer_package(tmp_path):
    """Client only (no tinker-algos): `train CONFIG --scheduler ADDR` is `submit CONFIG --watch`."""
    config = tmp_path / "job.yaml"
    config.write_text("name: t\nalgorithm: {name: sft, steps: 1}\n", encoding="utf-8")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        address = f"127.0.0.1:{s.getsockname()[1]}"
    result = opentinker("train", str(config), "--scheduler", address, env={"OPENTINKER_LOAD_PLUGINS": "tinker-env-echo"})
    assert result.returncode == 1, result.stderr
    assert f"cannot reach a scheduler at {address}" in result.stderr and "needs tinker-algos" not in result.stderr


@pytest.mark.parametrize("args", [["watch", "job-1"], ["logs", "job-1"], ["cancel", "job-1"], ["list"], ["pause", "job-1"],
                                  ["resume", "job-1"], ["job", "set", "job-1", "optimizer.lr=0.1"]])
def test_job_commands_report_an_unreachable_scheduler_and_exit_1(args):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        address = f"127.0.0.1:{s.getsockname()[1]}"
    result = CliRunner().invoke(app, [*args, "--scheduler", address])
    assert result.exit_code == 1
    assert f"error: cannot reach a scheduler at {address}" in result.stderr and "hint:" in result.stderr


@pytest.mark.parametrize("args", [["watch", "job-1"], ["logs", "job-1"], ["cancel", "job-1"], ["list"], ["submit"],
                                  ["pause", "job-1"], ["job", "set", "job-1", "optimizer.lr=0.1"]])
@pytest.mark.parametrize("content", [None, "not a certificate\n"])
def test_a_bad_tls_ca_file_is_one_line_naming_it_and_exit_2(args, content, tmp_path):
    ca = tmp_path / "ca.pem"
    if content is not None:
        ca.write_text(content)
    if args == ["submit"]:
        config = tmp_path / "job.yaml"
        config.write_text("name: t\nalgorithm: {name: sft, steps: 1}\n", encoding="utf-8")
        args = ["submit", str(config)]
    result = CliRunner().invoke(app, [*args, "--scheduler", "127.0.0.1:1", "--tls-ca", str(ca)])
    assert result.exit_code == 2, result.output
    why = "does not exist" if content is None else "is not a PEM certificate"
    assert result.stderr.strip().splitlines() == [result.stderr.strip()]
    assert result.stderr.startswith(f"error: --tls-ca: {ca} {why}"), result.stderr


def test_train_on_a_scheduler_with_a_missing_tls_ca_exits_2(tmp_path):
    config = tmp_path / "job.yaml"
    config.write_text("name: t\nalgorithm: {name: sft, steps: 1}\n", encoding="utf-8")
    result = opentinker("train", str(config), "--scheduler", "127.0.0.1:1", "--tls-ca", str(tmp_path / "ca.pem"),
                        env={"OPENTINKER_LOAD_PLUGINS": "tinker-env-echo"})
    assert result.returncode == 2, result.stderr
    assert result.stderr.strip() == f"error: --tls-ca: {tmp_path / 'ca.pem'} does not exist; pass the PEM certificate the scheduler's TLS uses"


def test_the_client_never_imports_torch():
    code = "import sys, tinker_client.cli as c; c.build_app(); assert 'torch' not in sys.modules, 'torch imported'"
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120)


def test_env_serve_serves_a_registered_env_until_terminated():
    import signal
    import time

    from tinker_core.remote import RemoteEnv

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen(
        [sys.executable, "-m", "tinker_client.cli", "env", "serve", "echo/echo-v0", "--port", str(port)],
        stderr=subprocess.PIPE, text=True, env={**os.environ, "OPENTINKER_LOAD_PLUGINS": "tinker-env-echo"},
    )
    try:
        assert "serving echo/echo-v0" in proc.stderr.readline()
        deadline = time.monotonic() + 30
        while True:
            try:
                with RemoteEnv(f"127.0.0.1:{port}", "echo/echo-v0") as env:
                    obs, _ = env.reset(seed=5)
                break
            except Exception:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.2)
        local = tinker_core.make_env("echo/echo-v0")
        assert obs == local.reset(seed=5)[0]
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=30)


def test_env_serve_unknown_env_exits_2_with_suggestion():
    result = opentinker("env", "serve", "echo/ehco-v0", "--port", "0", env={"OPENTINKER_LOAD_PLUGINS": "tinker-env-echo"})
    assert result.returncode == 2
    assert "did you mean 'echo/echo-v0'" in result.stderr


STALL_PLUGIN = """
import pathlib, threading
from tinker_core import EnvSpec, TextEnv, hookimpl

SPEC = EnvSpec(id="stall/stall-v0", description="test env: the action 'stall' blocks forever")

class StallEnv(TextEnv):
    env_spec = SPEC

    def __init__(self, marker=None):
        self.marker = marker

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        return "ready", {}

    def step(self, action):
        if action == "stall":
            pathlib.Path(self.marker).write_text("in step")
            threading.Event().wait()
        return action, 1.0, False, False, {}

@hookimpl
def opentinker_register_envs(register):
    register(SPEC, StallEnv)
"""


def stall_plugin_env(tmp_path) -> dict[str, str]:
    """Environment variables that make a subprocess load only a local plugin with a stuck env."""
    (tmp_path / "stall_plugin.py").write_text(STALL_PLUGIN)
    dist = tmp_path / "stall_plugin-0.1.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: stall-plugin\nVersion: 0.1\n")
    (dist / "entry_points.txt").write_text("[opentinker]\nstall = stall_plugin\n")
    path = os.pathsep.join(p for p in (str(tmp_path), os.environ.get("PYTHONPATH", "")) if p)
    return {**os.environ, "PYTHONPATH": path, "OPENTINKER_LOAD_PLUGINS": "stall-plugin"}


def test_env_serve_stops_on_sigterm_while_an_env_hangs_and_serves_others_meanwhile(tmp_path):
    import signal
    import threading
    import time

    import grpc

    from tinker_core.proto import env_pb2, env_pb2_grpc

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen(
        [sys.executable, "-m", "tinker_client.cli", "env", "serve", "stall/stall-v0", "--port", str(port), "--call-timeout", "0"],
        stderr=subprocess.PIPE, text=True, env=stall_plugin_env(tmp_path),
    )
    marker = tmp_path / "marker"
    try:
        assert "serving stall/stall-v0" in proc.stderr.readline()
        with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
            stub = env_pb2_grpc.EnvServiceStub(channel)
            grpc.channel_ready_future(channel).result(timeout=30)
            kwargs = json.dumps({"marker": str(marker)})
            stuck = stub.CreateSession(env_pb2.CreateEnvSessionRequest(env_id="stall/stall-v0", kwargs_json=kwargs), timeout=30).session_id
            stub.Reset(env_pb2.ResetRequest(session_id=stuck), timeout=30)
            errors: list[grpc.RpcError] = []

            def step() -> None:
                try:
                    stub.Step(env_pb2.StepRequest(session_id=stuck, action="stall"), timeout=60)
                except grpc.RpcError as e:
                    errors.append(e)

            stepper = threading.Thread(target=step, daemon=True)
            stepper.start()
            deadline = time.monotonic() + 30
            while not marker.exists():  # the Step is inside the env now
                assert time.monotonic() < deadline, "the Step never reached the env"
                time.sleep(0.05)
            other = stub.CreateSession(env_pb2.CreateEnvSessionRequest(env_id="stall/stall-v0"), timeout=30).session_id
            assert stub.Reset(env_pb2.ResetRequest(session_id=other), timeout=30).observation.text == "ready"
            assert stub.Step(env_pb2.StepRequest(session_id=other, action="hi"), timeout=30).observation.text == "hi"

            proc.send_signal(signal.SIGTERM)
            try:
                returncode = proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                pytest.fail("opentinker env serve did not stop within 10 s of SIGTERM while an env call hung")
            assert returncode == 0, proc.stderr.read()
            stepper.join(30)
            assert errors and errors[0].code() in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.CANCELLED)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=30)


@pytest.mark.parametrize(
    ("flag", "value", "message"),
    [
        ("--max-action-bytes", "0", "--max-action-bytes must be >= 1"),
        ("--max-observation-bytes", "-5", "--max-observation-bytes must be >= 1"),
        ("--call-timeout", "-1", "--call-timeout must be a number of seconds >= 0"),
    ],
)
def test_env_serve_bad_limits_exit_2(flag, value, message):
    result = opentinker("env", "serve", "echo/echo-v0", "--port", "0", flag, value, env={"OPENTINKER_LOAD_PLUGINS": "tinker-env-echo"})
    assert result.returncode == 2
    assert message in result.stderr


def test_config_validate_applies_overrides_and_a_bad_one_is_one_line(tmp_path):
    path = tmp_path / "good.yaml"
    path.write_text("env: {id: echo/echo-v0}\nalgorithm: {name: sft, steps: 3}\n")
    result = CliRunner().invoke(app, ["config", "validate", str(path), "algorithm.steps=7", "--no-plugins"])
    assert result.exit_code == 0, result.output
    assert "sft (7 steps)" in result.output
    bad = opentinker("config", "validate", str(path), "algorithm.stpes=7", "--no-plugins")
    assert bad.returncode == 2
    assert bad.stderr.strip().splitlines() == [
        "error: override 'algorithm.stpes=7': unknown key algorithm.stpes; did you mean 'algorithm.steps'?"
    ]
    brackets = opentinker("config", "validate", str(path), "rollout.stopp=[a, b]", "--no-plugins")
    assert brackets.stderr.strip() == "error: override 'rollout.stopp=[a, b]': unknown key rollout.stopp; did you mean 'rollout.stop'?"
    wrong_value = opentinker("config", "validate", str(path), "algorithm.steps=-1", "--no-plugins")
    assert wrong_value.returncode == 2 and "algorithm.steps: Input should be greater than or equal to 1" in wrong_value.stderr


def test_submit_sends_the_config_with_its_overrides_applied(tmp_path):
    from tinker_client.cli import _read_config_text

    path = tmp_path / "job.yaml"
    text = "name: t\nenv: {id: echo/echo-v0}\nalgorithm: {name: sft, steps: 3}\n"
    path.write_text(text)
    assert _read_config_text(path, []) == text  # as written, comments and all
    sent = json.loads(_read_config_text(path, ["algorithm.steps=5", "seed=2"]))
    assert sent == {"name": "t", "env": {"id": "echo/echo-v0"}, "algorithm": {"name": "sft", "steps": 5}, "seed": 2}


def test_version_prints_the_release_and_exits():
    import tinker_client

    out = subprocess.run([sys.executable, "-c", "from tinker_client.cli import main; main()", "--version"],
                         capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == f"opentinker {tinker_client.__version__}" == f"opentinker {tinker_core.__version__}"
