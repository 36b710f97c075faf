"""Which ``Host`` names the viewer answers: a defence against DNS rebinding.

``opentinker view`` serves whoever reaches its port and needs no key. A web page the user opens
elsewhere could make its own name resolve to ``127.0.0.1`` (DNS rebinding) and read every run
the viewer serves, as same-origin requests. Those requests carry the page's name in their
``Host`` header, so the viewer answers only the names it expects (:func:`host_allowlist`):
``localhost``, ``127.0.0.1``, ``::1``, the address it is bound to and the names given with
``--allow-host``; bound to every interface (``0.0.0.0``, ``::``), also any IP address (a
rebinding page has a name, not an address). Anything else is refused with ``421`` naming the
option.
"""

from __future__ import annotations

import ipaddress
import json
from collections.abc import Collection, Iterable
from typing import Any

__all__ = ["ANY_ADDRESS", "LOCAL_NAMES", "HostCheck", "host_allowlist", "host_name"]

LOCAL_NAMES = ("localhost", "127.0.0.1", "::1")
"""The names every viewer answers."""
ANY_ADDRESS = "<any IP address>"
"""In an allowlist: any IP address literal is allowed (a viewer bound to every interface)."""


def host_allowlist(bound: str, extra: Iterable[str] = ()) -> frozenset[str]:
    """The names a viewer bound to ``bound`` answers: the localhost names, ``bound`` and
    ``extra`` (lowercase, without ports); bound to every interface, any IP address too."""
    names = {*LOCAL_NAMES, *(host_name(n) for n in extra if n.strip())}
    if bound in ("0.0.0.0", "::", ""):  # noqa: S104 - recognising the bind-all address, not binding it
        names.add(ANY_ADDRESS)
    else:
        names.add(host_name(bound))
    return frozenset(names)


def host_name(host: str) -> str:
    """``host`` (a ``Host`` header or a name) lowercased, without its port and IPv6 brackets."""
    host = host.strip().lower()
    if host.startswith("["):
        return host[1:].partition("]")[0]
    if host.count(":") == 1:
        host = host.partition(":")[0]
    return host.rstrip(".")


def _is_address(name: str) -> bool:
    try:
        ipaddress.ip_address(name)
    except ValueError:
        return False
    return True


class HostCheck:
    """ASGI middleware: refuse (421) an HTTP request whose ``Host`` is not in ``allowed``."""

    def __init__(self, app: Any, allowed: Collection[str]) -> None:
        self.app, self.allowed = app, frozenset(allowed)

    def allows(self, host: str) -> bool:
        name = host_name(host)
        return name in self.allowed or (ANY_ADDRESS in self.allowed and _is_address(name))

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "http":
            host = next((v.decode("latin-1") for k, v in scope.get("headers", []) if k.lower() == b"host"), "")
            if not self.allows(host):
                names = ", ".join(sorted(n for n in self.allowed if n != ANY_ADDRESS))
                body = json.dumps({"detail": f"Host {host!r} is not a name this viewer answers ({names}): a page of "
                                             "another site cannot read your runs through it (DNS rebinding); add the "
                                             "name with opentinker view --allow-host NAME"}).encode()
                await send({"type": "http.response.start", "status": 421,
                            "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]})
                await send({"type": "http.response.body", "body": body})
                return
        await self.app(scope, receive, send)
