"""A job runner for the multi-node test: ``tinker_algos.train``, held at one checkpoint once.

A job whose ``name`` starts with ``held`` stops making progress right after its checkpoint at
step :data:`HOLD_STEP` is stored -- the first time only (``run_dir/held`` marks it) -- until the
scheduler asks it to stop or its process dies. The test uses the pause to lose the job's node
while the job is provably mid-run; the resumed attempt runs through. Every other job is
``tinker_algos.train`` unchanged (``shared=`` is passed on, so LoRA jobs share model hosts).

Ray workers import this module by name: the test puts this directory on ``PYTHONPATH`` before
it starts the Ray nodes and the scheduler.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import tinker_algos

HOLD_STEP = 3
#: A held job continues after this long even if nothing happened (the test failed elsewhere).
HOLD_LIMIT_S = 300.0


class _Holding:
    """The scheduler's callbacks, with ``on_checkpoint`` holding once at :data:`HOLD_STEP`."""

    def __init__(self, callbacks: Any, run_dir: Path) -> None:
        self._callbacks = callbacks
        self._marker = run_dir / "held"

    def __getattr__(self, name: str) -> Any:
        return getattr(self._callbacks, name)

    def on_checkpoint(self, step: int, path: str) -> None:
        self._callbacks.on_checkpoint(step, path)  # returns once the scheduler stored it
        if step != HOLD_STEP or self._marker.exists():
            return
        self._marker.write_text(f"held at step {step}\n")
        self._callbacks.on_log(f"held at step {step}")
        deadline = time.monotonic() + HOLD_LIMIT_S
        while not self._callbacks.should_stop() and time.monotonic() < deadline:
            time.sleep(0.1)


def train(config: Any, run_dir: Any, callbacks: Any = None, shared: Any = None) -> Any:
    """``tinker_algos.train(config, run_dir=..., callbacks=..., shared=...)``, held as above."""
    if callbacks is not None and str(config.name).startswith("held"):
        callbacks = _Holding(callbacks, Path(run_dir))
    return tinker_algos.train(config, run_dir=run_dir, callbacks=callbacks, shared=shared)
