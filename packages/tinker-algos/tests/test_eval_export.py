"""``opentinker eval`` and ``opentinker export`` on short tiny-model runs (a LoRA one, a full
fine-tuning one): held-out metrics, pass@k, bad input, and exports that load in a fresh process
with ``AutoModelForCausalLM`` / ``PeftModel`` and give the trained policy's logits."""

from __future__ import annotations

import json
import logging
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import typer
from typer.testing import CliRunner

import tinker_core
from tinker_algos import plugin, train
from tinker_algos.commands.evaluation import (
    EvalError,
    Source,
    check_env,
    eval_settings,
    find_source,
    pass_at_k,
    pass_ks,
    split_size,
)
from tinker_algos.commands.export import ExportError, is_portable, portable_base_name
from tinker_algos.model.models import LoraSpec, PolicyModel

pytestmark = pytest.mark.usefixtures("algos_and_echo_plugins")

PROMPT = "ab\ncd"


def job(**over):
    cfg = {
        "name": "eval-export",
        "seed": 7,
        "model": {"name": "tiny", "device": "cpu"},
        "env": {"id": "echo/echo-v0", "kwargs": {"words": ["ab", "cd", "ef"]}},
        "lora": {"rank": 4, "alpha": 8},
        "stages": [{"algorithm": {"name": "sft", "steps": 3, "batch_size": 4, "eval_size": 3}}],
        "rollout": {"prompts_per_step": 2, "group_size": 2, "max_new_tokens": 3, "stop": ["\n"]},
        "optimizer": {"lr": 0.01},
        "checkpoint": {"every": 2, "keep": 5},
        "logging": {"tensorboard": False, "plot": False},
    }
    cfg.update(over)
    return cfg


@pytest.fixture(scope="module")
def lora_run(tmp_path_factory, algos_and_echo_plugins) -> Path:
    run_dir = tmp_path_factory.mktemp("runs") / "lora"
    assert train(job(), run_dir=run_dir).status == "completed"
    return run_dir


@pytest.fixture(scope="module")
def full_run(tmp_path_factory, algos_and_echo_plugins) -> Path:
    run_dir = tmp_path_factory.mktemp("runs") / "full"
    one_stage = [{"algorithm": {"name": "sft", "steps": 2, "batch_size": 4, "eval_size": 3}}]
    assert train(job(lora=None, stages=one_stage), run_dir=run_dir).status == "completed"
    return run_dir


def cli() -> typer.Typer:
    app = typer.Typer(add_completion=False)
    plugin.opentinker_register_commands(cli=app)
    return app


def invoke(*args: str):
    return CliRunner().invoke(cli(), [str(a) for a in args])


def refused(*args: str) -> str:
    result = invoke(*args)
    assert result.exit_code == 2, result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    return lines[0]


def trained_policy(run_dir: Path, step: int) -> PolicyModel:
    """The policy as a resume would restore it (checkpoint.load_state into the run's trainer)."""
    from tinker_algos.run.job import ADAPTER, trainer_config
    from tinker_algos.training.checkpoint import load_state
    from tinker_algos.training.trainer import Trainer
    from tinker_core.config import parse_config

    cfg = parse_config(json.loads((run_dir / "config.json").read_text()))
    policy = PolicyModel.load(cfg.model.name, device="cpu", precision="fp32")
    lora = LoraSpec(rank=cfg.lora.rank, alpha=cfg.lora.alpha, target_modules=list(cfg.lora.target_modules)) if cfg.lora else None
    trainer = Trainer(policy, trainer_config(cfg.resolved_stages()[-1]), adapter=ADAPTER if lora else None, lora=lora, adapter_seed=cfg.seed)
    load_state(run_dir / "checkpoints" / f"step-{step:06d}" / "trainer", trainer, with_optimizer=False)
    policy.model.eval()
    return policy


def logits_of(policy: PolicyModel) -> tuple[list[int], torch.Tensor]:
    ids = policy.tokenizer.encode(PROMPT)
    with torch.no_grad():
        return ids, policy.module(input_ids=torch.tensor([ids])).logits[0]


