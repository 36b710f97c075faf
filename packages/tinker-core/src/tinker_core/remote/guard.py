"""How the env server runs env code: bounded in size and in time, never blocking the server.

:class:`ServerLimits` holds the limits checked before any work (the largest action, reset
options or env kwargs a client may send; the largest response) and the call timeout.
:class:`EnvCall` runs one env call in a daemon thread (:func:`tinker_core.timeouts.start_daemon`)
and :func:`wait_for` waits for it until it answers, the server's call timeout or the client's
deadline passes, the client goes away, or the server stops. A call given up on is abandoned,
never joined: the server keeps serving and can exit while it runs. Env code that holds the GIL in
one long C call cannot be interrupted this way; the size limits keep the built-in envs from that.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Generic, TypeVar

import grpc

from tinker_core.timeouts import start_daemon

log = logging.getLogger(__name__)

T = TypeVar("T")

POLL_S = 0.05
"""How often a waiting handler checks for a cancelled call or a stopping server, in seconds."""


REQUEST_OVERHEAD_BYTES = 64 * 1024
"""Room in a request for what is not the action (ids, env id, seed) beyond ``max_action_bytes``."""


@dataclass(frozen=True)
class ServerLimits:
    """The env server's limits (``serve_env`` arguments; ``opentinker env serve`` flags).

    Attributes:
        max_action_bytes: the largest action, reset ``options_json`` or env ``kwargs_json`` a
            request may carry, in UTF-8 bytes; more is ``INVALID_ARGUMENT``.
        max_observation_bytes: the largest response (observation, info, agent state) the server
            returns, in bytes; more is ``RESOURCE_EXHAUSTED``.
        call_timeout_s: the longest one env call (building the env, reset, step, observe, last)
            may run; None: only the client's deadline bounds it. A call that overruns is
            abandoned (``DEADLINE_EXCEEDED``) and its session closed.
    """

    max_action_bytes: int = 64 * 1024
    max_observation_bytes: int = 4 * 1024 * 1024
    call_timeout_s: float | None = 60.0

    @property
    def max_request_bytes(self) -> int:
        """The largest request message the server reads: ``max_action_bytes`` plus 64 KiB for
        the other fields. gRPC refuses a larger one itself (``RESOURCE_EXHAUSTED``, "Received
        message larger than max"), without parsing it."""
        return self.max_action_bytes + REQUEST_OVERHEAD_BYTES

    def __post_init__(self) -> None:
        for name in ("max_action_bytes", "max_observation_bytes"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"serve_env: {name} must be a positive number of bytes, got {value!r}")
        timeout = self.call_timeout_s
        if timeout is not None and not (timeout > 0 and math.isfinite(timeout)):
            raise ValueError(
                f"serve_env: call_timeout_s must be a positive number of seconds (or None to bound "
                f"env calls only by the client's deadline), got {timeout}"
            )


@dataclass(frozen=True)
class GaveUp:
    """Why a handler stopped waiting for an env call: the status code and a phrase for messages."""

    code: grpc.StatusCode
    why: str


class EnvCall(Generic[T]):
    """``fn()`` running in a daemon thread named ``name``.

    ``on_late(value)`` runs in that thread when the call ends after it was abandoned (to close
    what it built or the env it ran in); its errors are logged.
    """

    def __init__(self, fn: Callable[[], T], *, name: str, on_late: Callable[[T | None], None]) -> None:
        self._lock = threading.Lock()
        self._done = threading.Event()
        self._finished = False
        self._abandoned = False
        self._value: T | None = None
        self._error: BaseException | None = None
        self._name = name
        self._on_late = on_late
        start_daemon(fn, self._finish, name=name)

    def _finish(self, value: T | None, error: BaseException | None) -> None:
        with self._lock:
            self._finished = True
            self._value, self._error = value, error
            late = self._abandoned
        self._done.set()
        if late:
            try:
                self._on_late(value)
            except Exception:
                log.exception("cleaning up after the abandoned call %s failed", self._name)

    def wait(self, timeout_s: float) -> bool:
        """True once the call has ended (within ``timeout_s`` seconds)."""
        return self._done.wait(timeout_s)

    def abandon(self) -> bool:
        """Give up on the call; False when it has already ended (take its result instead)."""
        with self._lock:
            if self._finished:
                return False
            self._abandoned = True
            return True

    def result(self) -> T:
        """The call's value, or what it raised re-raised here; only after it has ended."""
        self._done.wait()
        if self._error is not None:
            raise self._error
        return self._value  # type: ignore[return-value]


def wait_for(
    call: EnvCall[T],
    *,
    timeout_s: float | None,
    context: grpc.ServicerContext,
    stopping: threading.Event,
) -> GaveUp | None:
    """Wait for ``call``; None once it has ended, else why the handler should give up on it.

    It gives up when ``timeout_s`` (the server's call timeout) or the client's deadline
    (``context.time_remaining()``) passes, when the RPC ends (the client cancelled or went away)
    or when ``stopping`` is set.
    """
    start = time.monotonic()
    remaining = context.time_remaining()
    client_first = remaining is not None and (timeout_s is None or remaining < timeout_s)
    limit = remaining if client_first else timeout_s
    deadline = None if limit is None else start + limit
    while not call.wait(POLL_S if deadline is None else max(0.0, min(POLL_S, deadline - time.monotonic()))):
        if stopping.is_set():
            return GaveUp(grpc.StatusCode.UNAVAILABLE, "was abandoned because the env server is stopping")
        if deadline is not None and time.monotonic() >= deadline:
            if client_first:
                return GaveUp(
                    grpc.StatusCode.DEADLINE_EXCEEDED,
                    f"did not answer within the client's deadline ({limit:.3g} s) and was abandoned",
                )
            return GaveUp(
                grpc.StatusCode.DEADLINE_EXCEEDED,
                f"took longer than the server's call timeout ({limit:g} s; serve_env(call_timeout_s=...), "
                "opentinker env serve --call-timeout) and was abandoned",
            )
        if not context.is_active():
            return GaveUp(grpc.StatusCode.CANCELLED, "was abandoned because the client cancelled it")
    return None
