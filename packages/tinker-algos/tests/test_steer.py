"""Runs you can steer: re-running a finished run, extending it."""

from __future__ import annotations

import json

import pytest

from tinker_algos import train
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
