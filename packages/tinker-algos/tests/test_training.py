"""The in-process entry point: a whole job, determinism, resume, outputs, bad input."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tinker_algos import train
from tinker_algos.records.metrics import read_metrics
from tinker_core.errors import ConfigError


def job(**over):
    cfg = {
        "name": "echo-job",
        "seed": 7,
        "model": {"name": "tiny"},
        "env": {"id": "echo/echo-v0", "kwargs": {"words": ["ab", "cd", "ef"]}},
        "stages": [
            {"name": "warm", "algorithm": {"name": "sft", "steps": 3, "batch_size": 8, "eval_size": 4}},
            {"name": "rl", "algorithm": {"name": "grpo", "steps": 3, "eval_size": 4, "eval_every": 2}},
        ],
        "rollout": {"prompts_per_step": 3, "group_size": 4, "max_new_tokens": 4, "stop": ["\n"]},
        "optimizer": {"lr": 0.003},
        "checkpoint": {"every": 2, "keep": 5},
        "logging": {"tensorboard": True, "plot": True},
    }
    cfg.update(over)
    return cfg


pytestmark = pytest.mark.usefixtures("algos_and_echo_plugins")


def test_a_two_stage_job_writes_metrics_checkpoints_and_a_curve(tmp_path):
    result = train(job(), run_dir=tmp_path)
    assert result.status == "completed" and result.step == 6
    rows = read_metrics(tmp_path / "metrics.jsonl")
    assert [r["step"] for r in rows] == [1, 2, 3, 4, 5, 6]
    assert [r["stage"] for r in rows] == ["warm"] * 3 + ["rl"] * 3
    assert "losses/sft" in rows[0] and "env/reward_mean" in rows[3] and "kl/sample_train" in rows[3]
    assert "eval/accuracy" in rows[2] and "eval/accuracy" in rows[4] and "eval/accuracy" not in rows[3]
    assert abs(rows[3]["kl/sample_train"]) < 1e-4  # sampler and trainer agree on CPU fp32
    assert (tmp_path / "curve.png").stat().st_size > 1000 and result.plot.endswith("curve.png")
    assert list((tmp_path / "tensorboard").iterdir())
    ckpts = sorted(p.name for p in (tmp_path / "checkpoints").iterdir())
    assert ckpts == ["step-000002", "step-000003", "step-000005", "step-000006"]
    assert json.loads((tmp_path / "result.json").read_text())["status"] == "completed"
    manifest = json.loads((tmp_path / "checkpoints" / "step-000006" / "trainer" / "manifest.json").read_text())
    assert manifest["data_cursor"] == {"stage_index": 2, "stage_step": 0, "global_step": 6}


def test_the_same_seed_gives_bit_identical_metrics(tmp_path, deterministic_metrics):
    a = train(job(logging={"tensorboard": False, "plot": False}), run_dir=tmp_path / "a")
    b = train(job(logging={"tensorboard": False, "plot": False}), run_dir=tmp_path / "b")
    assert a.step == b.step
    ra, rb = deterministic_metrics(tmp_path / "a"), deterministic_metrics(tmp_path / "b")
    assert ra == rb
    c = train(job(seed=8, logging={"tensorboard": False, "plot": False}), run_dir=tmp_path / "c")
    assert deterministic_metrics(tmp_path / "c") != ra and c.step == a.step


@pytest.mark.parametrize(
    ("stop_at", "lora"),
    [
        (2, None),  # inside the SFT stage
        (4, None),  # inside the GRPO stage
        # at the stage boundary, with LoRA dropout drawing from the global torch RNG: the random
        # stream continues across the boundary as in the run that never stopped
        (3, {"rank": 4, "alpha": 8, "dropout": 0.1}),
    ],
)
def test_resume_continues_exactly_as_if_never_stopped(tmp_path, stop_at, lora, stop_after, deterministic_metrics):
    quiet = {"logging": {"tensorboard": False, "plot": False}, "lora": lora}
    full = train(job(**quiet), run_dir=tmp_path / "full")
    cb = stop_after(stop_at)
    part = train(job(**quiet), run_dir=tmp_path / "part", callbacks=cb)
    assert part.status == "interrupted" and part.step == stop_at
    assert cb.checkpoints and cb.checkpoints[-1][0] == stop_at
    again = stop_after(10**9)
    rest = train(job(**quiet), run_dir=tmp_path / "part", callbacks=again)
    assert rest.status == "completed" and rest.step == full.step
    assert any(f"resuming from {tmp_path / 'part'}" in line and f"(step {stop_at})" in line for line in again.logs)
    assert deterministic_metrics(tmp_path / "part") == deterministic_metrics(tmp_path / "full")


def test_lora_job_saves_a_peft_adapter(tmp_path):
    from peft import PeftConfig

    result = train(job(lora={"rank": 4, "alpha": 8}, logging={"tensorboard": False, "plot": False}), run_dir=tmp_path)
    assert result.status == "completed"
    adapter = tmp_path / "checkpoints" / "step-000006" / "trainer" / "adapter"
    assert PeftConfig.from_pretrained(str(adapter)).r == 4


def test_a_lora_kl_penalty_measures_from_the_adapter_the_stage_starts_from(tmp_path):
    """GRPO's KL reference under LoRA is the SFT stage's adapter (not the base model): at the
    first GRPO step the policy is its reference, so the KL is 0 though SFT moved the adapter."""
    stages = job()["stages"]
    stages[0]["optimizer"] = {"lr": 0.03}
    stages[1]["algorithm"]["kl"] = {"coef": 0.5, "mode": "reward"}
    result = train(job(stages=stages, lora={"rank": 4, "alpha": 8}, logging={"tensorboard": False, "plot": False}), run_dir=tmp_path)
    assert result.status == "completed"
    rows = read_metrics(tmp_path / "metrics.jsonl")
    # the base model as the reference (the code before this test) gave 0.065 here
    assert rows[3]["stage"] == "rl" and rows[3]["kl/policy_ref"] == pytest.approx(0.0, abs=1e-7)


def test_bad_input_is_a_config_error_before_anything_runs(tmp_path):
    with pytest.raises(ConfigError, match="did you mean 'grpo'"):
        train(job(stages=[{"algorithm": {"name": "grpo", "estimator": "grpoo"}}]), run_dir=tmp_path)
    with pytest.raises(ConfigError, match="algorithm.steps"):
        train(job(stages=[{"algorithm": {"name": "sft", "steps": 0}}]), run_dir=tmp_path)
    with pytest.raises(ConfigError, match="needs a critic"):
        train(job(stages=[{"algorithm": {"name": "grpo", "estimator": "gae"}}]), run_dir=tmp_path / "x")


def test_grpo_checks_estimator_config_before_the_first_rollout(tmp_path, monkeypatch):
    """As ppo does: a key the estimator does not take is a config error naming the field, raised
    before any episode is played (the help's old example, {normalize: true}, among them)."""
    from tinker_algos.algorithms.base import StageContext
    from tinker_core.config import GRPOParams

    rollouts = []
    monkeypatch.setattr(StageContext, "group_rollout", lambda self, step: rollouts.append(step))
    for estimator, bad in (("grpo", {"normalize": True}), ("rloo", {"eps": 0.1}), ("reinforce_pp", {"gama": 0.9})):
        stages = [{"algorithm": {"name": "grpo", "estimator": estimator, "steps": 1, "params": {"estimator_config": bad}}}]
        with pytest.raises(ConfigError, match=rf"stages\[0\]\.algorithm\.params\.estimator_config: .*{next(iter(bad))!r}"):
            train(job(stages=stages), run_dir=tmp_path / estimator)
    assert rollouts == []
    assert "normalize" not in GRPOParams.model_fields["estimator_config"].description


def test_grpo_checks_its_loss_before_the_first_rollout_as_ppo_and_dpo_do(tmp_path, monkeypatch):
    """The shared policy update checks the loss's kind and its loss_config keys before any episode."""
    from tinker_algos.algorithms.base import StageContext

    rollouts = []
    monkeypatch.setattr(StageContext, "group_rollout", lambda self, step: rollouts.append(step))
    for name, algo, match in (
        ("kind", {"loss": "dpo"}, r"stages\[0\]\.algorithm\.loss: grpo needs a policy loss \(.*importance_sampling.*\), got 'dpo' \(preference\)"),
        ("key", {"loss": "ppo", "loss_config": {"eps": 0.2}}, r"stages\[0\]\.algorithm\.loss_config: .*'eps'"),
        ("value", {"loss": "ppo", "loss_config": {"dual_clip": 0.5}}, r"stages\[0\]\.algorithm\.loss_config: .*dual_clip must be > 1"),
    ):
        with pytest.raises(ConfigError, match=match):
            train(job(stages=[{"algorithm": {"name": "grpo", "steps": 1, **algo}}]), run_dir=tmp_path / name)
    assert rollouts == []


def test_a_tokenizer_that_does_not_fit_the_model_is_a_clear_error(tmp_path):
    from transformers import PreTrainedTokenizerFast

    from tinker_algos.model.models import ModelLoadError
    from tinker_algos.model.tokenizer import build_char_tokenizer

    big = build_char_tokenizer()
    big.add_tokens([f"<extra{i}>" for i in range(500)])
    assert isinstance(big, PreTrainedTokenizerFast)
    big.save_pretrained(tmp_path / "tok")
    import shutil

    from tinker_algos.model.models import resolve_model

    shutil.copy(Path(resolve_model("tiny")) / "config.json", tmp_path / "tok")  # says which model family
    with pytest.raises(ModelLoadError, match="tokenizer has .* tokens but model .* embeds only"):
        train(job(model={"name": "tiny", "tokenizer": str(tmp_path / "tok")}), run_dir=tmp_path / "run")


def stop_early_job(threshold: float = 0.0, **over):
    """The echo job with a warm start of at most 10 steps that evaluates every 2 and stops at
    ``threshold`` held-out accuracy (0.0: at its first evaluation)."""
    cfg = job(logging={"tensorboard": False, "plot": False}, **over)
    cfg["stages"][0]["algorithm"].update(steps=10, eval_every=2, stop_at={"eval/accuracy": threshold})
    return cfg


def test_a_stage_ends_at_the_first_evaluation_that_reaches_its_stop_at(tmp_path, stop_after):
    cb = stop_after(10**9)
    result = train(stop_early_job(), run_dir=tmp_path, callbacks=cb)
    assert result.status == "completed" and result.step == 2 + 3
    rows = read_metrics(tmp_path / "metrics.jsonl")
    assert [r["stage"] for r in rows] == ["warm"] * 2 + ["rl"] * 3
    assert "eval/accuracy" in rows[1]
    assert any("stage 0 'warm' reached its stop_at (eval/accuracy=" in line and "after 2 of 10 steps" in line for line in cb.logs)
    # the checkpoint after the stopping step is a stage boundary: a resume starts the next stage
    manifest = json.loads((tmp_path / "checkpoints" / "step-000002" / "trainer" / "manifest.json").read_text())
    assert manifest["data_cursor"] == {"stage_index": 1, "stage_step": 0, "global_step": 2}


def test_a_stop_at_never_reached_runs_every_step(tmp_path):
    result = train(stop_early_job(threshold=1.5), run_dir=tmp_path)
    assert result.status == "completed" and result.step == 10 + 3


@pytest.mark.parametrize("stop_at", [1, 2, 3])  # before the stop, at it, in the next stage
def test_resume_around_an_early_stage_end_is_exact(tmp_path, stop_at, stop_after, deterministic_metrics):
    full = train(stop_early_job(), run_dir=tmp_path / "full")
    part = train(stop_early_job(), run_dir=tmp_path / "part", callbacks=stop_after(stop_at))
    assert part.status == "interrupted" and part.step == stop_at
    rest = train(stop_early_job(), run_dir=tmp_path / "part")
    assert rest.status == "completed" and rest.step == full.step == 5
    assert deterministic_metrics(tmp_path / "part") == deterministic_metrics(tmp_path / "full")


@pytest.mark.parametrize(
    ("stop_at", "eval_every"),
    [({"eval/accuracy": 0.3}, 0), ({"losses/sft": 0.1}, 5), ({}, 5), ({"eval/accuracy": float("nan")}, 5)],
    ids=["no-evaluations", "not-held-out", "empty", "nan"],
)
def test_a_bad_stop_at_is_a_config_error(tmp_path, stop_at, eval_every):
    cfg = job()
    cfg["stages"][0]["algorithm"].update(stop_at=stop_at, eval_every=eval_every)
    with pytest.raises(ConfigError, match=r"stages\[0\]\.algorithm.*stop_at"):
        train(cfg, run_dir=tmp_path)
    assert not (tmp_path / "metrics.jsonl").exists()


def test_the_step_that_ends_a_stage_early_is_logged_whatever_logging_every(tmp_path):
    cfg = stop_early_job()
    cfg["logging"]["every"] = 5  # step 2 is no multiple of 5
    train(cfg, run_dir=tmp_path)
    rows = read_metrics(tmp_path / "metrics.jsonl")
    assert [r["step"] for r in rows if r["stage"] == "warm"] == [2] and "eval/accuracy" in rows[0]


def test_eval_temperature_adds_a_sampled_evaluation_of_the_same_problems(tmp_path):
    """``algorithm.eval_temperature``: each evaluation plays its problems again, sampled. Near 0
    sampling is greedy decoding (the same problems and seeds: the same accuracy); at a high
    temperature the trained echo policy scores lower than it does greedily."""
    cfg = job(logging={"tensorboard": False, "plot": False}, optimizer={"lr": 0.01},
              rollout={"max_new_tokens": 2, "stop": []})  # the words are 2 characters: 2 tokens
    cfg["stages"] = [{"name": "warm", "algorithm": {"name": "sft", "steps": 30, "batch_size": 8, "eval_size": 16, "eval_every": 30,
                                                    "eval_temperature": 0.001}},
                     # one step at a learning rate that leaves the warm start as it is (at 0.01 Adam's first
                     # step moves every weight by about 0.01, which undid the echo on an AMD EPYC)
                     {"name": "hot", "algorithm": {"name": "sft", "steps": 1, "batch_size": 8, "eval_size": 16, "eval_temperature": 8.0},
                      "optimizer": {"lr": 1e-7}}]
    assert train(cfg, run_dir=tmp_path).status == "completed"
    rows = [r for r in read_metrics(tmp_path / "metrics.jsonl") if "eval/accuracy" in r]
    assert len(rows) == 2
    cold, hot = rows
    assert cold["eval/accuracy"] > 0.5, "the warm start learned to echo"
    assert cold["eval/sampled_accuracy"] == cold["eval/accuracy"] and cold["eval/sampled_reward_mean"] == cold["eval/reward_mean"]
    assert hot["eval/accuracy"] == cold["eval/accuracy"]  # the same greedy policy
    assert hot["eval/sampled_accuracy"] < hot["eval/accuracy"]


def test_eval_temperature_must_be_positive():
    with pytest.raises(ConfigError, match="eval_temperature"):
        cfg = job()
        cfg["stages"][0]["algorithm"]["eval_temperature"] = 0
        train(cfg, run_dir="unused")
