"""Test helpers: a deterministic test workload, a test agent program and the JobService stub.

:func:`sleep_train` is a **test workload, not a stand-in for training**: it has the signature and
the callback behaviour of ``tinker_algos.train`` (metrics per step, checkpoints, ``should_stop``,
automatic resume from ``run_dir/checkpoints/``) but only sleeps and counts, so scheduler tests
(queueing, cancel, graceful shutdown, kill -9 recovery, retries) run in a fraction of a second
per job. Start a scheduler with ``runner="tinker_scheduler.testing:sleep_train"`` to use it. It
lives in the package (not in ``tests/``) because Ray workers must be able to import it.

Workload knobs, all in ``optimizer.params`` of the job config (a free-form section the
workload does not otherwise use; ``algorithm.params`` is typed per algorithm):

- ``step_s`` (float, default 0.02): seconds each step sleeps;
- ``crash_at_step`` (int) and ``crash_times`` (int, default 1): the worker process dies
  (``os._exit``) when it reaches that step, the first ``crash_times`` times it gets there --
  an actor death, as a killed node or OOM would cause;
- ``fail_at_step`` (int): raise ``RuntimeError`` at that step -- a job failure;
- ``rollout_errors`` (float, default 0): reported each step as ``rollout/errors/env_error``;
- ``eval_scores`` (list of floats): step ``s`` also reports ``eval/accuracy`` and
  ``eval/reward_mean`` = ``eval_scores[s - 1]`` while the list lasts (held-out evaluations).

Files it writes in ``run_dir`` (tests read them): ``checkpoints/step-NNNNNN.json``,
``attempts.jsonl`` (one line per call: the step it started from), ``metrics.jsonl`` and
``completions.txt`` (one line each time it completes).

:func:`echo_agent` is an agent program (``env: {id: agent/program-v0, kwargs: {entry:
ECHO_AGENT}}``) for the tests of a scheduler's ``allowed_imports``.

:class:`JobStub` is the generated gRPC stub with the API key metadata: one call per method, the
answers as proto messages, no retries or reconnects -- what a test of the service needs to see.
It is not a client SDK (that is ``tinker_client.jobs.JobClient``, which the scheduler may not
import). :class:`SchedulerProcess` runs ``python -m tinker_scheduler start``
(or ``opentinker scheduler start``) as a separate process and waits for its lines (tests kill it
with SIGKILL; the load benchmark measures it); :func:`running_scheduler` is the one way to start
``opentinker scheduler start`` as a user would, with a tenant and the Tinker API, for a block
(the integration fixtures, ``scripts/tinker_compat.py`` and the cookbook's ecosystem check use it).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

from tinker_core.run_files import METRICS_FILE, JsonLinesReader

SLEEP_TRAIN = "tinker_scheduler.testing:sleep_train"


@dataclass
class SleepTrainResult:
    """The fields of ``tinker_algos.TrainResult`` that a caller reads."""

    status: str
    step: int
    metrics: dict[str, float]
    run_dir: Path
    checkpoint: Path | None
    plot: Path | None = None
    eval: dict[str, float] = field(default_factory=dict)


def _params(config: Any) -> dict[str, Any]:
    stages = config.resolved_stages()
    optimizer = stages[0].optimizer if stages else None
    return dict(optimizer.params) if optimizer is not None else {}


def _latest_checkpoint(run_dir: Path) -> tuple[int, Path] | None:
    found = sorted((run_dir / "checkpoints").glob("step-*.json"))
    for path in reversed(found):
        try:
            return int(json.loads(path.read_text())["step"]), path
        except (ValueError, KeyError, OSError):
            continue  # a torn file cannot exist (atomic rename), but be lenient
    return None


def _write_checkpoint(run_dir: Path, step: int, keep: int) -> Path:
    directory = run_dir / "checkpoints"
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"step-{step:06d}.json"
    tmp = path.with_suffix(".tmp")
    with open(tmp, "w") as f:
        json.dump({"step": step}, f)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    for old in sorted(directory.glob("step-*.json"))[:-keep]:
        old.unlink(missing_ok=True)
    return path


def _metrics_of(run_dir: Path, step: int) -> dict[str, float] | None:
    """The metrics ``metrics.jsonl`` holds for ``step`` (the last line of it), else None."""
    found = None
    for row in JsonLinesReader(run_dir / METRICS_FILE).read().rows:
        if row.value.get("step") == step:
            found = {k: v for k, v in row.value.items() if k != "step"}
    return found


def _append_line(path: Path, line: str) -> None:
    with open(path, "a") as f:
        f.write(line + "\n")
        f.flush()
        os.fsync(f.fileno())


def sleep_train(config: Any, run_dir: Path | str, callbacks: Any = None) -> SleepTrainResult:
    """A deterministic test workload with ``tinker_algos.train``'s signature (see the module doc).

    Step ``s`` (1-based) reports ``{"losses/policy": 1/s, "rollout/tokens_per_s": 1000.0,
    "rollout/errors/env_error": params.rollout_errors}``; checkpoints follow ``config.checkpoint.every`` (0 = only at the
    end) and ``keep_last``; with ``config.checkpoint.resume`` it continues after the newest checkpoint,
    first reporting that checkpoint's step again (as ``tinker_algos.train`` does).
    """
    if isinstance(config, dict):
        from tinker_core.config import parse_config

        config = parse_config(config, check_plugins=False)
    run_dir = Path(run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    params = _params(config)
    step_s = float(params.get("step_s", 0.02))
    total = config.total_steps
    every = config.checkpoint.every
    keep = config.checkpoint.keep_last

    def call(name: str, *args: Any) -> Any:
        fn = getattr(callbacks, name, None)
        return fn(*args) if fn is not None else None

    start = 0
    checkpoint: Path | None = None
    latest = _latest_checkpoint(run_dir) if config.checkpoint.resume else None
    if latest is not None:
        start, checkpoint = latest
    _append_line(run_dir / "attempts.jsonl", json.dumps({"start_step": start}))
    print(f"sleep_train: starting at step {start} of {total}", flush=True)
    call("on_log", f"resumed from step {start}" if start else "starting from scratch")
    if start and (again := _metrics_of(run_dir, start)) is not None:
        call("on_metrics", start, again)  # as tinker_algos.train: the resume step once more

    metrics: dict[str, float] = {}
    step = start
    while step < total:
        if call("should_stop"):
            checkpoint = _write_checkpoint(run_dir, step, keep)
            call("on_checkpoint", step, str(checkpoint))
            call("on_log", f"stopping at step {step} (checkpoint written)")
            return SleepTrainResult("interrupted", step, metrics, run_dir, checkpoint)
        step += 1
        if params.get("crash_at_step") == step:
            crashes = run_dir / "crashes.txt"
            done = len(crashes.read_text().splitlines()) if crashes.exists() else 0
            if done < int(params.get("crash_times", 1)):
                _append_line(crashes, str(step))
                os._exit(17)
        if params.get("fail_at_step") == step:
            raise RuntimeError(f"sleep_train was told to fail at step {step}")
        time.sleep(step_s)
        metrics = {
            "losses/policy": 1.0 / step,
            "rollout/tokens_per_s": 1000.0,
            "rollout/errors/env_error": float(params.get("rollout_errors", 0.0)),
        }
        scores = list(params.get("eval_scores", ()))
        if step <= len(scores):
            metrics |= {"eval/accuracy": float(scores[step - 1]), "eval/reward_mean": float(scores[step - 1])}
        _append_line(run_dir / "metrics.jsonl", json.dumps({"step": step, **metrics}))
        call("on_metrics", step, dict(metrics))
        call("on_log", f"step {step}/{total}")
        if every and step % every == 0 and step < total:
            checkpoint = _write_checkpoint(run_dir, step, keep)
            call("on_checkpoint", step, str(checkpoint))
    checkpoint = _write_checkpoint(run_dir, step, keep)
    call("on_checkpoint", step, str(checkpoint))
    _append_line(run_dir / "completions.txt", str(step))
    return SleepTrainResult("completed", step, metrics, run_dir, checkpoint, eval={"eval/accuracy": 1.0})


# ---- the JobService stub for tests -------------------------------------------------------------


class JobStub:
    """The JobService stub for tests: the generated stub plus the API key metadata, one gRPC
    call per method and no retries (``tinker_client.jobs.JobClient`` is the client SDK).

    ``with JobStub("127.0.0.1:50051", api_key="otk_...") as client: client.submit(text)``.
    """

    def __init__(self, address: str, api_key: str | None = None, *, root_certificates: bytes | None = None) -> None:
        import grpc

        from tinker_core.proto import jobs_pb2_grpc

        if root_certificates is not None:
            self.channel = grpc.secure_channel(address, grpc.ssl_channel_credentials(root_certificates))
        else:
            self.channel = grpc.insecure_channel(address)
        self.stub = jobs_pb2_grpc.JobServiceStub(self.channel)
        self.metadata = (("authorization", f"Bearer {api_key}"),) if api_key else ()

    def __enter__(self) -> JobStub:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self.channel.close()

    def submit(self, config_text: str, *, request_id: str = "", priority: int | None = None, timeout: float = 30) -> Any:
        from tinker_core.proto import jobs_pb2

        request = jobs_pb2.SubmitJobRequest(config_text=config_text, client_request_id=request_id)
        if priority is not None:
            request.priority = priority
        return self.stub.Submit(request, metadata=self.metadata, timeout=timeout)

    def get(self, job_id: str, timeout: float = 30) -> Any:
        from tinker_core.proto import jobs_pb2

        return self.stub.Get(jobs_pb2.GetJobRequest(job_id=job_id), metadata=self.metadata, timeout=timeout)

    def list(self, states: list[int] | None = None, page_size: int = 0, page_token: str = "") -> Any:
        from tinker_core.proto import jobs_pb2

        request = jobs_pb2.ListJobsRequest(states=cast(Any, states or []), page_size=page_size, page_token=page_token)
        return self.stub.List(request, metadata=self.metadata, timeout=30)

    def cancel(self, job_id: str, reason: str = "") -> Any:
        from tinker_core.proto import jobs_pb2

        request = jobs_pb2.CancelJobRequest(job_id=job_id, reason=reason)
        return self.stub.Cancel(request, metadata=self.metadata, timeout=30)

    def pause(self, job_id: str, reason: str = "") -> Any:
        from tinker_core.proto import jobs_pb2

        return self.stub.Pause(jobs_pb2.PauseJobRequest(job_id=job_id, reason=reason), metadata=self.metadata, timeout=30)

    def resume(self, job_id: str) -> Any:
        from tinker_core.proto import jobs_pb2

        return self.stub.Resume(jobs_pb2.ResumeJobRequest(job_id=job_id), metadata=self.metadata, timeout=30)

    def set_settings(self, job_id: str, settings: list[str]) -> Any:
        from tinker_core.proto import jobs_pb2

        request = jobs_pb2.SetJobSettingsRequest(job_id=job_id, settings=settings)
        return self.stub.SetSettings(request, metadata=self.metadata, timeout=30)

    def fork(self, job_id: str, overrides: list[str] | None = None, *, step: int | None = None, request_id: str = "") -> Any:
        from tinker_core.proto import jobs_pb2

        request = jobs_pb2.ForkJobRequest(job_id=job_id, overrides=overrides or [], client_request_id=request_id)
        if step is not None:
            request.step = step
        return self.stub.Fork(request, metadata=self.metadata, timeout=60)

    def wait_for_state(self, job_id: str, state: int, timeout: float = 120) -> Any:
        """Poll until the job is in ``state`` (e.g. PAUSED, which ends no watch); return it."""
        deadline = time.monotonic() + timeout
        while True:
            job = self.get(job_id)
            if job.state == state or time.monotonic() > deadline:
                return job
            time.sleep(0.05)

    def watch(self, job_id: str, after_cursor: int = 0, timeout: float | None = 120) -> Iterator[Any]:
        """The job's events from ``after_cursor`` on; ends after the terminal state change."""
        from tinker_core.proto import jobs_pb2

        request = jobs_pb2.WatchJobRequest(job_id=job_id, after_cursor=after_cursor)
        return iter(self.stub.Watch(request, metadata=self.metadata, timeout=timeout))

    def wait(self, job_id: str, timeout: float = 120) -> Any:
        """Follow the job until it ends; return the final Job."""
        for _ in self.watch(job_id, timeout=timeout):
            pass
        return self.get(job_id)


