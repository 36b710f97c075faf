"""``import opentinker``: train, evaluate and load_policy at the front door (docs/index.md)."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import types
from pathlib import Path

import pytest

import opentinker
from tinker_core.errors import ConfigError

ROOT = Path(__file__).resolve().parent.parent


def test_the_front_page_example_runs(tmp_path, monkeypatch, capsys):
    """docs/index.md's Python blocks, with the installed plugins (the docs test skips this page)."""
    monkeypatch.chdir(tmp_path)
    blocks = re.findall(r"```python\n(.*?)```", (ROOT / "docs" / "index.md").read_text(encoding="utf-8"), flags=re.S)
    assert blocks and "opentinker.train(" in blocks[0] and "opentinker.load_policy(" in blocks[0]
    module = types.ModuleType("doc_index")
    for i, block in enumerate(blocks):
        exec(compile(block, f"docs/index.md[block {i}]", "exec"), module.__dict__)
    assert "completed 2" in capsys.readouterr().out
    assert type(module.model).__name__.startswith("PeftModel")
    assert not list(tmp_path.iterdir()), "the example writes under its temporary run_dir only"


def test_train_takes_a_yaml_path_keyword_overrides_and_defaults_to_runs_name(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "job.yaml").write_text(
        "name: echo-api\nmodel: {name: tiny, device: cpu}\nenv: {id: echo/echo-v0}\n"
        "algorithm: {name: grpo, steps: 1, eval_size: 2}\nrollout: {prompts_per_step: 2, group_size: 2, max_new_tokens: 2}\n"
        "logging: {tensorboard: false, plot: false}\n"
    )
    result = opentinker.train("job.yaml", seed=3, algorithm={"name": "grpo", "steps": 2, "eval_size": 2})
    assert result.status == "completed" and result.step == 2
    assert Path(result.run_dir) == Path("runs") / "echo-api"
    saved = json.loads((tmp_path / "runs" / "echo-api" / "config.json").read_text())
    assert saved["seed"] == 3 and saved["algorithm"]["steps"] == 2, "the run's saved config records the overrides"


def test_overrides_replace_top_level_fields_and_a_misspelled_one_is_named():
    job = opentinker.job_config({"algorithm": {"name": "sft", "steps": 1}}, seed=5, name="other")
    assert (job.seed, job.name, job.algorithm.steps) == (5, "other", 1)
    assert opentinker.job_config(job, seed=6).seed == 6
    with pytest.raises(ConfigError, match="did you mean 'seed'"):
        opentinker.job_config({"algorithm": {"name": "sft"}}, sed=1)


def test_evaluate_a_config_is_the_untrained_baseline():
    job = {"name": "base", "seed": 0, "model": {"name": "tiny", "device": "cpu"}, "env": {"id": "echo/echo-v0"},
           "algorithm": {"name": "grpo", "steps": 1}, "rollout": {"max_new_tokens": 2}}
    metrics = opentinker.evaluate(job, n=2)
    assert metrics["eval/n"] == 2 and 0.0 <= metrics["eval/accuracy"] <= 1.0


def test_importing_opentinker_loads_no_torch():
    code = "import sys, opentinker; assert opentinker.train; print(sorted(m for m in sys.modules if m.split('.')[0] in ('torch', 'transformers', 'tinker_algos')))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
