"""``opentinker doctor`` names the fix of every problem it checks for. Failures are simulated by
replacing the machine facts the checks read (tinker_client.doctor's small functions, the plugin
list) or with real gRPC servers on 127.0.0.1 -- never by breaking this machine."""

from __future__ import annotations

import socket
from concurrent import futures

import grpc
import pytest
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from typer.testing import CliRunner

import tinker_core.registry
from tinker_client import doctor
from tinker_client.cli import app
from tinker_core import hookimpl
from tinker_core.doctor import Finding
from tinker_core.errors import DuplicateNameError
from tinker_core.handshake import ServerHandshake
from tinker_core.registry import PluginInfo

REAL_PORT_IN_USE = doctor.port_in_use  # (the fixture replaces the module's)


@pytest.fixture(autouse=True)
def quiet_machine(monkeypatch):
    """A healthy machine: no plugins, every port free, chromium and tmux present."""
    monkeypatch.setenv("OPENTINKER_DISABLE_PLUGIN_AUTOLOAD", "1")
    tinker_core.registry.reset_plugins()
    monkeypatch.setattr(doctor, "port_in_use", lambda port, host="127.0.0.1": False)
    monkeypatch.setattr(doctor, "which", lambda program: f"/usr/bin/{program}")
    monkeypatch.setattr(doctor, "our_distributions", lambda: {"tinker-client": "0.1.0", "tinker-core": "0.1.0"})
    yield
    tinker_core.registry.reset_plugins()


def problems(findings: list[Finding]) -> list[str]:
    return [f.line() for f in findings if f.problem]


def run(*args: str):
    return CliRunner().invoke(app, ["doctor", *args])


def test_a_healthy_machine_exits_0_saying_so():
    result = run()
    assert result.exit_code == 0, result.output
    assert "ok: python: " in result.output and "ok: plugins: 0 loaded" in result.output
    assert result.output.rstrip().endswith("all is well")


def test_an_old_python_names_the_version_to_install(monkeypatch):
    monkeypatch.setattr(doctor, "python_version", lambda: (3, 10, 4))
    assert problems(list(doctor.check_python())) == [
        "error: python: 3.10.4 is older than the 3.11 OpenTinker needs; fix: install Python 3.11 or newer and "
        "reinstall OpenTinker with it (uv python install 3.11)"]
    result = run()
    assert result.exit_code == 1 and "1 error(s)" in result.output


def test_mixed_package_versions_name_the_pins_that_make_one_release(monkeypatch):
    monkeypatch.setattr(doctor, "our_distributions", lambda: {
        "tinker-client": "0.1.0", "tinker-core": "0.2.0", "tinker-algos": "0.1.0", "opentinker": "0.2.0"})
    (line,) = problems(list(doctor.check_packages()))
    assert line.startswith("error: packages: one release, mixed versions: opentinker 0.2.0, tinker-algos 0.1.0")
    assert line.endswith("fix: pip install 'tinker-algos==0.2.0' 'tinker-client==0.2.0' (the packages are released together)")


def test_a_plugin_that_failed_to_load_names_its_distribution_and_the_fix(monkeypatch):
    broken = PluginInfo(name="games", distribution="tinker-env-chess", version="1.2.0",
                        error="ImportError: No module named 'chess'")
    monkeypatch.setattr(tinker_core.registry, "list_plugins", lambda: [broken])
    assert problems(list(doctor.check_plugins())) == [
        "error: plugin games: tinker-env-chess 1.2.0 failed to load: ImportError: No module named 'chess'; "
        "fix: pip install -U tinker-env-chess (or uninstall it, or leave it out with OPENTINKER_LOAD_PLUGINS)"]


def test_a_name_registered_twice_names_the_fix(monkeypatch):
    def duplicate():
        raise DuplicateNameError("env 'math/add-v0' is registered by both 'a-envs' and 'b-envs'")

    monkeypatch.setattr(tinker_core.registry, "list_plugins", duplicate)
    (line,) = problems(list(doctor.check_plugins()))
    assert "'a-envs' and 'b-envs'" in line
    assert line.endswith("fix: uninstall one of the distributions named, or leave one out with OPENTINKER_LOAD_PLUGINS")


class _Checks:
    @staticmethod
    @hookimpl
    def opentinker_register_doctor_checks(register):
        register("sim", lambda: [Finding("sim", "missing", "error", fix="apt-get install sim")])
        register("crashy", lambda: 1 / 0)


def test_plugin_checks_run_and_a_crashing_one_is_the_plugins_error():
    tinker_core.registry.register_plugin(_Checks(), distribution="sim-envs")
    assert problems(list(doctor.check_plugin_checks())) == [
        "error: crashy: the check of sim-envs failed: ZeroDivisionError: division by zero; fix: pip install -U sim-envs",
        "error: sim: missing; fix: apt-get install sim",
    ]


