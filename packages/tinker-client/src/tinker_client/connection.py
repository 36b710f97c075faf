"""What every client of a scheduler shares: the address, the API key, the channel, auth metadata."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypedDict

import grpc
import tenacity

from tinker_core.handshake import Peer, handshake_channel

DEFAULT_ADDRESS = "localhost:50051"

#: The codes a call is tried again on: the scheduler unreachable (restarting) or too slow to answer.
RETRY_CODES = frozenset({grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED})
#: Only unreachable: for calls that may have done their work before a deadline passed.
UNREACHABLE = frozenset({grpc.StatusCode.UNAVAILABLE})


def backoff_s(failures: int) -> float:
    """The wait before the next try after ``failures`` (>= 1) failed ones in a row: 0.2 s,
    doubling, at most 5 s -- the one backoff of every client call and stream reconnect."""
    return min(0.2 * 2 ** (failures - 1), 5.0)


def call_with_retry(fn: Callable[..., Any], request: Any, *, attempts: int,
                    codes: frozenset[grpc.StatusCode] = RETRY_CODES, **kwargs: Any) -> Any:
    """``fn(request, **kwargs)`` (a unary gRPC call), tried up to ``attempts`` times while it
    fails with one of ``codes`` (tenacity, waiting :func:`backoff_s`); the last error is raised."""
    retrying = tenacity.Retrying(
        stop=tenacity.stop_after_attempt(max(1, attempts)),
        wait=lambda state: backoff_s(state.attempt_number),
        retry=tenacity.retry_if_exception(lambda e: isinstance(e, grpc.RpcError) and e.code() in codes),
        reraise=True,
    )
    return retrying(fn, request, **kwargs)


class ConnectionOptions(TypedDict, total=False):
    """The TLS keywords every client takes and hands to :class:`SchedulerConnection`."""

    tls: bool
    tls_ca: str | Path | None


def read_ca_file(path: str | Path, name: str = "tls_ca") -> bytes:
    """The PEM certificates in ``path`` to trust; a missing, unreadable or non-PEM file is a
    one-line :class:`ValueError` naming ``name`` (the argument or option) and the file."""
    try:
        data = Path(path).read_bytes()
    except FileNotFoundError:
        raise ValueError(f"{name}: {path} does not exist; pass the PEM certificate the scheduler's TLS uses") from None
    except OSError as e:
        raise ValueError(f"{name}: {path} is not readable ({e.strerror or e})") from None
    if b"-----BEGIN CERTIFICATE-----" not in data:
        raise ValueError(f"{name}: {path} is not a PEM certificate (no '-----BEGIN CERTIFICATE-----' line)")
    return data


class SchedulerConnection:
    """A gRPC channel to a scheduler.

    ``address`` defaults to ``$OPENTINKER_SCHEDULER`` else ``localhost:50051``; ``api_key`` (or
    ``$OPENTINKER_API_KEY``) is sent as ``authorization: Bearer <key>``; ``tls_ca`` is a PEM file
    to trust for a TLS scheduler (``tls=True`` uses the system roots; a bad file is a ValueError,
    see :func:`read_ca_file`). Closes as a context manager.
    """

    def __init__(
        self,
        address: str | None = None,
        api_key: str | None = None,
        *,
        tls: bool = False,
        tls_ca: str | Path | None = None,
        options: list[tuple[str, Any]] | None = None,
    ) -> None:
        self.address = address or os.environ.get("OPENTINKER_SCHEDULER") or DEFAULT_ADDRESS
        self.api_key = api_key if api_key is not None else os.environ.get("OPENTINKER_API_KEY")
        if tls or tls_ca:
            root = read_ca_file(tls_ca) if tls_ca else None
            channel = grpc.secure_channel(self.address, grpc.ssl_channel_credentials(root), options=options)
        else:
            channel = grpc.insecure_channel(self.address, options=options)
        # every call sends this client's versions; a scheduler of another wire MAJOR is refused
        self.channel = handshake_channel(channel, "tinker-client", "scheduler")

    @property
    def server(self) -> Peer | None:
        """The scheduler's versions, from its answer to the first call (None before it, or from a
        scheduler older than the handshake)."""
        return self.channel.handshake.server  # type: ignore[no-any-return]

    @property
    def metadata(self) -> list[tuple[str, str]]:
        return [("authorization", f"Bearer {self.api_key}")] if self.api_key else []

    def close(self) -> None:
        self.channel.close()

    def __enter__(self) -> Any:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()
