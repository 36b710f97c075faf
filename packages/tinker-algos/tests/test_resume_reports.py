"""A resumed run reports the metrics of the step it resumes at once more.

The checkpoint of step N is written before the scheduler has stored step N's metrics; a scheduler
killed in between resumes the job from step N and would never get them (found by kill -9 of a
scheduler process, ``integration-tests/reliability/test_kill9.py``). The scheduler's store keeps
one copy of each step, so reporting it again is harmless.
"""

from __future__ import annotations

import pytest

from tinker_algos import train
from tinker_algos.records.metrics import read_metrics

pytestmark = pytest.mark.usefixtures("algos_and_echo_plugins")


class Reports:
    def __init__(self, stop_at: int | None = None) -> None:
        self.stop_at = stop_at
        self.metrics: list[tuple[int, dict[str, float]]] = []

    def on_metrics(self, step: int, metrics: dict[str, float]) -> None:
        self.metrics.append((step, dict(metrics)))

    def should_stop(self) -> bool:
        return self.stop_at is not None and bool(self.metrics) and self.metrics[-1][0] >= self.stop_at


def test_a_resumed_run_reports_its_checkpoint_step_again_then_the_rest(tmp_path):
    config = {
        "name": "reports", "seed": 1, "model": {"name": "tiny"}, "env": {"id": "echo/echo-v0"},
        "algorithm": {"name": "sft", "steps": 4, "batch_size": 4, "eval_size": 2},
        "checkpoint": {"every": 1}, "logging": {"tensorboard": False, "plot": False},
    }
    first = Reports(stop_at=2)
    assert train(config, run_dir=tmp_path, callbacks=first).status == "interrupted"
    assert [step for step, _ in first.metrics] == [1, 2]
    second = Reports()
    assert train(config, run_dir=tmp_path, callbacks=second).status == "completed"
    assert [step for step, _ in second.metrics] == [2, 3, 4]
    assert second.metrics[0][1] == first.metrics[1][1]  # the same values, from metrics.jsonl
    assert [row["step"] for row in read_metrics(tmp_path / "metrics.jsonl")] == [1, 2, 3, 4]  # logged once


def test_a_fresh_run_reports_each_step_once(tmp_path):
    config = {
        "name": "fresh", "seed": 1, "model": {"name": "tiny"}, "env": {"id": "echo/echo-v0"},
        "algorithm": {"name": "sft", "steps": 2, "batch_size": 4, "eval_size": 2},
        "logging": {"tensorboard": False, "plot": False},
    }
    reports = Reports()
    train(config, run_dir=tmp_path, callbacks=reports)
    assert [step for step, _ in reports.metrics] == [1, 2]