FRESH = """
import sys, torch
from transformers import AutoModelForCausalLM, AutoTokenizer
out, base_dir, prompt, *exports = sys.argv[1:]
results = {}
for spec in exports:
    kind, path = spec.split("=", 1)
    if kind == "adapter":
        from peft import PeftModel
        model = PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(base_dir), path)
    else:
        model = AutoModelForCausalLM.from_pretrained(path)
    ids = AutoTokenizer.from_pretrained(path)(prompt, return_tensors="pt").input_ids
    with torch.no_grad():
        results[path] = (ids[0].tolist(), model.eval()(input_ids=ids).logits[0])
assert "tinker_algos" not in sys.modules
torch.save(results, out)
"""


def load_in_fresh_process(tmp_path: Path, base_dir: str, **exports: Path) -> dict[str, tuple[list[int], torch.Tensor]]:
    """``{path: (token ids, logits)}`` of each export, loaded by transformers/peft in a new interpreter."""
    out = tmp_path / "fresh.pt"
    args = [f"{kind.split('_')[0]}={path}" for kind, path in exports.items()]
    subprocess.run([sys.executable, "-c", FRESH, str(out), base_dir, PROMPT, *args], check=True)
    return torch.load(out, weights_only=False)


# ---- pass@k -------------------------------------------------------------------------------------
def test_pass_at_k_is_the_unbiased_estimator():
    # hand-computed: 1 - C(n-c, k) / C(n, k)
    assert pass_at_k(5, 2, 2) == pytest.approx(1 - 3 / 10)  # C(3,2)=3, C(5,2)=10
    assert pass_at_k(5, 2, 1) == pytest.approx(2 / 5)
    assert pass_at_k(10, 3, 5) == pytest.approx(1 - 21 / 252)  # C(7,5)=21, C(10,5)=252
    assert pass_at_k(4, 0, 2) == 0.0
    assert pass_at_k(4, 3, 2) == 1.0  # one wrong sample: every pair of samples holds a right one
    assert pass_ks(1) == [1] and pass_ks(4) == [1, 2, 4] and pass_ks(6) == [1, 2, 4, 6]
    with pytest.raises(ValueError):
        pass_at_k(3, 1, 4)


# ---- eval ---------------------------------------------------------------------------------------
def test_eval_of_a_run_reproduces_its_training_held_out_metrics(lora_run, tmp_path):
    out = tmp_path / "eval.json"
    result = invoke("eval", lora_run, "--output", out)
    assert result.exit_code == 0, result.output
    for column in ("accuracy", "reward mean", "turns", "errors", "n"):
        assert column in result.stdout
    assert f"wrote {out}" in result.stdout
    report = json.loads(out.read_text())
    assert report["step"] == 3 and report["source"] == str(lora_run / "checkpoints" / "step-000003")
    assert report["env"] == "echo/echo-v0" and report["n"] == 3 and len(report["episodes"]) == 3
    trained = json.loads((lora_run / "result.json").read_text())["eval"]
    for key in ("eval/accuracy", "eval/reward_mean", "eval/turns_mean"):
        assert report["metrics"][key] == trained[key], key
    # without --output the JSON goes into the run directory
    assert invoke("eval", lora_run, "--n", "2").exit_code == 0
    assert json.loads((lora_run / "eval" / "step-000003-echo_echo-v0.json").read_text())["n"] == 2
    # the transcripts: one rollout record per episode, beside the JSON (or at --transcripts)
    from tinker_core.run_files import read_rollouts

    records = read_rollouts(tmp_path / "eval.rollouts.jsonl")
    assert [(r.kind, r.stage, r.step, r.episode) for r in records] == [("eval", "echo/echo-v0", 3, i) for i in range(3)]
    assert [r.reward for r in records] == [e["reward"] for e in report["episodes"]]
    assert [r.turns[0].text for r in records] == [e["transcript"][0][1] for e in report["episodes"]]
    assert len(read_rollouts(lora_run / "eval" / "step-000003-echo_echo-v0.rollouts.jsonl")) == 2
    assert invoke("eval", lora_run, "--n", "1", "--transcripts", tmp_path / "t.jsonl").exit_code == 0
    assert len(read_rollouts(tmp_path / "t.jsonl")) == 1


