"""An ASGI app served by uvicorn in a daemon thread of the scheduler's process (the Tinker
gateway, ``--tinker-port``; the OpenAI serve route, ``--serve-port``), with the header deadline of
:mod:`tinker_core.http_limits` (the apps bound their bodies themselves)."""

from __future__ import annotations

import socket
import threading
from typing import Any

from tinker_core.http_limits import HEADER_TIMEOUT_S, HttpLimits, uvicorn_config


class HttpServer:
    """``app`` on ``host:port`` (0: a free port) in a daemon thread; :attr:`port` is the bound port.

    The socket is bound before the thread starts, so a taken port raises ``OSError`` here and
    connections made right after construction wait in the backlog until uvicorn serves them. A
    connection whose request headers are not in within ``header_timeout_s`` is closed."""

    def __init__(self, app: Any, host: str, port: int, *, name: str, lifespan: str = "off",
                 join_timeout_s: float = 10.0, header_timeout_s: float = HEADER_TIMEOUT_S) -> None:
        import uvicorn

        limits = HttpLimits(max_request_bytes=1, header_timeout_s=header_timeout_s)  # (checks the timeout)
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        self._socket = socket.socket(family, socket.SOCK_STREAM)
        self._socket.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._socket.bind((host.strip("[]"), port))
        self._socket.listen(2048)
        self.host, self.app = host, app
        self.port: int = int(self._socket.getsockname()[1])
        self._join_timeout_s = join_timeout_s
        self._server = uvicorn.Server(uvicorn_config(app, limits, log_level="warning", access_log=False,
                                                     lifespan=lifespan))
        self._thread = threading.Thread(target=self._server.run, kwargs={"sockets": [self._socket]}, name=name,
                                        daemon=True)
        self._thread.start()

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}"

    def stop(self) -> None:
        self._server.should_exit = True
        self._thread.join(timeout=self._join_timeout_s)
        self._socket.close()
