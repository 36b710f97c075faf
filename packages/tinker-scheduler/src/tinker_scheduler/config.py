"""How a scheduler is set up: :class:`SchedulerConfig` (the options of ``opentinker scheduler start``).

::

    from tinker_scheduler import Scheduler, SchedulerConfig

    scheduler = Scheduler(SchedulerConfig(port=0, db="jobs.db", runs_dir="runs")).start()
    scheduler = Scheduler(port=0, db="jobs.db", runs_dir="runs").start()   # the same
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from tinker_algos.tinker_ops import RequestLimits
from tinker_core.proto import MAX_MESSAGE_BYTES
from tinker_scheduler.auth import AuthMode
from tinker_serve.http_limits import BODY_TIMEOUT_S, HEADER_TIMEOUT_S

#: The job runner unless a config names another one.
DEFAULT_RUNNER = "tinker_algos.train"
_PATH_OPTIONS = ("db", "runs_dir", "tls_cert", "tls_key")
_LIMITS = RequestLimits()
#: The request-limit options and the :class:`~tinker_algos.tinker_ops.RequestLimits` field each sets.
_LIMIT_OPTIONS = {"max_data_per_request": "max_data", "max_tokens_per_request": "max_tokens",
                  "max_new_tokens_per_sample": "max_new_tokens"}


def default_home() -> Path:
    """``$OPENTINKER_HOME`` or ``~/.opentinker``: where the default db and runs directory live."""
    return Path(os.environ.get("OPENTINKER_HOME") or Path.home() / ".opentinker")


@dataclass(frozen=True)
class SchedulerConfig:
    """Every option of a :class:`~tinker_scheduler.scheduler.Scheduler`; the defaults are
    those of ``opentinker scheduler start`` (except ``metrics_port``: off here, 9464 there).

    Paths may be given as strings; they are stored as :class:`~pathlib.Path`. A bad combination
    raises :class:`ValueError` naming the option.
    """

    #: Address the gRPC server binds (``0.0.0.0`` for every interface).
    host: str = "127.0.0.1"
    #: gRPC port; 0 picks a free one (read ``Scheduler.port`` after ``start()``).
    port: int = 50051
    #: The SQLite job store, created if missing (None: ``$OPENTINKER_HOME/scheduler.db``).
    db: Path | None = None
    #: Jobs write to ``runs_dir/<tenant>/<job id>/`` (None: ``$OPENTINKER_HOME/runs``).
    runs_dir: Path | None = None
    #: Join this Ray cluster; None starts a local one (unless Ray is already initialised in this
    #: process, which is then used as it is).
    ray_address: str | None = None
    #: CPUs of the local Ray; with a cluster, the most this scheduler uses.
    num_cpus: float | None = None
    #: GPUs likewise.
    num_gpus: float | None = None
    #: Prometheus endpoint port; 0 picks a free one, None disables it.
    metrics_port: int | None = None
    #: PEM certificate chain file; with ``tls_key`` the server speaks TLS only.
    tls_cert: Path | None = None
    #: PEM private key file.
    tls_key: Path | None = None
    #: How often a job whose actor died is restarted before it FAILS.
    max_retries: int = 3
    #: ``auto``, ``required`` or ``none`` (see :mod:`tinker_scheduler.auth`).
    auth: AuthMode = AuthMode.AUTO
    #: Importable ``"module:function"`` with the signature of
    #: ``tinker_algos.train(config, run_dir=..., callbacks=...)`` that jobs run.
    runner: str = DEFAULT_RUNNER
    #: Accept and store jobs but start none (maintenance).
    paused: bool = False
    #: Seconds ``stop()`` waits for running jobs to checkpoint.
    shutdown_timeout: float = 60.0
    #: Seconds a cancelled job may take to stop before its actor is killed.
    cancel_timeout: float = 60.0
    #: The scheduling loop's period.
    tick_s: float = 0.1
    #: gRPC server threads (each open Watch stream holds one).
    max_workers: int = 64
    #: Where TrainingService sessions run: ``"ray"`` (model hosts are Ray actors) or ``"local"``
    #: (hosts live in the scheduler process).
    training_host_backend: str = "ray"
    #: CPUs each model host started for sessions reserves (subtracted from what jobs may use).
    training_host_cpus: float = 1.0
    #: A training session unused this long is checkpointed and released from its host
    #: (restored on its next request).
    session_idle_timeout_s: float = 600.0
    #: A model host without sessions or jobs this long shuts down.
    host_idle_timeout_s: float = 60.0
    #: The gRPC send/receive message limit (tensors travel in messages).
    max_message_bytes: int = MAX_MESSAGE_BYTES
    #: LoRA jobs whose base model (name, revision, tokenizer, dtype, device) matches run together
    #: on one shared model host, up to this many per host (they take turns, a training step
    #: each); 0 gives every job its own worker and model copy. Needs the ``ray`` host backend and
    #: a runner that accepts ``shared=`` (``tinker_algos.train``).
    max_jobs_per_host: int = 8
    #: Directories whose contents jobs and sessions may load as base models (``model.name``,
    #: CreateSession's ``base_model``) and read as data files (``algorithm.data``); besides these
    #: only presets, hub ids and the tenant's own run outputs are allowed (see
    #: :mod:`tinker_scheduler.paths`).
    model_roots: tuple[Path, ...] = ()
    #: TrainingService limits, checked before a request is queued on a model host (besides the
    #: model's context length): data per Forward/ForwardBackward, sequences per
    #: ComputeLogprobs, and sequences sampled (prompts x num_samples) per Sample.
    max_data_per_request: int = _LIMITS.max_data
    #: Tokens per TrainingService request: the model inputs of all its data or sequences; for
    #: Sample, every sampled sequence's prompt plus ``max_tokens``.
    max_tokens_per_request: int = _LIMITS.max_tokens
    #: The largest ``max_tokens`` (new tokens per sequence) a TrainingService Sample may ask for.
    max_new_tokens_per_sample: int = _LIMITS.max_new_tokens
    #: Tinker API gateway: a client session (``tinker.ServiceClient``, which heartbeats every
    #: 10 s) not heard from this long expires and its models are unloaded (their saved
    #: checkpoints remain).
    tinker_session_timeout_s: float = 600.0
    #: Tinker API gateway: the largest request body accepted (larger: 413).
    tinker_max_request_bytes: int = MAX_MESSAGE_BYTES
    #: Tinker API gateway: the largest JSON request body accepted (larger: 413); every route but
    #: ``forward_backward`` (protobuf) takes JSON.
    tinker_max_json_bytes: int = 8 * 1024 * 1024
    #: HTTP servers (Tinker gateway, serve route): seconds a client has to send a request's
    #: headers before its connection is closed.
    http_header_timeout_s: float = HEADER_TIMEOUT_S
    #: HTTP servers: seconds a client has to send a request's body (slower: 408).
    http_body_timeout_s: float = BODY_TIMEOUT_S

    def __post_init__(self) -> None:
        for name in _PATH_OPTIONS:
            value = getattr(self, name)
            if value is not None and not isinstance(value, Path):
                object.__setattr__(self, name, Path(value))
        roots = (self.model_roots,) if isinstance(self.model_roots, str | Path) else self.model_roots
        object.__setattr__(self, "model_roots", tuple(Path(r) for r in roots))
        object.__setattr__(self, "auth", AuthMode(self.auth))
        object.__setattr__(self, "max_message_bytes", int(self.max_message_bytes))
        object.__setattr__(self, "max_jobs_per_host", int(self.max_jobs_per_host))
        if (self.tls_cert is None) != (self.tls_key is None):
            raise ValueError("tls_cert and tls_key go together: give both for TLS, or neither")
        if self.max_retries < 0:
            raise ValueError(f"max_retries must be >= 0 (got {self.max_retries})")
        if self.max_jobs_per_host < 0:
            raise ValueError(f"max_jobs_per_host must be >= 0 (0: no shared hosts), got {self.max_jobs_per_host}")
        if not self.tinker_session_timeout_s > 0 or self.tinker_max_request_bytes < 1:
            raise ValueError("tinker_session_timeout_s must be > 0 and tinker_max_request_bytes >= 1 (got "
                             f"{self.tinker_session_timeout_s!r}, {self.tinker_max_request_bytes!r})")
        if self.tinker_max_json_bytes < 1:
            raise ValueError(f"tinker_max_json_bytes must be >= 1 (got {self.tinker_max_json_bytes!r})")
        for name in ("http_header_timeout_s", "http_body_timeout_s"):
            if not getattr(self, name) > 0:
                raise ValueError(f"{name} must be > 0 seconds (got {getattr(self, name)!r})")
        for name in _LIMIT_OPTIONS:
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be a whole number >= 1, got {value!r}")

    @property
    def request_limits(self) -> RequestLimits:
        """The TrainingService's :class:`~tinker_algos.tinker_ops.RequestLimits` from the ``max_*`` options."""
        return RequestLimits(**{field: getattr(self, name) for name, field in _LIMIT_OPTIONS.items()})

    @property
    def db_path(self) -> Path:
        return self.db if self.db is not None else default_home() / "scheduler.db"

    @property
    def runs_path(self) -> Path:
        return self.runs_dir if self.runs_dir is not None else default_home() / "runs"
