"""``opentinker job set RUN_DIR KEY=VALUE``: checks a live-setting change, writes it as a request."""

from __future__ import annotations

import json

from typer.testing import CliRunner

from tinker_client.cli import app
from tinker_core.config import parse_config

CONFIG = {
    "name": "live", "env": {"id": "echo/echo-v0"},
    "stages": [{"algorithm": {"name": "sft", "steps": 2}}, {"algorithm": {"name": "grpo", "steps": 3}}],
}


def run_dir(tmp_path):
    (tmp_path / "config.json").write_text(parse_config(CONFIG, check_plugins=False).model_dump_json())
    return tmp_path


def test_job_set_writes_a_request_the_run_takes_at_its_next_step(tmp_path):
    ok = CliRunner().invoke(app, ["job", "set", str(run_dir(tmp_path)), "optimizer.lr=0.01", "stages.1.algorithm.eval_every=5"])
    assert ok.exit_code == 0, ok.output
    (request,) = (tmp_path / "control").glob("*.json")
    assert json.loads(request.read_text()) == {"set": ["optimizer.lr=0.01", "stages.1.algorithm.eval_every=5"]}


def test_job_set_refuses_a_setting_that_is_not_live_naming_those_that_are(tmp_path):
    bad = CliRunner().invoke(app, ["job", "set", str(run_dir(tmp_path)), "model.name=gpt2"])
    assert bad.exit_code == 2
    assert "model.name cannot change while a job runs; the settings that can: optimizer.lr, rollout.temperature, algorithm.kl.coef, algorithm.eval_every" in " ".join(bad.output.split())
    assert not (tmp_path / "control").exists()


def test_job_set_refuses_a_bad_value_and_a_directory_that_is_not_a_run(tmp_path):
    bad = CliRunner().invoke(app, ["job", "set", str(run_dir(tmp_path)), "optimizer.lr=-1"])
    assert bad.exit_code == 2 and "optimizer.lr" in bad.output
    missing = CliRunner().invoke(app, ["job", "set", str(tmp_path / "nope"), "optimizer.lr=0.1"])
    assert missing.exit_code == 2 and "is not a run directory" in missing.output
