"""The version handshake: every gRPC call says which OpenTinker and which wire protocol it speaks.

A client (the SDK, the CLI, a job's remote env) sends two metadata keys on every call::

    opentinker-version: tinker-client 0.1.0     # the sending distribution and its version
    opentinker-wire: 1.0                        # WIRE_VERSION: MAJOR.MINOR of the protocol

and every server (the scheduler, an env server) answers with its own two keys in the initial
metadata of every call. The protocol's MAJOR changes when a message or a call changes
incompatibly (a field renumbered, removed or given another meaning); MINOR when something is only
added (proto3 peers ignore fields they do not know). Peers with the same MAJOR talk; otherwise
the server refuses the call with ``FAILED_PRECONDITION`` and one line naming both versions and what
to upgrade, and a client that gets an answer from a server of another MAJOR refuses it the same
way (:class:`IncompatiblePeer`). A call without the keys (``grpcurl``, a health probe, a client
older than the handshake) is served as before.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from importlib import metadata
from typing import Any, NamedTuple

import grpc

#: The wire protocol this code speaks, ``MAJOR.MINOR`` (see the module doc for when each moves).
WIRE_VERSION = "1.0"
VERSION_KEY = "opentinker-version"
WIRE_KEY = "opentinker-wire"

Metadata = Sequence[tuple[str, str | bytes]]


def package_version(dist: str = "tinker-core") -> str:
    """The installed version of ``dist`` ("unknown" when it is not installed as a distribution)."""
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return "unknown"


def _major(wire: str) -> int | None:
    head = wire.strip().split(".", 1)[0]
    return int(head) if head.isdigit() else None


class Peer(NamedTuple):
    """One end of a call: its role ("client", "scheduler", "env server"), distribution and wire."""

    role: str
    dist: str
    version: str
    wire: str

    def describe(self) -> str:
        return f"{self.role} {self.dist} {self.version} (wire {self.wire})"

    def metadata(self) -> list[tuple[str, str]]:
        return [(VERSION_KEY, f"{self.dist} {self.version}"), (WIRE_KEY, self.wire)]


def local(role: str, dist: str) -> Peer:
    """This process as a peer: ``dist``'s installed version and :data:`WIRE_VERSION`."""
    return Peer(role, dist, package_version(dist), WIRE_VERSION)


def peer_from(metadata_: Iterable[Any] | None, role: str) -> Peer | None:
    """The peer that sent ``metadata_`` (None when it sent no handshake)."""
    found: dict[str, str] = {}
    for item in metadata_ or ():
        key, value = item[0], item[1]
        found[key] = value.decode(errors="replace") if isinstance(value, bytes) else str(value)
    if WIRE_KEY not in found:
        return None
    dist, _, version = found.get(VERSION_KEY, "unknown unknown").partition(" ")
    return Peer(role, dist or "unknown", version or "unknown", found[WIRE_KEY])


def refusal(ours: Peer, theirs: Peer) -> str | None:
    """None when the two speak the same wire MAJOR; else the one line that refuses the call."""
    mine, other = _major(ours.wire), _major(theirs.wire)
    if other is not None and mine == other:
        return None
    if other is None or mine is None:
        older, newer = theirs, ours
    else:
        older, newer = (theirs, ours) if other < mine else (ours, theirs)
    return (f"{theirs.describe()} and {ours.describe()} speak incompatible wire protocols: "
            f"upgrade the {older.role} (pip install -U '{older.dist}>={newer.version}'), "
            f"or use a {newer.role} of the {older.role}'s version")