def job_config_text(
    *,
    name: str = "test",
    steps: int = 5,
    step_s: float = 0.02,
    cpus: float = 1.0,
    priority: int | None = None,
    checkpoint_every: int = 1,
    **params: Any,
) -> str:
    """A small valid job config (YAML) for :func:`sleep_train` (an SFT job, no env needed)."""
    lines = [
        f"name: {name}",
        f"algorithm: {{name: sft, steps: {steps}}}",
        f"optimizer: {{params: {json.dumps({'step_s': step_s, **params})}}}",
        f"resources: {{cpus: {cpus}}}",
        f"checkpoint: {{every: {checkpoint_every}, keep: 2}}",
    ]
    if priority is not None:
        lines.append(f"priority: {priority}")
    return "\n".join(lines) + "\n"


#: A test agent program (``agent/program-v0``'s ``entry``) that a scheduler's operator may allow.
ECHO_AGENT = "tinker_scheduler.testing:echo_agent"


def echo_agent(task: Any, client: Any) -> float:
    """A test agent program: one completion of ``task`` through the job's rollout proxy, reward 1.

    Like :func:`sleep_train`, it lives in the package because Ray workers must import it (a
    scheduler imports an agent program only from its installed packages, when its operator
    allows it: ``allowed_imports``)."""
    reply = client.completions.create(model="policy", prompt=str(task), max_tokens=2)
    return 1.0 if reply.choices else 0.0


