"""Resume skips a damaged newest checkpoint: flipped byte, truncated file, missing file, missing manifest.

A real tiny SFT job checkpoints every step; a copy of its run directory has its newest
checkpoint(s) damaged, then ``train()`` resumes it. The job must continue from the newest intact
checkpoint, say which one it skipped and why, and end with exactly the uninterrupted run's
metrics and weights (training is deterministic).
"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest
import typer

from tinker_algos import train
from tinker_algos.training.checkpoint import CheckpointError, verify

pytestmark = pytest.mark.usefixtures("algos_and_echo_plugins")

STEPS = 4


def job() -> dict:
    return {
        "name": "fallback",
        "seed": 3,
        "model": {"name": "tiny"},
        "env": {"id": "echo/echo-v0", "kwargs": {"words": ["ab", "cd", "ef"]}},
        "algorithm": {"name": "sft", "steps": STEPS, "batch_size": 4, "eval_size": 2},
        "optimizer": {"lr": 0.003},
        "checkpoint": {"every": 1, "keep": STEPS + 1},
        "logging": {"tensorboard": False, "plot": False},
    }


@pytest.fixture(scope="module")
def full_run(tmp_path_factory, algos_and_echo_plugins) -> Path:
    """The uninterrupted run: checkpoints step-000001 .. step-000004, all kept."""
    run_dir = tmp_path_factory.mktemp("full")
    assert train(job(), run_dir=run_dir).status == "completed"
    return run_dir


class Logs:
    def __init__(self) -> None:
        self.lines: list[str] = []

    def on_log(self, line: str) -> None:
        self.lines.append(line)


def ckpt(run_dir: Path, step: int) -> Path:
    return run_dir / "checkpoints" / f"step-{step:06d}"


def weights_digest(checkpoint: Path) -> str:
    return json.loads((checkpoint / "trainer" / "manifest.json").read_text())["files"]["model/model.safetensors"]["sha256"]


def flip_byte(f: Path) -> None:
    data = bytearray(f.read_bytes())
    data[len(data) // 2] ^= 0x01
    f.write_bytes(bytes(data))


def truncate(f: Path) -> None:
    f.write_bytes(f.read_bytes()[: f.stat().st_size // 2])


DAMAGE = {
    "flipped-weights-byte": (lambda c: flip_byte(c / "trainer" / "model" / "model.safetensors"), "trainer/model/model.safetensors does not match its SHA-256"),
    "truncated-algorithm-state": (lambda c: truncate(c / "algorithm.pt"), "algorithm.pt has .* bytes, the manifest says"),
    "deleted-rng-state": (lambda c: (c / "trainer" / "rng_state.pt").unlink(), "trainer/rng_state.pt is missing"),
    "deleted-manifest": (lambda c: (c / "manifest.json").unlink(), "manifest.json is missing"),
}


@pytest.mark.parametrize("case", list(DAMAGE))
def test_resume_skips_a_damaged_newest_checkpoint_and_ends_as_the_uninterrupted_run(
    full_run, tmp_path, case, deterministic_metrics
):
    damage, reason = DAMAGE[case]
    run_dir = tmp_path / "run"
    shutil.copytree(full_run, run_dir)
    damage(ckpt(run_dir, STEPS))
    logs = Logs()
    result = train(job(), run_dir=run_dir, callbacks=logs)
    assert result.status == "completed" and result.step == STEPS
    skipped = [line for line in logs.lines if line.startswith("skipping damaged checkpoint")]
    assert len(skipped) == 1 and skipped[0].startswith(f"skipping damaged checkpoint {ckpt(run_dir, STEPS)}: ")
    assert re.search(reason, skipped[0]), skipped[0]
    assert f"resuming from {ckpt(run_dir, STEPS - 1)} (step {STEPS - 1})" in logs.lines
    assert deterministic_metrics(run_dir) == deterministic_metrics(full_run)
    assert verify(ckpt(run_dir, STEPS)) is True  # rewritten, intact
    assert weights_digest(ckpt(run_dir, STEPS)) == weights_digest(ckpt(full_run, STEPS))


def test_several_damaged_checkpoints_are_skipped_down_to_the_newest_intact_one(full_run, tmp_path, deterministic_metrics):
    run_dir = tmp_path / "run"
    shutil.copytree(full_run, run_dir)
    flip_byte(ckpt(run_dir, 4) / "trainer" / "trainer_state.pt")
    (ckpt(run_dir, 3) / "progress.json").unlink()
    logs = Logs()
    assert train(job(), run_dir=run_dir, callbacks=logs).status == "completed"
    skipped = [line for line in logs.lines if line.startswith("skipping damaged checkpoint")]
    assert [line.split(":")[0].rsplit("/", 1)[1] for line in skipped] == ["step-000004", "step-000003"]
    assert "progress.json is missing" in skipped[1]
    assert f"resuming from {ckpt(run_dir, 2)} (step 2)" in logs.lines
    assert deterministic_metrics(run_dir) == deterministic_metrics(full_run)


def test_no_intact_checkpoint_is_a_clear_error_and_deletes_nothing(full_run, tmp_path):
    run_dir = tmp_path / "run"
    shutil.copytree(full_run, run_dir)
    for step in range(1, STEPS + 1):
        (ckpt(run_dir, step) / "trainer" / "rng_state.pt").unlink()
    logs = Logs()
    with pytest.raises(CheckpointError, match=r"no intact checkpoint to resume from in .*checkpoints: all 4 are damaged"):
        train(job(), run_dir=run_dir, callbacks=logs)
    assert len([line for line in logs.lines if line.startswith("skipping damaged checkpoint")]) == STEPS
    assert all(ckpt(run_dir, step).is_dir() for step in range(1, STEPS + 1))


def test_a_checkpoint_from_before_checksums_is_resumed_unverified(full_run, tmp_path, deterministic_metrics):
    """No run manifest and no ``files`` in the trainer's manifest: what older versions wrote."""
    run_dir = tmp_path / "run"
    shutil.copytree(full_run, run_dir)
    shutil.rmtree(ckpt(run_dir, STEPS))
    old = ckpt(run_dir, STEPS - 1)
    (old / "manifest.json").unlink()
    trainer_manifest = json.loads((old / "trainer" / "manifest.json").read_text())
    del trainer_manifest["files"]
    (old / "trainer" / "manifest.json").write_text(json.dumps(trainer_manifest))
    logs = Logs()
    assert train(job(), run_dir=run_dir, callbacks=logs).status == "completed"
    assert f"checkpoint {old} has no checksums (written by an older version); loading it unverified" in logs.lines
    assert f"resuming from {old} (step {STEPS - 1})" in logs.lines
    assert deterministic_metrics(run_dir) == deterministic_metrics(full_run)


def test_opentinker_train_reports_no_intact_checkpoint_in_one_line_with_exit_2(full_run, tmp_path):
    from typer.testing import CliRunner

    from tinker_algos import plugin

    run_dir = tmp_path / "run"
    shutil.copytree(full_run, run_dir)
    for step in range(1, STEPS + 1):
        truncate(ckpt(run_dir, step) / "algorithm.pt")
    config = tmp_path / "job.json"
    config.write_text(json.dumps(job()))
    cli = typer.Typer(add_completion=False)
    cli.command()(lambda: None)  # keeps `train` a subcommand, as in `opentinker`
    plugin.opentinker_register_commands(cli=cli)
    result = CliRunner().invoke(cli, ["train", str(config), "--run-dir", str(run_dir)])
    assert result.exit_code == 2, result.output
    assert "error: no intact checkpoint to resume from" in result.output and "Traceback" not in result.output
