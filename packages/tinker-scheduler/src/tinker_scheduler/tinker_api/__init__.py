"""A Tinker-compatible HTTP API on the scheduler, for the official ``tinker`` SDK.

``opentinker scheduler start --tinker-port PORT`` serves it beside the gRPC server (same
process); :func:`serve` does the same for an in-process :class:`~tinker_scheduler.scheduler.Scheduler`.
Point the SDK at it with ``tinker.ServiceClient(base_url="http://HOST:PORT", api_key="tml-<tenant key>")``.
Modules: :mod:`.app` (routes), :mod:`.futures` (request ids, ordered per model),
:mod:`.translate` (requests onto TrainingService sessions), :mod:`.records` (what survives a
restart, in the scheduler's SQLite store), :mod:`.listings` (the REST listings),
:mod:`.protowire` (the protobuf messages the SDK uses), :mod:`.auth` (``tml-`` keys). See
docs/guides/tinker-api.md.
"""

from __future__ import annotations

import socket
import threading
from typing import Any

__all__ = ["Gateway", "serve"]


class Gateway:
    """A uvicorn server of the Tinker API in a daemon thread; :attr:`port` is the bound port."""

    def __init__(self, app: Any, host: str, port: int) -> None:
        import uvicorn

        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        self._socket = socket.socket(family, socket.SOCK_STREAM)
        self._socket.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._socket.bind((host.strip("[]"), port))
        self._socket.listen(2048)  # connections wait in the backlog until uvicorn serves them
        self.host = host
        self.port: int = self._socket.getsockname()[1]
        self.app = app
        config = uvicorn.Config(app, log_level="warning", access_log=False, lifespan="off")
        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(target=self._run, name="opentinker-tinker-api", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        self._server.run(sockets=[self._socket])

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}"

    def stop(self) -> None:
        self._server.should_exit = True
        self._thread.join(timeout=10)
        self.app.state.expiry.stop()
        self.app.state.futures.close()
        self.app.state.futures.records.close()
        self._socket.close()


def serve(scheduler: Any, host: str = "127.0.0.1", port: int = 0) -> Gateway:
    """Serve the Tinker API of a started ``scheduler`` on ``host:port`` (0: a free port)."""
    from tinker_scheduler.tinker_api.app import create_app
    from tinker_scheduler.tinker_api.records import Records
    from tinker_scheduler.tinker_api.translate import Models

    if scheduler.training is None:
        raise RuntimeError("start the scheduler before its Tinker API")
    jobs = getattr(scheduler, "jobs", None)
    config = scheduler.config
    models = Models(scheduler.training, Records(scheduler.store.path), free=getattr(jobs, "free", None),
                    limits=config.request_limits)
    app = create_app(models, scheduler.store, config.auth, session_timeout_s=config.tinker_session_timeout_s,
                     max_request_bytes=config.tinker_max_request_bytes)
    return Gateway(app, host, port)