# ---- a scheduler in its own process ---------------------------------------------------------


#: ``opentinker scheduler`` as a user runs it (the client's CLI, which delegates to this package).
OPENTINKER_SCHEDULER = (sys.executable, "-m", "tinker_client.cli", "scheduler")
#: ``python -m tinker_scheduler`` (the same commands without the client package).
SCHEDULER_MODULE = (sys.executable, "-m", "tinker_scheduler")


def scheduler_env(cache: Path | None = None, base: dict[str, str] | None = None) -> dict[str, str]:
    """The environment a scheduler subprocess (and the CLI calls beside it) runs with on a test
    machine: ``base`` (default ``os.environ``) plus no per-session uv virtualenv for Ray workers, no
    Ray token auth, a fresh short ``RAY_TMPDIR`` (Ray's unix sockets live there; the caller removes
    it, as :func:`running_scheduler` does for its own), no hub (``HF_HUB_OFFLINE=1``)
    and, when given, ``OPENTINKER_CACHE=cache``."""
    env = {**(os.environ if base is None else base), "RAY_ENABLE_UV_RUN_RUNTIME_ENV": "0",
           "RAY_AUTH_MODE": "disabled", "RAY_TMPDIR": tempfile.mkdtemp(prefix="ot-ray-"), "HF_HUB_OFFLINE": "1"}
    if cache is not None:
        env["OPENTINKER_CACHE"] = str(cache)
    return env


