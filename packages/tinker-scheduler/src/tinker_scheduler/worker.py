"""The Ray actor that runs one job.

:class:`JobWorker` calls the job runner (``tinker_algos.train`` unless the scheduler was given
another importable callable with the same signature) with callbacks that buffer what the job
reports -- metrics, log lines, checkpoints -- and its captured stdout/stderr lines. The
scheduler drains the buffer every tick (:meth:`JobWorker.drain`) and asks the job to stop with
:meth:`JobWorker.stop`, which makes ``callbacks.should_stop()`` true: the runner then writes a
checkpoint and returns ``status == "interrupted"``.

Each report carries a sequence number; ``drain(stored)`` acknowledges what the scheduler has
stored, and ``on_checkpoint`` waits for that acknowledgement before training goes on, so a
worker that dies later loses no report up to its newest checkpoint (from which it resumes).

The actor is threaded (``max_concurrency > 1``): ``run`` occupies one thread while ``drain`` and
``stop`` are served by the others. This module is imported by Ray workers, so it stays light:
no Ray, no gRPC.
"""

from __future__ import annotations

import contextlib
import importlib
import io
import math
import os
import sys
import threading
import time
import traceback
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

from tinker_core.import_policy import ImportPolicy, enforced
from tinker_scheduler import host_memory

#: Events kept when the scheduler falls behind; older ones are dropped first.
MAX_BUFFERED_EVENTS = 100_000
#: How long ``on_checkpoint`` waits for the scheduler to store the events up to the checkpoint.
CHECKPOINT_FLUSH_TIMEOUT_S = 30.0


def resolve_runner(path: str) -> Callable[..., Any]:
    """Import a runner from ``"package.module:function"`` or ``"package.module.function"``."""
    module_name, sep, attr = path.partition(":")
    if not sep:
        module_name, _, attr = path.rpartition(".")
    if not module_name or not attr:
        raise ValueError(f"runner {path!r} is not an importable path; use 'package.module:function'")
    obj: Any = importlib.import_module(module_name)
    for part in attr.split("."):
        obj = getattr(obj, part)
    if not callable(obj):
        raise ValueError(f"runner {path!r} is not callable")
    return obj  # type: ignore[no-any-return]


def _floats(values: Any) -> dict[str, float]:
    out: dict[str, float] = {}
    for key, value in dict(values or {}).items():
        try:
            out[str(key)] = float(value)
        except (TypeError, ValueError):
            continue
    return out


class _Callbacks:
    """The ``callbacks`` object handed to the runner (see the train contract)."""

    def __init__(self, worker: JobWorker) -> None:
        self._worker = worker

    def on_metrics(self, step: int, metrics: dict[str, float]) -> None:
        self._worker.report({"kind": "metrics", "step": int(step), "values": _floats(metrics), "mono": time.monotonic(),
                            "host": host_memory.report()})

    def on_log(self, line: str) -> None:
        for text in str(line).splitlines() or [""]:
            self._worker.report({"kind": "log", "source": "stdout", "level": "INFO", "text": text})

    def on_checkpoint(self, step: int, path: str) -> None:
        seq = self._worker.report({"kind": "checkpoint", "step": int(step), "path": str(path)})
        # Hold training until the scheduler has stored everything up to this checkpoint: if the
        # process dies later, the run resumes from here and no reported step is lost.
        self._worker.wait_stored(seq, CHECKPOINT_FLUSH_TIMEOUT_S)

    def should_stop(self) -> bool:
        return self._worker.stopping()


class _LineCapture(io.TextIOBase):
    """A text stream that turns every written line into a log event (and echoes it)."""

    def __init__(self, worker: JobWorker, source: str, echo: Any) -> None:
        self._worker = worker
        self._source = source
        self._echo = echo
        self._partial = ""

    def writable(self) -> bool:
        return True

    def write(self, text: str) -> int:
        if self._echo is not None:
            with contextlib.suppress(Exception):
                self._echo.write(text)
        self._partial += text
        *lines, self._partial = self._partial.split("\n")
        for line in lines:
            self._worker.report({"kind": "log", "source": self._source, "level": "", "text": line.rstrip("\r")})
        return len(text)

    def flush(self) -> None:
        if self._echo is not None:
            with contextlib.suppress(Exception):
                self._echo.flush()

    def close_partial(self) -> None:
        if self._partial:
            self._worker.report({"kind": "log", "source": self._source, "level": "", "text": self._partial})
            self._partial = ""


