"""The job store's records: job states, jobs, new jobs, events, and the store's error.

Plain frozen values (no SQLite): the servicers, the scheduling loop and the metrics read them;
:class:`tinker_scheduler.store.JobStore` writes and reads them (and re-exports every name here).
"""

from __future__ import annotations

import enum
import threading
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import sqlite3
    from collections.abc import Mapping

    from tinker_core.config import JobConfig

#: Parsed job configs :class:`JobConfigs` keeps (the least recently used go first).
MAX_KEPT_CONFIGS = 4096


class JobState(enum.IntEnum):
    """A job's state; the values are those of ``opentinker.v1.JobState``."""

    UNSPECIFIED = 0
    QUEUED = 1
    RUNNING = 2
    SUCCEEDED = 3
    FAILED = 4
    CANCELLED = 5
    #: Stopped with a checkpoint and out of the queue until resumed (not terminal).
    PAUSED = 6

    @property
    def terminal(self) -> bool:
        return self in TERMINAL_STATES


TERMINAL_STATES = frozenset({JobState.SUCCEEDED, JobState.FAILED, JobState.CANCELLED})


class StoreError(Exception):
    """A request the store refuses; ``field`` names the offending input."""

    def __init__(self, field: str, message: str) -> None:
        self.field = field
        super().__init__(f"{field}: {message}")


@dataclass(frozen=True)
class JobRecord:
    """One row of the ``jobs`` table."""

    seq: int
    id: str
    tenant: str
    name: str
    state: JobState
    reason: str
    priority: int
    config_text: str
    config_format: int
    config_json: str
    client_request_id: str
    cpus: float
    gpus: float
    memory_gb: float
    run_dir: str
    created_at: float
    queued_at: float
    started_at: float | None
    finished_at: float | None
    checkpoint_path: str
    checkpoint_step: int | None
    restarts: int
    #: Set when a cancel was asked for while the job was running (None: not cancelled).
    cancel_reason: str | None
    last_cursor: int
    metrics_step: int | None
    #: Set when a pause was asked for while the job was running (None: not asked).
    pause_reason: str | None = None

    @classmethod
    def from_row(cls, row: sqlite3.Row | Mapping[str, object]) -> JobRecord:
        """A record from a ``jobs`` row (a ``sqlite3.Row`` or a dict of its columns)."""
        data = dict(row)
        data["state"] = JobState(data["state"])
        return cls(**data)

    @property
    def cancel_requested(self) -> bool:
        return self.cancel_reason is not None

    @property
    def pause_requested(self) -> bool:
        return self.pause_reason is not None


def resume_phrase(job: JobRecord | None) -> str:
    """How a job that stopped will continue: the runner picks the newest checkpoint in its run
    directory, which may be newer than the last one the scheduler heard of."""
    if job is not None and job.checkpoint_step is not None:
        return f"resumes from its newest checkpoint (last reported: step {job.checkpoint_step})"
    return "resumes from its newest checkpoint, if it wrote one"


@dataclass(frozen=True)
class NewJob:
    """What :meth:`JobStore.submit` needs to create a job."""

    tenant: str
    name: str
    priority: int
    config_text: str
    config_format: int
    config_json: str
    cpus: float
    gpus: float
    memory_gb: float
    runs_dir: str
    client_request_id: str = ""
    #: The id to give the job ("": a fresh one); a fork's run dir is made before it is stored.
    job_id: str = ""


@dataclass(frozen=True)
class Event:
    """One stored event; ``payload`` is the decoded JSON of its kind (state, metrics or log)."""

    job_id: str
    cursor: int
    time: float
    kind: str
    payload: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class PendingEvent:
    """An event to append: ``kind`` is ``"metrics"`` or ``"log"`` (state changes go through
    :meth:`JobStore.transition`)."""

    kind: str
    payload: dict[str, Any]
    time: float | None = None


class JobConfigs:
    """Each job's config, parsed once: kept from Submit (which parsed and checked it), else parsed
    from the record's ``config_json`` on first use (a job submitted before a restart) and kept.

    The scheduling loop reads a job's config here to pick its model host and to start it. The
    newest :data:`MAX_KEPT_CONFIGS` are kept; an older one is parsed again if it is needed.
    """

    def __init__(self) -> None:
        self._configs: OrderedDict[str, JobConfig] = OrderedDict()
        self._lock = threading.Lock()

    def keep(self, job_id: str, config: JobConfig) -> None:
        """Keep the config Submit parsed for ``job_id``."""
        with self._lock:
            self._configs[job_id] = config
            self._configs.move_to_end(job_id)
            while len(self._configs) > MAX_KEPT_CONFIGS:
                self._configs.popitem(last=False)

    def of(self, job: JobRecord) -> JobConfig:
        """The config of ``job`` (a full record: ``config_json`` set); a ``ValueError`` (pydantic's
        ``ValidationError``) if its stored JSON no longer parses."""
        with self._lock:
            config = self._configs.get(job.id)
        if config is None:
            from tinker_core.config import JobConfig

            config = JobConfig.model_validate_json(job.config_json)
            self.keep(job.id, config)
        return config
