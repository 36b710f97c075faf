"""``opentinker env serve``: serve registered envs over gRPC (EnvService, for RemoteEnv) or, with
``--protocol openenv``, one env as an OpenEnv server (:mod:`tinker_client.openenv_server`)."""

from __future__ import annotations

from typing import Annotated

import typer

from tinker_client.console import fail
from tinker_core.errors import OpenTinkerError

__all__ = ["register"]


def register(env_app: typer.Typer) -> None:
    """Add the ``serve`` command to the ``opentinker env`` group."""

    @env_app.command("serve")
    def env_serve(
        env_id: Annotated[list[str], typer.Argument(help="Registered env id(s) to serve.")],
        host: Annotated[str, typer.Option(help="Interface to listen on (0.0.0.0 for every interface).")] = "127.0.0.1",
        port: Annotated[int, typer.Option(help="Port; 0 picks a free one.")] = 50052,
        max_sessions: Annotated[int, typer.Option("--max-sessions", help="Sessions open at once at most.")] = 64,
        idle_timeout: Annotated[float, typer.Option("--idle-timeout", help="Close a session idle this many seconds.")] = 300.0,
        max_action_bytes: Annotated[
            int, typer.Option("--max-action-bytes", help="Largest action, reset options or env kwargs a request may carry (bytes).")
        ] = 64 * 1024,
        max_observation_bytes: Annotated[
            int, typer.Option("--max-observation-bytes", help="Largest response (observation and info) returned (bytes).")
        ] = 4 * 1024 * 1024,
        call_timeout: Annotated[
            float,
            typer.Option("--call-timeout", help="Abandon an env call (and close its session) after this many seconds; 0: only the client's deadline."),
        ] = 60.0,
        protocol: Annotated[
            str,
            typer.Option("--protocol", help="grpc: OpenTinker's EnvService (RemoteEnv); openenv: an OpenEnv HTTP/WebSocket server of one env "
                         "(OpenEnv's clients, TRL's environment_factory; needs tinker-client[openenv]; --call-timeout is grpc only)."),
        ] = "grpc",
    ) -> None:
        """Serve environments over gRPC (EnvService) until interrupted; clients use RemoteEnv. With
        --protocol openenv, serve one env as an OpenEnv server instead.

        SIGTERM or Ctrl-C stops it within a few seconds, whatever an env is doing (a second SIGTERM
        ends it at once).
        """
        import math
        import signal

        from tinker_core.remote import serve_env

        if protocol not in ("grpc", "openenv"):
            fail(f"--protocol must be grpc or openenv, got {protocol!r}")
        for flag, value in (("--max-sessions", max_sessions), ("--max-action-bytes", max_action_bytes),
                            ("--max-observation-bytes", max_observation_bytes)):
            if value < 1:
                fail(f"{flag} must be >= 1, got {value}")
        if idle_timeout <= 0:
            fail(f"--idle-timeout must be > 0 seconds, got {idle_timeout}")
        if not (call_timeout >= 0 and math.isfinite(call_timeout)):
            fail(f"--call-timeout must be a number of seconds >= 0 (0: only the client's deadline), got {call_timeout}")
        if protocol == "openenv":
            _serve_openenv(env_id, host, port, max_sessions, idle_timeout, max_action_bytes, max_observation_bytes)
            return
        try:
            server = serve_env(
                env_id, host=host, port=port, max_sessions=max_sessions, idle_timeout_s=idle_timeout,
                max_action_bytes=max_action_bytes, max_observation_bytes=max_observation_bytes,
                call_timeout_s=call_timeout or None,
            )
        except OpenTinkerError as e:
            fail(str(e), "'opentinker plugins' lists the registered env ids")
        except (OSError, RuntimeError) as e:  # the port is taken, or the host cannot be bound
            fail(f"cannot listen on {host}:{port}: {e}", "choose another --port")

        def on_sigterm(*_: object) -> None:
            signal.signal(signal.SIGTERM, signal.SIG_DFL)  # a second SIGTERM ends the process at once
            server.stop(grace=1.0)  # returns within ~2 s: stuck env calls are abandoned, not joined

        signal.signal(signal.SIGTERM, on_sigterm)
        typer.echo(f"serving {', '.join(env_id)} on {server.address} (Ctrl-C stops)", err=True)
        try:
            server.wait_for_termination()
        except KeyboardInterrupt:
            pass
        finally:
            server.stop(grace=1.0)


def _serve_openenv(env_ids: list[str], host: str, port: int, max_sessions: int, idle_timeout: float,
                   max_action_bytes: int, max_observation_bytes: int) -> None:
    """``env serve --protocol openenv``: one env as an OpenEnv server (uvicorn stops on SIGTERM / Ctrl-C)."""
    if len(env_ids) != 1:
        fail(f"--protocol openenv serves one env id, got {len(env_ids)}: {', '.join(env_ids)}", "run one server per env")
    try:
        from tinker_client.openenv_server import build_server
    except ImportError as e:
        fail(f"--protocol openenv needs openenv-core ({e.name} is missing)", "pip install 'tinker-client[openenv]'")
    try:
        server = build_server(env_ids[0], host, port, max_action_bytes=max_action_bytes, max_sessions=max_sessions,
                              idle_timeout_s=idle_timeout, max_observation_bytes=max_observation_bytes)
    except OpenTinkerError as e:
        fail(str(e), "'opentinker plugins' lists the registered env ids")
    import socket

    try:  # bound here, not by uvicorn: a taken port is one line and exit 2, and port 0 shows the port it got
        sock = socket.socket(socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0][0], socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
    except OSError as e:
        fail(f"cannot listen on {host}:{port}: {e.strerror or e}", "choose another --port")
    typer.echo(f"serving {env_ids[0]} (OpenEnv protocol) on http://{host}:{sock.getsockname()[1]} (Ctrl-C stops)", err=True)
    server.run(sockets=[sock])