class JobWorker:
    """Runs one job in a Ray actor and buffers its reports for the scheduler."""

    def __init__(self, job_id: str) -> None:
        self.job_id = job_id
        self._events: deque[dict[str, Any]] = deque(maxlen=MAX_BUFFERED_EVENTS)
        self._cond = threading.Condition()
        self._seq = 0
        self._stored = 0
        self._stop = threading.Event()
        self._captures: tuple[_LineCapture, _LineCapture] | None = None

    def report(self, event: dict[str, Any]) -> int:
        """Queue one job event (``kind`` ``log``, ``metrics``, ``checkpoint``, ...) for the
        scheduler to store; returns its sequence number (see :meth:`wait_stored`)."""
        event.setdefault("time", time.time())
        with self._cond:
            self._seq += 1
            event["seq"] = self._seq
            self._events.append(event)
            return self._seq

    def wait_stored(self, seq: int, timeout: float) -> bool:
        """Wait until the scheduler stored every event up to ``seq`` (or the job is stopping);
        False when ``timeout`` passed first."""
        with self._cond:
            return self._cond.wait_for(lambda: self._stored >= seq or self._stop.is_set(), timeout)

    def pid(self) -> int:
        """The worker process id (tests use it to kill the worker)."""
        return os.getpid()

    def stopping(self) -> bool:
        """Whether :meth:`stop` was called (the runner's ``should_stop()``)."""
        return self._stop.is_set()

    def stop(self) -> None:
        """Make ``should_stop()`` true: the runner checkpoints and returns ``interrupted``."""
        self._stop.set()
        with self._cond:
            self._cond.notify_all()

    def drain(self, stored: int = 0) -> list[dict[str, Any]]:
        """Every event buffered since the last drain, oldest first (each has a ``seq``).

        :param stored: the largest ``seq`` the scheduler has durably stored (acknowledges the
            events of earlier drains; ``on_checkpoint`` waits for it).
        """
        with self._cond:
            if stored > self._stored:
                self._stored = stored
                self._cond.notify_all()
            events = list(self._events)
            self._events.clear()
        return events

    def run(
        self, runner: str, config: Any, run_dir: str, *, capture: str = "process",
        allowed_imports: Sequence[str] | None = None, **runner_kwargs: Any,
    ) -> dict[str, Any]:
        """Run the job to completion, interruption or failure; never raises.

        :param capture: ``"process"``: everything written to ``sys.stdout``/``sys.stderr`` in
            this process becomes the job's log (one job per process); ``"thread"``: only what
            this thread writes (several jobs share the process, see ``model_host``).
        :param allowed_imports: the scheduler's import policy, enforced on this process while the
            job runs (:func:`tinker_core.import_policy.enforced`): the code a config names
            (an agent program's ``entry``...) is imported only if it allows it. None: not enforced
            (a direct call, as in tests).
        :param runner_kwargs: passed on to the runner (``shared=`` on a model host).
        :returns: ``{"status": "completed" | "interrupted", "step", "metrics", "checkpoint",
            "plot", "eval"}`` from the runner's result, or ``{"status": "failed", "error",
            "config_error"}`` when it raised.
        """
        Path(run_dir).mkdir(parents=True, exist_ok=True)
        self.report({"kind": "log", "source": "scheduler", "level": "INFO", "text": _placement_line()})
        out = _LineCapture(self, "stdout", _stream("stdout", capture))
        err = _LineCapture(self, "stderr", _stream("stderr", capture))
        self._captures = (out, err)
        if capture == "thread":
            redirects: tuple[Any, Any] = (_thread_redirect("stdout", out), _thread_redirect("stderr", err))
        else:
            redirects = (contextlib.redirect_stdout(out), contextlib.redirect_stderr(err))
        policy = contextlib.nullcontext() if allowed_imports is None else enforced(ImportPolicy(tuple(allowed_imports)))
        try:
            fn = resolve_runner(runner)
            with redirects[0], redirects[1], policy:
                result = fn(config, run_dir=Path(run_dir), callbacks=_Callbacks(self), **runner_kwargs)
            return _summary(result)
        except BaseException as exc:  # a failing job must not kill the actor: report it
            from tinker_core.errors import ConfigError

            for line in traceback.format_exc().rstrip().splitlines()[-20:]:
                self.report({"kind": "log", "source": "stderr", "level": "ERROR", "text": line})
            message = str(exc).strip() or type(exc).__name__
            return {
                "status": "failed",
                "error": f"{type(exc).__name__}: {message}",
                "config_error": isinstance(exc, ConfigError),
            }
        finally:
            self._captures = None
            out.close_partial()
            err.close_partial()

    @contextlib.contextmanager
    def capture_here(self) -> Iterator[None]:
        """While :meth:`run` runs: what the *current* thread writes goes to this job's log too
        (a model host runs the job's work on its executor thread)."""
        captures = self._captures
        if captures is None:
            yield
            return
        with _thread_redirect("stdout", captures[0]), _thread_redirect("stderr", captures[1]):
            yield


