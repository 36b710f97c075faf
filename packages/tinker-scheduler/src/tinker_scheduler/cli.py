"""``opentinker scheduler start`` and ``opentinker scheduler add-tenant NAME``.

Added to the ``opentinker`` CLI by :mod:`tinker_scheduler.plugin`; also runnable as
``python -m tinker_scheduler ...``. Exit codes: 0 success, 1 failure at run time, 2 bad input.

``start``'s options are generated from the fields of
:class:`~tinker_scheduler.config.SchedulerConfig` that carry a
:class:`~tinker_scheduler.config.CliOption` (their help, flag, bounds), plus the two ports of the
HTTP fronts (:data:`FRONTS`), which need the ``http`` extra (tinker-serve).
"""

from __future__ import annotations

import dataclasses
import importlib.util
import inspect
import ipaddress
import os
import signal
import sys
import threading
import typing
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, NoReturn

import typer

from tinker_scheduler.config import FIELD_DEFAULT, CliOption, SchedulerConfig

if TYPE_CHECKING:
    from tinker_scheduler.auth import AuthMode
    from tinker_scheduler.http_thread import HttpServer
    from tinker_scheduler.scheduler import Scheduler

EXIT_BAD_INPUT = 2
#: The HTTP fronts' ports: options of the command, not of the scheduler (served beside it).
FRONTS = {
    "tinker_port": CliOption(
        "Also serve the Tinker API (official tinker SDK) over HTTP on this port; 0 picks one. Off by default.",
        type=int | None, default=None, port=True),
    "serve_port": CliOption(
        "Also serve finished LoRA jobs with OpenAI's API (completions, chat, a chat page) on this port; 0 picks one. "
        "Off by default.", type=int | None, default=None, port=True),
}
HTTP_EXTRA_HINT = "install the HTTP fronts: pip install 'tinker-scheduler[http]' (or 'opentinker[scheduler]')"

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


@dataclasses.dataclass(frozen=True)
class _Option:
    """One option of ``start``: the keyword it arrives as, its flag, type, default and rules."""

    name: str
    flag: str
    type: Any
    default: Any
    rules: CliOption


def _options() -> list[_Option]:
    """``start``'s options: the CLI fields of SchedulerConfig in their order, then :data:`FRONTS`."""
    hints = typing.get_type_hints(SchedulerConfig)
    out = []
    for f in dataclasses.fields(SchedulerConfig):
        rules = f.metadata.get("cli")
        if rules is not None:
            default = f.default if rules.default is FIELD_DEFAULT else rules.default
            out.append(_Option(f.name, rules.flag or f"--{f.name.replace('_', '-')}", rules.type or hints[f.name],
                               default, rules))
    out += [_Option(name, f"--{name.replace('_', '-')}", rules.type, rules.default, rules) for name, rules in FRONTS.items()]
    return out


OPTIONS = _options()


def _check(values: dict[str, Any]) -> None:
    """Refuse bad option values before anything starts (exit 2, naming the flag)."""
    from tinker_core.import_policy import ImportPolicy
    from tinker_scheduler.auth import AuthMode

    for o in OPTIONS:
        value, rules = values[o.name], o.rules
        if rules.minimum is not None and value < rules.minimum:
            _fail(f"{o.flag}: must be >= {rules.minimum} (got {value})", rules.hint or None)
        if rules.seconds and not value > 0:
            _fail(f"{o.flag}: must be > 0 seconds (got {value})")
        if rules.port and value is not None and not 0 <= value <= 65535:
            _fail(f"{o.flag}: {value} is not a port number", "use 0-65535 (0 picks a free one)")
    try:
        AuthMode(values["auth"])
    except ValueError:
        _fail(f"--auth: {values['auth']!r} is not a mode", "use --auth auto, --auth required or --auth none")
    _check_tls(values["tls_cert"], values["tls_key"])
    try:
        ImportPolicy(tuple(values["allowed_imports"] or ()))
    except ValueError as e:
        _fail(f"--allow-import: {str(e).removeprefix('allowed_imports: ')}")
    for root in values["model_roots"] or ():
        if not root.is_dir():
            _fail(f"--model-root: {root} is not a directory", "pass a directory that holds models or data files")
    if values["tinker_port"] is not None and importlib.util.find_spec("fastapi") is None:
        _fail("--tinker-port: the Tinker gateway needs FastAPI, which is not installed", HTTP_EXTRA_HINT)
    if values["serve_port"] is not None and not _has_openai_front():
        _fail("--serve-port: the OpenAI route needs tinker-serve (the plugin that registers the 'openai' HTTP front), "
              "which is not installed", HTTP_EXTRA_HINT)


def _has_openai_front() -> bool:
    from tinker_core.http_fronts import OPENAI
    from tinker_core.registry import get_registry

    return OPENAI in get_registry("http_fronts")


