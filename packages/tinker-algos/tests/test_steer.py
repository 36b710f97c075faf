"""Runs you can steer: re-running a finished run, extending it, forking it, the keep policy."""

from __future__ import annotations

import json

import pytest

from tinker_algos import train
from tinker_algos.run.forking import ForkError, fork, parse_run_spec
from tinker_algos.run.lineage import render_tree, run_tree
from tinker_core.errors import ConfigError

pytestmark = pytest.mark.usefixtures("algos_and_echo_plugins")


def job(grpo_steps: int = 2, **over):
    cfg = {
        "name": "steer", "seed": 3, "model": {"name": "tiny"},
        "env": {"id": "echo/echo-v0", "kwargs": {"words": ["ab", "cd", "ef"]}},
        "stages": [
            {"name": "warm", "algorithm": {"name": "sft", "steps": 2, "batch_size": 8, "eval_size": 4}},
            {"name": "rl", "algorithm": {"name": "grpo", "steps": grpo_steps, "eval_size": 4, "eval_every": 2}},
        ],
        "rollout": {"prompts_per_step": 2, "group_size": 4, "max_new_tokens": 4, "stop": ["\n"]},
        "optimizer": {"lr": 0.003},
        "checkpoint": {"every": 1, "keep_last": 10},
        "logging": {"tensorboard": False, "plot": False},
    }
    cfg.update(over)
    return cfg


@pytest.fixture(scope="module")
def finished(tmp_path_factory):
    """A finished 4-step run (2 SFT, 2 GRPO), checkpointed at every step."""
    run_dir = tmp_path_factory.mktemp("finished") / "run"
    train(job(), run_dir=run_dir)
    return run_dir


def copy_run(src, dst):
    import shutil

    shutil.copytree(src, dst)
    return dst


def test_rerunning_a_finished_run_leaves_its_result_and_files_as_they_were(finished, tmp_path):
    run_dir = copy_run(finished, tmp_path / "run")
    before = {f: (run_dir / f).read_bytes() for f in ("result.json", "config.json", "metrics.jsonl")}
    stored = json.loads(before["result.json"])
    again = train(job(), run_dir=run_dir)
    assert {f: (run_dir / f).read_bytes() for f in before} == before
    assert again.status == "completed" and again.step == 4
    assert again.metrics == stored["metrics"] and again.eval == stored["eval"] and again.eval
    # a change that trains nothing differently (logging, checkpoint cadence) is still a no-op
    quiet = train(job(logging={"tensorboard": False, "plot": False, "every": 2}), run_dir=run_dir)
    assert quiet.to_dict() == again.to_dict() and (run_dir / "result.json").read_bytes() == before["result.json"]


def test_a_finished_run_whose_result_json_was_lost_gets_it_back_from_its_metrics(finished, tmp_path):
    run_dir = copy_run(finished, tmp_path / "run")
    stored = json.loads((run_dir / "result.json").read_text())
    (run_dir / "result.json").unlink()
    again = train(job(), run_dir=run_dir)
    assert again.eval == stored["eval"] and again.step == 4
    assert {k: v for k, v in again.metrics.items() if not k.startswith("time/")} == {
        k: v for k, v in stored["metrics"].items() if not k.startswith("time/")}
    assert json.loads((run_dir / "result.json").read_text())["eval"] == stored["eval"]


def test_raising_the_last_stages_steps_extends_a_finished_run_as_if_it_had_run_them(finished, tmp_path, deterministic_metrics):
    run_dir = copy_run(finished, tmp_path / "run")
    seen = []

    class Logs:
        def on_log(self, line):
            seen.append(line)

    longer = train(job(grpo_steps=4), run_dir=run_dir, callbacks=Logs())
    assert longer.status == "completed" and longer.step == 6
    assert any("extending stage 1 'rl' from 2 to 4 steps" in line for line in seen)
    assert json.loads((run_dir / "config.json").read_text())["stages"][1]["algorithm"]["steps"] == 4
    straight = train(job(grpo_steps=4), run_dir=tmp_path / "straight")
    assert deterministic_metrics(run_dir) == deterministic_metrics(tmp_path / "straight")
    assert longer.eval == straight.eval


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"model": {"name": "tiny", "revision": "other"}}, "model.revision"),
        ({"optimizer": {"lr": 0.001}}, "optimizer.lr"),
        ({"seed": 4}, "seed"),
    ],
)
def test_a_change_that_cannot_extend_a_finished_run_is_refused_naming_the_field(finished, tmp_path, change, field):
    run_dir = copy_run(finished, tmp_path / "run")
    before = (run_dir / "config.json").read_bytes()
    with pytest.raises(ConfigError, match=rf"{field}: .*this run is finished.*fork it"):
        train(job(**change), run_dir=run_dir)
    assert (run_dir / "config.json").read_bytes() == before


def test_fewer_steps_or_another_stage_layout_on_a_finished_run_is_refused(finished, tmp_path):
    run_dir = copy_run(finished, tmp_path / "run")
    with pytest.raises(ConfigError, match=r"stages\.1\.algorithm\.steps: 1 is not more than the 2 steps"):
        train(job(grpo_steps=1), run_dir=run_dir)
    first_longer = job()
    first_longer["stages"][0]["algorithm"]["steps"] = 3
    with pytest.raises(ConfigError, match=r"stages\.0\.algorithm\.steps: 2 -> 3"):
        train(first_longer, run_dir=run_dir)
    one_stage = job()
    one_stage["stages"] = one_stage["stages"][:1]
    with pytest.raises(ConfigError, match=r"stages: "):
        train(one_stage, run_dir=run_dir)


