"""The compare file (tinker_algos.compare.spec) and ``opentinker compare``'s bad input: one
``error:`` line, exit 2, before any job starts."""

from __future__ import annotations

from pathlib import Path

import pytest
import typer
import yaml
from typer.testing import CliRunner

from tinker_algos import plugin
from tinker_algos.compare.spec import CompareError, expand, load_spec

pytestmark = pytest.mark.usefixtures("algos_and_echo_plugins")

BASE = {
    "name": "cmp",
    "model": {"name": "tiny"},
    "env": {"id": "echo/echo-v0"},
    "stages": [
        {"algorithm": {"name": "sft", "steps": 2, "batch_size": 4, "eval_size": 2}},
        {"algorithm": {"name": "grpo", "steps": 2, "estimator": "grpo", "eval_size": 2}},
    ],
    "rollout": {"prompts_per_step": 2, "group_size": 2, "max_new_tokens": 3},
    "logging": {"tensorboard": False},
}

VARIANTS = [
    {"name": "grpo", "set": {}},
    {"name": "dr_grpo", "set": {"stages.1.algorithm.estimator": "dr_grpo"}},
    {"name": "rloo", "set": ["stages.1.algorithm.estimator=rloo"]},
]


def write(tmp_path: Path, **over) -> Path:
    (tmp_path / "base.yaml").write_text(yaml.safe_dump(BASE))
    doc = {"base": "base.yaml", "variants": VARIANTS, "seeds": 2, **over}
    doc = {k: v for k, v in doc.items() if v is not None}
    path = tmp_path / "cmp.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


def test_a_compare_file_expands_to_every_variant_and_seed(tmp_path):
    spec = load_spec(write(tmp_path))
    assert [v.name for v in spec.variants] == ["grpo", "dr_grpo", "rloo"] and spec.seeds == (0, 1)
    assert spec.output == Path("runs") / "compare-cmp"
    jobs = expand(spec)
    assert [(j.variant, j.seed) for j in jobs] == [(v, s) for v in ("grpo", "dr_grpo", "rloo") for s in (0, 1)]
    assert [j.config["stages"][1]["algorithm"]["estimator"] for j in jobs[::2]] == ["grpo", "dr_grpo", "rloo"]
    assert jobs[3].config["seed"] == 1 and jobs[3].config["name"] == "cmp-dr_grpo-s1"
    assert spec.configs["rloo"].stages[1].algorithm.estimator == "rloo"
    assert [v.override_texts for v in spec.variants] == [[], ["stages.1.algorithm.estimator=dr_grpo"], ["stages.1.algorithm.estimator=rloo"]]
    assert BASE["stages"][1]["algorithm"]["estimator"] == "grpo"  # the base is not changed


def test_a_set_mapping_reads_as_override_texts_that_parse_back(tmp_path):
    from tinker_core.config import parse_override

    values = {"checkpoint.resume": False, "lora": None, "rollout.stop": ["a", "b"], "env.kwargs.tag": "007", "optimizer.lr": 0.5}
    spec = load_spec(write(tmp_path, variants=[{"name": "v", "set": values}]))
    texts = spec.variants[0].override_texts
    assert texts == ["checkpoint.resume=false", "lora=null", 'rollout.stop=["a", "b"]', 'env.kwargs.tag="007"', "optimizer.lr=0.5"]
    assert [parse_override(t).value for t in texts] == list(values.values())


def test_an_inline_base_a_seed_list_and_an_output(tmp_path):
    spec = load_spec(write(tmp_path, base=BASE, seeds=[3, 9], output=str(tmp_path / "out")))
    assert spec.seeds == (3, 9) and spec.output == tmp_path / "out" and spec.base_source.endswith("(inline)")
    assert load_spec(write(tmp_path), output=tmp_path / "elsewhere").output == tmp_path / "elsewhere"


def test_metrics_are_listed_in_order_default_none(tmp_path):
    assert load_spec(write(tmp_path)).metrics == ()
    assert load_spec(write(tmp_path, metrics=["eval/reward_mean", "eval/accuracy"])).metrics == ("eval/reward_mean", "eval/accuracy")
    assert load_spec(write(tmp_path, metrics="eval/reward_mean")).metrics == ("eval/reward_mean",)


def test_the_baseline_is_the_first_variant_unless_named(tmp_path):
    assert load_spec(write(tmp_path)).baseline == "grpo"
    assert load_spec(write(tmp_path, baseline="rloo")).baseline == "rloo"


