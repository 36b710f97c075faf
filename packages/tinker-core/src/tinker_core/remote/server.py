"""The env server: :func:`serve_env` starts one, :class:`EnvServer` is its handle.

It serves ``EnvService`` (see :mod:`tinker_core.remote.servicer`) and the standard gRPC health
service, and closes sessions idle for longer than ``idle_timeout_s`` from a background thread.
Its limits (:class:`~tinker_core.remote.guard.ServerLimits`) are checked before any work, and env
calls run in threads it can abandon, so one request cannot freeze it and :meth:`EnvServer.stop`
returns within about ``grace`` + 1 s whatever an env is doing.
"""

from __future__ import annotations

import logging
import math
import threading
from collections.abc import Callable, Sequence
from concurrent import futures
from typing import TYPE_CHECKING

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc

from tinker_core.handshake import ServerHandshake
from tinker_core.proto import ENV_SERVICE, MAX_MESSAGE_BYTES
from tinker_core.proto import env_pb2 as pb
from tinker_core.remote.guard import ServerLimits
from tinker_core.remote.servicer import EnvServicer

if TYPE_CHECKING:
    from google.protobuf.message import Message

log = logging.getLogger(__name__)


class EnvServer:
    """A running env server (returned by :func:`serve_env`); serves until :meth:`stop`.

    Attributes:
        host: the interface it listens on.
        port: the port it listens on (the real one when it was started with port 0).
        address: ``host:port``, what clients connect to.
        env_ids: the env ids it serves, or None for every registered env.
    """

    def __init__(
        self,
        server: grpc.Server,
        servicer: EnvServicer,
        health_servicer: health.HealthServicer,
        host: str,
        port: int,
    ) -> None:
        self._server = server
        self._servicer = servicer
        self._health = health_servicer
        self.host = host
        self.port = port
        self.address = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
        self.env_ids = servicer.env_ids
        self._stopped = threading.Event()
        self._stop_lock = threading.Lock()
        self._reaper: threading.Thread | None = None
        if servicer.idle_timeout_s is not None:
            self._reaper = threading.Thread(target=self._reap_loop, name="opentinker-env-reaper", daemon=True)
            self._reaper.start()

    def _reap_loop(self) -> None:
        timeout = self._servicer.idle_timeout_s
        assert timeout is not None
        interval = min(max(timeout / 4, 0.01), 5.0)
        while not self._stopped.wait(interval):
            try:
                self._servicer.reap_idle()
            except Exception:  # pragma: no cover - keep reaping whatever happens
                log.exception("reaping idle env sessions failed")

    @property
    def limits(self) -> ServerLimits:
        """Its size limits and call timeout."""
        return self._servicer.limits

    @property
    def max_sessions(self) -> int:
        return self._servicer.max_sessions

    @property
    def idle_timeout_s(self) -> float | None:
        return self._servicer.idle_timeout_s

    @property
    def num_sessions(self) -> int:
        """How many sessions are open now."""
        return len(self._servicer.session_ids())

    def session_ids(self) -> list[str]:
        return self._servicer.session_ids()

    def reap_idle(self, now: float | None = None) -> int:
        """Close sessions idle for longer than ``idle_timeout_s`` as of ``now``
        (``time.monotonic()`` by default); return how many. A background thread calls this."""
        return self._servicer.reap_idle(now)

    def stop(self, grace: float | None = 1.0) -> None:
        """Stop serving (calls in flight get ``grace`` seconds, then are abandoned) and close
        every session's env; returns within about ``grace`` + 1 s, whatever an env is doing
        (an env busy in an abandoned call is left to its daemon thread).

        Idempotent; safe to call from another thread or a signal handler.
        """
        if self._stopped.is_set():  # also keeps a signal handler from waiting on our own lock
            return
        with self._stop_lock:
            if self._stopped.is_set():
                return
            self._stopped.set()
            self._health.enter_graceful_shutdown()
            done = self._server.stop(grace)
            done.wait(None if grace is None else grace + 1.0)
            self._servicer.stop(wait_s=1.0)  # handlers still waiting on env calls give up now
            if self._reaper is not None and self._reaper is not threading.current_thread():
                self._reaper.join(timeout=5.0)
            log.info("env server on %s stopped", self.address)

    @property
    def stopped(self) -> bool:
        return self._stopped.is_set()

    def wait_for_termination(self, timeout: float | None = None) -> bool:
        """Block until the server stops (or ``timeout`` seconds pass); True once it stopped.

        A CLI serves with ``server.wait_for_termination()`` and calls ``server.stop()`` on
        KeyboardInterrupt.
        """
        timed_out = self._server.wait_for_termination(timeout)
        return not timed_out

    def __enter__(self) -> EnvServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def __repr__(self) -> str:
        served = "every registered env" if self.env_ids is None else ", ".join(self.env_ids)
        state = "stopped" if self.stopped else "serving"
        return f"<EnvServer {self.address} {state} {served}>"


