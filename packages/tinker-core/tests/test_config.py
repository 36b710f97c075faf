from __future__ import annotations

import json

import pytest

from tinker_core import ConfigError
from tinker_core.config import JobConfig, json_schema, load_config, parse_config

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
    assert config.optimizer.name == "adamw" and config.checkpoint.keep_last == 2


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


def test_a_misspelled_algorithm_name_hides_no_other_problem():
    """One pass reports them all: the name (with a did-you-mean), the fields behind it checked as
    the algorithm it most likely is, other sections, and the plugin names."""
    text = """
env: {id: echo/ehco-v0}
algorithm: {name: grpoo, stepz: 2, estimator: no_such_estimator}
rolout: {group_size: 2}
optimizer: {name: no_such_opt}
"""
    with pytest.raises(ConfigError) as info:
        load_config(text)
    problems = info.value.problems
    assert problems[0] == "algorithm.name: Input should be 'sft', 'grpo', 'ppo' or 'dpo' (got \"grpoo\"); did you mean 'grpo'?"
    assert "algorithm.stepz: unknown key; did you mean 'steps'?" in problems
    assert "rolout: unknown key; did you mean 'rollout'?" in problems
    joined = "\n".join(problems)
    for where in ("env.id: unknown env 'echo/ehco-v0'", "algorithm.estimator: unknown advantage estimator",
                  "optimizer.name: unknown optimizer"):
        assert where in joined, problems
    # with no likely name, the keys no algorithm takes are still named
    with pytest.raises(ConfigError) as info:
        load_config("stages: [{algorithm: {name: zzzz, stepz: 1, steps: 1}}]", check_plugins=False)
    assert info.value.problems[1:] == ["stages[0].algorithm.stepz: unknown key (no algorithm takes it)"]


def test_json_schema_exports_every_section():
    schema = json_schema()
    json.dumps(schema)
    assert {"model", "lora", "env", "algorithm", "stages", "rollout", "optimizer", "resources", "checkpoint", "logging", "seed"} <= set(schema["properties"])
    assert schema["additionalProperties"] is False


def test_config_round_trips_through_json():
    config = load_config(GOOD, check_plugins=False)
    again = JobConfig.model_validate_json(config.model_dump_json())
    assert again == config


def test_algorithm_params_are_typed_per_algorithm_with_their_defaults():
    env = {"env": {"id": "echo/echo-v0"}}
    ppo = parse_config({**env, "algorithm": {"name": "ppo", "params": {"critic": "separate"}}}, check_plugins=False)
    assert ppo.algorithm.params.critic == "separate" and ppo.algorithm.params.vf_coef == 0.1
    assert ppo.algorithm.params.value_clip == 0.2 and ppo.algorithm.params.critic_lr is None
    dpo = parse_config({"algorithm": {"name": "dpo"}}, check_plugins=False)
    assert dpo.algorithm.params.min_reward_gap == 0.0 and dpo.algorithm.params.eval_data is None
    grpo = parse_config({**env, "algorithm": {"name": "grpo", "params": {"multi_agent": {"mode": "opponent"}}}}, check_plugins=False)
    assert grpo.algorithm.params.multi_agent.opponent == "random" and grpo.algorithm.params.estimator_config == {}
    assert parse_config({**env, "algorithm": {"name": "grpo"}}, check_plugins=False).algorithm.params.multi_agent is None
    roles = {"x": {"lr": 1e-3, "optimizer": "sgd", "optimizer_params": {"momentum": 0.9}}, "o": {"loss": "ppo", "loss_config": {"eps_low": 0.1}}}
    learners = parse_config({**env, "algorithm": {"name": "grpo", "params": {"multi_agent": {"mode": "learners", "roles": roles}}}}, check_plugins=False)
    got = learners.algorithm.params.multi_agent.roles
    assert got["x"].lr == 1e-3 and got["x"].loss is None and got["o"].loss == "ppo" and got["o"].loss_config == {"eps_low": 0.1}
    assert got["x"].optimizer == "sgd" and got["x"].optimizer_params == {"momentum": 0.9} and got["o"].optimizer is None
    league = parse_config({**env, "algorithm": {"name": "grpo", "params": {"multi_agent": {"mode": "league", "league": {"scripted": ["random"]}}}}},
                          check_plugins=False).algorithm.params.multi_agent.league
    assert (league.pool_size, league.snapshot_every, league.sample, league.scripted) == (4, 10, "recency", ["random"])
    # held-out opponents: eval_opponents, else eval_opponent, else opponent
    def held_out(multi_agent: dict) -> list[str]:
        config = parse_config({**env, "algorithm": {"name": "grpo", "params": {"multi_agent": multi_agent}}}, check_plugins=False)
        return config.algorithm.params.multi_agent.held_out_opponents()

    assert held_out({"eval_opponents": ["conceder", "boulware"]}) == ["conceder", "boulware"]
    assert held_out({"eval_opponent": "conceder", "opponent": "boulware"}) == ["conceder"]
    assert held_out({"opponent": "boulware"}) == ["boulware"] and held_out({}) == ["random"]


