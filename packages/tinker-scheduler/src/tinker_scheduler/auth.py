"""Who is calling: API keys in gRPC metadata, and the auth modes.

Every call carries the tenant's key as ``authorization: Bearer <key>`` or ``x-api-key: <key>``.
Modes (``opentinker scheduler start --auth``):

- ``auto`` (default): while the job store has no tenant, calls need no key and act as the
  single local tenant ``local``; once a tenant exists (``opentinker scheduler add-tenant``),
  every call needs a valid key. The check is made per call, so adding the first tenant while
  the scheduler runs locks it down at once.
- ``required``: every call needs a valid key (with no tenant, every call fails).
- ``none``: keys are ignored and every call is the ``local`` tenant (one trusted user;
  bind to 127.0.0.1).
"""

from __future__ import annotations

from collections.abc import Iterable
from enum import StrEnum

from tinker_scheduler.store import LOCAL_TENANT, JobStore


class AuthMode(StrEnum):
    AUTO = "auto"
    REQUIRED = "required"
    NONE = "none"


class AuthError(Exception):
    """The caller could not be authenticated (gRPC UNAUTHENTICATED)."""


ADD_TENANT_HINT = "create a tenant and its key with 'opentinker scheduler add-tenant NAME'"


def key_from_metadata(metadata: Iterable[tuple[str, str | bytes]]) -> str | None:
    """The API key in ``authorization: Bearer <key>`` or ``x-api-key``, or None."""
    for name, value in metadata:
        text = value.decode() if isinstance(value, bytes) else value
        name = name.lower()
        if name == "authorization":
            scheme, _, token = text.strip().partition(" ")
            if scheme.lower() == "bearer" and token.strip():
                return token.strip()
        elif name == "x-api-key" and text.strip():
            return text.strip()
    return None


def authenticate(store: JobStore, mode: AuthMode, metadata: Iterable[tuple[str, str | bytes]]) -> str:
    """The caller's tenant; raises :class:`AuthError` with what to send instead."""
    if mode == AuthMode.NONE:
        return LOCAL_TENANT
    if mode == AuthMode.AUTO and store.tenant_count() == 0:
        return LOCAL_TENANT
    key = key_from_metadata(metadata)
    if key is None:
        if store.tenant_count() == 0:
            raise AuthError(f"this scheduler requires API keys but has no tenant; {ADD_TENANT_HINT}")
        raise AuthError("missing API key: send the metadata 'authorization: Bearer <key>' (or 'x-api-key: <key>')")
    tenant = store.authenticate(key)
    if tenant is None:
        raise AuthError(f"invalid API key; check the key, or {ADD_TENANT_HINT}")
    return tenant
