from __future__ import annotations

import json

import pytest

from tinker_core import ConfigError, JobConfig, load_config
from tinker_core.config import json_schema, parse_config

GOOD = """
name: arithmetic-grpo
seed: 3
model: {name: tiny}
lora: {rank: 4}
env: {id: echo/echo-v0, kwargs: {words: [a, b]}}
stages:
  - {name: warmup, algorithm: {name: sft, steps: 5}}
  - {algorithm: {name: grpo, steps: 7}, rollout: {group_size: 4}}
rollout: {group_size: 8, max_new_tokens: 6, stop: ["\\n"]}
"""


def test_a_good_config_loads_with_defaults_and_stage_inheritance():
    config = load_config(GOOD, check_plugins=False)
    assert isinstance(config, JobConfig)
    assert config.seed == 3 and config.lora is not None and config.lora.rank == 4
    stages = config.resolved_stages()
    assert [s.name for s in stages] == ["warmup", "1-grpo"]
    assert stages[0].rollout.group_size == 8 and stages[1].rollout.group_size == 4
    assert stages[1].env.kwargs == {"words": ["a", "b"]}
    assert config.total_steps == 12
    assert config.optimizer.name == "adamw" and config.checkpoint.keep == 2


def test_load_from_a_file(tmp_path):
    path = tmp_path / "job.yaml"
    path.write_text(GOOD)
    assert load_config(path, check_plugins=False).name == "arithmetic-grpo"
    assert load_config(str(path), check_plugins=False).name == "arithmetic-grpo"


def test_every_problem_is_named_with_its_field_path():
    bad = """
env: {id: echo/ehco-v0}
algorithm: {name: grpo, steps: ten}
optimizr: {lr: 1}
"""
    with pytest.raises(ConfigError) as info:
        load_config(bad)
    problems = info.value.problems
    assert len(problems) == 3
    assert any(p.startswith("algorithm.steps:") and "integer" in p and '"ten"' in p for p in problems)
    assert "optimizr: unknown key; did you mean 'optimizer'?" in problems
    assert "env.id: unknown env 'echo/ehco-v0'; did you mean 'echo/echo-v0'?" in problems


@pytest.mark.parametrize(
    "text, needle",
    [
        ("algorithm: {name: grpo}\nenv: {id: echo/echo-v0}\noptimizer: {lr: -1}", "optimizer.lr: Input should be greater than 0"),
        ("algorithm: {name: rl}", "algorithm.name: Input should be 'sft', 'grpo', 'ppo' or 'dpo'"),
        ("algorithm: {name: grpo}", "needs an 'env'"),
        ("seed: 1", "give either 'algorithm'"),
        ("algorithm: {name: sft}\nlora: {rnak: 4}", "lora.rnak: unknown key; did you mean 'rank'?"),
        ("algorithm: {name: sft}\nstages: []\nmodel: {dtype: fp8}", "model.dtype: Input should be"),
        ("algorithm: {name: sft}\nenv: {id: arithmetic}", "env.id: namespace/name-vN"),
        ("stages: [{algorithm: {name: sft, stepz: 1}}]", "stages[0].algorithm.stepz: unknown key; did you mean 'steps'?"),
        ("- a\n- b", "expected a mapping"),
        ("", "the file is empty"),
        ("a: [", "not valid YAML"),
    ],
)
def test_bad_configs_fail_before_anything_runs(text, needle):
    with pytest.raises(ConfigError) as info:
        load_config(text, check_plugins=False)
    assert any(needle.replace("namespace/name-vN", "") in p and ("namespace/name-vN" in p if "name-vN" in needle else True) for p in info.value.problems), info.value.problems


def test_plugin_names_are_checked_against_the_registry():
    text = """
env: {id: echo/echo-v0}
algorithm: {name: grpo, estimator: no_such_estimator, loss: no_such_loss}
optimizer: {name: no_such_opt}
"""
    with pytest.raises(ConfigError) as info:
        load_config(text)
    joined = "\n".join(info.value.problems)
    for where in ("algorithm.estimator: unknown advantage estimator", "algorithm.loss: unknown loss", "optimizer.name: unknown optimizer"):
        assert where in joined
    # a remote env is not looked up locally
    remote = parse_config({"env": {"id": "far/away-v0", "address": "h:1"}, "algorithm": {"name": "grpo"}}, check_plugins=False)
    assert remote.env.address == "h:1"


def test_json_schema_exports_every_section():
    schema = json_schema()
    json.dumps(schema)
    assert {"model", "lora", "env", "algorithm", "stages", "rollout", "optimizer", "resources", "checkpoint", "logging", "seed"} <= set(schema["properties"])
    assert schema["additionalProperties"] is False


def test_config_round_trips_through_json():
    config = load_config(GOOD, check_plugins=False)
    again = JobConfig.model_validate_json(config.model_dump_json())
    assert again == config
