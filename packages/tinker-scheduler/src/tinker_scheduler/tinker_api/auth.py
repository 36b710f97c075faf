"""API keys of Tinker SDK clients.

The SDK sends its key as ``X-API-Key`` and refuses keys that do not start with ``tml-``. The
gateway's keys are the scheduler's own tenant keys (``opentinker scheduler add-tenant NAME``
prints ``otk_...``) with ``tml-`` in front: ``TINKER_API_KEY=tml-otk_...``. The auth mode is the
scheduler's (:mod:`tinker_scheduler.auth`): with ``auto`` and no tenant yet, any ``tml-`` key is
the single ``local`` tenant.
"""

from __future__ import annotations

from collections.abc import Mapping

from tinker_scheduler.auth import AuthError, AuthMode, authenticate
from tinker_scheduler.store import JobStore

#: The prefix the SDK requires on every key.
KEY_PREFIX = "tml-"


def api_key_of(headers: Mapping[str, str]) -> str:
    """The key of an ``X-API-Key`` header, else of ``Authorization: Bearer KEY``; "" for none."""
    key = (headers.get("x-api-key") or "").strip()
    if not key:
        scheme, _, token = (headers.get("authorization") or "").partition(" ")
        key = token.strip() if scheme.lower() == "bearer" else ""
    return key


def tenant_of(store: JobStore, mode: AuthMode, headers: Mapping[str, str]) -> str:
    """The caller's tenant from its ``X-API-Key`` (or ``Authorization: Bearer``) header; raises
    :class:`AuthError` naming what to send."""
    key = api_key_of(headers)
    if key and not key.startswith(KEY_PREFIX):
        raise AuthError(f"API keys start with {KEY_PREFIX!r}: send {KEY_PREFIX}<the key 'opentinker scheduler add-tenant' printed>")
    metadata = [("x-api-key", key[len(KEY_PREFIX):])] if key[len(KEY_PREFIX):] else []
    return authenticate(store, mode, metadata)
