"""``opentinker doctor``: is this machine ready, and do its parts fit together?

Built-in checks: Python, the installed OpenTinker packages (one release: their versions must
match), the plugins (each loads, no name registered twice), a scheduler when ``--scheduler`` is
given (reachable, its version and wire protocol), the default ports, and Chromium and tmux for the
test suite. Plugins add theirs through ``opentinker_register_doctor_checks`` -- tinker-algos adds
torch (device, dtypes) and the model cache, so this module never imports torch.

One line per finding (:class:`tinker_core.doctor.Finding`); every problem names its fix. Exit 0
when nothing is an error (warnings too with ``--strict``), else 1. The machine facts each check
reads are the small functions below (``python_version``, ``our_distributions``, ``port_in_use``,
``which``...), which the tests replace to simulate each failure.
"""

from __future__ import annotations

import json
import re
import shutil
import socket
import sys
from collections.abc import Callable, Iterable, Iterator
from importlib import metadata
from pathlib import Path
from typing import Annotated

import typer

from tinker_core.doctor import Finding

MIN_PYTHON = (3, 11)
#: The distributions this project publishes all carry this in their Project-URLs.
PROJECT_URL = "github.com/opentinker/opentinker"
#: Ports the commands listen on by default, and who.
DEFAULT_PORTS = {
    50051: "opentinker scheduler start (gRPC)",
    9464: "opentinker scheduler start --metrics-port",
    8000: "opentinker serve",
    8765: "opentinker view",
}
#: Programs the test suite drives (not needed to train): name -> (what uses it, how to install).
TEST_PROGRAMS = {
    "chromium": ("the chat page's and the viewer's browser tests", "apt-get install chromium"),
    "tmux": ("the terminal recordings of train and watch", "apt-get install tmux"),
}


# ---- machine facts (the tests replace these) ----------------------------------------------


def python_version() -> tuple[int, int, int]:
    return sys.version_info[:3]


def our_distributions() -> dict[str, str]:
    """name -> version of every installed distribution this project publishes."""
    found = {}
    for dist in metadata.distributions():
        urls = dist.metadata.get_all("Project-URL") or []
        if any(PROJECT_URL in url for url in urls):
            found[dist.metadata["Name"]] = dist.version
    return found


def port_in_use(port: int, host: str = "127.0.0.1") -> bool:
    with socket.socket() as s:
        s.settimeout(0.5)
        return s.connect_ex((host, port)) == 0


def which(program: str) -> str | None:
    return shutil.which(program)


# ---- checks ---------------------------------------------------------------------------------


def check_python() -> Iterator[Finding]:
    v = python_version()
    text = ".".join(map(str, v))
    if v[:2] < MIN_PYTHON:
        need = ".".join(map(str, MIN_PYTHON))
        yield Finding("python", f"{text} is older than the {need} OpenTinker needs", "error",
                      fix=f"install Python {need} or newer and reinstall OpenTinker with it (uv python install {need})")
    else:
        yield Finding("python", f"{text} ({sys.executable})")


def check_packages() -> Iterator[Finding]:
    dists = our_distributions()
    if "tinker-client" not in dists:  # a source tree on sys.path: nothing to compare
        yield Finding("packages", "OpenTinker runs from a source tree (no installed distribution to compare)")
        return
    listed = ", ".join(f"{name} {version}" for name, version in sorted(dists.items()))
    versions = set(dists.values())
    if len(versions) == 1:
        yield Finding("packages", listed)
        return
    def key(version: str) -> tuple[int, ...]:
        return tuple(int(part) if part.isdigit() else -1 for part in re.split(r"[.+-]", version))

    newest = max(versions, key=key)
    behind = sorted(name for name, version in dists.items() if version != newest)
    pins = " ".join(f"'{name}=={newest}'" for name in behind)
    yield Finding("packages", f"one release, mixed versions: {listed}", "error",
                  fix=f"pip install {pins} (the packages are released together)")


def check_plugins() -> Iterator[Finding]:
    from tinker_core.errors import OpenTinkerError
    from tinker_core.registry import list_plugins

    try:
        infos = list_plugins()
    except OpenTinkerError as e:
        yield Finding("plugins", str(e), "error",
                      fix="uninstall one of the distributions named, or leave one out with OPENTINKER_LOAD_PLUGINS")
        return
    loaded = [i for i in infos if i.error is None]
    yield Finding("plugins", f"{len(loaded)} loaded: " + (", ".join(
        f"{i.distribution} {i.version or '?'}" for i in loaded) or "none"))
    for info in infos:
        if info.error is not None:
            yield Finding(f"plugin {info.name}", f"{info.distribution} {info.version or '?'} failed to load: {info.error}",
                          "error", fix=f"pip install -U {info.distribution} (or uninstall it, or leave it out "
                                       "with OPENTINKER_LOAD_PLUGINS)")


def check_plugin_checks() -> Iterator[Finding]:
    """Run the checks plugins registered (``opentinker_register_doctor_checks``)."""
    from tinker_core.errors import OpenTinkerError
    from tinker_core.registry import get_registry

    try:
        entries = get_registry("doctor_checks").entries()
    except OpenTinkerError:
        return  # check_plugins said why
    for entry in entries:
        try:
            found = list(entry.obj())
        except Exception as e:  # noqa: BLE001 - a plugin's check is reported, not trusted
            found = [Finding(entry.name, f"the check of {entry.distribution} failed: {type(e).__name__}: {e}", "error",
                             fix=f"pip install -U {entry.distribution}")]
        yield from found