def add_tenant(db: Path, name: str, *, env: dict[str, str] | None = None,
               program: tuple[str, ...] = OPENTINKER_SCHEDULER) -> str:
    """``<program> add-tenant NAME --db DB``: the tenant's key (``otk_...``; the Tinker SDK's key is
    ``"tml-" + key``). Raises ``CalledProcessError`` with the command's output when it fails."""
    return subprocess.run([*program, "add-tenant", name, "--db", str(db)], capture_output=True, text=True,
                          env=env, check=True, timeout=120).stdout.strip()


class SchedulerProcess:
    """``<program> start`` in its own session, its output in ``<directory>/<name>.log``.

    ``program`` is :data:`SCHEDULER_MODULE` (default) or :data:`OPENTINKER_SCHEDULER` (the user's
    ``opentinker scheduler``). ``db`` and ``runs`` default to ``directory/scheduler.db`` and
    ``directory/runs``; ``options`` are more ``start`` options (default ``--num-cpus 2``); each of
    ``--port 0``, ``--metrics-port -1`` and ``--shutdown-timeout 60`` is added unless ``options``
    set it. ``runner`` is the job runner (default the :func:`sleep_train` test workload; ``None``:
    the real trainer). ``env`` is the process's environment (default: this one's; see
    :func:`scheduler_env`). The process starts its own local Ray in its session: :meth:`cleanup` kills
    the whole session (Ray's processes can outlive a SIGKILLed scheduler). Raises
    ``AssertionError`` with the log when it does not start. After start, :attr:`address` is the
    gRPC address and :attr:`tinker_url` the Tinker API's URL (``None`` without ``--tinker-port``).
    """

    def __init__(
        self, directory: Path, name: str, *options: str, runner: str | None = SLEEP_TRAIN, db: Path | None = None,
        runs: Path | None = None, env: dict[str, str] | None = None, start_timeout: float = 120.0,
        program: tuple[str, ...] = SCHEDULER_MODULE,
    ) -> None:
        self.db = db or directory / "scheduler.db"
        self.runs = runs or directory / "runs"
        self.log = directory / f"{name}.log"
        self.env = env
        self.api_key: str | None = None  # set by running_scheduler when it adds a tenant
        options = options or ("--num-cpus", "2")
        defaults = {"--port": "0", "--metrics-port": "-1", "--shutdown-timeout": "60"}
        command = [*program, "start", "--db", str(self.db), "--runs-dir", str(self.runs),
                   *(x for flag, value in defaults.items() if flag not in options for x in (flag, value)),
                   *(("--runner", runner) if runner else ()), *options]
        with open(self.log, "w") as out:
            self.process = subprocess.Popen(
                command, stdout=out, stderr=subprocess.STDOUT, start_new_session=True, env=self.env
            )
        self.address = self.wait_for(r"listening on (\S+)", start_timeout)
        self.tinker_url = self.wait_for(r"tinker API at (http://\S+)", 60) if "--tinker-port" in options else None

    def wait_for(self, pattern: str, timeout: float = 120.0) -> str:
        """Group 1 of the first match of ``pattern`` in the log, waiting for it up to ``timeout``
        seconds; ``AssertionError`` with the log (the process cleaned up) if the process ends or
        the time runs out first."""
        deadline = time.monotonic() + timeout
        while True:
            match = re.search(pattern, self.log.read_text())
            if match:
                return match.group(1)
            if self.process.poll() is not None or time.monotonic() > deadline:
                self.cleanup()
                raise AssertionError(f"the scheduler did not start (no {pattern!r}):\n{self.log.read_text()}")
            time.sleep(0.1)

    @property
    def pid(self) -> int:
        return self.process.pid

    def kill9(self) -> None:
        """SIGKILL the scheduler process only (not its Ray), as a crash would."""
        self.process.send_signal(signal.SIGKILL)
        self.process.wait(timeout=30)

    def terminate(self) -> int:
        """SIGTERM (a graceful stop); the exit status."""
        self.process.send_signal(signal.SIGTERM)
        return self.process.wait(timeout=120)

    def stop(self) -> None:
        """A graceful stop when it comes within 60 s, then :meth:`cleanup`."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.process.wait(timeout=60)
        self.cleanup()

    def cleanup(self) -> None:
        """Kill whatever is left of this process's session (its Ray processes)."""
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait(timeout=30)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.process.pid, signal.SIGKILL)


