"""Experiment trackers: where each logged step goes besides ``metrics.jsonl``.

``logging.report_to`` in the job config names them: ``tensorboard`` (the default), ``wandb``,
``mlflow``, ``trackio``. Each library is optional and imported only when a job asks for it
(``pip install "tinker-algos[wandb]"``, ...). A tracker the job *lists* but cannot import is a
:class:`~tinker_core.errors.ConfigError` naming the extra; the default TensorBoard output, when
tensorboard is not installed, is skipped with one warning. A tracker that raises while logging is
dropped with one warning: a dashboard never stops a training run. Non-finite values stay in
``metrics.jsonl`` and are not sent to trackers.

The episodes a run records (``logging.rollouts``, :mod:`tinker_algos.records.recording`) go to the trackers
that take tables (:class:`TableTracker`: wandb, mlflow, trackio) as a table ``rollouts`` each time
they are written (:func:`log_table_to`), with the columns of
:data:`tinker_algos.records.recording.TABLE_COLUMNS`.

Where each writes (a resumed run continues the same tracker run; the ids live in
``trackers.json`` in the run directory):

- ``tensorboard``: ``<run_dir>/tensorboard/`` (events past the resume step are dropped);
- ``wandb``: a run named after the job in project ``logging.project``, files under
  ``<run_dir>/wandb/``; ``WANDB_MODE=offline`` keeps it on disk (``wandb sync`` uploads later);
- ``mlflow``: a run in experiment ``logging.project`` in the store MLflow picks
  (``MLFLOW_TRACKING_URI``: a tracking server, ``sqlite:///mlflow.db``, or a local ``file:``
  store with ``MLFLOW_ALLOW_FILE_STORE=true``); the job config is logged as parameters;
- ``trackio``: a local trackio project ``logging.project`` (``TRACKIO_DIR``, else trackio's
  default), a run named after the job; ``trackio show`` opens the dashboard. trackio keeps one
  current run per thread, so jobs sharing a model host should not both use it.
"""

from __future__ import annotations

import contextlib
import io
import json
import logging
import math
import re
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from tinker_core.config import TRACKERS, LoggingConfig, missing_tracker
from tinker_core.errors import ConfigError

logger = logging.getLogger(__name__)
_warned: set[str] = set()
IDS_FILE = "trackers.json"


def warn_once(key: str, message: str) -> None:
    """Log ``message`` as a warning the first time ``key`` is seen in this process."""
    if key not in _warned:
        _warned.add(key)
        logger.warning(message)


@dataclass(frozen=True)
class RunInfo:
    """What a tracker names its run with: the run directory, the job's name, the project
    (``logging.project``) and the job config (as JSON-ready values)."""

    dir: Path
    name: str
    project: str
    config: dict[str, Any]


class Tracker(Protocol):
    """One experiment tracker of a run: ``log`` gets each logged step's finite values, ``close``
    ends the run (flushes, marks it finished)."""

    def log(self, step: int, metrics: dict[str, float]) -> None: ...

    def close(self) -> None: ...


class TableTracker(Tracker, Protocol):
    """A tracker that also takes tables: ``log_table(step, key, columns, rows)``."""

    def log_table(self, step: int, key: str, columns: list[str], rows: list[list[Any]]) -> None: ...


class TensorBoardTracker:
    def __init__(self, run_dir: Path, resume_step: int) -> None:
        from torch.utils.tensorboard import SummaryWriter  # ImportError without tensorboard

        self.writer = SummaryWriter(log_dir=str(run_dir / "tensorboard"), purge_step=resume_step + 1)

    def log(self, step: int, metrics: dict[str, float]) -> None:
        for k, v in metrics.items():
            self.writer.add_scalar(k, v, step)

    def close(self) -> None:
        self.writer.flush()
        self.writer.close()