def _placement_line() -> str:
    """Where the job runs: the Ray node, the process and the resources Ray assigned."""
    where = f"pid {os.getpid()}"
    try:
        import ray

        if not ray.is_initialized():  # in-process (tests, the local host backend): do not start Ray
            return f"job started ({where})"
        context = ray.get_runtime_context()
        assigned = {k: round(v, 4) for k, v in sorted(context.get_assigned_resources().items())}
        where = f"Ray node {context.get_node_id()[:12]}, {where}, resources {assigned}"
    except Exception:  # not in a Ray worker (a direct call in a test)
        pass
    return f"job started ({where})"


def _stream(name: str, capture: str = "process") -> Any:
    """The stream a capture echoes to: the real one, not another job's capture."""
    stream = getattr(sys, name, None)
    return stream.default if capture == "thread" and isinstance(stream, _ThreadRouter) else stream


class _ThreadRouter(io.TextIOBase):
    """A ``sys.stdout``/``sys.stderr`` that sends each thread's writes to that thread's target.

    Installed by :func:`_thread_redirect` while any thread has a route (removed when the last
    one ends); threads without a route write to the stream that was there before.
    """

    def __init__(self, default: Any) -> None:
        self.default = default
        self.routes: dict[int, Any] = {}

    def _target(self) -> Any:
        return self.routes.get(threading.get_ident(), self.default)

    def writable(self) -> bool:
        return True

    def write(self, text: str) -> int:
        target = self._target()
        return int(target.write(text)) if target is not None else len(text)

    def flush(self) -> None:
        target = self._target()
        if target is not None:
            target.flush()


_router_lock = threading.Lock()


@contextlib.contextmanager
def _thread_redirect(name: str, target: Any) -> Iterator[None]:
    with _router_lock:
        router = getattr(sys, name)
        if not isinstance(router, _ThreadRouter):
            router = _ThreadRouter(router)
            setattr(sys, name, router)
        me = threading.get_ident()
        router.routes[me] = target
    try:
        yield
    finally:
        with _router_lock:
            router.routes.pop(me, None)
            if not router.routes and getattr(sys, name) is router:  # the last job left
                setattr(sys, name, router.default)


def _summary(result: Any) -> dict[str, Any]:
    """The JSON-friendly fields of a ``TrainResult`` (a dataclass, an object or a mapping)."""

    def get(name: str, default: Any = None) -> Any:
        if isinstance(result, dict):
            return result.get(name, default)
        return getattr(result, name, default)

    status = str(get("status", "completed"))
    step = get("step")
    checkpoint = get("checkpoint")
    plot = get("plot")
    metrics = _floats(get("metrics"))
    evaluation = _floats(get("eval"))
    return {
        "status": status,
        "step": int(step) if step is not None and not (isinstance(step, float) and math.isnan(step)) else None,
        "metrics": metrics,
        "checkpoint": str(checkpoint) if checkpoint else "",
        "plot": str(plot) if plot else "",
        "eval": evaluation,
    }