@contextlib.contextmanager
def running_scheduler(directory: Path, *options: str, tenant: str | None = None, tinker: bool = False,
                      runner: str | None = None, program: tuple[str, ...] = OPENTINKER_SCHEDULER,
                      start_timeout: float = 180.0) -> Iterator[SchedulerProcess]:
    """``opentinker scheduler start`` as a user runs it (the real trainer; db, runs, the cache
    ``$OPENTINKER_CACHE`` and the log under ``directory``), stopped (SIGTERM, then its whole
    session killed) on exit. ``tenant`` adds that tenant first: its key is ``process.api_key``
    (``otk_...``). ``tinker=True`` adds ``--tinker-port 0``: the URL is ``process.tinker_url``.
    ``options`` default to ``--num-cpus 2`` (added unless they set it). ``process.env`` is the
    environment to run CLI calls beside it with (made by :func:`scheduler_env`)."""
    env = scheduler_env(cache=directory / "cache")
    try:
        key = add_tenant(directory / "scheduler.db", tenant, env=env, program=program) if tenant else None
        if "--num-cpus" not in options:
            options = (*options, "--num-cpus", "2")
        if tinker and "--tinker-port" not in options:
            options = (*options, "--tinker-port", "0")
        process = SchedulerProcess(directory, "scheduler", *options, runner=runner, env=env,
                                   start_timeout=start_timeout, program=program)
        process.api_key = key
        try:
            yield process
        finally:
            process.stop()
    finally:
        shutil.rmtree(env["RAY_TMPDIR"], ignore_errors=True)