def test_a_learner_roles_unknown_optimizer_is_named_with_its_path():
    data = {"env": {"id": "echo/echo-v0"},
            "algorithm": {"name": "grpo", "params": {"multi_agent": {"mode": "learners", "roles": {"x": {"optimizer": "adamm"}}}}}}
    with pytest.raises(ConfigError) as info:
        parse_config(data)
    assert any(p.startswith("algorithm.params.multi_agent.roles.x.optimizer: unknown optimizer 'adamm'") for p in info.value.problems), info.value.problems


def test_a_learner_roles_unknown_loss_is_named_with_its_path():
    data = {"env": {"id": "echo/echo-v0"},
            "algorithm": {"name": "grpo", "params": {"multi_agent": {"mode": "learners", "roles": {"x": {"loss": "ppoo"}}}}}}
    with pytest.raises(ConfigError) as info:
        parse_config(data)
    assert any(p.startswith("algorithm.params.multi_agent.roles.x.loss: ") and "ppo" in p for p in info.value.problems), info.value.problems


@pytest.mark.parametrize(
    "algorithm, needle",
    [
        ({"name": "ppo", "params": {"critic": "shared"}}, "algorithm.params.critic: Input should be 'head' or 'separate'"),
        ({"name": "ppo", "params": {"vf_coef": -1}}, "algorithm.params.vf_coef: Input should be greater than or equal to 0"),
        ({"name": "ppo", "params": {"value_clip": -0.1}}, "algorithm.params.value_clip: Input should be greater than or equal to 0"),
        ({"name": "ppo", "params": {"critic_lr": 0}}, "algorithm.params.critic_lr: Input should be greater than 0"),
        ({"name": "ppo", "params": {"detach_head": "maybe"}}, "algorithm.params.detach_head: Input should be a valid boolean"),
        ({"name": "ppo", "params": {"estimator_config": 3}}, "algorithm.params.estimator_config: Input should be a valid dictionary"),
        ({"name": "ppo", "params": {"vf_coeff": 0.5}}, "algorithm.params.vf_coeff: unknown key; did you mean 'vf_coef'?"),
        ({"name": "ppo", "params": {"clip_ratio": 0.5}}, "algorithm.params.clip_ratio: unknown key; allowed keys: critic, vf_coef"),
        ({"name": "dpo", "params": {"evaldata": "x"}}, "algorithm.params.evaldata: unknown key; did you mean 'eval_data'?"),
        ({"name": "dpo", "params": {"min_reward_gap": -1}}, "algorithm.params.min_reward_gap: Input should be greater than or equal to 0"),
        ({"name": "dpo", "params": {"eval_data": 3}}, "algorithm.params.eval_data: give a path string or a mapping with path or hub (and split, fields, max_rows)"),
        ({"name": "sft", "params": {"lr": 1}}, "algorithm.params.lr: unknown key; this section takes no keys"),
        ({"name": "grpo", "params": {"multi_agent": {"mode": "team"}}},
         "algorithm.params.multi_agent.mode: Input should be 'self_play', 'opponent', 'learners' or 'league'"),
        ({"name": "grpo", "params": {"multi_agent": {"opponent": ""}}}, "algorithm.params.multi_agent.opponent: String should have at least 1 character"),
        ({"name": "grpo", "params": {"multi_agent": {"colour": 1}}}, "algorithm.params.multi_agent.colour: unknown key; allowed keys: mode,"),
        ({"name": "grpo", "params": {"multi_agent": {"learner_role": "x"}}}, "algorithm.params.multi_agent.learner_role: only used with mode: opponent"),
        ({"name": "grpo", "params": {"multi_agent": "self_play"}}, "algorithm.params.multi_agent: Input should be a valid dictionary"),
        ({"name": "grpo", "params": {"multi_agent": {"mode": "learners", "learner_role": "x"}}},
         "algorithm.params.multi_agent.learner_role: only used with mode: opponent (learners mode trains every role"),
        ({"name": "grpo", "params": {"multi_agent": {"roles": {"x": {}}}}},
         "algorithm.params.multi_agent.roles: only used with mode: learners (mode is 'self_play'); set mode: learners"),
        ({"name": "grpo", "params": {"multi_agent": {"mode": "opponent", "roles": {"x": {"lr": 0.1}}}}},
         "algorithm.params.multi_agent.roles: only used with mode: learners (mode is 'opponent')"),
        ({"name": "grpo", "params": {"multi_agent": {"mode": "learners", "roles": {}}}}, "algorithm.params.multi_agent.roles: is empty; name the env's roles"),
        ({"name": "grpo", "params": {"multi_agent": {"mode": "learners", "roles": {"x": {"lr": 0}}}}},
         "algorithm.params.multi_agent.roles.x.lr: Input should be greater than 0"),
        ({"name": "grpo", "params": {"multi_agent": {"mode": "learners", "roles": {"x": {"learning_rate": 0.1}}}}},
         "algorithm.params.multi_agent.roles.x.learning_rate: unknown key"),
        ({"name": "grpo", "params": {"multi_agent": {"mode": "opponent", "league": {"pool_size": 2}}}},
         "algorithm.params.multi_agent.league: only used with mode: league (mode is 'opponent'); set mode: league"),
        ({"name": "grpo", "params": {"multi_agent": {"mode": "league", "league": {"pool_size": 0}}}},
         "algorithm.params.multi_agent.league.pool_size: Input should be greater than or equal to 1"),
        ({"name": "grpo", "params": {"multi_agent": {"mode": "league", "league": {"sample": "elo"}}}},
         "algorithm.params.multi_agent.league.sample: Input should be 'recency' or 'win_rate'"),
        ({"name": "grpo", "params": {"multi_agent": {"eval_opponents": []}}},
         "algorithm.params.multi_agent.eval_opponents: List should have at least 1 item"),
        ({"name": "grpo", "params": {"multi_agent": {"eval_opponents": "conceder"}}},
         "algorithm.params.multi_agent.eval_opponents: Input should be a valid list"),
        ({"name": "grpo", "params": {"multi_agent": {"eval_opponent": "random", "eval_opponents": ["conceder"]}}},
         "algorithm.params.multi_agent.eval_opponents: set with eval_opponent ('random'); keep one"),
        ({"name": "grpo", "params": {"multi_agent": {"eval_opponents": ["conceder", "boulware", "conceder"]}}},
         "algorithm.params.multi_agent.eval_opponents: lists conceder twice"),
        ({"name": "grpo", "params": {"multi_agent": {"eval_opponents": ["conceder", ""]}}},
         "algorithm.params.multi_agent.eval_opponents: names an empty opponent"),
        ({"steps": 3}, "algorithm.name: Field required; give one of 'sft', 'grpo', 'ppo' or 'dpo'"),
    ],
)
def test_bad_algorithm_params_name_their_field_path(algorithm, needle):
    with pytest.raises(ConfigError) as info:
        parse_config({"env": {"id": "echo/echo-v0"}, "algorithm": algorithm}, check_plugins=False)
    assert any(p.startswith(needle) for p in info.value.problems), info.value.problems


