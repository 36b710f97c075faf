"""Limits every HTTP server of OpenTinker runs with (``opentinker serve``, ``opentinker view``,
and the scheduler's Tinker gateway and serve route): a request-body size, a deadline for a
request's headers and one for its body. It lives in tinker-core so that the torch-free
tinker-client (``opentinker view``) and tinker-serve share one copy; it needs starlette and
uvicorn, which every package that runs a server declares (tinker-serve, ``tinker-client[view]``).

- :class:`BodyGuard` (ASGI middleware): a body larger than ``max_request_bytes`` is refused
  with 413, at once by its ``Content-Length`` or as soon as a streamed body grows past it; a body
  not received in full within ``body_timeout_s`` of the app's first read is refused with 408.
- :func:`uvicorn_config`: uvicorn's config with an HTTP protocol that closes a connection whose
  request headers are not complete ``header_timeout_s`` after it opened (or after the first
  byte of a next request on a kept-alive connection). uvicorn itself only times out idle
  kept-alive connections, so half-sent requests would otherwise stay open forever.

Errors inside the app are raised as Starlette ``HTTPException`` (status and detail), so each
app's own handler gives them its error shape; the 413 by ``Content-Length`` is answered by the
``respond`` callable the middleware is given, before the app runs.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from starlette.types import ASGIApp, Message, Receive, Scope, Send

#: Default seconds a client has to send a request's headers.
HEADER_TIMEOUT_S = 10.0
#: Default seconds a client has to send a request's body (from the app's first read of it).
BODY_TIMEOUT_S = 60.0
#: The deepest nesting of arrays and objects a JSON body may have.
MAX_JSON_DEPTH = 32


@dataclass(frozen=True)
class HttpLimits:
    """The limits of one HTTP server."""

    max_request_bytes: int
    header_timeout_s: float = HEADER_TIMEOUT_S
    body_timeout_s: float = BODY_TIMEOUT_S

    def __post_init__(self) -> None:
        if self.max_request_bytes < 1:
            raise ValueError(f"max_request_bytes must be >= 1 (got {self.max_request_bytes!r})")
        for name in ("header_timeout_s", "body_timeout_s"):
            if not getattr(self, name) > 0:
                raise ValueError(f"{name} must be > 0 seconds (got {getattr(self, name)!r})")


class BodyGuard:
    """ASGI middleware bounding request bodies by size and time (see the module docstring).

    ``respond(status, message)`` is the ASGI response for a body refused before the app runs;
    ``what`` names the option that sets the size limit, for the error message."""

    def __init__(self, app: ASGIApp, limits: HttpLimits, respond: Callable[[int, str], ASGIApp],
                 what: str = "max_request_bytes") -> None:
        self.app, self.limits, self.respond, self.what = app, limits, respond, what

    def _too_large(self) -> str:
        return f"the request body is larger than the server's limit of {self.limits.max_request_bytes} bytes ({self.what})"

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        limit, timeout = self.limits.max_request_bytes, self.limits.body_timeout_s
        length = dict(scope["headers"]).get(b"content-length")
        if length is not None and (not length.isdigit() or int(length) > limit):
            status = 413 if length.isdigit() else 400
            await self.respond(status, self._too_large() if status == 413 else "Content-Length is not a number")(
                scope, receive, send)
            return
        from starlette.exceptions import HTTPException

        received, complete, deadline = 0, False, None
        loop = asyncio.get_running_loop()

        async def guarded() -> Message:
            nonlocal received, complete, deadline
            if complete:  # the body is in: later reads wait for the disconnect, as long as they like
                return await receive()
            if deadline is None:
                deadline = loop.time() + timeout
            try:
                message = await asyncio.wait_for(receive(), max(0.0, deadline - loop.time()))
            except TimeoutError:
                raise HTTPException(408, f"the request body did not arrive within {timeout:g} s") from None
            if message["type"] != "http.request":
                complete = True
                return message
            received += len(message.get("body", b""))
            if received > limit:
                raise HTTPException(413, self._too_large())
            complete = not message.get("more_body", False)
            return message

        await self.app(scope, guarded, send)


def parse_json(raw: bytes, max_depth: int = MAX_JSON_DEPTH) -> Any:
    """A JSON body; :class:`ValueError` (with a message for the caller) if it is not JSON or nests
    arrays and objects more than ``max_depth`` deep. Pure work on the body: run it off the event
    loop for large bodies."""
    try:
        body = json.loads(raw)
    except RecursionError:
        raise ValueError(f"the request body nests arrays or objects more than {max_depth} levels deep") from None
    except ValueError:  # also invalid UTF-8
        raise ValueError("the request body is not valid JSON") from None
    level: list[Any] = [body]
    for _ in range(max_depth):  # after k rounds, ``level`` holds the values k + 1 levels deep
        level = [v for x in level if isinstance(x, dict | list) for v in (x.values() if isinstance(x, dict) else x)]
        if not level:
            return body
    if any(isinstance(x, dict | list) for x in level):
        raise ValueError(f"the request body nests arrays or objects more than {max_depth} levels deep")
    return body


class _HeaderDeadline:
    """Mixin for a uvicorn HTTP protocol: closes a connection whose request headers are not in
    within :attr:`header_timeout_s` (see the module docstring)."""

    header_timeout_s: float = HEADER_TIMEOUT_S
    _header_timer: asyncio.TimerHandle | None = None
    _header_cycle: Any = None

    def connection_made(self, transport: Any) -> None:
        super().connection_made(transport)  # type: ignore[misc]
        self._arm_header_deadline()

    def data_received(self, data: bytes) -> None:
        # the first bytes of a next request on a kept-alive connection start its own deadline
        if self._between_requests() and (self._header_timer is None or self._header_cycle is not self._cycle()):
            self._arm_header_deadline()
        super().data_received(data)  # type: ignore[misc]

    def connection_lost(self, exc: Exception | None) -> None:
        if self._header_timer is not None:
            self._header_timer.cancel()
            self._header_timer = None
        super().connection_lost(exc)  # type: ignore[misc]

    def _cycle(self) -> Any:
        return getattr(self, "cycle", None)

    def _between_requests(self) -> bool:
        cycle = self._cycle()
        return cycle is None or bool(cycle.response_complete)

    def _arm_header_deadline(self) -> None:
        if self._header_timer is not None:
            self._header_timer.cancel()
        self._header_cycle = self._cycle()  # the request before the one whose headers are awaited
        self._header_timer = self.loop.call_later(self.header_timeout_s, self._header_deadline_passed)  # type: ignore[attr-defined]

    def _header_deadline_passed(self) -> None:
        self._header_timer = None
        transport = self.transport  # type: ignore[attr-defined]
        # closed only when no request began since the deadline was set (a kept-alive connection
        # between two requests that did arrive is left to uvicorn's keep-alive timeout)
        waiting = self._cycle() is self._header_cycle and self._between_requests()
        if waiting and transport is not None and not transport.is_closing():
            transport.close()


def protocol_class(header_timeout_s: float) -> type:
    """uvicorn's HTTP protocol (httptools when installed, else h11) with a header deadline."""
    base: type
    try:
        from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

        base = HttpToolsProtocol
    except ImportError:  # no httptools
        from uvicorn.protocols.http.h11_impl import H11Protocol

        base = H11Protocol
    return type(f"Deadline{base.__name__}", (_HeaderDeadline, base), {"header_timeout_s": float(header_timeout_s)})


