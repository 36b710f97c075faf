"""The one error type of the TrainingService side: a failure with a gRPC status code name.

Model hosts return ``("error", code, message)`` tuples instead of raising across Ray (no pickled
exceptions); :func:`classify` turns any other exception into such a code and message.
"""

from __future__ import annotations

import logging

logger = logging.getLogger("tinker_scheduler.model_host")


class StatusError(Exception):
    """A request that fails with a gRPC status ``code`` (a ``grpc.StatusCode`` name)."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code


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
