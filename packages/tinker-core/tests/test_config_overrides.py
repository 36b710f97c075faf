"""``key.path=value`` overrides (tinker_core.config.overrides): parsing, the schema walk, loading."""

from __future__ import annotations

import pytest

from tinker_core.config import OverrideError, apply_overrides, get_path, load_config, parse_override

BASE = {
    "name": "job",
    "env": {"id": "math/arithmetic-v0", "kwargs": {"digits": 2}},
    "stages": [
        {"algorithm": {"name": "sft", "steps": 3}},
        {"algorithm": {"name": "grpo", "steps": 2, "estimator": "grpo"}},
    ],
}

YAML = """
name: job
env: {id: math/arithmetic-v0, kwargs: {digits: 2}}
stages:
  - {algorithm: {name: sft, steps: 3}}
  - {algorithm: {name: grpo, steps: 2, estimator: grpo}}
"""


@pytest.mark.parametrize(
    ("text", "path", "value"),
    [
        ("seed=3", ("seed",), 3),
        ("optimizer.lr=0.5", ("optimizer", "lr"), 0.5),
        ("optimizer.lr=1e-3", ("optimizer", "lr"), 0.001),
        ("checkpoint.resume=false", ("checkpoint", "resume"), False),
        ("rollout.stop=[a, b]", ("rollout", "stop"), ["a", "b"]),
        ("lora=null", ("lora",), None),
        ("name=arith", ("name",), "arith"),
        ("name='007'", ("name",), "007"),
        ("env.kwargs={digits: 3, ops: ['+']}", ("env", "kwargs"), {"digits": 3, "ops": ["+"]}),
        ("stages.1.algorithm.estimator=rloo", ("stages", 1, "algorithm", "estimator"), "rloo"),
        ("env.system_prompt=a=b", ("env", "system_prompt"), "a=b"),  # split at the first '='
    ],
)
def test_values_are_yaml_and_digit_parts_index_lists(text, path, value):
    ov = parse_override(text)
    assert ov.path == path and ov.value == value and type(ov.value) is type(value)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("optimizer.lr", "expected key.path=value"),
        ("optimizer..lr=1", "empty part"),
        ("=1", "empty part"),
        ("seed=", "no value after '='"),
        ("seed=[1", "not valid YAML"),
    ],
)
def test_malformed_overrides_are_one_line_errors(text, message):
    with pytest.raises(OverrideError, match=message) as e:
        parse_override(text)
    assert "\n" not in str(e.value) and repr(text) in str(e.value)


def test_apply_sets_paths_creates_sections_and_leaves_the_input_alone():
    out = apply_overrides(BASE, [
        "stages.1.algorithm.estimator=dr_grpo",
        "stages.0.algorithm.steps=5",
        "lora.rank=4",  # a section the file does not have
        "env.kwargs.ops=['+']",  # a free mapping: any key
        "stages.1.algorithm.params.estimator_config.normalize=true",
        "stages.1.algorithm.loss_config.clip=0.2",
        "optimizer.params.betas=[0.9, 0.99]",
    ])
    assert out["stages"][1]["algorithm"]["estimator"] == "dr_grpo"
    assert out["stages"][0]["algorithm"]["steps"] == 5
    assert out["lora"] == {"rank": 4}
    assert out["env"]["kwargs"] == {"digits": 2, "ops": ["+"]}
    assert out["stages"][1]["algorithm"]["params"] == {"estimator_config": {"normalize": True}}
    assert out["stages"][1]["algorithm"]["loss_config"] == {"clip": 0.2}
    assert out["optimizer"]["params"]["betas"] == [0.9, 0.99]
    assert BASE["stages"][1]["algorithm"]["estimator"] == "grpo" and "lora" not in BASE


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("optimzer.lr=1", "unknown key optimzer; did you mean 'optimizer'?"),
        ("stages.1.algorithm.estimatr=rloo", "unknown key stages.1.algorithm.estimatr; did you mean 'stages.1.algorithm.estimator'?"),
        ("rollout.group_sise=4", "did you mean 'rollout.group_size'?"),
        # the algorithm's name picks its model: grpo has no critic
        ("stages.1.algorithm.params.critic=head", "unknown key stages.1.algorithm.params.critic; keys there: estimator_config, multi_agent"),
        ("stages.5.algorithm.steps=1", "stages has 2 item(s); index 5 is out of range"),
        ("stages.last.algorithm.steps=1", "stages is a list; index it with a number"),
        ("rollout.group_size.x=1", "rollout.group_size is a value, not a section"),
        ("zzz=1", "unknown key zzz; keys there: name, seed"),
    ],
)
def test_an_unknown_path_names_it_with_a_did_you_mean(text, message):
    with pytest.raises(OverrideError) as e:
        apply_overrides(BASE, [text])
    assert message in str(e.value) and "\n" not in str(e.value)


def test_later_overrides_see_earlier_ones():
    out = apply_overrides({"algorithm": {"name": "grpo"}, "env": {"id": "math/arithmetic-v0"}},
                          ["algorithm.name=ppo", "algorithm.params.critic=separate"])
    assert out["algorithm"] == {"name": "ppo", "params": {"critic": "separate"}}
    with pytest.raises(OverrideError, match="algorithm.params.critic"):
        apply_overrides({"algorithm": {"name": "grpo"}}, ["algorithm.params.critic=separate"])


def test_load_config_applies_overrides_before_validation(tmp_path):
    f = tmp_path / "job.yaml"
    f.write_text(YAML)
    config = load_config(f, check_plugins=False, overrides=["stages.1.algorithm.estimator=rloo", "seed=7"])
    assert config.stages[1].algorithm.estimator == "rloo" and config.seed == 7
    from tinker_core.errors import ConfigError

    with pytest.raises(ConfigError, match="stages\\[0\\].algorithm.steps"):  # the value is checked by the schema
        load_config(f, check_plugins=False, overrides=["stages.0.algorithm.steps=-1"])


def test_get_path():
    assert get_path(BASE, ("stages", 1, "algorithm", "estimator")) == (True, "grpo")
    assert get_path(BASE, ("stages", 2)) == (False, None)
    assert get_path(BASE, ("optimizer", "lr")) == (False, None)