class IncompatiblePeer(grpc.RpcError):  # type: ignore[misc]
    """A server answered with a wire protocol this client does not speak (``FAILED_PRECONDITION``)."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self._message = message

    def code(self) -> grpc.StatusCode:
        return grpc.StatusCode.FAILED_PRECONDITION

    def details(self) -> str:
        return self._message

    def __str__(self) -> str:
        return self._message


# ---- servers --------------------------------------------------------------------------------


class ServerHandshake(grpc.ServerInterceptor):  # type: ignore[misc]
    """Answers every call with this server's versions and refuses clients of another wire MAJOR."""

    def __init__(self, role: str, dist: str) -> None:
        self.peer = local(role, dist)
        self._answer = self.peer.metadata()

    def intercept_service(self, continuation: Callable[[Any], Any], details: Any) -> Any:
        handler = continuation(details)
        if handler is None:
            return None
        client = peer_from(details.invocation_metadata, "client")
        why = refusal(self.peer, client) if client is not None else None
        answer = self._answer

        def wrap(behavior: Callable[[Any, Any], Any]) -> Callable[[Any, Any], Any]:
            def handshaken(request: Any, context: Any) -> Any:
                context.send_initial_metadata(answer)
                if why is not None:
                    context.abort(grpc.StatusCode.FAILED_PRECONDITION, why)
                return behavior(request, context)
            return handshaken

        for kind, make in (
            ("unary_unary", grpc.unary_unary_rpc_method_handler),
            ("unary_stream", grpc.unary_stream_rpc_method_handler),
            ("stream_unary", grpc.stream_unary_rpc_method_handler),
            ("stream_stream", grpc.stream_stream_rpc_method_handler),
        ):
            behavior = getattr(handler, kind)
            if behavior is not None:
                return make(wrap(behavior), request_deserializer=handler.request_deserializer,
                            response_serializer=handler.response_serializer)
        return handler


# ---- clients --------------------------------------------------------------------------------


class _Details(NamedTuple):
    method: str
    timeout: float | None
    metadata: Any
    credentials: Any
    wait_for_ready: Any
    compression: Any


class ClientHandshake(
    grpc.UnaryUnaryClientInterceptor,  # type: ignore[misc]
    grpc.UnaryStreamClientInterceptor,  # type: ignore[misc]
    grpc.StreamUnaryClientInterceptor,  # type: ignore[misc]
    grpc.StreamStreamClientInterceptor,  # type: ignore[misc]
):
    """Sends this client's versions on every call; checks the server's answer on unary calls and
    on server streams until one answer was compatible (after that the channel is trusted)."""

    def __init__(self, dist: str, server_role: str = "server") -> None:
        self.peer = local("client", dist)
        self.server_role = server_role
        self.server: Peer | None = None  # the last server that answered with a handshake

    def _details(self, details: Any) -> _Details:
        sent = [*(details.metadata or ()), *self.peer.metadata()]
        return _Details(details.method, details.timeout, sent, details.credentials,
                        getattr(details, "wait_for_ready", None), getattr(details, "compression", None))

    def _check(self, call: Any) -> Any:
        if self.server is not None:
            return call
        try:
            answered = call.initial_metadata()
        except grpc.RpcError:
            return call
        server = peer_from(answered, self.server_role)
        if server is not None:
            why = refusal(self.peer, server)
            if why is not None:
                call.cancel()
                raise IncompatiblePeer(why)
            self.server = server
        return call

    def intercept_unary_unary(self, continuation: Any, details: Any, request: Any) -> Any:
        return self._check(continuation(self._details(details), request))

    def intercept_unary_stream(self, continuation: Any, details: Any, request: Any) -> Any:
        return self._check(continuation(self._details(details), request))

    def intercept_stream_unary(self, continuation: Any, details: Any, requests: Any) -> Any:
        return continuation(self._details(details), requests)

    def intercept_stream_stream(self, continuation: Any, details: Any, requests: Any) -> Any:
        return continuation(self._details(details), requests)


def handshake_channel(channel: grpc.Channel, dist: str, server_role: str = "server") -> grpc.Channel:
    """``channel`` with :class:`ClientHandshake` on every call (the interceptor is ``.handshake``)."""
    interceptor = ClientHandshake(dist, server_role)
    wrapped = grpc.intercept_channel(channel, interceptor)
    wrapped.handshake = interceptor
    return wrapped
