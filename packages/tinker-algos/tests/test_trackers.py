"""Experiment trackers (``logging.report_to``) and the learning-curve panels.

Each tracker library is optional: the offline-mode tests run only where it is installed (they say
so when skipped); a missing library is simulated where the test is about that.
"""

from __future__ import annotations

import importlib.util
import json
import logging
import math
import sys
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from tinker_algos import plugin
from tinker_algos.records import metrics as metrics_mod
from tinker_algos.records import trackers
from tinker_algos.records.metrics import KL_NEGLIGIBLE, MetricsLog, curve_panels, plot_curves
from tinker_core.config import TRACKERS, parse_config
from tinker_core.errors import ConfigError

ROWS = [{"step": s, "stage": "grpo", "env/reward_mean": s / 4, "losses/total": 1.0 / s} for s in (1, 2, 3)]


@pytest.fixture(autouse=True)
def fresh_warnings(monkeypatch):
    monkeypatch.setattr(trackers, "_warned", set())


def job(**logging):
    return parse_config({"name": "tracked", "algorithm": {"name": "sft", "steps": 3}, "logging": logging}, check_plugins=False)


def missing(monkeypatch, name: str, module: str) -> None:
    """Make tracker ``name`` look uninstalled: its import fails and find_spec finds nothing."""
    monkeypatch.setitem(sys.modules, module, None)
    monkeypatch.setitem(TRACKERS, name, (f"no_such_module_for_{name}", TRACKERS[name][1]))


def test_without_tensorboard_the_default_output_is_skipped_with_one_warning(tmp_path, monkeypatch, caplog):
    missing(monkeypatch, "tensorboard", "torch.utils.tensorboard")
    with caplog.at_level(logging.WARNING, logger="tinker_algos.records.trackers"):
        for run in ("a", "b"):
            (tmp_path / run).mkdir()
            log = MetricsLog.for_job(tmp_path / run, job())
            log.log(1, "sft", {"losses/total": 0.5})
            log.close()
    warned = [r.getMessage() for r in caplog.records]
    assert warned == ["logging.report_to: tensorboard needs the no_such_module_for_tensorboard package; "
                      "pip install 'tinker-algos[tensorboard]' (or drop tensorboard); no tensorboard output"]
    assert (tmp_path / "a" / "metrics.jsonl").is_file() and not (tmp_path / "a" / "tensorboard").exists()


def test_a_listed_tracker_without_its_library_is_a_config_error_naming_the_extra(tmp_path, monkeypatch):
    missing(monkeypatch, "wandb", "wandb")
    with pytest.raises(ConfigError) as e:
        MetricsLog.for_job(tmp_path, job(report_to=["wandb"]))
    assert e.value.problems == ["logging.report_to: wandb needs the no_such_module_for_wandb package; "
                                "pip install 'tinker-algos[wandb]' (or drop wandb)"]


def test_train_exits_2_with_one_line_when_a_listed_tracker_is_missing(tmp_path, monkeypatch):
    missing(monkeypatch, "mlflow", "mlflow")
    config = tmp_path / "job.yaml"
    config.write_text("algorithm: {name: sft, steps: 1}\nlogging: {report_to: [mlflow]}\n")
    cli = typer.Typer(add_completion=False)
    cli.command()(lambda: None)
    plugin.opentinker_register_commands(cli=cli)
    result = CliRunner().invoke(cli, ["train", str(config), "--run-dir", str(tmp_path / "run")])
    assert result.exit_code == 2, result.output
    assert "logging.report_to: mlflow needs the no_such_module_for_mlflow package; pip install 'tinker-algos[mlflow]'" in result.output
    assert "Traceback" not in result.output
    assert not (tmp_path / "run").exists()  # nothing ran


class Broken:
    def log(self, step, metrics):
        raise OSError("disk full")

    def close(self):
        pass


