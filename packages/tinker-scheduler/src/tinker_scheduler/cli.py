"""``opentinker scheduler start`` and ``opentinker scheduler add-tenant NAME``.

Added to the ``opentinker`` CLI by :mod:`tinker_scheduler.plugin`; also runnable as
``python -m tinker_scheduler ...``. Exit codes: 0 success, 1 failure at run time, 2 bad input.
"""

from __future__ import annotations

import ipaddress
import os
import signal
import sys
import threading
from pathlib import Path
from typing import Annotated, NoReturn

import typer

from tinker_core.proto import MAX_MESSAGE_BYTES

EXIT_BAD_INPUT = 2
DEFAULT_PORT = 50051
DEFAULT_METRICS_PORT = 9464

app = typer.Typer(
    help="Run the OpenTinker job scheduler (Ray + gRPC JobService) and manage its tenants.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


def _fail(reason: str, hint: str | None = None, code: int = EXIT_BAD_INPUT) -> NoReturn:
    typer.echo(f"error: {reason}", err=True)
    if hint:
        typer.echo(f"hint: {hint}", err=True)
    raise typer.Exit(code)


def _is_loopback(host: str) -> bool:
    if host in ("localhost",):
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


@app.command()
def start(
    host: Annotated[str, typer.Option(help="Address to bind; 0.0.0.0 serves every interface.")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="gRPC port; 0 picks a free one (printed at start).")] = DEFAULT_PORT,
    db: Annotated[Path | None, typer.Option(help="SQLite job store (default $OPENTINKER_HOME/scheduler.db).")] = None,
    runs_dir: Annotated[
        Path | None, typer.Option(help="Jobs write to RUNS_DIR/<tenant>/<job-id>/ (default $OPENTINKER_HOME/runs).")
    ] = None,
    ray_address: Annotated[
        str | None, typer.Option(help="Join this Ray cluster (e.g. 'auto' or HOST:6379); default: start a local Ray.")
    ] = None,
    num_cpus: Annotated[
        float | None, typer.Option(help="CPUs of the local Ray; with --ray-address, the most this scheduler uses.")
    ] = None,
    num_gpus: Annotated[float | None, typer.Option(help="GPUs, likewise.")] = None,
    metrics_port: Annotated[
        int, typer.Option(help="Prometheus /metrics port; 0 picks a free one, -1 disables it.")
    ] = DEFAULT_METRICS_PORT,
    tls_cert: Annotated[Path | None, typer.Option(help="PEM certificate chain; with --tls-key, serve TLS only.")] = None,
    tls_key: Annotated[Path | None, typer.Option(help="PEM private key of --tls-cert.")] = None,
    max_retries: Annotated[
        int, typer.Option(help="Restarts of a job whose actor died (from its last checkpoint) before it FAILS.")
    ] = 3,
    auth: Annotated[
        str, typer.Option(help="auto: keys required once a tenant exists; required; none: single local user.")
    ] = "auto",
    shutdown_timeout: Annotated[
        float, typer.Option(help="Seconds SIGTERM waits for running jobs to checkpoint before killing them.")
    ] = 60.0,
    runner: Annotated[
        str, typer.Option(help="Importable 'module:function' jobs run (advanced; tests use a test workload).")
    ] = "tinker_algos.train",
    max_jobs_per_host: Annotated[
        int, typer.Option(help="LoRA jobs on the same base model share one model host, up to N per host; 0: one model copy per job.")
    ] = 8,
    model_root: Annotated[
        list[Path] | None,
        typer.Option(
            "--model-root",
            help="A directory whose models and data files jobs and sessions may load (repeatable); "
            "otherwise only presets ('tiny'), hub ids and a tenant's own run outputs.",
        ),
    ] = None,
    max_data_per_request: Annotated[
        int, typer.Option(help="TrainingService: data (or sequences sampled) per request, at most.")
    ] = 1024,
    max_tokens_per_request: Annotated[
        int, typer.Option(help="TrainingService: tokens per request (all its data; for Sample, prompts plus max_tokens), at most.")
    ] = 65_536,
    max_new_tokens_per_sample: Annotated[
        int, typer.Option(help="TrainingService: a Sample request's max_tokens, at most.")
    ] = 8192,
    tinker_port: Annotated[
        int | None, typer.Option(help="Also serve the Tinker API (official tinker SDK) over HTTP on this port; 0 picks one. Off by default.")
    ] = None,
    serve_port: Annotated[
        int | None, typer.Option(help="Also serve finished LoRA jobs with OpenAI's API (completions, chat, a chat page) on this port; 0 picks one. Off by default.")
    ] = None,
    tinker_session_timeout: Annotated[
        float, typer.Option(help="Tinker API: seconds a client session may go without a heartbeat before it expires and its models unload.")
    ] = 600.0,
    tinker_max_request_bytes: Annotated[
        int, typer.Option(help="Tinker API: the largest request body accepted (larger ones get HTTP 413).")
    ] = MAX_MESSAGE_BYTES,
    tinker_max_json_bytes: Annotated[
        int, typer.Option(help="Tinker API: the largest JSON request body accepted (every route but forward_backward; larger: HTTP 413).")
    ] = 8 * 1024 * 1024,
    http_header_timeout: Annotated[
        float, typer.Option(help="Tinker API and serve route: seconds a client has to send a request's headers before its connection is closed.")
    ] = 10.0,
    http_body_timeout: Annotated[
        float, typer.Option(help="Tinker API and serve route: seconds a client has to send a request's body (slower: HTTP 408).")
    ] = 60.0,
) -> None:
    """Start the scheduler and serve until SIGTERM or Ctrl-C (running jobs checkpoint and re-queue)."""
    import logging

    from tinker_scheduler.auth import AuthMode
    from tinker_scheduler.config import SchedulerConfig
    from tinker_scheduler.scheduler import Scheduler
    from tinker_scheduler.store import StoreError

    try:
        mode = AuthMode(auth)
    except ValueError:
        _fail(f"--auth: {auth!r} is not a mode", "use --auth auto, --auth required or --auth none")
    if (tls_cert is None) != (tls_key is None):
        _fail("--tls-cert and --tls-key go together", "give both to serve TLS, or neither")
    for name, path in (("--tls-cert", tls_cert), ("--tls-key", tls_key)):
        if path is not None and not path.is_file():
            _fail(f"{name}: {path} does not exist", "pass a PEM file")
    if tls_cert is not None and tls_key is not None:
        from tinker_scheduler.server import read_tls_pair

        try:
            read_tls_pair(tls_cert, tls_key, ("--tls-cert", "--tls-key"))
        except ValueError as e:
            _fail(str(e))
    if max_retries < 0:
        _fail(f"--max-retries: must be >= 0 (got {max_retries})")
    if max_jobs_per_host < 0:
        _fail(f"--max-jobs-per-host: must be >= 0 (got {max_jobs_per_host})", "0 gives every job its own model copy")
    for root in model_root or ():
        if not root.is_dir():
            _fail(f"--model-root: {root} is not a directory", "pass a directory that holds models or data files")
    for flag, value in (("--max-data-per-request", max_data_per_request), ("--max-tokens-per-request", max_tokens_per_request),
                        ("--max-new-tokens-per-sample", max_new_tokens_per_sample)):
        if value < 1:
            _fail(f"{flag}: must be >= 1 (got {value})")
    if not tinker_session_timeout > 0:
        _fail(f"--tinker-session-timeout: must be > 0 seconds (got {tinker_session_timeout})")
    if tinker_max_request_bytes < 1:
        _fail(f"--tinker-max-request-bytes: must be >= 1 (got {tinker_max_request_bytes})")
    if tinker_max_json_bytes < 1:
        _fail(f"--tinker-max-json-bytes: must be >= 1 (got {tinker_max_json_bytes})")
    for flag, seconds in (("--http-header-timeout", http_header_timeout), ("--http-body-timeout", http_body_timeout)):
        if not seconds > 0:
            _fail(f"{flag}: must be > 0 seconds (got {seconds})")
    if not 0 <= port <= 65535:
        _fail(f"--port: {port} is not a port number", "use 0-65535 (0 picks a free one)")
    if tinker_port is not None and not 0 <= tinker_port <= 65535:
        _fail(f"--tinker-port: {tinker_port} is not a port number", "use 0-65535 (0 picks a free one)")
    if serve_port is not None and not 0 <= serve_port <= 65535:
        _fail(f"--serve-port: {serve_port} is not a port number", "use 0-65535 (0 picks a free one)")
    if mode == AuthMode.NONE and not _is_loopback(host):
        typer.echo(
            f"warning: --auth none on {host} lets anyone who can reach it submit jobs; "
            "bind to 127.0.0.1 or use --auth required",
            err=True,
        )
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        scheduler = Scheduler(SchedulerConfig(
            host=host, port=port, db=db, runs_dir=runs_dir, ray_address=ray_address, num_cpus=num_cpus,
            num_gpus=num_gpus, metrics_port=None if metrics_port < 0 else metrics_port, tls_cert=tls_cert,
            tls_key=tls_key, max_retries=max_retries, auth=mode, runner=runner, shutdown_timeout=shutdown_timeout,
            max_jobs_per_host=max_jobs_per_host, model_roots=tuple(model_root or ()),
            max_data_per_request=max_data_per_request, max_tokens_per_request=max_tokens_per_request,
            max_new_tokens_per_sample=max_new_tokens_per_sample, tinker_session_timeout_s=tinker_session_timeout,
            tinker_max_request_bytes=tinker_max_request_bytes, tinker_max_json_bytes=tinker_max_json_bytes,
            http_header_timeout_s=http_header_timeout, http_body_timeout_s=http_body_timeout,
        ))
        scheduler.start()
    except (StoreError, ValueError) as e:
        _fail(str(e))
    except OSError as e:
        _fail(str(e), code=1)
    gateway = None
    if tinker_port is not None:
        from tinker_scheduler.tinker_api import serve

        try:
            gateway = serve(scheduler, host, tinker_port)
        except OSError as e:
            scheduler.stop()
            _fail(f"--tinker-port: {e}", code=1)
    route = None
    if serve_port is not None:
        from tinker_scheduler import serve_route

        try:
            route = serve_route.serve(scheduler, host, serve_port, tinker=gateway.models if gateway is not None else None)
        except OSError as e:
            if gateway is not None:
                gateway.stop()
            scheduler.stop()
            _fail(f"--serve-port: {e}", code=1)

    stop = threading.Event()

    def request_stop(signum: int, _frame: object) -> None:
        stop.set()

    # After start(): ray.init installs a SIGTERM handler of its own, ours must win.
    signal.signal(signal.SIGTERM, request_stop)
    signal.signal(signal.SIGINT, request_stop)
    c = scheduler.capacity
    metrics = f"http://{scheduler.address.rsplit(':', 1)[0]}:{scheduler.metrics_port}/metrics" if scheduler.metrics_port else "off"
    typer.echo(
        f"opentinker scheduler listening on {scheduler.address} "
        f"({'TLS' if tls_cert else 'plaintext'}, auth {mode.value}); "
        f"resources {c.cpus:g} CPU, {c.gpus:g} GPU, {c.memory_gb:.1f} GiB; metrics {metrics}; "
        f"db {scheduler.db_path}; runs {scheduler.runs_dir}"
    )
    if gateway is not None:
        typer.echo(f"tinker API at {gateway.url} (tinker.ServiceClient(base_url=..., api_key='tml-<tenant key>'))")
    if route is not None:
        typer.echo(f"OpenAI API at {route.url}/v1 (openai.OpenAI(base_url=..., api_key='<tenant key>'); models: job ids)")
    sys.stdout.flush()
    while not stop.wait(0.5):
        pass
    typer.echo("shutting down: asking running jobs to checkpoint...")
    sys.stdout.flush()
    if route is not None:
        route.stop()
    if gateway is not None:
        gateway.stop()
    scheduler.stop()
    typer.echo("scheduler stopped")
    # The store, its lock, the model hosts and Ray are closed: end now. The interpreter's own
    # finalisation of Ray's, gRPC's and torch's native state took 3 s more after a SIGTERM.
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


@app.command("add-tenant")
def add_tenant(
    name: Annotated[str, typer.Argument(help="Tenant name: lowercase letters, digits, '-' and '_'.")],
    db: Annotated[Path | None, typer.Option(help="SQLite job store (default $OPENTINKER_HOME/scheduler.db).")] = None,
) -> None:
    """Create tenant NAME (if new) and a new API key for it; the key is printed once, on stdout."""
    from tinker_scheduler.config import default_home
    from tinker_scheduler.store import JobStore, StoreError

    try:
        store = JobStore(db if db is not None else default_home() / "scheduler.db")
    except StoreError as e:
        _fail(str(e))
    try:
        existed = name in store.tenants()
        key = store.add_tenant(name)
    except StoreError as e:
        _fail(str(e))
    finally:
        store.close()
    what = "new key for existing tenant" if existed else "tenant created"
    typer.echo(f"{what} {name!r}; the key is shown only once, store it now:", err=True)
    typer.echo(key)


def main() -> None:
    app(prog_name="python -m tinker_scheduler")
