"""The ``scheduler`` commands: registered through the opentinker hook, add-tenant, start's checks."""

from __future__ import annotations

import subprocess
import sys
from importlib import metadata

import pytest
import typer
from typer.testing import CliRunner

from tinker_scheduler import plugin
from tinker_scheduler.store import JobStore


@pytest.fixture
def cli() -> typer.Typer:
    root = typer.Typer()

    @root.command()
    def version() -> None:  # a root app with one command of its own, like `opentinker`
        typer.echo("0")

    plugin.opentinker_register_commands(cli=root)
    return root


def test_the_plugin_is_an_opentinker_entry_point():
    entry = next(e for e in metadata.entry_points(group="opentinker") if e.name == "scheduler")
    assert entry.value == "tinker_scheduler.plugin" and entry.load() is plugin


def test_the_plugin_module_stays_light():
    code = "import sys, tinker_scheduler.plugin, tinker_scheduler.cli; print('ray' in sys.modules, 'grpc' in sys.modules)"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert result.stdout.split() == ["False", "False"]


def test_scheduler_commands_are_added_under_scheduler(cli):
    result = CliRunner().invoke(cli, ["scheduler", "--help"])
    assert result.exit_code == 0
    assert "start" in result.output and "add-tenant" in result.output


def test_add_tenant_prints_a_working_key_once_on_stdout(cli, tmp_path):
    db = tmp_path / "jobs.db"
    result = CliRunner().invoke(cli, ["scheduler", "add-tenant", "alice", "--db", str(db)])
    assert result.exit_code == 0, result.output
    key = result.stdout.strip()
    assert key.startswith("otk_") and "\n" not in key
    assert "shown only once" in result.stderr
    store = JobStore(db)
    assert store.authenticate(key) == "alice"
    store.close()


def test_add_tenant_as_a_module_command(tmp_path):
    db = tmp_path / "jobs.db"
    result = subprocess.run(
        [sys.executable, "-m", "tinker_scheduler", "add-tenant", "bob", "--db", str(db)],
        capture_output=True, text=True, timeout=60,
    )
    assert result.returncode == 0, result.stderr
    store = JobStore(db)
    assert store.authenticate(result.stdout.strip()) == "bob"
    store.close()


def test_add_tenant_refuses_a_bad_name_with_exit_2(cli, tmp_path):
    result = CliRunner().invoke(cli, ["scheduler", "add-tenant", "Not OK", "--db", str(tmp_path / "jobs.db")])
    assert result.exit_code == 2
    assert "error: name: tenant name 'Not OK' is not allowed" in result.stderr


@pytest.mark.parametrize("command", [["start", "--port", "0", "--metrics-port", "-1"], ["add-tenant", "bob"]])
def test_a_corrupt_job_store_is_one_line_naming_the_file_and_exit_2(cli, tmp_path, command):
    db = tmp_path / "jobs.db"
    db.write_bytes(b"garbage, not SQLite " * 500)
    result = CliRunner().invoke(cli, ["scheduler", *command, "--db", str(db)])
    assert result.exit_code == 2, result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith(f"error: db: the job store {db} is damaged or not a SQLite file")
    assert "restore it from a backup, or move it away" in lines[0]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--auth", "sometimes"], "--auth: 'sometimes' is not a mode"),
        (["--tls-cert", "cert.pem"], "--tls-cert and --tls-key go together"),
        (["--tls-cert", "missing.pem", "--tls-key", "missing.key"], "--tls-cert: missing.pem does not exist"),
        (["--max-retries", "-1"], "--max-retries: must be >= 0"),
        (["--max-jobs-per-host", "-2"], "--max-jobs-per-host: must be >= 0"),
        (["--port", "70000"], "--port: 70000 is not a port number"),
        (["--max-data-per-request", "0"], "--max-data-per-request: must be >= 1 (got 0)"),
        (["--max-tokens-per-request", "-1"], "--max-tokens-per-request: must be >= 1"),
        (["--max-new-tokens-per-sample", "0"], "--max-new-tokens-per-sample: must be >= 1"),
        (["--runner", "no_such_module:train", "--port", "0"], "runner 'no_such_module:train' cannot be used"),
    ],
)
def test_start_rejects_bad_options_before_starting_anything(cli, tmp_path, args, message):
    result = CliRunner().invoke(cli, ["scheduler", "start", "--db", str(tmp_path / "jobs.db"), *args])
    assert result.exit_code == 2
    assert message in result.stderr


