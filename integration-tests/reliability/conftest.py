"""The reliability suite (issue 12): schedulers as real processes, killed and loaded.

Ray settings for this machine: no per-session uv virtualenv for workers, no token auth, and a
short temp directory (Ray's unix sockets live there). Every scheduler process a test starts is
killed with its whole session (its local Ray) afterwards.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

pytest.importorskip("tinker_scheduler", reason="needs tinker-scheduler (the integration session installs it)")

from tinker_scheduler.testing import SchedulerProcess  # noqa: E402

os.environ.setdefault("RAY_ENABLE_UV_RUN_RUNTIME_ENV", "0")
os.environ.setdefault("RAY_AUTH_MODE", "disabled")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("RAY_TMPDIR", str(Path(tempfile.gettempdir()) / "ot-reliability-ray"))
Path(os.environ["RAY_TMPDIR"]).mkdir(parents=True, exist_ok=True)


@pytest.fixture
def processes() -> Iterator[list[SchedulerProcess]]:
    """Append each :class:`SchedulerProcess` a test starts; all are killed after it."""
    started: list[SchedulerProcess] = []
    yield started
    for process in started:
        process.cleanup()