def uvicorn_config(app: Any, limits: HttpLimits, **options: Any) -> Any:
    """``uvicorn.Config(app, **options)`` serving with ``limits``' header deadline."""
    import uvicorn

    return uvicorn.Config(app, http=protocol_class(limits.header_timeout_s), **options)


@contextlib.contextmanager
def serve_in_thread(server: Any, name: str, what: str, *, join_timeout_s: float = 30.0) -> Iterator[int]:
    """Run the ``uvicorn.Server`` ``server`` in a daemon thread named ``name`` until the block
    ends; yields the port it bound (``port`` 0 picks a free one). The one way OpenTinker runs a
    server in a thread (``opentinker view``, the OpenEnv server, the rollout proxy, the
    scheduler's HTTP fronts).

    The socket is bound here, before the thread starts, so a taken port raises ``OSError`` at
    once; the block begins once the server has started (its lifespan's startup done). A server
    that has not started within 60 s is a ``RuntimeError`` naming ``what``. At the end the server
    is asked to exit and its thread is given ``join_timeout_s`` to finish."""
    import socket

    host = str(server.config.host).strip("[]")
    sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, int(server.config.port)))
        sock.listen(2048)
        thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, name=name, daemon=True)
        thread.start()
        try:
            deadline = time.monotonic() + 60
            while not server.started:
                if not thread.is_alive() or time.monotonic() > deadline:
                    raise RuntimeError(f"{what} did not start")
                time.sleep(0.02)
            yield int(sock.getsockname()[1])
        finally:
            server.should_exit = True
            thread.join(timeout=join_timeout_s)
    finally:
        sock.close()
