"""How a scheduler is set up: :class:`SchedulerConfig` (the options of ``opentinker scheduler start``).

::

    from tinker_scheduler import Scheduler, SchedulerConfig

    scheduler = Scheduler(SchedulerConfig(port=0, db="jobs.db", runs_dir="runs")).start()
    scheduler = Scheduler(port=0, db="jobs.db", runs_dir="runs").start()   # the same
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tinker_algos.tinker_ops import RequestLimits
from tinker_core.import_policy import ImportPolicy
from tinker_core.proto import MAX_MESSAGE_BYTES
from tinker_scheduler.auth import AuthMode

#: The job runner unless a config names another one.
DEFAULT_RUNNER = "tinker_algos.train"
_PATH_OPTIONS = ("db", "runs_dir", "tls_cert", "tls_key")
_LIMITS = RequestLimits()
#: The HTTP fronts' default deadlines for a request's headers and body: those of
#: ``tinker_core.http_limits`` (HEADER_TIMEOUT_S, BODY_TIMEOUT_S; a test keeps them equal),
#: repeated here so the scheduler's config loads without the ``http`` extra.
HTTP_HEADER_TIMEOUT_S = 10.0
HTTP_BODY_TIMEOUT_S = 60.0
#: The request-limit options and the :class:`~tinker_algos.tinker_ops.RequestLimits` field each sets.
_LIMIT_OPTIONS = {"max_data_per_request": "max_data", "max_tokens_per_request": "max_tokens",
                  "max_new_tokens_per_sample": "max_new_tokens"}


#: ``CliOption.default`` when the option's default is the field's.
FIELD_DEFAULT: Any = type("FieldDefault", (), {"__repr__": lambda self: "FIELD_DEFAULT"})()


@dataclass(frozen=True)
class CliOption:
    """How a :class:`SchedulerConfig` field is offered as an option of ``opentinker scheduler start``
    (the command's options are generated from the fields that carry one, see
    :mod:`tinker_scheduler.cli`).

    ``flag``: the option's name when it is not the field's (``--model-root`` for ``model_roots``);
    ``type`` / ``default``: the option's when they differ from the field's (e.g. ``--metrics-port``
    defaults to 9464, -1 turns it off); ``minimum``: the least value (an error names the flag);
    ``seconds``: must be > 0 seconds; ``port``: a port number 0-65535; ``hint``: what to do
    instead, shown under an error.
    """

    help: str
    flag: str = ""
    type: Any = None
    default: Any = FIELD_DEFAULT
    minimum: int | None = None
    seconds: bool = False
    port: bool = False
    hint: str = ""


def cli(help: str, **how: Any) -> dict[str, CliOption]:
    """The metadata of a field offered as a ``scheduler start`` option (see :class:`CliOption`)."""
    return {"cli": CliOption(help, **how)}


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
    host: str = field(default="127.0.0.1", metadata=cli("Address to bind; 0.0.0.0 serves every interface."))
    #: gRPC port; 0 picks a free one (read ``Scheduler.port`` after ``start()``).
    port: int = field(default=50051, metadata=cli("gRPC port; 0 picks a free one (printed at start).", port=True))
    #: The SQLite job store, created if missing (None: ``$OPENTINKER_HOME/scheduler.db``).
    db: Path | None = field(default=None, metadata=cli("SQLite job store (default $OPENTINKER_HOME/scheduler.db)."))
    #: Jobs write to ``runs_dir/<tenant>/<job id>/`` (None: ``$OPENTINKER_HOME/runs``).
    runs_dir: Path | None = field(default=None, metadata=cli(
        "Jobs write to RUNS_DIR/<tenant>/<job-id>/ (default $OPENTINKER_HOME/runs)."))
    #: Join this Ray cluster; None starts a local one (unless Ray is already initialised in this
    #: process, which is then used as it is).
    ray_address: str | None = field(default=None, metadata=cli(
        "Join this Ray cluster (e.g. 'auto' or HOST:6379); default: start a local Ray."))
    #: CPUs of the local Ray; with a cluster, the most this scheduler uses.
    num_cpus: float | None = field(default=None, metadata=cli(
        "CPUs of the local Ray; with --ray-address, the most this scheduler uses."))
    #: GPUs likewise.
    num_gpus: float | None = field(default=None, metadata=cli("GPUs, likewise."))
    #: Prometheus endpoint port; 0 picks a free one, None disables it.
    metrics_port: int | None = field(default=None, metadata=cli(
        "Prometheus /metrics port; 0 picks a free one, -1 disables it.", type=int, default=9464))
    #: PEM certificate chain file; with ``tls_key`` the server speaks TLS only.
    tls_cert: Path | None = field(default=None, metadata=cli("PEM certificate chain; with --tls-key, serve TLS only."))
    #: PEM private key file.
    tls_key: Path | None = field(default=None, metadata=cli("PEM private key of --tls-cert."))
    #: How often a job whose actor died is restarted before it FAILS.
    max_retries: int = field(default=3, metadata=cli(
        "Restarts of a job whose actor died (from its last checkpoint) before it FAILS.", minimum=0))
    #: ``auto``, ``required`` or ``none`` (see :mod:`tinker_scheduler.auth`).
    auth: AuthMode = field(default=AuthMode.AUTO, metadata=cli(
        "auto: keys required once a tenant exists; required; none: single local user.", type=str, default="auto"))
    #: Importable ``"module:function"`` with the signature of
    #: ``tinker_algos.train(config, run_dir=..., callbacks=...)`` that jobs run.
    runner: str = field(default=DEFAULT_RUNNER, metadata=cli(
        "Importable 'module:function' jobs run (advanced; tests use a test workload)."))
    #: Accept and store jobs but start none (maintenance).
    paused: bool = False
    #: Seconds ``stop()`` waits for running jobs to checkpoint.
    shutdown_timeout: float = field(default=60.0, metadata=cli(
        "Seconds SIGTERM waits for running jobs to checkpoint before killing them."))
    #: Seconds a cancelled or paused job may take to stop before its actor is killed (a paused one
    #: then resumes from its newest checkpoint).
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
    max_jobs_per_host: int = field(default=8, metadata=cli(
        "LoRA jobs on the same base model share one model host, up to N per host; 0: one model copy per job.",
        minimum=0, hint="0 gives every job its own model copy"))
    #: Directories whose contents jobs and sessions may load as base models (``model.name``,
    #: CreateSession's ``base_model``) and read as data files (``algorithm.data``); besides these
    #: only presets, hub ids and the tenant's own run outputs are allowed (see
    #: :mod:`tinker_scheduler.paths`).
    model_roots: tuple[Path, ...] = field(default=(), metadata=cli(
        "A directory whose models and data files jobs and sessions may load (repeatable); otherwise only "
        "presets ('tiny'), hub ids and a tenant's own run outputs.", flag="--model-root", type=list[Path] | None,
        default=None))
    #: Code jobs may import besides the registered env plugins: patterns ``pkg.module:name``,
    #: ``pkg.module`` (any name in it), ``pkg.*`` (the package and its modules) or ``*``
    #: (anything). A job whose config names other code (``agent/program-v0``'s ``entry``,
    #: ``tasks``, ``reward``; any env kwarg its spec declares in ``import_kwargs``) is refused at
    #: Submit, and its worker refuses to import it (see :mod:`tinker_core.import_policy`).
    allowed_imports: tuple[str, ...] = field(default=(), metadata=cli(
        "Code jobs may import besides the registered env plugins, e.g. an agent program's entry (repeatable): "
        "'pkg.module:name', 'pkg.module' (any name in it), 'pkg.*' (the package and its modules) or '*' (anything); "
        "default: none.", flag="--allow-import", type=list[str] | None, default=None))
    #: TrainingService limits, checked before a request is queued on a model host (besides the
    #: model's context length): data per Forward/ForwardBackward, sequences per
    #: ComputeLogprobs, and sequences sampled (prompts x num_samples) per Sample.
    max_data_per_request: int = field(default=_LIMITS.max_data, metadata=cli(
        "TrainingService: data (or sequences sampled) per request, at most.", minimum=1))
    #: Tokens per TrainingService request: the model inputs of all its data or sequences; for
    #: Sample, every sampled sequence's prompt plus ``max_tokens``.
    max_tokens_per_request: int = field(default=_LIMITS.max_tokens, metadata=cli(
        "TrainingService: tokens per request (all its data; for Sample, prompts plus max_tokens), at most.", minimum=1))
    #: The largest ``max_tokens`` (new tokens per sequence) a TrainingService Sample may ask for.
    max_new_tokens_per_sample: int = field(default=_LIMITS.max_new_tokens, metadata=cli(
        "TrainingService: a Sample request's max_tokens, at most.", minimum=1))
    #: Tinker API gateway: a Tinker session (``tinker.ServiceClient``, which heartbeats every
    #: 10 s) not heard from this long expires and its models are unloaded (their saved
    #: checkpoints remain).
    tinker_session_timeout_s: float = field(default=600.0, metadata=cli(
        "Tinker API: seconds a Tinker session may go without a heartbeat before it expires and its models unload.",
        flag="--tinker-session-timeout", seconds=True))
    #: Tinker API gateway: the largest request body accepted (larger: 413).
    tinker_max_request_bytes: int = field(default=MAX_MESSAGE_BYTES, metadata=cli(
        "Tinker API: the largest request body accepted (larger ones get HTTP 413).", minimum=1))
    #: Tinker API gateway: the largest JSON request body accepted (larger: 413); every route but
    #: ``forward_backward`` (protobuf) takes JSON.
    tinker_max_json_bytes: int = field(default=8 * 1024 * 1024, metadata=cli(
        "Tinker API: the largest JSON request body accepted (every route but forward_backward; larger: HTTP 413).",
        minimum=1))
    #: HTTP servers (Tinker gateway, serve route): seconds a client has to send a request's
    #: headers before its connection is closed.
    http_header_timeout_s: float = field(default=HTTP_HEADER_TIMEOUT_S, metadata=cli(
        "Tinker API and serve route: seconds a client has to send a request's headers before its connection is closed.",
        flag="--http-header-timeout", seconds=True))
    #: HTTP servers: seconds a client has to send a request's body (slower: 408).
    http_body_timeout_s: float = field(default=HTTP_BODY_TIMEOUT_S, metadata=cli(
        "Tinker API and serve route: seconds a client has to send a request's body (slower: HTTP 408).",
        flag="--http-body-timeout", seconds=True))

    def __post_init__(self) -> None:
        for name in _PATH_OPTIONS:
            value = getattr(self, name)
            if value is not None and not isinstance(value, Path):
                object.__setattr__(self, name, Path(value))
        roots = (self.model_roots,) if isinstance(self.model_roots, str | Path) else self.model_roots
        object.__setattr__(self, "model_roots", tuple(Path(r) for r in roots))
        object.__setattr__(self, "allowed_imports", ImportPolicy(self.allowed_imports or ()).patterns)  # ValueError naming a bad one
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
