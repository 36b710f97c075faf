"""``opentinker serve``, the command tinker-serve adds through ``opentinker_register_commands``."""

from __future__ import annotations

import subprocess
import sys

import typer
from typer.testing import CliRunner

from tinker_serve import plugin
from tinker_serve.cli import parse_adapter

APP = (
    "import typer; from tinker_serve import plugin; cli = typer.Typer(add_completion=False); "
    "cli.command('other')(lambda: None); plugin.opentinker_register_commands(cli=cli); cli()"
)


def cli() -> typer.Typer:
    app = typer.Typer(add_completion=False)
    app.command("other")(lambda: None)  # a second command keeps `serve` a subcommand, as in `opentinker`
    plugin.opentinker_register_commands(cli=app)
    return app


def test_hook_adds_serve_and_importing_the_command_loads_no_torch():
    assert "serve" in typer.main.get_command(cli()).commands
    code = "import sys, tinker_serve.plugin, tinker_serve.cli; assert 'torch' not in sys.modules and 'fastapi' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True)


def test_adapter_specs():
    assert parse_adapter("sums=runs/arith") == ("sums", "runs/arith")
    assert parse_adapter("runs/arith/") == ("arith", "runs/arith/")


def test_bad_input_is_one_error_line_and_exit_2(tmp_path):
    for args in (["serve", str(tmp_path / "missing-model")], ["serve", "tiny", "--adapter", "=x"], ["serve", "tiny", "--device", "tpu"]):
        result = CliRunner().invoke(cli(), args)
        assert result.exit_code == 2, result.output
        lines = result.stderr.strip().splitlines()
        assert lines[-1].startswith("error: ") and [line for line in lines[:-1] if not line.startswith("loading model ")] == [], result.stderr


def test_serve_builds_the_app_with_an_adapter_from_a_run_directory_and_the_key(tiny_dir, arithmetic_run, monkeypatch):
    import uvicorn
    from fastapi.testclient import TestClient

    started = {}
    monkeypatch.setattr(uvicorn, "run", lambda app, **kw: started.update(app=app, **kw))
    args = ["serve", str(tiny_dir), "--adapter", f"sums={arithmetic_run}", "--port", "8123", "--api-key", "k", "--device", "cpu"]
    result = CliRunner().invoke(cli(), args)
    assert result.exit_code == 0, result.output
    assert started["port"] == 8123 and started["host"] == "127.0.0.1"
    assert f"serving {tiny_dir}, sums on http://127.0.0.1:8123" in result.stderr
    # off a terminal, one line says what loads before the model is ready
    assert result.stderr.splitlines()[0] == f"loading model {tiny_dir}, adapter sums from {arithmetic_run} ..."
    assert started["log_level"] == "info"
    with TestClient(started["app"]) as http:
        assert http.get("/v1/models").status_code == 401
        ids = [m["id"] for m in http.get("/v1/models", headers={"Authorization": "Bearer k"}).json()["data"]]
    assert ids == [str(tiny_dir), "sums"]


def test_serve_prints_no_hugging_face_progress_bars(tiny_dir):
    """In a fresh process (nothing switched the bars off yet), loading the model draws no
    "Loading weights" bar: the startup line is the output."""
    import os

    code = "import uvicorn; uvicorn.run = lambda *a, **k: None\n" + APP.replace("; ", "\n")
    env = {k: v for k, v in os.environ.items() if k not in ("HF_HUB_DISABLE_PROGRESS_BARS", "TQDM_DISABLE")}
    out = subprocess.run([sys.executable, "-c", code, "serve", str(tiny_dir), "--device", "cpu"],
                         capture_output=True, text=True, env=env, timeout=300)
    assert out.returncode == 0, out.stderr
    assert "serving" in out.stderr
    for bar in ("Loading weights", "it/s]", "%|"):
        assert bar not in out.stderr + out.stdout, out.stderr
