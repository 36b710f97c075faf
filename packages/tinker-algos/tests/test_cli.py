"""``opentinker train``, the command tinker-algos adds to the CLI through ``opentinker_register_commands``."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Annotated

import typer
from typer.testing import CliRunner

from tinker_algos import plugin
from tinker_algos.records.run_dir import RUN_MARKER, make_run_dir

JOB = """
name: cli-train
seed: 0
model: {name: tiny}
env: {id: echo/echo-v0}
stages:
  - {algorithm: {name: sft, steps: 2, batch_size: 4, eval_size: 2}}
rollout: {prompts_per_step: 2, group_size: 2, max_new_tokens: 3}
checkpoint: {every: 2}
logging: {tensorboard: false}
"""


def cli_with_train() -> typer.Typer:
    cli = typer.Typer(add_completion=False)
    cli.command()(lambda: None)  # a second command keeps `train` a subcommand, as in `opentinker`
    plugin.opentinker_register_commands(cli=cli)
    return cli


def test_hook_adds_train_and_importing_the_command_loads_no_torch():
    assert "train" in typer.main.get_command(cli_with_train()).commands
    code = "import sys, tinker_algos.commands.cli; assert 'torch' not in sys.modules, 'torch imported'"
    subprocess.run([sys.executable, "-c", code], check=True)


def test_train_runs_the_job_in_this_process_and_fresh_starts_over(tmp_path, monkeypatch):
    monkeypatch.setenv("OPENTINKER_LOAD_PLUGINS", "tinker-algos,tinker-env-echo")
    config = tmp_path / "job.yaml"
    config.write_text(JOB)
    run_dir = make_run_dir(tmp_path / "run")  # as an earlier run left it: with the marker
    (run_dir / "stale.txt").write_text("from an earlier run")
    result = CliRunner().invoke(cli_with_train(), ["train", str(config), "--run-dir", str(run_dir), "--fresh"])
    assert result.exit_code == 0, result.output
    assert f"completed: 2 steps; run dir: {run_dir}" in result.stdout
    assert "  eval/accuracy = " in result.stdout
    assert f"learning curve: {run_dir / 'curve.png'}" in result.stdout and (run_dir / "curve.png").is_file()
    assert not (run_dir / "stale.txt").exists()
    assert (run_dir / RUN_MARKER).is_file()  # the new run dir is marked as the project's again


def _refused(args: list[str], tmp_path: Path, job: str = JOB) -> str:
    config = tmp_path / "job.yaml"
    config.write_text(job)
    result = CliRunner().invoke(cli_with_train(), ["train", str(config), *args])
    assert result.exit_code == 2, result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    return lines[0]


def test_fresh_refuses_a_directory_opentinker_did_not_create(tmp_path):
    precious = tmp_path / "precious"
    precious.mkdir()
    (precious / "thesis.tex").write_text("years of work")
    line = _refused(["--run-dir", str(precious), "--fresh"], tmp_path)
    assert str(precious) in line and f"has no {RUN_MARKER} marker" in line
    assert (precious / "thesis.tex").read_text() == "years of work"


def test_fresh_refuses_a_symlink_and_the_current_directory(tmp_path, monkeypatch):
    target = make_run_dir(tmp_path / "elsewhere")
    link = tmp_path / "link"
    link.symlink_to(target)
    assert "is a symbolic link" in _refused(["--run-dir", str(link), "--fresh"], tmp_path)
    monkeypatch.chdir(target)
    assert "the current directory" in _refused(["--run-dir", ".", "--fresh"], tmp_path)
    assert (target / RUN_MARKER).is_file()


def test_the_default_run_dir_stays_inside_runs(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    outside = make_run_dir(tmp_path / "outside")
    (tmp_path / "runs").mkdir()
    (tmp_path / "runs" / "cli-train").symlink_to(outside)  # runs/<name> leads out of runs/
    for args in ([], ["--fresh"]):
        line = _refused(args, tmp_path)
        assert "runs/cli-train" in line and "outside runs/" in line
    assert (outside / RUN_MARKER).is_file()


def test_a_name_that_is_not_a_safe_slug_exits_2_before_anything_is_removed(tmp_path, monkeypatch):
    (tmp_path / "work").mkdir()
    monkeypatch.chdir(tmp_path / "work")  # runs/.. would be this directory
    config = tmp_path / "job.yaml"
    config.write_text(JOB.replace("name: cli-train", "name: .."))
    result = CliRunner().invoke(cli_with_train(), ["train", str(config), "--fresh"])
    assert result.exit_code == 2
    assert "name: must be a safe directory name" in result.stderr
    assert config.is_file() and (tmp_path / "work").is_dir()


def test_a_device_this_machine_lacks_exits_2_naming_model_device(tmp_path, monkeypatch):
    monkeypatch.setenv("OPENTINKER_LOAD_PLUGINS", "tinker-algos,tinker-env-echo")
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)  # as on this CPU machine
    line = _refused(["--run-dir", str(tmp_path / "run")], tmp_path, JOB.replace("{name: tiny}", "{name: tiny, device: 'cuda:99'}"))
    assert line == "error: model.device: 'cuda:99' was asked for but CUDA is not available here; available: cpu (or use 'auto')"


def test_a_bad_config_exits_2_naming_every_problem(tmp_path):
    config = tmp_path / "job.yaml"
    config.write_text("name: x\nmodel: {name: tiny}\nenv: {id: echo/echo-v0}\nbogus: 1\nstages: [{algorithm: {name: sft, steps: -1}}]\n")
    result = CliRunner().invoke(cli_with_train(), ["train", str(config)])
    assert result.exit_code == 2
    assert f"error: {config}: 2 problem(s)" in result.stderr
    assert "  - bogus: unknown key" in result.stderr and "steps" in result.stderr


def test_train_with_a_scheduler_is_the_clis_submit_watch(tmp_path):
    calls = []
    cli = typer.Typer(add_completion=False)

    @cli.command()
    def submit(
        file: Path,
        scheduler: Annotated[str | None, typer.Option("--scheduler")] = None,
        api_key: Annotated[str | None, typer.Option("--api-key")] = None,
        tls_ca: Annotated[Path | None, typer.Option("--tls-ca")] = None,
        priority: Annotated[int | None, typer.Option()] = None,
        watch_: Annotated[bool, typer.Option("--watch")] = False,
    ) -> None:
        calls.append(dict(file=file, scheduler=scheduler, api_key=api_key, tls_ca=tls_ca, priority=priority, watch_=watch_))
        raise typer.Exit(1)  # the job failed: train exits like submit --watch

    plugin.opentinker_register_commands(cli=cli)
    result = CliRunner().invoke(cli, ["train", "job.yaml", "-s", "host:1", "--api-key", "k"])
    assert result.exit_code == 1, result.output
    assert calls == [dict(file=Path("job.yaml"), scheduler="host:1", api_key="k", tls_ca=None, priority=None, watch_=True)]


def test_train_applies_overrides_and_records_them_in_the_run_dir(tmp_path, monkeypatch):
    import json

    monkeypatch.setenv("OPENTINKER_LOAD_PLUGINS", "tinker-algos,tinker-env-echo")
    config = tmp_path / "job.yaml"
    config.write_text(JOB)
    run_dir = tmp_path / "run"
    overrides = ["stages.0.algorithm.steps=1", "seed=3", "optimizer.lr=1e-4"]
    result = CliRunner().invoke(cli_with_train(), ["train", str(config), *overrides, "--run-dir", str(run_dir)])
    assert result.exit_code == 0, result.output
    assert "completed: 1 steps" in result.stdout
    saved = json.loads((run_dir / "config.json").read_text())
    assert saved["stages"][0]["algorithm"]["steps"] == 1 and saved["seed"] == 3 and saved["optimizer"]["lr"] == 1e-4
    assert json.loads((run_dir / "overrides.json").read_text()) == {"config_file": str(config), "overrides": overrides}
    assert (run_dir / RUN_MARKER).is_file()
    again = CliRunner().invoke(cli_with_train(), ["train", str(config), "--run-dir", str(run_dir), "--fresh"])
    assert again.exit_code == 0, again.output
    assert not (run_dir / "overrides.json").exists()  # this run has none


def test_a_bad_override_exits_2_in_one_line_before_anything_runs(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    line = _refused(["stages.0.algorithm.stepz=1"], tmp_path)
    assert line == ("error: override 'stages.0.algorithm.stepz=1': unknown key stages.0.algorithm.stepz; "
                    "did you mean 'stages.0.algorithm.steps'?")
    assert "out of range" in _refused(["stages.3.algorithm.steps=1"], tmp_path)
    assert "expected key.path=value" in _refused(["seed"], tmp_path)
    assert not (tmp_path / "runs").exists()


def test_train_with_a_scheduler_passes_the_overrides_to_submit(tmp_path):
    calls = []
    cli = typer.Typer(add_completion=False)

    @cli.command()
    def submit(
        file: Path,
        overrides: Annotated[list[str] | None, typer.Argument()] = None,
        scheduler: Annotated[str | None, typer.Option("--scheduler")] = None,
        api_key: Annotated[str | None, typer.Option("--api-key")] = None,
        tls_ca: Annotated[Path | None, typer.Option("--tls-ca")] = None,
        watch_: Annotated[bool, typer.Option("--watch")] = False,
    ) -> None:
        calls.append(dict(file=file, overrides=overrides, scheduler=scheduler, watch_=watch_))

    plugin.opentinker_register_commands(cli=cli)
    result = CliRunner().invoke(cli, ["train", "job.yaml", "seed=2", "optimizer.lr=0.1", "-s", "host:1"])
    assert result.exit_code == 0, result.output
    assert calls == [dict(file=Path("job.yaml"), overrides=["seed=2", "optimizer.lr=0.1"], scheduler="host:1", watch_=True)]
