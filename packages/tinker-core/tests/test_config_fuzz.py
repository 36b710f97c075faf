"""Fuzzing the job config (issue 12's reliability suite, first part): whatever YAML a user or an
attacker sends, loading it either gives a valid JobConfig or one ConfigError with readable
lines -- never another exception, never a traceback. Bounded: a fixed number of examples."""

from __future__ import annotations

import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tinker_core.config import JobConfig, load_config, parse_config
from tinker_core.errors import ConfigError

SECTIONS = ["name", "seed", "model", "lora", "env", "algorithm", "stages", "rollout", "optimizer",
            "resources", "checkpoint", "logging", "priority"]
FIELDS = ["name", "steps", "group_size", "prompts_per_step", "max_new_tokens", "id", "kwargs", "params",
          "multi_agent", "mode", "opponent", "critic", "lr", "rank", "dtype", "device", "every", "keep",
          "estimator", "loss", "loss_config", "aggregation", "beta", "data", "temperature", "stop"]

scalars = st.one_of(
    st.none(), st.booleans(), st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=True, allow_infinity=True), st.text(max_size=40),
    st.sampled_from(["sft", "grpo", "ppo", "dpo", "tiny", "math/arithmetic-v0", "..", "/etc", "1e9", "cuda:99"]),
)
values = st.recursive(
    scalars,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4),
        st.dictionaries(st.sampled_from(FIELDS) | st.text(max_size=8), inner, max_size=5),
    ),
    max_leaves=20,
)
configs = st.dictionaries(st.sampled_from(SECTIONS), values, max_size=8)


def _judge(load) -> None:  # noqa: ANN001
    try:
        config = load()
    except ConfigError as e:
        lines = e.problems if hasattr(e, "problems") else str(e).splitlines()
        assert lines and all(isinstance(line, str) and line for line in lines)
        assert "Traceback" not in str(e)
    else:
        assert isinstance(config, JobConfig)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(configs)
def test_any_mapping_gives_a_config_or_one_config_error(data: dict) -> None:
    _judge(lambda: parse_config(data, check_plugins=False))


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.one_of(st.text(max_size=400), st.binary(max_size=400).map(lambda b: b.decode("latin-1"))))
def test_any_text_gives_a_config_or_one_config_error(text: str) -> None:
    _judge(lambda: load_config(text, check_plugins=False))


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(configs)
def test_any_config_round_trips_through_yaml_text(data: dict) -> None:
    try:
        text = yaml.safe_dump(data)
    except yaml.YAMLError:
        return
    _judge(lambda: load_config(text, check_plugins=False))
