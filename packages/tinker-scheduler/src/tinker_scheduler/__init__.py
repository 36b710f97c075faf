"""OpenTinker's execution runtime: a job scheduler on Ray behind the gRPC ``JobService``.

Importing this package is cheap (no Ray, no gRPC); the names below load on first use:

- :class:`Scheduler` -- the server (``opentinker scheduler start`` runs one), set up by a
  :class:`SchedulerConfig`;
- :class:`JobStore`, :class:`JobState` -- the SQLite job store;
- :func:`plan`, :class:`Resources`, :class:`QueuedJob` -- the queue policy (pure functions).

Test helpers (a deterministic test workload and a small client) are in
:mod:`tinker_scheduler.testing`.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from tinker_scheduler.config import SchedulerConfig
    from tinker_scheduler.policy import QueuedJob, Resources, plan
    from tinker_scheduler.scheduler import Scheduler
    from tinker_scheduler.store import JobState, JobStore

__all__ = ["JobState", "JobStore", "QueuedJob", "Resources", "Scheduler", "SchedulerConfig", "plan"]

_LAZY = {
    "Scheduler": "tinker_scheduler.scheduler",
    "SchedulerConfig": "tinker_scheduler.config",
    "JobStore": "tinker_scheduler.store",
    "JobState": "tinker_scheduler.store",
    "plan": "tinker_scheduler.policy",
    "Resources": "tinker_scheduler.policy",
    "QueuedJob": "tinker_scheduler.policy",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'tinker_scheduler' has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)