class WandbTracker:
    def __init__(self, run: RunInfo, ids: dict[str, str]) -> None:
        import wandb

        ids.setdefault("wandb", uuid.uuid4().hex[:12])
        self.run = wandb.init(
            project=run.project, name=run.name, id=ids["wandb"], dir=str(run.dir),
            config=run.config, resume="allow", reinit="create_new",
            settings=wandb.Settings(console="off", silent=True),
        )

    def log(self, step: int, metrics: dict[str, float]) -> None:
        self.run.log(metrics, step=step)

    def log_table(self, step: int, key: str, columns: list[str], rows: list[list[Any]]) -> None:
        import wandb

        self.run.log({key: wandb.Table(columns=columns, data=rows)}, step=step)

    def close(self) -> None:
        self.run.finish()


class MlflowTracker:
    def __init__(self, run: RunInfo, ids: dict[str, str]) -> None:
        from mlflow.entities import Param
        from mlflow.tracking import MlflowClient

        self.client = MlflowClient()  # MLflow's own choice of store: MLFLOW_TRACKING_URI, else its default
        experiment = self.client.get_experiment_by_name(run.project)
        experiment_id = experiment.experiment_id if experiment else self.client.create_experiment(run.project)
        self.run_id = ids.get("mlflow")
        if self.run_id is not None:
            try:
                self.client.get_run(self.run_id)
            except Exception:  # a store that lost it (another tracking URI): start a new run
                self.run_id = None
        if self.run_id is None:
            self.run_id = self.client.create_run(experiment_id, run_name=run.name).info.run_id
            params = [Param(k, v) for k, v in flat_params(run.config).items()]
            for i in range(0, len(params), 100):  # MLflow takes at most 100 params per batch
                self.client.log_batch(self.run_id, params=params[i:i + 100])
        ids["mlflow"] = self.run_id

    def log(self, step: int, metrics: dict[str, float]) -> None:
        from mlflow.entities import Metric

        now = int(time.time() * 1000)
        self.client.log_batch(self.run_id, metrics=[Metric(k, v, now, step) for k, v in metrics.items()])

    def log_table(self, step: int, key: str, columns: list[str], rows: list[list[Any]]) -> None:
        """One JSON table artifact per step: ``<key>/step-N.json`` (MLflow's ``log_table``)."""
        data = {c: [row[i] for row in rows] for i, c in enumerate(columns)}
        self.client.log_table(self.run_id, data=data, artifact_file=f"{key}/step-{step:06d}.json")

    def close(self) -> None:
        self.client.set_terminated(self.run_id)


ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")


@contextlib.contextmanager
def banner_to_log(library: str) -> Iterator[None]:
    """Run a library call that ``print``s a banner (trackio's, with raw colour codes) without it
    reaching the command's stdout: its lines go to this module's logger at INFO (``-v`` shows
    them), colour codes removed."""
    out = io.StringIO()
    try:
        with contextlib.redirect_stdout(out):
            yield
    finally:
        for line in ANSI.sub("", out.getvalue()).splitlines():
            if line.strip():
                logger.info("%s: %s", library, line.strip().removeprefix("* "))


class TrackioTracker:
    def __init__(self, run: RunInfo) -> None:
        import trackio

        with banner_to_log("trackio"):
            self.run = trackio.init(
                project=run.project, name=run.name, config=run.config,
                resume="allow", embed=False, auto_log_gpu=False, auto_log_cpu=False,
            )

    def log(self, step: int, metrics: dict[str, float]) -> None:
        self.run.log(metrics, step=step)

    def log_table(self, step: int, key: str, columns: list[str], rows: list[list[Any]]) -> None:
        import trackio

        self.run.log({key: trackio.Table(columns=columns, data=rows)}, step=step)

    def close(self) -> None:
        from trackio import context_vars

        with banner_to_log("trackio"):
            self.run.finish()
        if context_vars.current_run.get() is self.run:  # else trackio's atexit hook finishes it again, printing again
            context_vars.current_run.set(None)