def test_eval_with_samples_reports_pass_at_k_from_the_episodes(lora_run, tmp_path):
    out = tmp_path / "eval.json"
    result = invoke("eval", lora_run, "--samples", "4", "--n", "2", "--max-new-tokens", "2", "-o", out)
    assert result.exit_code == 0, result.output
    assert "pass@4" in result.stdout
    report = json.loads(out.read_text())
    episodes = report["episodes"]
    assert report["samples"] == 4 and len(episodes) == 8
    assert [e["seed"] for e in episodes[:4]] == [episodes[0]["seed"]] * 4  # a problem's samples share its seed
    correct = [sum(e["success"] for e in episodes[i * 4 : (i + 1) * 4]) for i in range(2)]
    for k in (1, 2, 4):
        assert report["metrics"][f"eval/pass@{k}"] == pytest.approx(sum(pass_at_k(4, c, k) for c in correct) / 2)
    assert report["metrics"]["eval/pass@1"] == pytest.approx(sum(e["success"] for e in episodes) / 8)


def test_eval_skips_a_damaged_newest_checkpoint_and_takes_a_checkpoint_dir(lora_run, tmp_path):
    import shutil

    run = tmp_path / "run"
    shutil.copytree(lora_run, run)
    weights = run / "checkpoints" / "step-000003" / "trainer" / "adapter" / "adapter_model.safetensors"
    weights.write_bytes(weights.read_bytes()[:-8])
    assert find_source(run).step == 2
    result = invoke("eval", run, "-o", tmp_path / "run.json")
    assert result.exit_code == 0 and "(step 2)" in result.stdout, result.output
    assert f"skipped damaged checkpoint {run / 'checkpoints' / 'step-000003'}: " in result.stderr
    assert "is damaged" in refused("eval", run / "checkpoints" / "step-000003")
    out = tmp_path / "e.json"
    assert invoke("eval", run / "checkpoints" / "step-000002", "-o", out).exit_code == 0
    assert json.loads(out.read_text())["step"] == 2


def test_eval_of_a_job_config_is_its_untrained_model_on_the_problems_training_evaluates(lora_run, tmp_path):
    import yaml

    from tinker_algos.commands.evaluation import eval_settings, run_eval

    config = tmp_path / "job.yaml"
    config.write_text(yaml.safe_dump(job()))
    src = find_source(config)
    assert (src.kind, src.weights, src.base_model) == ("config", "base", "tiny")
    out, trained_out = tmp_path / "base.json", tmp_path / "trained.json"
    result = invoke("eval", config, "-o", out)
    assert result.exit_code == 0, result.output
    assert invoke("eval", lora_run, "-o", trained_out).exit_code == 0
    base, trained = json.loads(out.read_text()), json.loads(trained_out.read_text())
    assert base["source"] == str(config) and base["step"] is None
    assert (base["env"], base["env_kwargs"], base["n"]) == (trained["env"], trained["env_kwargs"], trained["n"])
    assert [e["seed"] for e in base["episodes"]] == [e["seed"] for e in trained["episodes"]]
    # the untrained model, loaded as training starts from it
    policy = PolicyModel.load("tiny", device="cpu", precision="fp32")
    policy.model.eval()
    metrics, _ = run_eval(policy, eval_settings(src.job))
    assert base["metrics"] == pytest.approx(metrics)
    assert "holds no trained weights to export" in refused("export", config, "-o", tmp_path / "x")


def test_eval_bad_input_is_one_error_line_and_exit_2(lora_run, tmp_path):
    assert "does not exist" in refused("eval", tmp_path / "missing")
    (tmp_path / "empty").mkdir()
    assert "is not a run directory, a checkpoint" in refused("eval", tmp_path / "empty")
    (tmp_path / "bad.yaml").write_text("algorithm: {name: grpo, steps: -1}\n")
    assert "steps" in refused("eval", tmp_path / "bad.yaml")
    assert "did you mean 'echo/echo-v0'" in refused("eval", lora_run, "--env", "echo/ecko-v0")
    assert "--n must be at least 1" in refused("eval", lora_run, "--n", "0")
    assert "--samples must be at least 1" in refused("eval", lora_run, "--samples", "0")
    assert "--n 1000000000 is over the limit of 100000 problems an evaluation plays; pass --n 100000 or fewer" in refused("eval", lora_run, "--n", "1000000000")  # the probe: ran on
    assert "--samples 1000000 is over the limit of 1024 samples a problem; pass --samples 1024 or fewer" in refused("eval", lora_run, "--samples", "1000000")  # the probe: ran on
    assert "split" in refused("eval", lora_run, "--split", "test")  # echo takes no 'split'
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "checkpoints").mkdir()
    assert "has no checkpoint yet" in refused("eval", tmp_path / "run")