class Kept:
    def __init__(self):
        self.seen = []

    def log(self, step, metrics):
        self.seen.append((step, metrics))

    def close(self):
        pass


def test_a_tracker_that_fails_is_dropped_with_one_warning_and_training_logs_on(tmp_path, caplog):
    kept = Kept()
    log = MetricsLog(tmp_path, trackers={"broken": Broken(), "kept": kept})
    with caplog.at_level(logging.WARNING, logger="tinker_algos.records.trackers"):
        log.log(1, "sft", {"losses/total": 0.5, "optim/grad_norm": math.nan})
        log.log(2, "sft", {"losses/total": 0.25})
    assert [r.getMessage() for r in caplog.records] == [
        "broken failed at step 1 (OSError: disk full); no more broken output for this run"]
    assert kept.seen == [(1, {"losses/total": 0.5}), (2, {"losses/total": 0.25})]  # NaN stays in metrics.jsonl only
    assert len((tmp_path / "metrics.jsonl").read_text().splitlines()) == 2


def test_flat_params_are_mlflow_parameter_names():
    assert trackers.flat_params({"a": {"b": 1, "c d": "x"}, "env": {"kwargs": {"k@1": [1, 2]}}, "e": {}}) == {
        "a/b": "1", "a/c d": "x", "env/kwargs/k_1": "[1, 2]", "e": "{}"}


# ---- the curve ---------------------------------------------------------------------------------


def test_panels_without_data_are_left_out():
    assert [p[0] for p in curve_panels(ROWS)] == ["reward", "loss"]


def test_a_multi_agent_run_draws_each_roles_held_out_reward_per_opponent(tmp_path):
    evals = {"eval/reward_mean": 0.4, "eval/alice/reward_mean": 0.5, "eval/bob/reward_mean": 0.3, "eval/alice/win_rate": 0.5}
    one = [{**r, **evals} for r in ROWS]
    assert curve_panels(one)[-1] == ("held-out reward by role", ["eval/alice/reward_mean", "eval/bob/reward_mean"], "linear")
    vs = {f"eval/vs/{o}/{k.removeprefix('eval/')}": v for o in ("conceder", "boulware") for k, v in evals.items()}
    several = [{**r, **evals, **vs} for r in ROWS]
    assert [p for p in curve_panels(several) if p[0].startswith("held-out reward by role")] == [
        ("held-out reward by role vs boulware", ["eval/vs/boulware/alice/reward_mean", "eval/vs/boulware/bob/reward_mean"], "linear"),
        ("held-out reward by role vs conceder", ["eval/vs/conceder/alice/reward_mean", "eval/vs/conceder/bob/reward_mean"], "linear"),
    ]
    pytest.importorskip("matplotlib")
    assert plot_curves(several, tmp_path / "curve.png") == tmp_path / "curve.png"


def test_kl_noise_is_left_out_and_real_kl_is_drawn_on_a_log_scale():
    noise = [{**r, "kl/policy_ref": 1e-14 * r["step"]} for r in ROWS]
    assert "KL" not in [p[0] for p in curve_panels(noise)]
    real = [{**r, "kl/policy_ref": 0.01 * r["step"]} for r in ROWS]
    assert ("KL", ["kl/policy_ref"], "log") in curve_panels(real)
    signed = [{**r, "kl/sample_train": (-1) ** r["step"] * 1e-3} for r in ROWS]
    assert ("KL", ["kl/sample_train"], "symlog") in curve_panels(signed)
    assert max(abs(r["kl/policy_ref"]) for r in noise) < KL_NEGLIGIBLE