def test_a_stage_params_error_names_the_stage_without_the_union_tag():
    data = {
        "env": {"id": "echo/echo-v0"},
        "stages": [{"algorithm": {"name": "sft"}}, {"algorithm": {"name": "ppo", "params": {"vf_coef": "x", "critci": "head"}}}],
    }
    with pytest.raises(ConfigError) as info:
        parse_config(data, check_plugins=False)
    assert sorted(p.split(":")[0] for p in info.value.problems) == ["stages[1].algorithm.params.critci", "stages[1].algorithm.params.vf_coef"]
    assert "stages[1].algorithm.params.critci: unknown key; did you mean 'critic'?" in info.value.problems


def test_json_schema_holds_every_algorithm_option():
    text = json.dumps(json_schema())
    for option in ("vf_coef", "value_clip", "critic_lr", "detach_head", "min_reward_gap", "eval_data", "multi_agent", "learner_role", "eval_opponent", "eval_opponents", "roles", "loss_config", "pool_size", "snapshot_every"):
        assert f'"{option}"' in text, option
    assert '"discriminator"' in text


@pytest.mark.parametrize("name", ["..", "../x", "/etc", "a/b", ".hidden", "a..b", "a" * 129, "a\x00b", "ok\n", "", "with space"])
def test_a_job_name_must_be_a_safe_directory_name(name):
    with pytest.raises(ConfigError) as info:
        parse_config({"name": name, "algorithm": {"name": "sft"}}, check_plugins=False)
    [problem] = info.value.problems
    assert problem.startswith("name: must be a safe directory name") and "e.g. 'arithmetic-grpo'" in problem