def flat_params(config: dict[str, Any], prefix: str = "") -> dict[str, str]:
    """``{"a": {"b": 1}}`` -> ``{"a/b": "1"}``: a config as MLflow parameters (keys made of the
    characters MLflow allows, values cut at 500 characters)."""
    out: dict[str, str] = {}
    for key, value in config.items():
        name = prefix + re.sub(r"[^\w\-. /]", "_", str(key))
        if isinstance(value, dict) and value:
            out.update(flat_params(value, name + "/"))
        else:
            out[name] = json.dumps(value)[:500] if not isinstance(value, str) else value[:500]
    return out


def open_trackers(run_dir: Path, logging_config: LoggingConfig, *, name: str = "job",
                  config: dict[str, Any] | None = None, resume_step: int = 0) -> dict[str, Tracker]:
    """The trackers ``logging_config`` asks for, started for run ``name`` (its job config
    ``config``) in ``run_dir``. Raises :class:`ConfigError` for a tracker listed in
    ``report_to`` whose library does not import; the default TensorBoard output is skipped then."""
    ids_path = run_dir / IDS_FILE
    ids: dict[str, str] = json.loads(ids_path.read_text(encoding="utf-8")) if ids_path.is_file() else {}
    run = RunInfo(run_dir, name, logging_config.project, config or {})
    opened: dict[str, Tracker] = {}
    for tracker in logging_config.trackers():
        try:
            if tracker == "tensorboard":
                opened[tracker] = TensorBoardTracker(run_dir, resume_step)
            elif tracker == "wandb":
                opened[tracker] = WandbTracker(run, ids)
            elif tracker == "mlflow":
                opened[tracker] = MlflowTracker(run, ids)
            elif tracker == "trackio":
                opened[tracker] = TrackioTracker(run)
        except ImportError as e:
            from importlib.util import find_spec

            if find_spec(TRACKERS[tracker][0]) is None:
                problem = missing_tracker(tracker)
            else:  # installed, but something it imports is missing or broken
                problem = f"logging.report_to: {tracker} is installed but does not import ({type(e).__name__}: {e})"
            if logging_config.report_to is not None:
                close_all(opened)
                raise ConfigError([problem]) from None
            warn_once(f"missing:{tracker}", f"{problem}; no {tracker} output")
    if ids:
        ids_path.write_text(json.dumps(ids, sort_keys=True), encoding="utf-8")
    return opened


def log_to(trackers: dict[str, Tracker], step: int, metrics: dict[str, float]) -> None:
    """Send one step's finite values to every tracker; one that raises is dropped with a warning."""
    finite = {k: float(v) for k, v in metrics.items() if math.isfinite(float(v))}
    for name, tracker in list(trackers.items()):
        try:
            tracker.log(step, finite)
        except Exception as e:
            del trackers[name]
            warn_once(f"failed:{name}", f"{name} failed at step {step} ({type(e).__name__}: {e}); no more {name} output for this run")


def log_table_to(trackers: dict[str, Tracker], step: int, key: str, columns: list[str], rows: list[list[Any]]) -> None:
    """Send a table to every tracker that takes tables; one that raises is dropped with a warning."""
    for name, tracker in list(trackers.items()):
        log_table = getattr(tracker, "log_table", None)
        if log_table is None:
            continue
        try:
            log_table(step, key, columns, rows)
        except Exception as e:
            del trackers[name]
            warn_once(f"failed:{name}", f"{name} failed at step {step} ({type(e).__name__}: {e}); no more {name} output for this run")


def close_all(trackers: dict[str, Tracker]) -> None:
    """Close every tracker; one that raises while closing is reported with a warning."""
    for name, tracker in list(trackers.items()):
        try:
            tracker.close()
        except Exception as e:
            warn_once(f"close:{name}", f"{name} failed while closing ({type(e).__name__}: {e})")
    trackers.clear()