def _check_tls(cert: Path | None, key: Path | None) -> None:
    if (cert is None) != (key is None):
        _fail("--tls-cert and --tls-key go together", "give both to serve TLS, or neither")
    for name, path in (("--tls-cert", cert), ("--tls-key", key)):
        if path is not None and not path.is_file():
            _fail(f"{name}: {path} does not exist", "pass a PEM file")
    if cert is not None and key is not None:
        from tinker_scheduler.server import read_tls_pair

        try:
            read_tls_pair(cert, key, ("--tls-cert", "--tls-key"))
        except ValueError as e:
            _fail(str(e))


def _config(values: dict[str, Any]) -> SchedulerConfig:
    """The scheduler's config from the options (``--metrics-port -1``: no metrics endpoint)."""
    fields = {o.name: values[o.name] for o in OPTIONS if o.name not in FRONTS}
    fields["metrics_port"] = None if values["metrics_port"] < 0 else values["metrics_port"]
    fields["model_roots"] = tuple(values["model_roots"] or ())
    fields["allowed_imports"] = tuple(values["allowed_imports"] or ())
    return SchedulerConfig(**fields)


def _run(values: dict[str, Any]) -> None:
    """Start the scheduler and serve until SIGTERM or Ctrl-C (running jobs checkpoint and re-queue)."""
    import logging

    from tinker_scheduler.auth import AuthMode
    from tinker_scheduler.scheduler import Scheduler
    from tinker_scheduler.store import StoreError

    _check(values)
    host, mode = values["host"], AuthMode(values["auth"])
    if mode == AuthMode.NONE and not _is_loopback(host):
        typer.echo(
            f"warning: --auth none on {host} lets anyone who can reach it submit jobs; "
            "bind to 127.0.0.1 or use --auth required",
            err=True,
        )
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        scheduler = Scheduler(_config(values))
        scheduler.start()
    except (StoreError, ValueError) as e:
        _fail(str(e))
    except OSError as e:
        _fail(str(e), code=1)
    fronts = _start_fronts(scheduler, host, values["tinker_port"], values["serve_port"])
    _serve_until_stopped(scheduler, fronts, mode)


def _start_fronts(scheduler: Scheduler, host: str, tinker_port: int | None, serve_port: int | None) -> list[HttpServer]:
    """The HTTP fronts asked for: the Tinker gateway, then the serve route (a failure stops all)."""
    fronts: list[HttpServer] = []
    try:
        if tinker_port is not None:
            from tinker_scheduler.tinker_api import serve

            flag = "--tinker-port"
            fronts.append(serve(scheduler, host, tinker_port))
        if serve_port is not None:
            from tinker_scheduler import serve_route
            from tinker_scheduler.tinker_api import Gateway

            flag = "--serve-port"
            gateway = fronts[0] if fronts and isinstance(fronts[0], Gateway) else None
            fronts.append(serve_route.serve(scheduler, host, serve_port, tinker=gateway.models if gateway else None))
    except OSError as e:
        for front in reversed(fronts):
            front.stop()
        scheduler.stop()
        _fail(f"{flag}: {e}", code=1)
    return fronts


def _serve_until_stopped(scheduler: Scheduler, fronts: list[HttpServer], mode: AuthMode) -> NoReturn:
    import logging

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
        f"({'TLS' if scheduler.config.tls_cert else 'plaintext'}, auth {mode.value}); "
        f"resources {c.cpus:g} CPU, {c.gpus:g} GPU, {c.memory_gb:.1f} GiB; metrics {metrics}; "
        f"db {scheduler.db_path}; runs {scheduler.runs_dir}"
    )
    for front in fronts:  # (the gateway's module needs the http extra: imported only when it serves)
        from tinker_scheduler.tinker_api import Gateway

        if isinstance(front, Gateway):
            typer.echo(f"tinker API at {front.url} (tinker.ServiceClient(base_url=..., api_key='tml-<tenant key>'))")
        else:
            typer.echo(f"OpenAI API at {front.url}/v1 (openai.OpenAI(base_url=..., api_key='<tenant key>'); models: job ids)")
    sys.stdout.flush()
    while not stop.wait(0.5):
        pass
    typer.echo("shutting down: asking running jobs to checkpoint...")
    sys.stdout.flush()
    for front in reversed(fronts):
        front.stop()
    scheduler.stop()
    typer.echo("scheduler stopped")
    # The store, its lock, the model hosts and Ray are closed: end now. The interpreter's own
    # finalisation of Ray's, gRPC's and torch's native state took 3 s more after a SIGTERM.
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


def start(**values: Any) -> None:
    """Start the scheduler and serve until SIGTERM or Ctrl-C (running jobs checkpoint and re-queue)."""
    _run(values)


def _signature() -> inspect.Signature:
    """``start``'s parameters, one per :data:`OPTIONS` (typer reads the signature and its annotations)."""
    return inspect.Signature([
        inspect.Parameter(o.name, inspect.Parameter.KEYWORD_ONLY, default=o.default,
                          annotation=Annotated[o.type, typer.Option(o.flag, help=o.rules.help)])
        for o in OPTIONS
    ], return_annotation=None)


start.__signature__ = _signature()  # type: ignore[attr-defined]
start.__annotations__ = {p.name: p.annotation for p in start.__signature__.parameters.values()} | {"return": None}  # type: ignore[attr-defined]
app.command()(start)


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
