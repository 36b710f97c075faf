"""Live settings: a change requested while a run goes on takes effect at the next step boundary."""

from __future__ import annotations

import json

import pytest

from tinker_algos import train
from tinker_core.config import OverrideError, parse_config
from tinker_core.config.live import check_live, write_request

pytestmark = pytest.mark.usefixtures("algos_and_echo_plugins")


def job(**over):
    cfg = {
        "name": "live", "seed": 5, "model": {"name": "tiny"},
        "env": {"id": "echo/echo-v0", "kwargs": {"words": ["ab", "cd", "ef"]}},
        "stages": [
            {"name": "warm", "algorithm": {"name": "sft", "steps": 2, "batch_size": 8, "eval_size": 4}},
            {"name": "rl", "algorithm": {"name": "grpo", "steps": 3, "eval_size": 4}},
        ],
        "rollout": {"prompts_per_step": 2, "group_size": 4, "max_new_tokens": 4, "stop": ["\n"]},
        "optimizer": {"lr": 0.003},
        "checkpoint": {"every": 1, "keep_last": 10},
        "logging": {"tensorboard": False, "plot": False},
    }
    cfg.update(over)
    return cfg


class SetAfter:
    """Callbacks that request ``changes`` once step ``at`` is reported (and stop after ``stop``)."""

    def __init__(self, run_dir, at, changes, stop=None):
        self.run_dir, self.at, self.changes, self.stop = run_dir, at, changes, stop
        self.seen, self.logs = 0, []

    def on_metrics(self, step, metrics):
        if step == self.at and self.seen < step:
            write_request(self.run_dir, self.changes)
        self.seen = step

    def on_log(self, line):
        self.logs.append(line)

    def should_stop(self):
        return self.stop is not None and self.seen >= self.stop


@pytest.fixture(scope="module")
def baseline(tmp_path_factory):
    run_dir = tmp_path_factory.mktemp("live") / "baseline"
    train(job(), run_dir=run_dir)
    return run_dir


def test_a_live_lr_change_shows_at_the_step_it_took_effect_and_changes_nothing_before(baseline, tmp_path, deterministic_metrics):
    run_dir = tmp_path / "run"
    cb = SetAfter(run_dir, 3, ["optimizer.lr=0.03"])
    train(job(), run_dir=run_dir, callbacks=cb)
    mine, base = deterministic_metrics(run_dir), deterministic_metrics(baseline)
    assert mine[:3] == base[:3]  # nothing before the boundary
    assert mine[3]["live/optimizer.lr"] == 0.03 and "live/optimizer.lr" not in mine[4]
    assert mine[3]["optim/lr"] == pytest.approx(0.03) and base[3]["optim/lr"] == pytest.approx(0.003)
    assert mine[3:] != base[3:]
    assert [json.loads(line) for line in (run_dir / "live.jsonl").read_text().splitlines()] == [{"step": 4, "set": "optimizer.lr=0.03"}]
    assert any("step 4: live settings optimizer.lr=0.03" in line for line in cb.logs)
    # config.json keeps the config as started; a re-run of the finished run is a no-op
    assert json.loads((run_dir / "config.json").read_text())["optimizer"]["lr"] == 0.003
    assert train(job(), run_dir=run_dir).step == 5


def test_a_resumed_run_replays_its_live_changes_at_their_steps(tmp_path, deterministic_metrics):
    whole = tmp_path / "whole"
    train(job(), run_dir=whole, callbacks=SetAfter(whole, 2, ["optimizer.lr=0.03", "rollout.temperature=0.7"]))
    part = tmp_path / "part"
    first = train(job(), run_dir=part, callbacks=SetAfter(part, 2, ["optimizer.lr=0.03", "rollout.temperature=0.7"], stop=4))
    assert first.status == "interrupted"
    train(job(), run_dir=part)
    assert deterministic_metrics(part) == deterministic_metrics(whole)
    assert deterministic_metrics(whole)[2]["live/rollout.temperature"] == 0.7


def test_a_change_no_running_stage_uses_is_refused_and_kept_with_its_reason(baseline, tmp_path, deterministic_metrics):
    run_dir = tmp_path / "run"
    two_optimizers = job()
    two_optimizers["stages"][0]["optimizer"] = {"lr": 0.003}
    cb = SetAfter(run_dir, 3, ["stages.0.optimizer.lr=0.5"])
    train(two_optimizers, run_dir=run_dir, callbacks=cb)
    assert deterministic_metrics(run_dir) == deterministic_metrics(baseline)
    (rejected,) = (run_dir / "control" / "rejected").iterdir()
    assert "no stage from the running one (1) on uses it" in json.loads(rejected.read_text())["error"]
    assert any("live settings: refused" in line for line in cb.logs)
    assert not (run_dir / "live.jsonl").exists()


def test_only_declared_settings_may_change_and_they_are_validated():
    config = parse_config(job(), check_plugins=False)
    with pytest.raises(OverrideError, match=r"algorithm.steps cannot change while a job runs; the settings that can: optimizer.lr, rollout.temperature"):
        check_live(config, ["stages.1.algorithm.steps=9"])
    with pytest.raises(OverrideError, match=r"stages.1.optimizer.lr: this job has no stages.1.optimizer section"):
        check_live(config, ["stages.1.optimizer.lr=0.1"])
    with pytest.raises(Exception, match=r"temperature"):
        check_live(config, ["rollout.temperature=-1"])
    new, _ = check_live(config, ["stages.1.algorithm.eval_every=1"])
    assert new.stages[1].algorithm.eval_every == 1



def test_a_fork_keeps_the_live_changes_made_before_its_step(baseline, tmp_path, deterministic_metrics):
    from tinker_algos.run.forking import fork

    parent = tmp_path / "parent"
    train(job(), run_dir=parent, callbacks=SetAfter(parent, 2, ["optimizer.lr=0.03"]))
    fork(f"{parent}@4", run_dir=tmp_path / "after")
    assert deterministic_metrics(tmp_path / "after") == deterministic_metrics(parent)
    fork(f"{parent}@2", run_dir=tmp_path / "before")  # the change took effect at step 3: not in this fork
    assert not (tmp_path / "before" / "live.jsonl").exists()
    assert deterministic_metrics(tmp_path / "before") == deterministic_metrics(baseline)


def test_the_rollout_settings_a_stage_reads_once_are_not_live():
    """A stage binds its rollout section's other settings when it is built and reads only the live
    ones (``rollout.temperature``) at each step: a live setting must not be among those bound."""
    from dataclasses import fields

    from tinker_algos.rollout.section import BOUND_ONCE, LIVE_SAMPLING
    from tinker_algos.sampling.sampler import SamplingParams
    from tinker_core.config.live import LIVE_SETTINGS

    live_rollout = {k.split(".", 1)[1] for k in LIVE_SETTINGS if k.startswith("rollout.")}
    assert set(LIVE_SAMPLING) == live_rollout == {"temperature"}
    assert not live_rollout & set(BOUND_ONCE)
    assert live_rollout <= {f.name for f in fields(SamplingParams)}  # each one is a sampling parameter of that name