def test_eval_n_is_capped_by_the_envs_split(lora_run, monkeypatch):
    from tinker_core import registry

    monkeypatch.setenv("OPENTINKER_LOAD_PLUGINS", "tinker-algos,tinker-env-echo,tinker-env-math")
    registry.reset_plugins()
    try:
        # math/dataset-v0's bundled split has 50 problems: one more is one line, before the model loads
        assert "--n 51 is over the 50 problems of env 'math/dataset-v0' with arguments {}; pass --n 50 or fewer" in refused(
            "eval", lora_run, "--env", "math/dataset-v0", "--n", "51")
        check_env(eval_settings(None, env_id="math/dataset-v0", n=50))
        check_env(eval_settings(None, env_id="math/dataset-v0"))  # the default n plays as training's eval does
        assert split_size(tinker_core.make_env("math/arithmetic-v0")) is None  # draws without end
        check_env(eval_settings(None, env_id="math/arithmetic-v0", n=100_000))  # only the documented maximum
    finally:
        monkeypatch.undo()
        registry.reset_plugins()


def test_eval_overrides_apply_to_a_job_config_source_only(tmp_path):
    import yaml

    config = tmp_path / "job.yaml"
    config.write_text(yaml.safe_dump(job()))
    src = find_source(config, overrides=["env.kwargs.words=[xy]", "stages.0.algorithm.eval_size=2"])
    assert src.job is not None and src.job.env is not None
    assert src.job.env.kwargs == {"words": ["xy"]} and src.job.stages[0].algorithm.eval_size == 2
    assert "did you mean 'env.kwargs'" in refused("eval", config, "env.kwarg.words=[xy]")
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "checkpoints").mkdir()
    assert "apply to a job config (.yaml) source" in refused("eval", tmp_path / "run", "seed=1")

# ---- export -------------------------------------------------------------------------------------
def test_export_refuses_an_output_inside_the_run_directory_or_containing_it(lora_run, tmp_path):
    before = sorted(p.relative_to(lora_run) for p in lora_run.rglob("*"))
    for inside in (lora_run / "checkpoints" / "merged", lora_run / "export", lora_run):
        message = refused("export", lora_run, "--merge", "--output", inside, "--force")
        assert "inside" in message and "write the export somewhere else" in message
    message = refused("export", lora_run, "--output", lora_run.parent, "--force")
    assert "contains" in message
    assert sorted(p.relative_to(lora_run) for p in lora_run.rglob("*")) == before  # nothing written or replaced


def test_export_writes_an_adapter_and_a_merged_model_that_load_in_a_fresh_process(lora_run, tmp_path):
    from safetensors import safe_open

    from tinker_algos.model.model_files import resolve_model

    adapter, merged = tmp_path / "adapter", tmp_path / "merged"
    result = invoke("export", lora_run, "--output", adapter)
    assert result.exit_code == 0, result.output
    assert f"exported LoRA adapter of {lora_run / 'checkpoints' / 'step-000003'} (step 3) to {adapter} (base model: base, saved in {adapter / 'base'})" in result.stdout
    result = invoke("export", lora_run, "--output", merged, "--merge")
    assert result.exit_code == 0 and "merged full model" in result.stdout, result.output

    # the layout vLLM's --lora-modules reads: the two files at the top, no modules_to_save; the
    # tiny base (a name plain peft cannot resolve) saved beside them in base/, which the adapter records
    # relative to itself
    assert [p.name for p in adapter.iterdir() if p.is_dir()] == ["base"]
    config = json.loads((adapter / "adapter_config.json").read_text())
    assert config["base_model_name_or_path"] == "base" and not config["modules_to_save"]
    assert config["r"] == 4 and config["lora_alpha"] == 8 and config["bias"] == "none" and not config["use_dora"]
    with safe_open(str(adapter / "adapter_model.safetensors"), framework="pt") as f:
        keys = list(f.keys())  # noqa: SIM118
    modules = {re.fullmatch(r"base_model\.model\.(.+)\.lora_[AB]\.weight", k).group(1).rsplit(".", 1)[-1] for k in keys}
    assert modules == set(config["target_modules"]) and keys
    assert (adapter / "tokenizer.json").is_file()
    assert {"config.json", "generation_config.json", "model.safetensors", "tokenizer.json"} <= {p.name for p in merged.iterdir()}

    trained = trained_policy(lora_run, 3)
    ids, want = logits_of(trained)
    with trained.adapters_disabled():
        assert (logits_of(trained)[1] - want).abs().max() > 1e-3  # the adapter changed the model
    fresh = load_in_fresh_process(tmp_path, resolve_model("tiny"), adapter=adapter, merged=merged)
    for path in (adapter, merged):
        got_ids, got = fresh[str(path)]
        assert got_ids == ids
        assert torch.allclose(got, want, atol=1e-5), (path, (got - want).abs().max())


