"""The model hosts of one scheduler: which host serves which base model, and what they reserve.

A :class:`HostKey` names a host: LoRA sessions and LoRA jobs with the same key use the same base
weights and share one :class:`~tinker_scheduler.model_host.ModelHost`; a full fine-tuning session
gets a key (and a host) of its own. :class:`HostPool` starts hosts on demand (Ray actors, or
objects in this process with the ``local`` backend), counts what they reserve -- the scheduler
subtracts it from what jobs may use -- and shuts down hosts idle for ``idle_timeout_s``.
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypedDict, TypeVar, cast

from tinker_scheduler import host_ops as ops
from tinker_scheduler.errors import StatusError
from tinker_scheduler.policy import GIB, Resources

if TYPE_CHECKING:
    from tinker_scheduler.model_host import SessionSpec

logger = logging.getLogger("tinker_scheduler.training")

R = TypeVar("R")

BACKENDS = ("ray", "local")


class HostArgs(TypedDict, total=False):
    """The arguments a :class:`~tinker_scheduler.model_host.ModelHost` is built with."""

    base_model: str
    device: str | None
    precision: str | None
    full: bool
    revision: str | None
    tokenizer: str | None


@dataclass(frozen=True)
class HostKey:
    """Which model host a session or job uses: the same key means the same base weights.

    ``own`` is ``"lora"`` for hosts shared by LoRA adapters, or the id of the one full
    fine-tuning session the host serves.
    """

    base_model: str
    revision: str | None = None
    tokenizer: str | None = None
    precision: str = "auto"
    device: str = "auto"
    own: str = "lora"

    @classmethod
    def of(
        cls, base_model: str, precision: str | None = None, device: str | None = None, *,
        revision: str | None = None, tokenizer: str | None = None, own: str | None = None,
    ) -> HostKey:
        """The key of a host; ``None`` and ``""`` mean the defaults, ``own`` a full fine-tuning host."""
        return cls(base_model, revision or None, tokenizer or None, precision or "auto", device or "auto", own or "lora")

    def __str__(self) -> str:
        extras = [f"{k}={v}" for k, v in (("revision", self.revision), ("tokenizer", self.tokenizer)) if v]
        return f"{self.base_model}[{', '.join([*extras, self.precision, self.device, self.own])}]"


class HostHandle:
    """A model host: a Ray actor (``backend="ray"``) or an object in this process (``"local"``)."""

    def __init__(
        self, key: HostKey, backend: str, kwargs: HostArgs, cpus: float, *,
        gpus: float = 0.0, memory_gb: float = 0.0,
    ) -> None:
        from tinker_scheduler.model_host import ModelHost

        self.key = key
        self.backend = backend
        self.cpus = cpus if backend == "ray" else 0.0
        self.gpus = gpus if backend == "ray" else 0.0
        self.memory_gb = memory_gb if backend == "ray" else 0.0
        self.sessions: set[str] = set()
        self.jobs: set[str] = set()  # JobService jobs running on this host (ray backend only)
        self.idle_since: float | None = time.monotonic()
        self.dead = False
        if backend == "local":
            self._host: ModelHost | None = ModelHost(**kwargs)
            self._actor = None
        else:
            import ray

            self._host = None
            self._actor = (
                cast(Any, ray.remote(ModelHost))
                .options(
                    num_cpus=cpus, num_gpus=gpus or None, memory=int(memory_gb * GIB) or None,
                    max_concurrency=64, max_restarts=0,
                )
                .remote(num_threads=max(1, int(cpus)), **kwargs)
            )

    @property
    def actor(self) -> Any:
        """The Ray actor (``None`` for the local backend); the scheduler runs jobs on it."""
        return self._actor

    @property
    def reserved(self) -> Resources:
        return Resources(self.cpus, self.gpus, self.memory_gb)

    @property
    def idle(self) -> bool:
        return not self.sessions and not self.jobs

    def _invoke(self, method: str, *args: Any) -> Any:
        """``method(*args)`` on the host; its :class:`StatusError` as raised there, a dead Ray
        host's as UNAVAILABLE."""
        if self._actor is None:
            return getattr(self._host, method)(*args)
        import ray

        try:
            return ray.get(getattr(self._actor, method).remote(*args))
        except ray.exceptions.RayTaskError as e:
            if isinstance(e.cause, StatusError):  # what the host raised (the only type it raises)
                raise StatusError(e.cause.code, str(e.cause)) from None
            raise self._died(e) from None
        except ray.exceptions.RayError as e:
            raise self._died(e) from None

    def _died(self, e: Exception) -> StatusError:
        import ray

        first = (str(e).strip().splitlines() or [type(e).__name__])[0]
        # an actor that Ray's memory monitor killed answers OutOfMemoryError to every later call
        # (it is no RayActorError): dead too, so the next session on this base gets a new host
        if isinstance(e, ray.exceptions.RayActorError | ray.exceptions.OutOfMemoryError):
            self.dead = True
        return StatusError("UNAVAILABLE", f"the model host died ({type(e).__name__}: {first[:200]}); retry the request")

    def call(
        self, session_id: str, request: ops.HostRequest[R], *, deadline: float | None = None, token: str = "",
    ) -> R:
        """Run a session's request on the host (``deadline``, ``token``: see ``ModelHost.call``);
        raises :class:`StatusError` on failure."""
        return cast(R, self._invoke("call", session_id, request, deadline, token))

    def cancel(self, token: str) -> None:
        """Drop the waiting request sent with ``token`` (does not wait for a Ray host's answer)."""
        if self._actor is not None:
            self._actor.cancel.remote(token)
        elif self._host is not None:
            self._host.cancel(token)

    def add_session(self, spec: SessionSpec) -> ops.ModelInfo:
        """Give a training session a slot on the host; its model's info."""
        return cast(ops.ModelInfo, self._invoke("add_session", spec))

    def remove_session(self, session_id: str) -> None:
        self._invoke("remove_session", session_id)

    def close(self) -> None:
        if self._actor is not None:
            import ray

            try:
                ray.kill(self._actor, no_restart=True)
            except Exception:  # noqa: BLE001 - already gone
                logger.debug("killing model host", exc_info=True)
        elif self._host is not None:
            self._host.close()