@pytest.mark.parametrize("name", ["a", "arithmetic-grpo", "Run_2.v1", "a" * 128])
def test_safe_job_names_load(name):
    assert parse_config({"name": name, "algorithm": {"name": "sft"}}, check_plugins=False).name == name


@pytest.mark.parametrize(
    "text, needle",
    [
        ("rollout: {group_size: 100000000}", "rollout.group_size: Input should be less than or equal to 1024"),
        ("rollout: {group_size: 1.0e+8}", "rollout.group_size: Input should be less than or equal to 1024"),
        ("rollout: {prompts_per_step: 1000000000}", "rollout.prompts_per_step: Input should be less than or equal to 4096"),
        ("rollout: {prompts_per_step: 4096, group_size: 1024}", "rollout: prompts_per_step * group_size = 4,194,304 episodes"),
        ("rollout: {max_new_tokens: 1000000}", "rollout.max_new_tokens: Input should be less than or equal to 32768"),
        ("seed: 99999999999999999999999", "seed: Input should be less than or equal to 9223372036854775807"),
        ("algorithm: {name: sft, steps: 100000000000}", "algorithm.steps: Input should be less than or equal to"),
        ("algorithm: {name: sft, batch_size: 10000000}", "algorithm.batch_size: Input should be less than or equal to"),
        ("algorithm: {name: sft, eval_size: 10000000}", "algorithm.eval_size: Input should be less than or equal to"),
        ("model: {name: \"a\\x01b\"}", "model.name: must not hold control characters"),
        ("algorithm: {name: sft, data: \"x\\ty.jsonl\"}", "algorithm.data: must not hold control characters"),
    ],
)
def test_sizes_have_upper_bounds_checked_at_validation(text, needle):
    if not text.startswith("algorithm:"):
        text = "algorithm: {name: sft}\n" + text
    with pytest.raises(ConfigError) as info:
        load_config(text, check_plugins=False)
    assert any(p.startswith(needle) for p in info.value.problems), info.value.problems
    assert all("\n" not in p for p in info.value.problems)


def test_the_largest_settings_still_validate():
    text = "algorithm: {name: sft, steps: 10000000, batch_size: 65536}\nseed: 9223372036854775807\nrollout: {prompts_per_step: 64, group_size: 1024, max_new_tokens: 32768}"
    config = load_config(text, check_plugins=False)
    assert config.rollout.group_size == 1024 and config.seed == 2**63 - 1


