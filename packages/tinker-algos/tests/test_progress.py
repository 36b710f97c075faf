"""What ``opentinker train`` shows while it runs: the status from the first second, the bar, the
learning-signal hint; Hugging Face's own progress bars stay off."""

from __future__ import annotations

import re

import numpy as np
import pytest
import typer
from typer.testing import CliRunner

from tinker_algos import plugin
from tinker_algos.records.health import FLAT_HINT, TiedRewardsHint, all_groups_tied
from tinker_algos.run.job import train

TERMINAL = {"TTY_COMPATIBLE": "1", "TTY_INTERACTIVE": "1", "COLUMNS": "150", "HF_HUB_DISABLE_PROGRESS_BARS": "0"}
ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")


def as_seen(stream: str) -> str:
    """The lines a terminal keeps of ``stream``: what follows the last carriage return of each
    line (the live bar redraws itself after one), without colour codes."""
    return "\n".join(ANSI.sub("", line.split("\r")[-1]) for line in stream.split("\n"))

# the tiny random model never says the echo env's word: every reward is 0, every group tied
FLAT_GRPO = """
name: flat
seed: 0
model: {name: tiny}
env: {id: echo/echo-v0}
algorithm: {name: grpo, steps: 4, eval_size: 2}
rollout: {prompts_per_step: 2, group_size: 2, max_new_tokens: 3}
checkpoint: {every: 2}
logging: {tensorboard: false, plot: false}
"""


class Recorder:
    def __init__(self) -> None:
        self.calls: list[tuple[str, str]] = []

    def on_status(self, text: str, short: str | None = None) -> None:
        self.calls.append(("status", text))

    def on_log(self, line: str) -> None:
        self.calls.append(("log", line))

    def on_metrics(self, step: int, metrics: dict[str, float]) -> None:
        self.calls.append(("metrics", str(step)))


def test_the_hint_needs_three_tied_steps_in_a_row_and_is_given_once():
    logged: list[str] = []
    hint = TiedRewardsHint(logged.append)
    groups = np.array([0, 0, 1, 1])
    tied, signal = np.array([1.0, 1.0, 0.0, 0.0]), np.array([1.0, 0.0, 0.0, 0.0])
    for rewards in (tied, tied, signal, tied, tied):
        hint.observe(rewards, groups)
    assert logged == []  # the step with a signal started the count again
    for _ in range(4):
        hint.observe(tied, groups)
    assert logged == [FLAT_HINT.format(n=3)]
    assert all_groups_tied(np.array([0.5]), np.array([7])) and not all_groups_tied(signal, groups)


def test_a_flat_grpo_run_reports_its_status_and_says_once_that_rewards_tie(tmp_path):
    recorder = Recorder()
    train(FLAT_GRPO, run_dir=tmp_path / "run", callbacks=recorder)
    statuses = [text for kind, text in recorder.calls if kind == "status"]
    assert statuses[0] == "loading model tiny"
    assert re.fullmatch(r"model tiny loaded in \d+\.\d s: [\d.]+ [KM]? ?parameters, [\d.]+ [KM]?B float32 on cpu", statuses[1]), statuses[1]
    assert statuses[2] == "first step of stage 0 (grpo): sampling, scoring, learning"
    hints = [text for kind, text in recorder.calls if kind == "log" and text.startswith("hint:")]
    assert hints == [FLAT_HINT.format(n=3)]
    order = [kind if kind != "log" or not text.startswith("hint:") else "hint" for kind, text in recorder.calls]
    assert order.index("hint") > [i for i, k in enumerate(order) if k == "metrics"][1]  # after the 3rd step's sampling
    assert "SFT" in hints[0] and "group_size" in hints[0] and "easier env" in hints[0] and "reward shaping" in hints[0]