def serve_env(
    env_id: str | Sequence[str] | None = None,
    host: str = "127.0.0.1",
    port: int = 0,
    *,
    max_sessions: int = 64,
    idle_timeout_s: float | None = 300.0,
    max_workers: int | None = None,
    max_action_bytes: int = ServerLimits.max_action_bytes,
    max_observation_bytes: int = ServerLimits.max_observation_bytes,
    call_timeout_s: float | None = ServerLimits.call_timeout_s,
) -> EnvServer:
    """Serve registered environments over gRPC (``EnvService`` plus gRPC health); return at once.

    Args:
        env_id: the env id to serve, several ids, or None for every registered env. Unknown ids
            raise :class:`~tinker_core.errors.UnknownNameError` (with a did-you-mean) here,
            before anything listens.
        host: the interface to listen on; the default serves this machine only.
        port: the port; 0 picks a free one (read it from the returned ``.port``).
        max_sessions: the most sessions open at once; one more is refused with
            ``RESOURCE_EXHAUSTED`` (after closing idle ones).
        idle_timeout_s: a session with no call for this long is closed; None never closes one.
        max_workers: threads serving calls (default ``2 * max_sessions + 4``: each session
            may have one call running and one waiting, so stuck sessions cannot take every
            thread); calls on different sessions run concurrently, calls on one session run one
            at a time.
        max_action_bytes: the largest action, reset options or env kwargs (UTF-8 bytes) a
            request may carry; more is ``INVALID_ARGUMENT`` naming the limit, before any work.
            gRPC itself refuses a request over this plus 64 KiB (``RESOURCE_EXHAUSTED``)
            without parsing it.
        max_observation_bytes: the largest response (observation, info, agent state) the
            server returns; more is ``RESOURCE_EXHAUSTED`` naming the limit.
        call_timeout_s: the longest one env call (construction, reset, step, observe, last)
            may run, further bounded by each client's deadline; None: only the client's
            deadline. An overrunning call is abandoned (``DEADLINE_EXCEEDED``) and its session
            closed, so it cannot block the server.

    Returns:
        An :class:`EnvServer`: ``.port``, ``.address``, ``.stop()``, ``.wait_for_termination()``;
        also a context manager that stops it.
    """
    from tinker_core.registry import make_env

    max_workers = _checked_sizes(max_sessions, idle_timeout_s, max_workers)
    env_ids = _served_ids(env_id)
    limits = ServerLimits(max_action_bytes, max_observation_bytes, call_timeout_s)  # ValueError when bad
    servicer = EnvServicer(env_ids, max_sessions, idle_timeout_s, make_env, limits)
    health_servicer = health.HealthServicer()
    server = grpc.server(
        futures.ThreadPoolExecutor(max_workers=max_workers, thread_name_prefix="opentinker-env"),
        options=[
            ("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
            # a request far over the limits is refused by gRPC itself, before Python parses it
            ("grpc.max_receive_message_length", limits.max_request_bytes),
            ("grpc.so_reuseport", 0),
        ],
        interceptors=[ServerHandshake("env server", "tinker-core")],  # versions on every call (tinker_core.handshake)
    )
    server.add_generic_rpc_handlers((_decoding_handlers(servicer),))
    health_pb2_grpc.add_HealthServicer_to_server(health_servicer, server)
    bound = _listen(server, host, port)
    server.start()
    for service in ("", ENV_SERVICE):
        health_servicer.set(service, health_pb2.HealthCheckResponse.SERVING)
    handle = EnvServer(server, servicer, health_servicer, host, bound)
    log.info("serving %r on %s", "every registered env" if env_ids is None else env_ids, handle.address)
    return handle


def _checked_sizes(max_sessions: int, idle_timeout_s: float | None, max_workers: int | None) -> int:
    """Check :func:`serve_env`'s session and thread sizes; return ``max_workers`` (its default filled in)."""
    if max_sessions < 1:
        raise ValueError(f"serve_env: max_sessions must be >= 1, got {max_sessions}")
    if max_workers is None:
        max_workers = 2 * max_sessions + 4
    if max_workers < 1:
        raise ValueError(f"serve_env: max_workers must be >= 1, got {max_workers}")
    if idle_timeout_s is not None and not (idle_timeout_s > 0 and math.isfinite(idle_timeout_s)):
        raise ValueError(
            f"serve_env: idle_timeout_s must be a positive number of seconds (or None to keep "
            f"idle sessions forever), got {idle_timeout_s}"
        )
    return max_workers


def _served_ids(env_id: str | Sequence[str] | None) -> tuple[str, ...] | None:
    """The env ids :func:`serve_env` serves (None: every registered env), each checked to be registered."""
    from tinker_core.registry import env_spec

    if env_id is None:
        return None
    env_ids = (env_id,) if isinstance(env_id, str) else tuple(env_id)
    if not env_ids:
        raise ValueError("serve_env: env_id is an empty list; pass an env id, or None for every registered env")
    for one in env_ids:
        env_spec(one)  # UnknownNameError with a did-you-mean
    return env_ids


def _listen(server: grpc.Server, host: str, port: int) -> int:
    """Bind ``server`` to ``host:port`` (an IPv6 host in brackets); the port it got, or an OSError."""
    bind = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
    try:
        bound = server.add_insecure_port(bind)
    except RuntimeError as e:
        raise OSError(f"serve_env: could not listen on {bind}: {e}; pick another port or host") from e
    if bound == 0:
        raise OSError(f"serve_env: could not listen on {bind}; pick another port or host")
    return bound


def _decoding_handlers(servicer: EnvServicer) -> grpc.GenericRpcHandler:
    """The EnvService's method handlers, each decoding its own request: a request gRPC's
    deserializer would reject as INTERNAL ("Exception deserializing request!": invalid UTF-8 or a
    surrogate in a string field, a malformed message) is INVALID_ARGUMENT naming the message."""
    from google.protobuf.message import DecodeError

    service = pb.DESCRIPTOR.services_by_name["EnvService"]

    def decoding(
        method: Callable[[Message, grpc.ServicerContext], Message], request_type: type[Message]
    ) -> Callable[[bytes, grpc.ServicerContext], Message]:
        def handler(raw: bytes, context: grpc.ServicerContext) -> Message:
            try:
                request = request_type.FromString(raw)
            except DecodeError as e:
                context.abort(grpc.StatusCode.INVALID_ARGUMENT,
                              f"the request is not a valid {request_type.__name__} (strings must be valid UTF-8): {e}")
            return method(request, context)

        return handler

    handlers = {}
    for m in service.methods:
        request_type, response_type = getattr(pb, m.input_type.name), getattr(pb, m.output_type.name)
        handlers[m.name] = grpc.unary_unary_rpc_method_handler(
            decoding(getattr(servicer, m.name), request_type), response_serializer=response_type.SerializeToString)
    return grpc.method_handlers_generic_handler(service.full_name, handlers)
