"""The one error type of the TrainingService side, and where its codes become statuses.

A failure is a :class:`StatusError`: a message and a gRPC status code name. Model hosts raise
only this type (any other exception becomes one on the host, by :func:`classify`), so what
crosses a Ray actor's boundary is always a code and a message. The codes become statuses here
and nowhere else: :func:`grpc_status` for the gRPC services, :func:`http_status`
(:data:`HTTP_STATUS`) for the Tinker gateway.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import grpc

logger = logging.getLogger("tinker_scheduler.model_host")

#: gRPC status code names -> HTTP status. Unimplemented features are 400: the Tinker SDK retries 5xx.
#: The last four are HTTP-only conditions of the gateway (they have no gRPC call behind them).
HTTP_STATUS = {"INVALID_ARGUMENT": 400, "UNIMPLEMENTED": 400, "UNAUTHENTICATED": 401, "PERMISSION_DENIED": 403,
               "NOT_FOUND": 404, "FAILED_PRECONDITION": 409, "ALREADY_EXISTS": 409, "RESOURCE_EXHAUSTED": 429,
               "UNAVAILABLE": 503, "DEADLINE_EXCEEDED": 504, "CANCELLED": 499,
               "REQUEST_TOO_LARGE": 413, "GONE": 410, "REQUEST_TIMEOUT": 408}


class StatusError(Exception):
    """A request that fails with a gRPC status ``code`` (a ``grpc.StatusCode`` name)."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code

    def __reduce__(self) -> tuple[Any, ...]:  # pickled across Ray with its code
        return (type(self), (self.code, str(self)))


def invalid(message: str) -> StatusError:
    """An ``INVALID_ARGUMENT`` error; ``message`` names the field."""
    return StatusError("INVALID_ARGUMENT", message)


def classify(error: BaseException) -> tuple[str, str]:
    """``(code, message)`` of any exception: bad input is INVALID_ARGUMENT, a state that cannot serve
    the request FAILED_PRECONDITION, the rest INTERNAL (logged)."""
    from tinker_core.errors import OpenTinkerError, PreconditionError

    if isinstance(error, StatusError):
        return error.code, str(error)
    if isinstance(error, PreconditionError):
        return "FAILED_PRECONDITION", str(error)
    if isinstance(error, ValueError | TypeError | KeyError | OpenTinkerError):
        return "INVALID_ARGUMENT", str(error)
    logger.error("model host request failed", exc_info=error)
    return "INTERNAL", f"{type(error).__name__}: {error}"


def grpc_status(code: str) -> grpc.StatusCode:
    """The ``grpc.StatusCode`` of a code name (INTERNAL for a name gRPC does not have)."""
    import grpc

    return getattr(grpc.StatusCode, code, grpc.StatusCode.INTERNAL)


def http_status(code: str) -> int:
    """The HTTP status of a code name (:data:`HTTP_STATUS`; 500 for any other)."""
    return HTTP_STATUS.get(code, 500)
