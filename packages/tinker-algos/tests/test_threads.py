"""``model.threads``: the torch intra-op threads an embedded job runs with."""

from __future__ import annotations

import pytest
import torch

from tinker_algos import train
from tinker_core.config import parse_config
from tinker_core.errors import ConfigError

pytestmark = pytest.mark.usefixtures("algos_and_echo_plugins")


def job(**model):
    return {
        "name": "threads",
        "model": {"name": "tiny", "device": "cpu", **model},
        "env": {"id": "echo/echo-v0", "kwargs": {"words": ["ab", "cd"]}},
        "stages": [{"algorithm": {"name": "sft", "steps": 1, "batch_size": 2, "eval_size": 1}}],
        "rollout": {"max_new_tokens": 2, "stop": ["\n"]},
        "logging": {"tensorboard": False, "plot": False},
    }


def test_a_job_runs_with_the_threads_its_config_asks_for(tmp_path):
    before = torch.get_num_threads()
    seen = []
    try:
        class Spy:
            def on_metrics(self, step, metrics):
                seen.append(torch.get_num_threads())

        assert train(job(threads=1), run_dir=tmp_path / "one", callbacks=Spy()).status == "completed"
        assert seen == [1]
        torch.set_num_threads(before)
        seen.clear()
        assert train(job(), run_dir=tmp_path / "default", callbacks=Spy()).status == "completed"
        assert seen == [before]  # None leaves torch's setting alone
    finally:
        torch.set_num_threads(before)


def test_threads_must_be_positive():
    with pytest.raises(ConfigError, match="model.threads"):
        parse_config(job(threads=0))