@pytest.mark.parametrize("at", [1, 3], ids=["in-sft", "in-grpo"])
def test_a_fork_without_overrides_reproduces_its_parents_later_metrics(finished, tmp_path, at, deterministic_metrics):
    result = fork(f"{finished}@{at}", run_dir=tmp_path / "fork")
    assert result.status == "completed" and result.step == 4
    assert deterministic_metrics(tmp_path / "fork") == deterministic_metrics(finished)
    lineage = json.loads((tmp_path / "fork" / "lineage.json").read_text())
    assert lineage["parent"]["run_dir"] == str(finished.resolve()) and lineage["parent"]["step"] == at
    assert lineage["overrides"] == [] and lineage["config_hash"] == lineage["parent"]["config_hash"]
    assert (finished / "checkpoints" / f"step-{at:06d}").is_dir()  # the parent keeps its checkpoint


def test_a_fork_with_an_override_changes_only_the_steps_after_it(finished, tmp_path, deterministic_metrics):
    fork(finished, ["stages.1.optimizer.lr=0.01"], step=2, run_dir=tmp_path / "fork")
    mine, parents = deterministic_metrics(tmp_path / "fork"), deterministic_metrics(finished)
    assert mine[:2] == parents[:2] and mine[2:] != parents[2:] and len(mine) == 4
    lineage = json.loads((tmp_path / "fork" / "lineage.json").read_text())
    assert lineage["overrides"] == ["stages.1.optimizer.lr=0.01"] and lineage["config_hash"] != lineage["parent"]["config_hash"]
    tree = render_tree(run_tree(finished.parent)) + render_tree(run_tree(tmp_path))
    assert any("fork of" in line and "@2: stages.1.optimizer.lr=0.01" in line for line in tree)


def test_a_fork_of_a_finished_run_can_add_steps_to_its_last_stage(finished, tmp_path):
    result = fork(f"{finished}@4", ["stages.1.algorithm.steps=3"], run_dir=tmp_path / "fork")
    assert result.step == 5 and json.loads((finished / "result.json").read_text())["step"] == 4


def test_a_fork_of_a_finished_run_can_add_a_stage(finished, tmp_path, deterministic_metrics):
    more = job()
    more["stages"].append({"name": "more", "algorithm": {"name": "sft", "steps": 1, "batch_size": 8, "eval_size": 4}})
    from tinker_core.config import parse_config

    data = parse_config(more).model_dump(mode="json")
    result = fork(finished, [f"stages={json.dumps(data['stages'])}"], run_dir=tmp_path / "fork")
    assert result.step == 5
    rows = deterministic_metrics(tmp_path / "fork")
    assert rows[:4] == deterministic_metrics(finished) and rows[4]["stage"] == "more"


def test_what_a_fork_cannot_change_is_refused_before_anything_is_copied(finished, tmp_path):
    with pytest.raises(ConfigError, match=r"model.revision: .*a fork goes on from the parent's weights"):
        fork(f"{finished}@3", ["model.revision=other"], run_dir=tmp_path / "fork")
    with pytest.raises(ConfigError, match=r"stages.0.algorithm.name: 'sft' -> 'dpo'"):
        fork(f"{finished}@3", ["stages.0.algorithm.name=dpo"], run_dir=tmp_path / "fork")
    with pytest.raises(ConfigError, match=r"nothing to run"):
        fork(f"{finished}@4", run_dir=tmp_path / "fork")
    with pytest.raises(ForkError, match=r"no checkpoint at step 9 \(it has: 1, 2, 3, 4\)"):
        fork(f"{finished}@9", run_dir=tmp_path / "fork")
    assert not (tmp_path / "fork").exists()


def test_parse_run_spec():
    assert parse_run_spec("runs/a@20") == (parse_run_spec("runs/a")[0], 20)
    assert parse_run_spec("runs/a@b") == (parse_run_spec("runs/a@b")[0], None)


def steer_cli():
    import typer

    from tinker_algos import plugin

    cli = typer.Typer(add_completion=False)
    plugin.opentinker_register_commands(cli=cli)
    return cli


def test_opentinker_fork_and_runs_show_the_lineage_tree(finished, tmp_path, deterministic_metrics):
    import shutil
    import subprocess
    import sys

    from typer.testing import CliRunner

    runs = tmp_path / "runs"
    shutil.copytree(finished, runs / "steer")
    out = CliRunner().invoke(steer_cli(), ["fork", f"{runs / 'steer'}@3", "stages.1.optimizer.lr=0.01"])
    assert out.exit_code == 0, out.output
    assert (runs / "steer-fork-3" / "lineage.json").is_file() and "completed: 4 steps" in out.output
    again = CliRunner().invoke(steer_cli(), ["fork", f"{runs / 'steer'}@3", "model.revision=x"])
    assert again.exit_code == 2 and "model.revision" in again.output and not (runs / "steer-fork-3-2").exists()
    listed = CliRunner().invoke(steer_cli(), ["runs", str(runs)])
    assert listed.exit_code == 0
    lines = listed.output.splitlines()
    assert lines[0].startswith(f"{runs / 'steer'}  completed at step 4")
    assert lines[1].startswith(f"└─ {runs / 'steer-fork-3'}  completed at step 4  (fork of ") and "@3: stages.1.optimizer.lr=0.01" in lines[1]
    code = "import sys, tinker_algos.commands.cli_steer, tinker_algos.run.lineage; assert 'torch' not in sys.modules, 'torch imported'"
    subprocess.run([sys.executable, "-c", code], check=True)
