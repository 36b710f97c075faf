"""Shared fixtures: one Ray for the whole session, schedulers running the test workload.

Ray settings for this machine (see shared ENVIRONMENT notes): no per-session uv virtualenv for
workers, no token auth, temp files in a known place.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from hypothesis import settings

os.environ.setdefault("RAY_ENABLE_UV_RUN_RUNTIME_ENV", "0")
os.environ.setdefault("RAY_AUTH_MODE", "disabled")
os.environ.setdefault("RAY_TMPDIR", str(Path(tempfile.gettempdir()) / "opentinker-scheduler-tests-ray"))
Path(os.environ["RAY_TMPDIR"]).mkdir(parents=True, exist_ok=True)

# The fuzzers run a fixed sequence of examples by default, so a run (CI's too) does not depend on
# luck; HYPOTHESIS_PROFILE=explore draws new examples each run to look for new failures.
settings.register_profile("fixed", derandomize=True, deadline=None)  # no time limit: speed is measured by bench/, not asserted
settings.register_profile("explore", derandomize=False, deadline=None)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "fixed"))


@pytest.fixture(scope="session")
def ray_session() -> Iterator[None]:
    import ray

    ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False, namespace="opentinker-tests")
    yield
    ray.shutdown()


@pytest.fixture
def make_scheduler(ray_session, tmp_path) -> Iterator[Callable[..., object]]:
    """``make_scheduler(**kwargs)`` starts an in-process Scheduler on 127.0.0.1 port 0 that runs
    the sleep_train test workload; every one is stopped after the test."""
    from tinker_scheduler import Scheduler
    from tinker_scheduler.testing import SLEEP_TRAIN

    started: list[Scheduler] = []

    def make(**kwargs: object) -> Scheduler:
        options: dict[str, object] = {
            "port": 0,
            "db": tmp_path / f"scheduler-{len(started)}.db",
            "runs_dir": tmp_path / "runs",
            "runner": SLEEP_TRAIN,
            "tick_s": 0.05,
            "shutdown_timeout": 30.0,
        }
        options.update(kwargs)
        scheduler = Scheduler(**options).start()  # type: ignore[arg-type]
        started.append(scheduler)
        return scheduler

    yield make
    for scheduler in started:
        scheduler.stop()