def test_start_passes_the_request_limit_flags_to_the_scheduler(cli, tmp_path, monkeypatch):
    import tinker_scheduler.scheduler as scheduler_module
    from tinker_algos.tinker_ops import RequestLimits

    seen = []

    def fake_scheduler(config):
        seen.append(config)
        raise ValueError("stopped by the test before anything starts")

    monkeypatch.setattr(scheduler_module, "Scheduler", fake_scheduler)
    result = CliRunner().invoke(cli, [
        "scheduler", "start", "--db", str(tmp_path / "jobs.db"), "--max-data-per-request", "3",
        "--max-tokens-per-request", "500", "--max-new-tokens-per-sample", "9",
    ])
    assert result.exit_code == 2 and "stopped by the test" in result.stderr
    assert seen[0].request_limits == RequestLimits(max_data=3, max_tokens=500, max_new_tokens=9)
    CliRunner().invoke(cli, ["scheduler", "start", "--db", str(tmp_path / "jobs.db")])
    assert seen[1].request_limits == RequestLimits()  # the flags' defaults are the limits' defaults


def test_the_scheduler_runs_without_the_http_extra():
    # tinker-serve (with fastapi and uvicorn) is the `http` extra: gRPC alone must not need it
    code = ("import sys; sys.modules.update(dict.fromkeys(('tinker_serve', 'fastapi', 'uvicorn'))); "
            "import tinker_scheduler.scheduler, tinker_scheduler.server, tinker_scheduler.cli, "
            "tinker_scheduler.training_service, tinker_scheduler.job_service, tinker_scheduler.config; print('ok')")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.stdout.strip() == "ok", result.stderr


def test_the_tinker_gateway_without_fastapi_is_refused_with_the_install_hint(cli, tmp_path, monkeypatch):
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "fastapi" else real(name, *a))
    result = CliRunner().invoke(cli, ["scheduler", "start", "--db", str(tmp_path / "jobs.db"), "--tinker-port", "0"])
    assert result.exit_code == 2
    assert "--tinker-port: the Tinker gateway needs FastAPI, which is not installed" in result.stderr
    assert "pip install 'tinker-scheduler[http]'" in result.stderr


def test_the_serve_route_without_the_openai_front_is_refused_with_the_install_hint(cli, tmp_path, monkeypatch):
    # the scheduler finds tinker-serve's app through the plugin registry: without the plugin, no front
    from tinker_core.registry import reset_plugins

    monkeypatch.setenv("OPENTINKER_LOAD_PLUGINS", "tinker-scheduler")
    reset_plugins()
    try:
        result = CliRunner().invoke(cli, ["scheduler", "start", "--db", str(tmp_path / "jobs.db"), "--serve-port", "0"])
    finally:
        monkeypatch.delenv("OPENTINKER_LOAD_PLUGINS")
        reset_plugins()
    assert result.exit_code == 2
    assert "--serve-port: the OpenAI route needs tinker-serve" in result.stderr
    assert "pip install 'tinker-scheduler[http]'" in result.stderr


def test_start_offers_every_cli_field_of_the_scheduler_config(cli):
    import dataclasses

    from tinker_scheduler.config import SchedulerConfig

    text = CliRunner().invoke(cli, ["scheduler", "start", "--help"], env={"COLUMNS": "300"}).output
    for f in dataclasses.fields(SchedulerConfig):
        if "cli" in f.metadata:
            assert (f.metadata["cli"].flag or f"--{f.name.replace('_', '-')}") in text, f.name
