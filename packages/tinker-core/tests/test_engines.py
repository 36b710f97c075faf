"""The rollout-engine contract's plain pieces: the sync check, pause modes, adapter names, the config field."""

from __future__ import annotations

import numpy as np
import pytest

from tinker_core.config import parse_config
from tinker_core.engines import (
    EngineError,
    WeightSyncError,
    adapter_name,
    check_pause_mode,
    probe_gap,
    verify_sync,
)
from tinker_core.errors import ConfigError


def test_the_sync_check_names_what_differs():
    probe = np.array([[-1.0, -2.0], [-0.5, -0.25]])
    assert verify_sync("w1", 3, digest="ab" * 32, sha256="ab" * 32, probe=probe, learner_probe=probe + 0.01, tolerance=0.05) == pytest.approx(0.01)
    with pytest.raises(WeightSyncError, match=r"w1 reports weights v3, but its parameters hash to cdcdcdcdcdcd, not the record's abababababab"):
        verify_sync("w1", 3, digest="cd" * 32, sha256="ab" * 32)
    with pytest.raises(WeightSyncError, match=r"w1 with weights v3: its probe logprobs differ from the learner's by 0.5 nats"):
        verify_sync("w1", 3, digest=None, sha256=None, probe=probe, learner_probe=probe + 0.5, tolerance=0.05)
    assert verify_sync("w1", 3, digest=None, sha256="ab", probe=None, learner_probe=probe) is None
    assert probe_gap(probe, probe[:1]) == float("inf")  # another shape never passes


def test_pause_modes_and_adapter_names():
    assert [check_pause_mode(m) for m in ("abort", "wait", "keep")] == ["abort", "wait", "keep"]
    with pytest.raises(EngineError, match="pause mode 'sleep' is not one of abort, wait, keep"):
        check_pause_mode("sleep")
    assert adapter_name("my-job", 12) == "my-job-v12"


def test_rollout_engine_defaults_to_hf_and_takes_options():
    base = {"env": {"id": "echo/echo-v0"}, "algorithm": {"name": "grpo"}}
    assert parse_config(base, check_plugins=False).rollout.engine == "hf"
    cfg = parse_config({**base, "rollout": {"engine": "vllm", "engine_options": {"url": "http://h:8000"}}}, check_plugins=False)
    assert (cfg.rollout.engine, cfg.rollout.engine_options) == ("vllm", {"url": "http://h:8000"})


def test_an_unregistered_engine_is_named_with_its_path():
    with pytest.raises(ConfigError) as info:
        parse_config({"env": {"id": "echo/echo-v0"}, "algorithm": {"name": "grpo"}, "rollout": {"engine": "nope"}})
    assert any(p.startswith("rollout.engine: unknown rollout engine 'nope'") for p in info.value.problems), info.value.problems