def test_train_on_a_terminal_shows_the_status_lines_then_the_bar_and_no_hugging_face_bars(tmp_path, monkeypatch):
    monkeypatch.setenv("OPENTINKER_LOAD_PLUGINS", "tinker-algos,tinker-env-echo")
    config = tmp_path / "job.yaml"
    config.write_text(FLAT_GRPO)
    cli = typer.Typer(add_completion=False)
    cli.command()(lambda: None)
    plugin.opentinker_register_commands(cli=cli)
    result = CliRunner().invoke(cli, ["train", str(config), "--run-dir", str(tmp_path / "run")], env=TERMINAL)
    assert result.exit_code == 0, result.output
    out = as_seen(result.output)
    phases = ["importing torch and transformers", "loading model tiny", "model tiny loaded in", "first step of stage 0 (grpo)"]
    where = [out.find(p) for p in phases]
    assert -1 not in where and where == sorted(where), out
    assert re.search(r"^ +\d+\.\ds  importing torch and transformers$", out, re.M)  # time-stamped lines above the bar
    assert "hint: for 3 steps in a row" in out and "checkpoint at step 2:" in out
    final_bar = next(line for line in reversed(out.splitlines()) if "4/4" in line)
    assert re.search(r"training .*4/4 .*reward 0 +eval acc 0 +loss ", final_bar) and "eta" not in final_bar, out
    assert "Writing model shards" not in out and "Loading weights" not in out


TWO_STAGES = FLAT_GRPO.replace("algorithm: {name: grpo, steps: 4, eval_size: 2}", """stages:
  - {name: first, algorithm: {name: grpo, steps: 3, eval_size: 2}}
  - {name: second, algorithm: {name: grpo, steps: 2, eval_size: 2}}""")


@pytest.fixture
def verbosity():
    """Set the output level for one test (what -q / -v / --log-level do), then put it back."""
    import logging

    from tinker_core.progress import set_verbosity

    root_level = logging.getLogger().level
    yield set_verbosity
    set_verbosity(logging.WARNING)
    logging.getLogger().setLevel(root_level)


def run_piped(tmp_path, monkeypatch, config: str) -> str:
    monkeypatch.setenv("OPENTINKER_LOAD_PLUGINS", "tinker-algos,tinker-env-echo")
    (tmp_path / "job.yaml").write_text(config)
    cli = typer.Typer(add_completion=False)
    cli.command()(lambda: None)
    plugin.opentinker_register_commands(cli=cli)
    result = CliRunner().invoke(cli, ["train", str(tmp_path / "job.yaml"), "--run-dir", str(tmp_path / "run"), "--fresh"],
                                env={"COLUMNS": "80"})
    assert result.exit_code == 0, result.output
    return result.output


def test_piped_train_output_has_whole_lines_one_step_numbering_and_no_time_left(tmp_path, monkeypatch, verbosity):
    out = run_piped(tmp_path, monkeypatch, TWO_STAGES)
    lines = out.splitlines()
    assert "stage 0 'first': grpo, steps 1..3" in lines and "stage 1 'second': grpo, steps 4..5" in lines, out
    hint = next(line for line in lines if line.startswith("hint:"))
    assert len(hint) > 80 and hint.endswith("(partial credit)."), out  # one line, not wrapped at 80 columns
    assert "eta" not in out and "\r" not in out and "\x1b" not in out and "━" not in out, out
    assert re.search(r"^training: 5/5 steps in \d+:\d\d  reward 0  eval acc 0  loss ", out, re.M), out
    assert "importing torch" not in out  # status lines are for a terminal, or -v


def test_quiet_keeps_hints_and_the_result_and_verbose_adds_status_lines(tmp_path, monkeypatch, verbosity):
    import logging

    verbosity(logging.ERROR)  # -q
    quiet = run_piped(tmp_path, monkeypatch, FLAT_GRPO)
    assert "checkpoint at" not in quiet and "stage 0" not in quiet and "training:" not in quiet, quiet
    assert "hint: for 3 steps in a row" in quiet and "completed: 4 steps" in quiet, quiet
    verbosity(logging.INFO)  # -v
    verbose = run_piped(tmp_path, monkeypatch, FLAT_GRPO)
    assert re.search(r"^ +\d+\.\ds  importing torch and transformers$", verbose, re.M), verbose
    assert re.search(r"^ +\d+\.\ds  first step of stage 0 \(grpo\)", verbose, re.M), verbose