def check_scheduler(address: str, api_key: str | None, tls_ca: Path | None) -> Iterator[Finding]:
    import grpc
    from grpc_health.v1 import health_pb2, health_pb2_grpc

    from tinker_client.connection import SchedulerConnection
    from tinker_core.handshake import local

    check = f"scheduler {address}"
    try:
        connection = SchedulerConnection(address, api_key, tls_ca=tls_ca)
    except ValueError as e:
        yield Finding(check, str(e), "error", fix="pass --tls-ca the PEM certificate the scheduler's TLS uses")
        return
    with connection:
        try:
            health_pb2_grpc.HealthStub(connection.channel).Check(health_pb2.HealthCheckRequest(), timeout=5)
        except grpc.RpcError as e:  # (IncompatiblePeer too: a server of another wire MAJOR)
            code = e.code()
            if code == grpc.StatusCode.FAILED_PRECONDITION:
                head, _, tail = (e.details() or "").partition(": upgrade")
                yield Finding(check, head, "error", fix=f"upgrade{tail}" if tail else "upgrade the older end")
            elif code == grpc.StatusCode.UNAVAILABLE:
                yield Finding(check, f"not reachable ({e.details()})", "error",
                              fix="start it (opentinker scheduler start), check the address and port (a "
                                  "kubectl port-forward?), or pass --tls-ca for a TLS scheduler")
            else:
                yield Finding(check, f"answered {code.name}: {e.details()}", "error",
                              fix="check --api-key and --tls-ca, and the scheduler's log")
            return
        server = connection.server
    ours = local("client", "tinker-client")
    if server is None:
        yield Finding(check, "reachable, but it does not say its version (older than the version handshake)",
                      "warning", fix=f"upgrade the scheduler to tinker-scheduler {ours.version}")
    else:
        yield Finding(check, f"reachable: {server.dist} {server.version}, wire {server.wire} "
                             f"(this client: {ours.dist} {ours.version}, wire {ours.wire})")


def check_ports(skip: Iterable[int] = ()) -> Iterator[Finding]:
    busy = {port: who for port, who in DEFAULT_PORTS.items() if port not in skip and port_in_use(port)}
    for port, who in busy.items():
        yield Finding(f"port {port}", f"in use ({who} listens there by default)", "warning",
                      fix=f"stop what listens on {port} (ss -ltnp 'sport = :{port}'), or give the command --port")
    if not busy:
        yield Finding("ports", "free: " + ", ".join(str(p) for p in DEFAULT_PORTS if p not in skip))


def check_test_programs() -> Iterator[Finding]:
    for program, (user, install) in TEST_PROGRAMS.items():
        path = which(program)
        if path is None:
            yield Finding(program, f"not installed: only the test suite needs it ({user})", "warning", fix=install)
        else:
            yield Finding(program, path)


def run_checks(scheduler: str | None = None, api_key: str | None = None,
               tls_ca: Path | None = None) -> list[Finding]:
    checks: list[Callable[[], Iterable[Finding]]] = [check_python, check_packages, check_plugins, check_plugin_checks]
    skip: set[int] = set()
    if scheduler is not None:
        checks.append(lambda: check_scheduler(scheduler, api_key, tls_ca))
        port = scheduler.rsplit(":", 1)[-1]
        if port.isdigit():
            skip.add(int(port))  # the scheduler asked about holds it, as it should
    checks += [lambda: check_ports(skip), check_test_programs]
    return [finding for check in checks for finding in check()]


def doctor(
    scheduler: Annotated[str | None, typer.Option("--scheduler", help="Also check this scheduler (HOST:PORT): reachable, its version and wire protocol.")] = None,
    api_key: Annotated[str | None, typer.Option("--api-key", envvar="OPENTINKER_API_KEY", help="API key for --scheduler.")] = None,
    tls_ca: Annotated[Path | None, typer.Option("--tls-ca", help="PEM certificate to trust for a TLS --scheduler.")] = None,
    strict: Annotated[bool, typer.Option("--strict", help="Exit 1 on warnings too.")] = False,
    as_json: Annotated[bool, typer.Option("--json", help="Print the findings as a JSON list.")] = False,
) -> None:
    """Check this machine and the installed parts: Python, packages, plugins, torch, the model cache,
    ports, a scheduler; one line per finding, each problem with its fix (exit 1 on an error)."""
    findings = run_checks(scheduler, api_key, tls_ca)
    if as_json:
        typer.echo(json.dumps([f.to_dict() for f in findings], indent=2))
    else:
        for finding in findings:
            typer.echo(finding.line(), err=finding.problem)
    errors = sum(f.severity == "error" for f in findings)
    warnings = sum(f.severity == "warning" for f in findings)
    if not as_json:
        typer.echo("all is well" if not errors and not warnings
                   else f"{errors} error(s), {warnings} warning(s)", err=bool(errors or warnings))
    if errors or (strict and warnings):
        raise typer.Exit(1)


def register(app: typer.Typer) -> None:
    app.command("doctor")(doctor)
