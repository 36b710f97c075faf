"""A GRPO step makes none of the choices its stage already made (issue 50): how episodes are
collected, how the update runs, which env class to build, which loss function to call, whether
agent programs play, whether the engine needs a sync and which autocast context to enter are
decided when the stage is built, so the traced second step of a real job never enters the
modules that make them (the registry, the plugin module, agent programs, the engine sync, the
device module)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from tinker_algos.algorithms.grpo import GRPO
from tinker_algos.run.job import train

DECIDED_ONCE = (
    "tinker_core/registry.py",
    "tinker_algos/plugin.py",
    "tinker_algos/builtins/__init__.py",
    "tinker_algos/rollout/agent_program.py",
    "tinker_algos/distributed/engine_sync.py",
    "tinker_algos/model/device.py",
)


def test_a_grpo_step_enters_none_of_the_modules_its_stage_decided_with(tmp_path: Path, monkeypatch: Any) -> None:
    entered: set[str] = set()
    calls = {"n": 0}
    real_step = GRPO.step

    def hook(frame: Any, event: str, arg: Any) -> None:
        if event == "call":
            entered.add(Path(frame.f_code.co_filename).as_posix())

    def traced_step(self: GRPO, step: int) -> dict[str, float]:
        calls["n"] += 1
        if calls["n"] != 2:  # the first step warms caches up (and resolves the loss once)
            return real_step(self, step)
        sys.setprofile(hook)
        try:
            return real_step(self, step)
        finally:
            sys.setprofile(None)

    monkeypatch.setattr(GRPO, "step", traced_step)
    job = {
        "name": "choices", "seed": 0, "model": {"name": "tiny"},
        "env": {"id": "math/arithmetic-v0", "kwargs": {"digits": 1, "ops": ["+"]}},
        "algorithm": {"name": "grpo", "steps": 2, "eval_every": 0, "eval_size": 2},
        "rollout": {"prompts_per_step": 2, "group_size": 2, "max_new_tokens": 3, "stop": ["\n"]},
        "logging": {"tensorboard": False, "plot": False},
    }
    train(job, run_dir=tmp_path / "run")
    assert calls["n"] == 2
    assert any(f.endswith("tinker_algos/algorithms/grpo.py") for f in entered)  # the trace saw the step
    assert any(f.endswith("tinker_algos/rollout/episodes.py") for f in entered)
    assert [m for m in DECIDED_ONCE if any(f.endswith(m) for f in entered)] == []