def test_a_busy_default_port_is_a_warning_naming_the_fix(monkeypatch):
    monkeypatch.setattr(doctor, "port_in_use", lambda port, host="127.0.0.1": port == 8765)
    assert problems(list(doctor.check_ports())) == [
        "warning: port 8765: in use (opentinker view listens there by default); "
        "fix: stop what listens on 8765 (ss -ltnp 'sport = :8765'), or give the command --port"]
    result = run()
    assert result.exit_code == 0 and "0 error(s), 1 warning(s)" in result.output  # warnings pass...
    assert run("--strict").exit_code == 1  # ...unless --strict


def test_missing_chromium_and_tmux_name_their_install(monkeypatch):
    monkeypatch.setattr(doctor, "which", lambda program: None)
    assert problems(list(doctor.check_test_programs())) == [
        "warning: chromium: not installed: only the test suite needs it (the chat page's and the viewer's browser "
        "tests); fix: apt-get install chromium",
        "warning: tmux: not installed: only the test suite needs it (the terminal recordings of train and watch); "
        "fix: apt-get install tmux",
    ]


def test_port_in_use_sees_a_real_listener():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        assert REAL_PORT_IN_USE(port)
    assert not REAL_PORT_IN_USE(port)  # closed


@pytest.fixture
def health_server():
    """``start(interceptors)`` -> the address of a real gRPC health server on 127.0.0.1."""
    servers = []

    def start(interceptors=()):
        server = grpc.server(futures.ThreadPoolExecutor(max_workers=2), interceptors=list(interceptors))
        servicer = health.HealthServicer()
        servicer.set("", health_pb2.HealthCheckResponse.SERVING)
        health_pb2_grpc.add_HealthServicer_to_server(servicer, server)
        port = server.add_insecure_port("127.0.0.1:0")
        server.start()
        servers.append(server)
        return f"127.0.0.1:{port}"

    yield start
    for server in servers:
        server.stop(0)


def test_a_reachable_scheduler_shows_its_version_and_wire(health_server):
    address = health_server([ServerHandshake("scheduler", "tinker-scheduler")])
    (finding,) = doctor.check_scheduler(address, None, None)
    assert finding.severity == "ok" and finding.detail.startswith("reachable: tinker-scheduler ")
    result = run("--scheduler", address)
    assert result.exit_code == 0, result.output
    assert f"ok: scheduler {address}: reachable" in result.output
    assert "port " not in result.output.split("ports:")[0]  # its own port is not reported busy


def test_a_scheduler_of_another_wire_names_what_to_upgrade(health_server):
    server_side = ServerHandshake("scheduler", "tinker-scheduler")
    server_side.peer = server_side.peer._replace(version="2.0.0", wire="2.0")  # it refuses wire 1.x
    address = health_server([server_side])
    (line,) = problems(list(doctor.check_scheduler(address, None, None)))
    assert line.startswith(f"error: scheduler {address}: client tinker-client ")
    assert "and scheduler tinker-scheduler 2.0.0 (wire 2.0) speak incompatible wire protocols" in line
    assert "; fix: upgrade the client (pip install -U 'tinker-client>=2.0.0')" in line


def test_a_scheduler_older_than_the_handshake_is_a_warning(health_server):
    address = health_server()
    (line,) = problems(list(doctor.check_scheduler(address, None, None)))
    assert line.startswith(f"warning: scheduler {address}: reachable, but it does not say its version")
    assert "fix: upgrade the scheduler to tinker-scheduler" in line


def test_an_unreachable_scheduler_names_how_to_reach_it():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # nothing listens once closed
    (line,) = problems(list(doctor.check_scheduler(f"127.0.0.1:{port}", None, None)))
    assert line.startswith(f"error: scheduler 127.0.0.1:{port}: not reachable")
    assert "fix: start it (opentinker scheduler start), check the address and port" in line


def test_a_bad_ca_file_names_the_option(tmp_path):
    bad = tmp_path / "ca.pem"
    bad.write_text("not a certificate")
    (line,) = problems(list(doctor.check_scheduler("127.0.0.1:1", None, bad)))
    assert "is not a PEM certificate" in line and line.endswith("fix: pass --tls-ca the PEM certificate the scheduler's TLS uses")


def test_json_lists_every_finding():
    import json

    result = run("--json")
    assert result.exit_code == 0
    found = json.loads(result.output)
    assert {f["check"] for f in found} >= {"python", "packages", "plugins", "ports", "chromium", "tmux"}