BAD = [
    ({"base": None}, "no 'base'"),
    ({"base": "missing.yaml"}, "base missing.yaml: config file"),
    ({"seeds": 0}, "seeds: 0; give at least 1"),
    ({"seeds": []}, "seeds: the list is empty"),
    ({"seeds": [1, 1]}, "lists a seed twice"),
    ({"variants": [{"name": "a", "set": {"stages.1.algorithm.estimatr": "rloo"}}]},
     "variant 'a': override 'stages.1.algorithm.estimatr=rloo': unknown key stages.1.algorithm.estimatr; "
     "did you mean 'stages.1.algorithm.estimator'?"),
    ({"variants": [{"name": "a", "set": ["optimzer.lr=0.1"]}]}, "did you mean 'optimizer'?"),
    ({"variants": [{"name": "a", "set": {"stages.1.algorithm.estimator": "grpo"}}]},
     "variant 'a': stages.1.algorithm.estimator=grpo changes nothing (the base has stages.1.algorithm.estimator: 'grpo')"),
    ({"variants": [{"name": "a", "set": {"optimizer.lr": 0.001}}]}, "change nothing (they are the base's defaults)"),
    ({"variants": [{"name": "a", "set": {}}, {"name": "a", "set": {"seed": 1}}]}, "the name 'a' is used twice"),
    ({"variants": [{"name": "a", "set": {}}, {"name": "b", "set": []}]}, "variants 'a' and 'b' run the same config"),
    ({"variants": [{"name": "a", "set": {"seed": 4}}]}, "compare sets each job's seed itself"),
    ({"variants": [{"name": "a", "sett": {}}]}, "variants[0]: unknown key 'sett'; did you mean 'set'?"),
    ({"variants": [{"name": "a b", "set": {}}]}, "variants[0]: name 'a b'"),
    ({"variants": []}, "variants: expected a list"),
    ({"variants": [{"name": "a", "set": {"stages.1.algorithm.estimator": "nope"}}]}, "variant 'a': stages[1].algorithm.estimator: unknown advantage"),
    ({"variants": [{"name": "a", "set": {"stages.0.algorithm.steps": -1}}]}, "variant 'a': stages[0].algorithm.steps: Input should be greater"),
    ({"seed": 3}, "unknown key 'seed'; did you mean 'seeds'?"),
    ({"baseline": "rlo"}, "baseline: 'rlo' is not a variant; did you mean 'rloo'?"),
    ({"metric": ["eval/accuracy"]}, "unknown key 'metric'; did you mean 'metrics'?"),
    ({"metrics": []}, "metrics: expected a list of logged metric names"),
    ({"metrics": ["eval/accuracy", 3]}, "metrics: expected a list of logged metric names"),
    ({"metrics": ["eval/accuracy", "eval/reward_mean", "eval/accuracy"]}, "metrics: eval/accuracy listed twice"),
    ({"metrics": ["eval/accuracy "]}, "metrics: 'eval/accuracy ': remove the spaces"),
    ({"metrics": ["eval/accuracy", "eval/vs/boulware/alice/reward_mean"]},
     "metrics[1]: 'eval/vs/boulware/alice/reward_mean': variant 'grpo' never logs it: its last stage's "
     "stages.1.algorithm.params.multi_agent.eval_opponents does not list 'boulware' (it lists: none)"),
]


@pytest.mark.parametrize(("over", "message"), BAD, ids=[m[:40] for _, m in BAD])
def test_bad_compare_files_are_one_line_naming_the_problem(tmp_path, over, message):
    with pytest.raises(CompareError) as e:
        load_spec(write(tmp_path, **over) if "base" not in over or over["base"] is not None else _without_base(tmp_path))
    assert message in str(e.value) and "\n" not in str(e.value)


def _without_base(tmp_path: Path) -> Path:
    path = tmp_path / "cmp.yaml"
    path.write_text(yaml.safe_dump({"variants": VARIANTS, "seeds": 2}))
    return path


def cli() -> typer.Typer:
    app = typer.Typer(add_completion=False)
    app.command()(lambda: None)
    plugin.opentinker_register_commands(cli=app)
    return app


@pytest.mark.parametrize(("over", "message"), [BAD[2], BAD[5], BAD[7], BAD[9]], ids=["zero-seeds", "unknown-key", "no-op", "duplicate"])
def test_compare_bad_input_exits_2_in_one_line_before_any_job(tmp_path, monkeypatch, over, message):
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(cli(), ["compare", str(write(tmp_path, **over))])
    assert result.exit_code == 2, result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and message in lines[0], result.stderr
    assert result.stdout == "" and not (tmp_path / "runs").exists()


def test_a_job_dir_of_another_config_is_refused_before_any_job(tmp_path, monkeypatch):
    import json

    monkeypatch.chdir(tmp_path)
    path = write(tmp_path)
    stale = tmp_path / "runs" / "compare-cmp" / "jobs" / "rloo" / "seed-1"
    stale.mkdir(parents=True)
    (stale / "config.json").write_text(json.dumps({"name": "another"}))
    result = CliRunner().invoke(cli(), ["compare", str(path)])
    assert result.exit_code == 2 and "holds a run of another config" in result.stderr
    assert not (tmp_path / "runs" / "compare-cmp" / "jobs" / "grpo").exists()


def test_a_job_dir_written_before_a_defaulted_field_existed_is_the_same_job(tmp_path):
    """A run's config.json lacking a field a later release added with its default is still the
    job's config; a changed value, or a config today's models reject, is another config."""
    from tinker_algos.compare.runner import config_json, same_config
    from tinker_algos.compare.spec import expand, load_spec

    job = expand(load_spec(write(tmp_path)))[0]
    recorded = config_json(job)
    assert same_config(recorded, job)
    older = {**recorded, "rollout": {k: v for k, v in recorded["rollout"].items() if k != "dynamic_sampling"}}
    assert older != recorded and same_config(older, job)
    changed = {**recorded, "rollout": {**recorded["rollout"], "group_size": recorded["rollout"]["group_size"] + 1}}
    assert not same_config(changed, job)
    assert not same_config({**recorded, "no_such_field": 1}, job)


def test_the_compare_modules_load_no_torch_and_no_client():
    import subprocess
    import sys

    modules = ["tinker_algos.commands.cli_compare", *(f"tinker_algos.compare.{m}" for m in ("spec", "runner", "scheduler", "stats", "summary", "report"))]
    code = f"import sys; import {', '.join(modules)}; assert 'torch' not in sys.modules and 'tinker_client' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True)


def test_the_compare_command_is_registered_with_train():
    assert "compare" in typer.main.get_command(cli()).commands