def test_a_full_fine_tuning_run_exports_a_full_model_with_or_without_merge(full_run, tmp_path):
    plain, merged = tmp_path / "plain", tmp_path / "merged"
    result = invoke("export", full_run, "-o", plain)
    assert result.exit_code == 0 and "full model (a full fine-tuning run)" in result.stdout, result.output
    assert invoke("export", full_run, "-o", merged, "--merge").exit_code == 0
    assert not (plain / "adapter_config.json").exists()
    assert all(f.stat().st_mode & 0o044 == 0o044 for f in plain.iterdir())  # others can read it
    ids, want = logits_of(trained_policy(full_run, 2))
    fresh = load_in_fresh_process(tmp_path, "-", full_plain=plain, full_merged=merged)
    for path in (plain, merged):
        assert fresh[str(path)][0] == ids and torch.allclose(fresh[str(path)][1], want, atol=1e-5)


def test_an_exported_adapter_and_merged_model_evaluate_alike(lora_run, tmp_path):
    adapter, merged = tmp_path / "adapter", tmp_path / "merged"
    assert invoke("export", lora_run, "-o", adapter).exit_code == 0
    assert invoke("export", lora_run, "-o", merged, "--merge").exit_code == 0
    reports = {}
    for path in (adapter, merged):
        out = tmp_path / f"{path.name}.json"
        # an export carries no run config: the env is named on the command line
        result = invoke("eval", path, "--env", "echo/echo-v0", "--n", "3", "-o", out)
        assert result.exit_code == 0, result.output
        reports[path.name] = json.loads(out.read_text())
    assert reports["adapter"]["kind"] == "adapter" and reports["merged"]["kind"] == "model"
    assert reports["adapter"]["episodes"] == reports["merged"]["episodes"]
    assert reports["adapter"]["metrics"] == reports["merged"]["metrics"]
    assert "pass --env ID" in refused("eval", adapter)


