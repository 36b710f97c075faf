"""Shared fixtures: the tiny model and a tiny-model server, a LoRA adapter trained on arithmetic,
SmolLM2 from the shared cache, and a real uvicorn server on a free localhost port.

Nothing here touches the network: ``HF_HUB_OFFLINE=1`` is set before any HF library is imported
and ``OPENTINKER_CACHE`` points into the session's temp dir (real models are read from the
cache the run began with).
"""

from __future__ import annotations

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import socket  # noqa: E402
import time  # noqa: E402
import types  # noqa: E402
from collections.abc import Iterator  # noqa: E402
from contextlib import contextmanager  # noqa: E402
from pathlib import Path  # noqa: E402

import pytest  # noqa: E402
import torch  # noqa: E402
from hypothesis import settings  # noqa: E402

# The fuzzers run a fixed sequence of examples by default (as in tinker-scheduler's tests);
# HYPOTHESIS_PROFILE=explore draws new examples each run.
settings.register_profile("fixed", derandomize=True, deadline=None)  # no time limit: speed is measured by bench/, not asserted
settings.register_profile("explore", derandomize=False, deadline=None)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "fixed"))

torch.set_num_threads(1)

from tinker_algos.hub.cache import cache_root  # noqa: E402

SHARED_CACHE = cache_root()
"""The cache as the test run began: real models are kept there between runs."""

ARITHMETIC = {"digits": 1, "ops": ["+"]}


@pytest.fixture(scope="session", autouse=True)
def _opentinker_cache(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    cache = tmp_path_factory.mktemp("opentinker-cache")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("OPENTINKER_CACHE", str(cache))
        yield cache


@pytest.fixture(scope="session")
def tiny_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The tiny preset (seed 0) saved in HF format, built once per session."""
    from tinker_algos.model.models import build_tiny_model

    return build_tiny_model(tmp_path_factory.mktemp("models") / "tiny", seed=0)


@pytest.fixture(scope="session")
def smollm2_dir() -> Path:
    """SmolLM2-135M-Instruct from the shared cache (fetched and imported on a machine's first run)."""
    from tinker_algos.hub import fetch_preset

    return fetch_preset("smollm2-135m-instruct", cache=SHARED_CACHE)


@pytest.fixture(scope="session")
def chat_dir(tmp_path_factory: pytest.TempPathFactory, smollm2_dir: Path) -> Path:
    """A small random-init Llama with SmolLM2's tokenizer and ChatML template (fast to sample)."""
    from tinker_algos.model.tokenizer import build_tiny_chat_model

    return build_tiny_chat_model(tmp_path_factory.mktemp("models") / "chat-small", smollm2_dir)


@pytest.fixture
def policy(tiny_dir: Path):
    from tinker_algos.model.models import PolicyModel

    return PolicyModel.load(tiny_dir, device="cpu", precision="fp32")


def arithmetic_job(model: str, steps: int = 20) -> dict:
    """A short LoRA SFT job on one-digit sums (held-out problems: ``split="test"``): enough steps to
    teach the tiny model the answer format (a number, then a newline), not the sums themselves."""
    return {
        "name": "serve-arithmetic",
        "seed": 0,
        "model": {"name": model, "device": "cpu"},
        "env": {"id": "math/arithmetic-v0", "kwargs": ARITHMETIC, "eval_kwargs": {**ARITHMETIC, "split": "test"}},
        "lora": {"rank": 8, "alpha": 16},
        "stages": [{"algorithm": {"name": "sft", "steps": steps, "batch_size": 32, "eval_size": 10}}],
        "rollout": {"prompts_per_step": 8, "group_size": 1, "max_new_tokens": 4, "stop": ["\n"]},
        "optimizer": {"lr": 0.01},
        "checkpoint": {"every": steps, "keep": 1},
        "logging": {"tensorboard": False, "plot": False},
    }


@pytest.fixture(scope="session")
def arithmetic_run(tiny_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A run directory of ``opentinker train``: a LoRA adapter of the tiny model taught one-digit sums."""
    import tinker_core.registry
    from tinker_algos import train

    run_dir = tmp_path_factory.mktemp("runs") / "arithmetic"
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("OPENTINKER_LOAD_PLUGINS", "tinker-algos,tinker-env-math")
        mp.delenv("OPENTINKER_DISABLE_PLUGIN_AUTOLOAD", raising=False)
        tinker_core.registry.reset_plugins()
        try:
            assert train(arithmetic_job(str(tiny_dir)), run_dir=run_dir).status == "completed"
        finally:
            tinker_core.registry.reset_plugins()
    return run_dir


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextmanager
def live_server(app) -> Iterator[str]:
    """Run ``app`` under uvicorn on a free localhost port in a thread; yields its base URL."""
    import uvicorn

    from tinker_core.http_limits import serve_in_thread

    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=0, log_level="warning", lifespan="on"))
    with serve_in_thread(server, "test-live-server", "the test server") as port:
        yield f"http://127.0.0.1:{port}"


def wait_until(condition, what: str, timeout: float = 60.0) -> None:
    """Poll ``condition`` until it holds (a hang guard, not a timing assertion)."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"gave up waiting for {what}")
        time.sleep(0.02)


@pytest.fixture(scope="session")
def helpers() -> types.SimpleNamespace:
    """``live_server(app)``, ``wait_until(cond, what)``, ``free_port()`` and the ``arithmetic`` env kwargs."""
    return types.SimpleNamespace(live_server=live_server, wait_until=wait_until, free_port=free_port, arithmetic=ARITHMETIC)
