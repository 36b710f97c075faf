"""The ``opentinker view`` command: serve run dirs with the viewer app on localhost."""

from __future__ import annotations

import contextlib
import threading
import time
import webbrowser
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Annotated, Any

import typer

from tinker_client.console import fail
from tinker_core.http_limits import serve_in_thread

__all__ = ["build_server", "register", "running", "serve"]

INSTALL = "pip install 'tinker-client[view]'"


def build_server(run_dirs: list[Path], host: str = "127.0.0.1", port: int = 8765, *,
                 header_timeout_s: float | None = None, allow_hosts: Sequence[str] = ()) -> Any:
    """A ``uvicorn.Server`` of the viewer app over ``run_dirs``, with the header deadline and
    body limits of every OpenTinker server, answering only the ``Host`` names of
    :func:`~tinker_client.viewer.hosts.host_allowlist` (``host`` and ``allow_hosts``).
    :class:`ValueError` names a path that is not a run dir."""
    import uvicorn

    from tinker_client.viewer.app import create_app, guarded, host_allowlist, load_runs
    from tinker_core.http_limits import HEADER_TIMEOUT_S, HttpLimits, uvicorn_config

    limits = HttpLimits(1, header_timeout_s=header_timeout_s or HEADER_TIMEOUT_S)
    app = create_app(load_runs(run_dirs), allowed_hosts=host_allowlist(host, allow_hosts))
    return uvicorn.Server(uvicorn_config(guarded(app), limits, host=host, port=port, log_level="warning", access_log=False))


@contextlib.contextmanager
def running(run_dirs: list[Path], host: str = "127.0.0.1", port: int = 0, **options: Any) -> Iterator[str]:
    """Serve ``run_dirs`` in a daemon thread (``port`` 0: a free one); yields the page's URL and
    stops the server on exit. For tests, benchmarks and scripts."""
    server = build_server(run_dirs, host, port, **options)
    with serve_in_thread(server, "opentinker-view", f"the viewer on {host}:{port}") as bound:
        yield f"http://{host}:{bound}/"


def serve(run_dirs: list[Path], host: str = "127.0.0.1", port: int = 8765, *, open_browser: bool = True,
          header_timeout_s: float | None = None, allow_hosts: Sequence[str] = ()) -> None:
    """Serve ``run_dirs`` at ``http://host:port/`` until interrupted; open a browser tab on it
    unless ``open_browser`` is False. :class:`ValueError` names a path that is not a run dir."""
    server = build_server(run_dirs, host, port, header_timeout_s=header_timeout_s, allow_hosts=allow_hosts)
    url = f"http://{'127.0.0.1' if host in ('0.0.0.0', '') else host}:{port}/"  # noqa: S104 (a bind-all address is shown as localhost)
    if open_browser:
        def _open() -> None:
            while not server.started and not server.should_exit:
                time.sleep(0.05)
            if server.started:
                webbrowser.open(url)

        threading.Thread(target=_open, daemon=True).start()
    typer.echo(f"viewing {len(server.config.app.app.state.runs)} run(s) at {url} (Ctrl-C to stop)")
    server.run()


def register(app: typer.Typer) -> None:
    """Add the ``view`` command to the ``opentinker`` app."""

    @app.command("view")
    def view(
        run_dirs: Annotated[list[Path], typer.Argument(metavar="RUN_DIR...", help="Run dirs (or compare report dirs) to view.", show_default=False)],
        host: Annotated[str, typer.Option("--host", help="Address to bind (default: this machine only).")] = "127.0.0.1",
        port: Annotated[int, typer.Option("--port", min=0, max=65535, help="Port to serve on.")] = 8765,
        no_browser: Annotated[bool, typer.Option("--no-browser", help="Do not open a browser tab.")] = False,
        allow_host: Annotated[list[str] | None, typer.Option(
            "--allow-host", metavar="NAME",
            help="Also answer requests for this host name (repeatable); by default only localhost, 127.0.0.1, ::1 and --host.",
        )] = None,
    ) -> None:
        """Open a local web viewer of run dirs: curves, rollouts, eval transcripts, config, checkpoints, phases; it follows a run while it trains."""
        try:
            import fastapi  # noqa: F401
            import uvicorn  # noqa: F401
        except ImportError as e:
            fail(f"opentinker view needs FastAPI and uvicorn ({e.name} is missing): {INSTALL}")
        try:
            serve(run_dirs, host, port, open_browser=not no_browser, allow_hosts=allow_host or ())
        except ValueError as e:
            fail(f"{e}; give a dir `opentinker train` wrote (runs/<name>, or its --run-dir)")
        except OSError as e:
            fail(f"cannot serve on {host}:{port}: {e.strerror or e}", "pick another --port")
