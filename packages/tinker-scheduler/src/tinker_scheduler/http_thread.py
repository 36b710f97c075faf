"""An ASGI app served by uvicorn in a daemon thread of the scheduler's process (the Tinker
gateway, ``--tinker-port``; the OpenAI serve route, ``--serve-port``), with the header deadline of
:mod:`tinker_core.http_limits` (the apps bound their bodies themselves): an object over
:func:`tinker_core.http_limits.serve_in_thread`, the one thread-server helper."""

from __future__ import annotations

import contextlib
from typing import Any

from tinker_core.http_limits import HEADER_TIMEOUT_S, HttpLimits, serve_in_thread, uvicorn_config


class HttpServer:
    """``app`` on ``host:port`` (0: a free port) in a daemon thread; :attr:`port` is the bound port.

    A taken port raises ``OSError`` here; the constructor returns once the server has started
    (with ``lifespan="on"``, after the app's startup). A connection whose request headers are not
    in within ``header_timeout_s`` is closed."""

    def __init__(self, app: Any, host: str, port: int, *, name: str, lifespan: str = "off",
                 join_timeout_s: float = 10.0, header_timeout_s: float = HEADER_TIMEOUT_S) -> None:
        import uvicorn

        limits = HttpLimits(max_request_bytes=1, header_timeout_s=header_timeout_s)  # (checks the timeout)
        self.host, self.app = host, app
        server = uvicorn.Server(uvicorn_config(app, limits, host=host, port=port, log_level="warning",
                                               access_log=False, lifespan=lifespan))
        self._running = contextlib.ExitStack()
        self.port: int = self._running.enter_context(
            serve_in_thread(server, name, f"{name} on {host}:{port}", join_timeout_s=join_timeout_s))

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}"

    def stop(self) -> None:
        self._running.close()
