"""What every servicer of the scheduler does with a call: find the caller's tenant, abort with a status."""

from __future__ import annotations

from typing import NoReturn

import grpc

from tinker_scheduler.auth import AuthError, AuthMode, authenticate
from tinker_scheduler.store import JobStore


def abort(context: grpc.ServicerContext, code: grpc.StatusCode, message: str) -> NoReturn:
    """End the call with ``code`` and ``message`` (``context.abort`` raises)."""
    context.abort(code, message)
    raise AssertionError("unreachable")


def caller_tenant(store: JobStore, mode: AuthMode, context: grpc.ServicerContext) -> str:
    """The caller's tenant from its API key; the call ends UNAUTHENTICATED without a valid one."""
    try:
        return authenticate(store, mode, context.invocation_metadata())
    except AuthError as e:
        abort(context, grpc.StatusCode.UNAUTHENTICATED, str(e))