def test_export_refuses_a_non_empty_output_and_a_private_base_path(lora_run, tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    (out / "keep.txt").write_text("mine")
    assert "is not empty; pass --force" in refused("export", lora_run, "-o", out)
    assert (out / "keep.txt").read_text() == "mine"
    assert invoke("export", lora_run, "-o", out, "--force").exit_code == 0
    assert not (out / "keep.txt").exists() and (out / "adapter_config.json").is_file()
    assert "does not exist" in refused("export", tmp_path / "nope", "-o", tmp_path / "x")
    # a base model given by path is never written into the adapter: --base-model names it
    source = find_source(lora_run)
    local = Source(**{**source.__dict__, "base_model": str(tmp_path)})
    with pytest.raises(ExportError, match="--base-model"):
        portable_base_name(local, None)
    assert portable_base_name(local, "HuggingFaceTB/SmolLM2-135M-Instruct") == "HuggingFaceTB/SmolLM2-135M-Instruct"
    assert is_portable("tiny") and is_portable("tiny:3") and is_portable("org/model-1.5B")
    assert not is_portable("/root/.cache/opentinker/models/tiny-abc") and not is_portable("./models/x")
    assert not is_portable(str(tmp_path)) and not is_portable("a/b/c")
    assert issubclass(ExportError, EvalError)


# ---- the real model -----------------------------------------------------------------------------
@pytest.mark.slow
def test_a_smollm2_lora_run_evaluates_and_exports_for_peft_and_transformers(smollm2_dir, tmp_path, monkeypatch):
    """SmolLM2-135M-Instruct (BPE tokenizer, chat template): one SFT step, then eval and export;
    the adapter and the merged model load in a fresh process and give the trained logits."""
    monkeypatch.setenv("OPENTINKER_CACHE", str(smollm2_dir.parent.parent))  # the preset resolves from there
    run_dir = tmp_path / "run"
    cfg = job(
        model={"name": "smollm2-135m-instruct", "device": "cpu"},
        env={"id": "echo/echo-v0", "kwargs": {"words": ["hi", "ok"]}},
        lora={"rank": 2, "alpha": 4, "target_modules": ["q_proj", "v_proj"]},
        stages=[{"algorithm": {"name": "sft", "steps": 1, "batch_size": 2, "eval_size": 2}}],
        rollout={"prompts_per_step": 1, "group_size": 2, "max_new_tokens": 4, "stop": ["\n"]},
        optimizer={"lr": 0.01},
        checkpoint={"every": 1},
    )
    result = train(cfg, run_dir=run_dir)
    assert result.status == "completed"

    out = tmp_path / "eval.json"
    assert invoke("eval", run_dir, "-o", out).exit_code == 0
    report = json.loads(out.read_text())
    assert report["n"] == 2 and report["step"] == 1
    for key in ("eval/accuracy", "eval/reward_mean", "eval/turns_mean"):
        assert report["metrics"][key] == result.eval[key], key

    adapter, merged = tmp_path / "adapter", tmp_path / "merged"
    assert "(base model: smollm2-135m-instruct)" in invoke("export", run_dir, "-o", adapter).stdout
    hub = invoke("export", run_dir, "-o", tmp_path / "hub", "--base-model", "HuggingFaceTB/SmolLM2-135M-Instruct")
    assert hub.exit_code == 0, hub.output
    config = json.loads((tmp_path / "hub" / "adapter_config.json").read_text())
    assert config["base_model_name_or_path"] == "HuggingFaceTB/SmolLM2-135M-Instruct"
    assert config["target_modules"] == ["q_proj", "v_proj"] and not config["modules_to_save"]
    assert invoke("export", run_dir, "-o", merged, "--merge").exit_code == 0

    trained = trained_policy(run_dir, 1)
    ids, want = logits_of(trained)
    with trained.adapters_disabled():
        assert (logits_of(trained)[1] - want).abs().max() > 1e-2  # the step moved the logits
    fresh = load_in_fresh_process(tmp_path, str(smollm2_dir), adapter=adapter, merged=merged)
    for path in (adapter, merged):
        got_ids, got = fresh[str(path)]
        assert got_ids == ids
        assert torch.allclose(got, want, atol=1e-4), (path, (got - want).abs().max())


BARS = ("Loading weights", "Writing model shards", "it/s]", "%|")
FRESH_CLI = (
    "import sys, typer\n"
    "from tinker_algos import plugin\n"
    "app = typer.Typer(add_completion=False)\n"
    "plugin.opentinker_register_commands(cli=app)\n"
    "typer.main.get_command(app).main(args=sys.argv[1:], prog_name='opentinker')\n"
)


def test_eval_and_export_print_no_hugging_face_progress_bars(lora_run, tmp_path):
    """In a fresh process (nothing switched the bars off yet): our table and lines only."""
    import os

    env = {k: v for k, v in os.environ.items() if k not in ("HF_HUB_DISABLE_PROGRESS_BARS", "TQDM_DISABLE")}
    env["OPENTINKER_LOAD_PLUGINS"] = "tinker-algos,tinker-env-echo"
    env.pop("OPENTINKER_DISABLE_PLUGIN_AUTOLOAD", None)
    for args in (["eval", str(lora_run), "-o", str(tmp_path / "e.json")],
                 ["export", str(lora_run), "-o", str(tmp_path / "merged"), "--merge"]):
        out = subprocess.run([sys.executable, "-c", FRESH_CLI, *args], capture_output=True, text=True, env=env, timeout=300)
        assert out.returncode == 0, out.stderr
        for bar in BARS:
            assert bar not in out.stderr + out.stdout, (args, out.stderr)


def test_a_tiny_adapter_export_moved_elsewhere_loads_with_plain_peft_in_a_fresh_process(lora_run, tmp_path):
    """The export names its bundled base relative to itself, so a moved folder still loads: with
    ``AutoPeftModelForCausalLM.from_pretrained(".")`` inside it (peft resolves a relative base from
    the working directory), with ``PeftModel`` on ``DIR/base`` from anywhere, and with ``opentinker
    eval`` -- no OpenTinker, no hub, the trained logits; every file 0644, every folder 0755."""
    adapter, moved = tmp_path / "adapter", tmp_path / "elsewhere" / "moved"
    assert invoke("export", lora_run, "--output", adapter).exit_code == 0
    moved.parent.mkdir()
    adapter.rename(moved)
    ids, want = logits_of(trained_policy(lora_run, 3))
    code = (
        "import sys, json, torch\n"
        "from peft import AutoPeftModelForCausalLM, PeftModel\n"
        "from transformers import AutoModelForCausalLM\n"
        "if sys.argv[1] == '.':\n"
        "    model = AutoPeftModelForCausalLM.from_pretrained('.')\n"
        "else:\n"
        "    model = PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(sys.argv[1] + '/base'), sys.argv[1])\n"
        "with torch.no_grad():\n"
        "    print(json.dumps(model.eval()(input_ids=torch.tensor([json.loads(sys.argv[2])])).logits[0].tolist()))\n"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("OPENTINKER_")}
    env["HF_HUB_OFFLINE"] = "1"
    for where, cwd in ((".", moved), (str(moved), tmp_path)):
        out = subprocess.run([sys.executable, "-c", code, where, json.dumps(ids)], capture_output=True, text=True,
                             cwd=cwd, env=env, timeout=300)
        assert out.returncode == 0, out.stderr
        got = torch.tensor(json.loads(out.stdout.strip().splitlines()[-1]))
        assert torch.allclose(got, want, atol=1e-5), where
    assert find_source(moved).base_model == str(moved / "base")  # what eval and serve load
    modes = {p.relative_to(moved).as_posix(): p.stat().st_mode & 0o777 for p in [moved, *moved.rglob("*")]}
    assert modes["base/model.safetensors"] == modes["adapter_model.safetensors"] == 0o644
    assert set(modes.values()) == {0o644, 0o755} and modes["."] == modes["base"] == 0o755, modes


def test_a_baseline_eval_writes_under_runs_not_into_the_current_directory(tmp_path, monkeypatch, algos_and_echo_plugins):
    import yaml

    monkeypatch.chdir(tmp_path)
    (tmp_path / "job.yaml").write_text(yaml.safe_dump(job(name="base-line")))
    result = invoke("eval", "job.yaml", "--n", "2")
    assert result.exit_code == 0, result.output
    assert [p.name for p in tmp_path.iterdir() if p.is_file()] == ["job.yaml"]  # nothing beside the config
    written = tmp_path / "runs" / "eval" / "base-line-baseline-echo_echo-v0.json"
    assert json.loads(written.read_text())["n"] == 2
    assert written.with_name("base-line-baseline-echo_echo-v0.rollouts.jsonl").is_file()


def test_eval_and_export_say_what_they_load_off_a_terminal_and_nothing_with_q(lora_run, tmp_path):
    from tinker_core.progress import set_verbosity

    result = invoke("eval", lora_run, "--n", "2", "-o", tmp_path / "e.json")
    assert result.exit_code == 0, result.output
    assert f"loading {lora_run / 'checkpoints' / 'step-000003'} and playing 2 episodes of echo/echo-v0 ...\n" in result.stderr
    result = invoke("export", lora_run, "-o", tmp_path / "x")
    assert result.exit_code == 0, result.output
    assert f"loading {lora_run} and writing its weights to {tmp_path / 'x'} ...\n" in result.stderr
    set_verbosity(logging.ERROR)  # what -q sets
    try:
        quiet = invoke("eval", lora_run, "--n", "2", "-o", tmp_path / "q.json")
    finally:
        set_verbosity(logging.WARNING)
    assert quiet.exit_code == 0 and "loading" not in quiet.stderr, quiet.stderr
