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

from typing import Any

from tinker_core.http_limits import HEADER_TIMEOUT_S
from tinker_scheduler.http_thread import HttpServer

__all__ = ["Gateway", "serve"]


class Gateway(HttpServer):
    """The Tinker API's uvicorn server in a daemon thread; :attr:`models` are its Tinker models."""

    def __init__(self, app: Any, host: str, port: int, *, header_timeout_s: float = HEADER_TIMEOUT_S) -> None:
        super().__init__(app, host, port, name="opentinker-tinker-api", header_timeout_s=header_timeout_s)

    @property
    def models(self) -> Any:
        """The gateway's :class:`~tinker_scheduler.tinker_api.translate.Models`."""
        return self.app.state.models

    def stop(self) -> None:
        super().stop()
        self.app.state.expiry.stop()
        self.app.state.futures.close()
        self.app.state.futures.records.close()


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
                     max_request_bytes=config.tinker_max_request_bytes, max_json_bytes=config.tinker_max_json_bytes,
                     body_timeout_s=config.http_body_timeout_s)
    return Gateway(app, host, port, header_timeout_s=config.http_header_timeout_s)