def test_a_config_over_1_mib_is_refused_before_parsing(tmp_path):
    from tinker_core.config import MAX_CONFIG_BYTES

    text = "algorithm: {name: sft}\n" + "# padding\n" * (MAX_CONFIG_BYTES // 10 + 1)
    path = tmp_path / "big.yaml"
    path.write_text(text)
    for source in (text, path):
        with pytest.raises(ConfigError) as info:
            load_config(source, check_plugins=False)
        assert info.value.problems[0].startswith(f"the config is {len(text):,} bytes; at most 1,048,576 (1 MiB)")


def test_a_binary_or_unreadable_config_file_is_one_clear_error(tmp_path):
    path = tmp_path / "job.yaml"
    path.write_bytes(b"\x89PNG\r\n\x1a\n\x00\xff\xfe")
    with pytest.raises(ConfigError) as info:
        load_config(path, check_plugins=False)
    assert info.value.problems == ["not UTF-8 text (byte 0); a job config is a YAML or JSON text file"]
    path.write_text("algorithm: {name: sft}\nname: \"a\x00\"\n")
    with pytest.raises(ConfigError) as info:
        load_config(path, check_plugins=False)
    [problem] = info.value.problems
    assert problem.startswith("not valid YAML: unacceptable character #x0000") and "\n" not in problem


def alias_bomb(levels: int) -> str:
    """~450 bytes of YAML (levels=6) whose aliases stand for 9**(levels + 1) strings in ``optimizer.params``."""
    lines = ["    a0: &a0 [x, x, x, x, x, x, x, x, x]"]
    lines += [f"    a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * 9) + "]" for i in range(1, levels + 1)]
    return "algorithm: {name: sft, steps: 2}\noptimizer:\n  params:\n" + "\n".join(lines) + "\n"


def deep_params(levels: int) -> str:
    """A config whose ``optimizer.params.x`` nests ``levels`` lists (the deepest at depth levels + 2)."""
    return "algorithm: {name: sft, steps: 2}\noptimizer: {params: {x: " + "[" * levels + "]" * levels + "}}\n"


def test_a_yaml_alias_bomb_is_one_config_error_before_it_expands(tmp_path):
    """Found by the reliability suite: ~450 bytes validated, and ``opentinker train`` then wrote a
    94 MB config.json (each alias level more: 9 times as much)."""
    path = tmp_path / "bomb.yaml"
    path.write_text(alias_bomb(6))
    for source in (alias_bomb(6), path):
        with pytest.raises(ConfigError) as info:
            load_config(source, check_plugins=False)
        [problem] = info.value.problems
        assert problem.startswith("its YAML aliases expand to over 1,000 values") and "write the values out" in problem
    assert info.value.source == str(path)
    # aliases that expand to no more values than the text has bytes are fine
    text = "algorithm: {name: sft, steps: 2}\noptimizer: {params: {w: &a [1, 2], x: *a, y: *a}}\n"
    assert load_config(text, check_plugins=False).optimizer.params == {"w": [1, 2], "x": [1, 2], "y": [1, 2]}


@pytest.mark.parametrize(
    "text",
    [deep_params(300), deep_params(62), "a: " + "[" * 20_000 + "]" * 20_000, '{"a": ' * 20_000 + "1" + "}" * 20_000],
    ids=["params-300-deep", "params-just-over", "yaml-20000-deep", "json-20000-deep"],
)
def test_a_config_nested_too_deeply_is_one_config_error(tmp_path, text):
    """Found by the reliability suite: 300 levels validated, then ``opentinker train`` failed with a
    traceback (pydantic's "Maximum serialization depth exceeded" writing config.json); 20,000 levels
    stop YAML's parser with a RecursionError (it was "not valid YAML: nested too deeply")."""
    path = tmp_path / "deep.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError) as info:
        load_config(path, check_plugins=False)
    [problem] = info.value.problems
    assert problem.startswith("nested deeper than 64 levels; ") and "flatten" in problem and "\n" not in problem


def test_a_config_nested_up_to_the_limit_loads_and_dumps():
    config = load_config(deep_params(61), check_plugins=False)  # the deepest list at depth 63
    assert json.loads(config.model_dump_json())["optimizer"]["params"]["x"] is not None