def test_the_curve_is_a_png_and_without_matplotlib_it_is_skipped_with_a_warning(tmp_path, monkeypatch, caplog):
    pytest.importorskip("matplotlib", reason="the plot extra (tinker-algos[plot]) is not installed")
    assert plot_curves([{**r, "kl/policy_ref": 0.1} for r in ROWS], tmp_path / "c.png", title="t") == tmp_path / "c.png"
    assert (tmp_path / "c.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    with caplog.at_level(logging.WARNING, logger="tinker_algos.records.trackers"):
        assert plot_curves(ROWS, tmp_path / "d.png") is None
        assert plot_curves(ROWS, tmp_path / "d.png") is None
    assert len(caplog.records) == 1 and "tinker-algos[plot]" in caplog.records[0].getMessage()
    assert not (tmp_path / "d.png").exists()
    assert metrics_mod.plot_curves([], tmp_path / "e.png") is None


# ---- offline modes of the real libraries (where installed) -----------------------------------


def rollout_record(episode: int):
    from tinker_core.episodes import RolloutRecord

    return RolloutRecord(
        kind="train", stage="rl", step=2, group=0, episode=episode, prompt="Say: ab\n",
        turns=[{"role": "policy", "text": "ab", "tokens": 2}], reward=float(episode), advantage=0.5, stop_reason="stop_string", new_tokens=2,
    )


ROLLOUT_ROW = {
    "kind": "train", "stage": "rl", "step": 2, "group": 0, "episode": 1, "reward": 1.0, "advantage": 0.5,
    "stop_reason": "stop_string", "new_tokens": 2, "prompt": "Say: ab\n", "completion": "ab",
}
"""The tracker table row of ``rollout_record(1)``."""


def log_three_steps(run_dir: Path, rollouts: bool = False, **logging_) -> None:
    """Three logged steps; with ``rollouts``, step 2 also records two episodes (a rollouts table)."""
    run_dir.mkdir(exist_ok=True)
    log = MetricsLog.for_job(run_dir, job(**logging_))
    for step in (1, 2, 3):
        if rollouts and step == 2:
            log.log_rollouts(step, [rollout_record(0), rollout_record(1)])
        log.log(step, "sft", {"losses/total": 1.0 / step, "env/reward_mean": step / 4})
    log.close()


def test_wandb_offline_writes_a_run_that_a_resume_continues(tmp_path, monkeypatch):
    pytest.importorskip("wandb", reason="wandb is not installed (pip install 'tinker-algos[wandb]')")
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_SILENT", "true")
    log_three_steps(tmp_path, rollouts=True, report_to=["wandb"])
    run_id = json.loads((tmp_path / "trackers.json").read_text())["wandb"]
    assert list((tmp_path / "wandb").glob(f"offline-run-*-{run_id}/run-{run_id}.wandb"))
    (table,) = (tmp_path / "wandb").glob(f"offline-run-*-{run_id}/files/media/table/rollouts_*.table.json")
    logged = json.loads(table.read_text())
    assert logged["columns"] == list(ROLLOUT_ROW) and logged["data"][1] == list(ROLLOUT_ROW.values())
    log_three_steps(tmp_path, report_to=["wandb"])  # a resumed job: the same W&B run id
    assert json.loads((tmp_path / "trackers.json").read_text())["wandb"] == run_id


def test_mlflow_logs_metrics_and_the_config_to_a_file_store(tmp_path, monkeypatch):
    # tinker-algos[mlflow] (mlflow-skinny) is in this package's dev group, so this runs in CI
    from mlflow.tracking import MlflowClient

    uri = (tmp_path / "mlruns").as_uri()
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")  # MLflow 3 keeps the file store behind a switch
    log_three_steps(tmp_path / "run", rollouts=True, report_to=["mlflow"], project="opentinker-test")
    run_id = json.loads((tmp_path / "run" / "trackers.json").read_text())["mlflow"]
    client = MlflowClient(tracking_uri=uri)
    table = json.loads(Path(client.download_artifacts(run_id, "rollouts/step-000002.json", str(tmp_path))).read_text())
    assert table["columns"] == list(ROLLOUT_ROW) and table["data"][1] == list(ROLLOUT_ROW.values())
    history = client.get_metric_history(run_id, "losses/total")
    assert [(m.step, m.value) for m in history] == [(1, 1.0), (2, 0.5), (3, 1 / 3)]
    run = client.get_run(run_id)
    assert run.data.params["algorithm/name"] == "sft" and run.info.run_name == "tracked"
    assert client.get_experiment(run.info.experiment_id).name == "opentinker-test"


@pytest.mark.skipif(importlib.util.find_spec("trackio") is None, reason="trackio is not installed (pip install 'tinker-algos[trackio]')")
def test_trackio_logs_locally(tmp_path, monkeypatch, capsys, caplog):
    monkeypatch.setenv("TRACKIO_DIR", str(tmp_path / "trackio"))
    if "trackio" in sys.modules:
        pytest.skip("trackio was imported before TRACKIO_DIR could be set")
    caplog.set_level(logging.INFO, logger="tinker_algos.records.trackers")
    log_three_steps(tmp_path / "run", rollouts=True, report_to=["trackio"], project="opentinker-test")
    from trackio import context_vars
    from trackio.sqlite_storage import SQLiteStorage

    # trackio's banner (print()ed with raw colour codes) stays off stdout: INFO log lines, plain
    out = capsys.readouterr().out
    assert "rackio" not in out and "\x1b" not in out, out
    banner = [r.getMessage() for r in caplog.records if r.getMessage().startswith("trackio: ")]
    assert 'trackio: trackio show --project "opentinker-test"' in banner and not [m for m in banner if "\x1b" in m], banner
    assert context_vars.current_run.get() is None  # finished: trackio's atexit hook has nothing to finish (and print) again

    assert SQLiteStorage.get_runs("opentinker-test") == ["tracked"]
    logs = SQLiteStorage.get_logs("opentinker-test", "tracked")
    assert [(row["step"], row["losses/total"]) for row in logs if "rollouts" not in row] == [(1, 1.0), (2, 0.5), (3, 1 / 3)]
    (tables,) = [row for row in logs if "rollouts" in row]
    assert tables["step"] == 2 and tables["rollouts"]["_type"] == "trackio.table"
    assert tables["rollouts"]["_value"][1] == ROLLOUT_ROW


class _Plain:
    """A tracker without tables (TensorBoard's kind)."""

    def __init__(self) -> None:
        self.steps: list[int] = []

    def log(self, step: int, metrics: dict[str, float]) -> None:
        self.steps.append(step)

    def close(self) -> None:
        pass


class _Tables(_Plain):
    def __init__(self, fail: bool = False) -> None:
        super().__init__()
        self.fail = fail
        self.tables: list[tuple[int, str, list[str], list[list]]] = []

    def log_table(self, step: int, key: str, columns: list[str], rows: list[list]) -> None:
        if self.fail:
            raise RuntimeError("table store is down")
        self.tables.append((step, key, columns, rows))


def test_rollout_tables_go_to_the_trackers_that_take_tables_and_a_failing_one_is_dropped(tmp_path, caplog):
    plain, tables, failing = _Plain(), _Tables(), _Tables(fail=True)
    log = MetricsLog(tmp_path, trackers={"tensorboard": plain, "wandb": tables, "mlflow": failing})
    with caplog.at_level(logging.WARNING, logger="tinker_algos.records.trackers"):
        log.log_rollouts(2, [rollout_record(0), rollout_record(1)])
        log.log_rollouts(3, [rollout_record(1)])
    assert [(s, k, c) for s, k, c, _ in tables.tables] == [(2, "rollouts", list(ROLLOUT_ROW)), (3, "rollouts", list(ROLLOUT_ROW))]
    assert tables.tables[0][3][1] == list(ROLLOUT_ROW.values()) and len(tables.tables[0][3]) == 2
    assert set(log.trackers) == {"tensorboard", "wandb"} and plain.steps == []
    assert [r.getMessage() for r in caplog.records] == [
        "mlflow failed at step 2 (RuntimeError: table store is down); no more mlflow output for this run"
    ]