class HostPool:
    """The hosts by key (thread-safe). ``backend`` is ``"ray"`` or ``"local"``; ``host_cpus`` is
    what a host started for sessions reserves; hosts idle ``idle_timeout_s`` are shut down by
    :meth:`reap`."""

    def __init__(self, *, backend: str = "ray", host_cpus: float = 1.0, idle_timeout_s: float = 60.0) -> None:
        if backend not in BACKENDS:
            raise ValueError(f"training host backend must be 'ray' or 'local', got {backend!r}")
        self.backend = backend
        self.host_cpus = host_cpus
        self.idle_timeout_s = idle_timeout_s
        self._hosts: dict[HostKey, HostHandle] = {}
        self._lock = threading.RLock()

    def reserved(self) -> Resources:
        """What the hosts hold (the scheduler subtracts it from what jobs may use)."""
        total = Resources()
        with self._lock:
            for h in self._hosts.values():
                total = total + h.reserved
        return total

    def host_count(self) -> int:
        with self._lock:
            return len(self._hosts)

    def get(self, key: HostKey) -> HostHandle | None:
        """The live host of ``key``, if any."""
        with self._lock:
            host = self._hosts.get(key)
            return host if host is not None and not host.dead else None

    def _live(self, key: HostKey) -> HostHandle | None:
        host = self._hosts.get(key)
        if host is not None and host.dead:
            self._hosts.pop(key, None)
            host = None
        return host

    # ---- sessions ---------------------------------------------------------------------------
    def attach_session(self, key: HostKey, kwargs: HostArgs, session_id: str, free: Resources | None) -> HostHandle:
        """The host of ``key`` for a session, started if needed (RESOURCE_EXHAUSTED when a new
        host's CPUs are not in ``free``)."""
        with self._lock:
            host = self._live(key)
            if host is None:
                cpus = self.host_cpus if self.backend == "ray" else 0.0
                if free is not None and cpus > free.cpus + 1e-9:
                    raise StatusError(
                        "RESOURCE_EXHAUSTED",
                        f"a new model host needs {cpus:g} CPU(s) but only {free.cpus:g} are free (jobs and other "
                        "hosts hold the rest); retry later, or share a base model another session already uses",
                    )
                host = HostHandle(key, self.backend, kwargs, cpus)
                self._hosts[key] = host
            host.sessions.add(session_id)
            host.idle_since = None
            return host

    def detach_session(self, key: HostKey, session_id: str) -> HostHandle | None:
        """Forget the session on its host (the caller removes it from the host); returns the host."""
        with self._lock:
            host = self._hosts.get(key)
            if host is None:
                return None
            host.sessions.discard(session_id)
            if host.idle:
                host.idle_since = time.monotonic()
            return host

    # ---- jobs (JobService) ------------------------------------------------------------------
    def attach_job(
        self, job_id: str, key: HostKey, kwargs: HostArgs, demand: Resources | None, max_jobs: int
    ) -> HostHandle | None:
        """A Ray model host for a LoRA job: one already serving ``key`` with room for another job,
        else (when ``demand`` is given) a new host that reserves ``demand``; None otherwise."""
        if self.backend != "ray":
            return None
        with self._lock:
            host = self._live(key)
            if host is None and demand is not None:
                host = HostHandle(key, "ray", kwargs, demand.cpus, gpus=demand.gpus, memory_gb=demand.memory_gb)
                self._hosts[key] = host
                logger.info("model host %s started for job %s with %s", key, job_id, demand)
            if host is None or len(host.jobs) >= max_jobs:
                return None
            host.jobs.add(job_id)
            host.idle_since = None
            return host

    def detach_job(self, key: HostKey, job_id: str, *, host_died: bool = False) -> None:
        """The job ended (its adapter is unloaded by the host); a dead host is dropped."""
        with self._lock:
            host = self._hosts.get(key)
            if host is None:
                return
            host.jobs.discard(job_id)
            if host_died:
                host.dead = True
            if host.dead:
                self._hosts.pop(key, None)
            elif host.idle:
                host.idle_since = time.monotonic()

    # ---- shutdown ---------------------------------------------------------------------------
    def reap(self) -> None:
        """Shut down hosts without sessions or jobs for longer than ``idle_timeout_s``."""
        now = time.monotonic()
        with self._lock:
            idle = [
                k for k, h in self._hosts.items()
                if h.idle and h.idle_since is not None and now - h.idle_since > self.idle_timeout_s
            ]
            hosts = [self._hosts.pop(k) for k in idle]
        for h in hosts:
            logger.info("model host %s idle: shutting down", h.key)
            h.close()

    def close(self) -> None:
        with self._lock:
            hosts = list(self._hosts.values())
            self._hosts.clear()
        for h in hosts:
            h.close()
