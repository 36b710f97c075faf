"""The keep policy: ``checkpoint.keep_last`` newest checkpoints plus every ``keep_every``-th step."""

from __future__ import annotations

import pytest

from tinker_algos import train
from tinker_algos.run.plan import kept_steps
from tinker_core.config import CheckpointConfig

pytestmark = pytest.mark.usefixtures("algos_and_echo_plugins")


def test_the_keep_policy_keeps_the_newest_and_every_nth():
    assert kept_steps(range(1, 11), 2) == {9, 10}
    assert kept_steps(range(1, 11), 2, 3) == {3, 6, 9, 10}
    assert kept_steps([5, 10, 15, 20, 25], 1, 10) == {10, 20, 25}


def test_a_run_keeps_a_sparse_history_by_keep_every(tmp_path):
    config = {
        "name": "keep", "seed": 3, "model": {"name": "tiny"}, "env": {"id": "echo/echo-v0"},
        "algorithm": {"name": "sft", "steps": 7, "batch_size": 4, "eval_size": 2},
        "checkpoint": {"every": 1, "keep_last": 2, "keep_every": 3}, "logging": {"tensorboard": False, "plot": False},
    }
    train(config, run_dir=tmp_path)
    assert sorted(p.name for p in (tmp_path / "checkpoints").iterdir()) == ["step-000003", "step-000006", "step-000007"]


def test_keep_is_the_older_name_of_keep_last():
    assert CheckpointConfig(keep=5).keep_last == 5 and CheckpointConfig().keep_last == 2
    assert "keep" not in CheckpointConfig(keep=5).model_dump()
    assert CheckpointConfig(keep=3, keep_last=3).keep_last == 3
    with pytest.raises(ValueError, match=r"keep \(5\) is the older name of keep_last \(2\)"):
        CheckpointConfig(keep=5, keep_last=2)
