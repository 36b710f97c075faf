"""The naming rules (a hub id has one rule for every package) and the shared progress display."""

from __future__ import annotations

import io

import pytest

from tinker_core.names import HUB_ID_RE, is_hub_id
from tinker_core.progress import HINT_STYLE, StepTimes, headline, log_style, progress_bar


@pytest.mark.parametrize("name", ["gpt2", "Qwen/Qwen2.5-0.5B", "org/model_v1.2", "a" * 96, f"{'o' * 96}/{'m' * 96}"])
def test_hub_ids(name: str) -> None:
    assert is_hub_id(name)


@pytest.mark.parametrize(
    "name",
    ["", "/abs/path", "./here", "org/../x", "org/.hidden", "-dash", "a" * 97, "org/name/extra", "org/", "sp ace", "~user"],
)
def test_not_hub_ids(name: str) -> None:
    assert not is_hub_id(name)


def test_the_rule_is_one_pattern() -> None:
    assert HUB_ID_RE.fullmatch("org/name") is not None and HUB_ID_RE.fullmatch("org/.x") is None


def test_hints_and_warnings_stand_out() -> None:
    assert log_style("hint: the reward is flat") == HINT_STYLE
    assert log_style("warning: low memory") == HINT_STYLE
    assert log_style("step 3: loss 1.2") is None


def test_the_progress_bar_shows_steps_eta_and_headline() -> None:
    rich_console = pytest.importorskip("rich.console", reason="progress_bar draws with rich: the tinker-core[progress] extra")
    out = io.StringIO()
    console = rich_console.Console(file=out, width=160, force_terminal=False)
    times = StepTimes()
    times.add({"time/step_s": 2.0})
    with progress_bar(console) as bar:
        task = bar.add_task("training", total=10, eta=times.eta(4, 10), summary=headline({"losses/total": 1.25}))
        bar.update(task, completed=4)
    text = out.getvalue()
    assert "training" in text and "4/10" in text and "eta 0:12" in text and "loss 1.25" in text
