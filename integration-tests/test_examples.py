"""Every job config under examples/ validates with every package and adapter extra installed,
including those whose env comes from an ecosystem adapter (reasoning-gym, TextArena), which a
single package's test env cannot load."""

from __future__ import annotations

from pathlib import Path

import pytest

from tinker_core.config import load_config

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"


@pytest.mark.parametrize("path", sorted(p for p in EXAMPLES.glob("*.yaml") if not p.name.startswith("compare-")), ids=lambda p: p.name)
def test_every_example_validates_with_all_plugins(path: Path) -> None:
    job = load_config(path)
    assert job.resolved_stages()
