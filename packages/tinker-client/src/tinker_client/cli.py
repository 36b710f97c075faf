"""The ``opentinker`` command line.

Built-in commands live here; other packages add theirs through the
``opentinker_register_commands(cli)`` hook. Exit codes: 0 success, 1 failure at run time,
2 bad input (with a one-line reason on stderr, and a hint).
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.table import Table
from rich.text import Text

from tinker_client.console import EXIT_BAD_INPUT, RootGroup, err_console, fail, fail_config
from tinker_client.doctor import register as register_doctor_command
from tinker_client.env_serve import register as register_env_serve_command
from tinker_client.job_settings import register as register_job_command
from tinker_client.new import register as register_new_command
from tinker_client.scheduler_options import (
    ApiKeyOpt,
    JobIdArg,
    SchedulerOpt,
    TlsCaOpt,
    print_job,
    scheduler_client,
)
from tinker_client.trace import register as register_trace_command
from tinker_client.viewer.command import register as register_view_command
from tinker_core.errors import ConfigError, OpenTinkerError

app = typer.Typer(
    name="opentinker",
    cls=RootGroup,
    help="OpenTinker: reinforcement learning for LLM agents, from a laptop CPU to a Ray cluster.",
    no_args_is_help=True,
    add_completion=True,  # --install-completion / --show-completion (bash, zsh, fish, powershell)
    pretty_exceptions_enable=False,
)
config_app = typer.Typer(help="Validate job configs and print their schema.", no_args_is_help=True)
env_app = typer.Typer(help="Work with environments.", no_args_is_help=True)
app.add_typer(config_app, name="config")
app.add_typer(env_app, name="env")


def _print_version(value: bool) -> None:
    if value:
        from tinker_client import __version__

        typer.echo(f"opentinker {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: Annotated[
        bool,
        typer.Option("--version", help="Print the release (one version for all the packages) and exit.",
                     callback=_print_version, is_eager=True),
    ] = False,
) -> None:
    """OpenTinker: reinforcement learning for LLM agents, from a laptop CPU to a Ray cluster."""


# ---- plugins ------------------------------------------------------------------------------


@app.command()
def plugins(
    as_json: Annotated[bool, typer.Option("--json", help="Print every plugin with every name it registers, as JSON.")] = False,
    check: Annotated[bool, typer.Option("--check", help="Exit 1 when a plugin failed to load (for CI).")] = False,
) -> None:
    """List installed plugins (distribution, version) and what they register, grouped by kind;
    env ids that cannot be built here apart, with what to install. --json lists every name."""
    from tinker_core.registry import list_plugins

    try:
        infos = list_plugins()
    except OpenTinkerError as e:
        fail(str(e), "check OPENTINKER_LOAD_PLUGINS, or reinstall the plugin named above")
    failed = [i for i in infos if i.error is not None]
    if as_json:
        typer.echo(json.dumps([i.to_dict() for i in infos], indent=2))
    else:
        console = Console(highlight=False, soft_wrap=True)
        for line in plugin_listing(infos, width=max(console.width, 60)):
            console.print(line)
    if failed and check:  # each failure was reported above (and warned about once, on stderr)
        raise typer.Exit(1)


SHOWN_PER_GROUP = 8
"""Names a group of ``opentinker plugins`` shows before ``... and N more`` (``--json`` lists all)."""


def plugin_listing(infos: list[Any], width: int = 80) -> list[Text]:
    """The lines of ``opentinker plugins``: the distributions, then each kind's names (envs by
    namespace), wrapped between names at ``width`` columns, then the env ids that cannot be
    built here grouped by reason."""
    import textwrap
    from collections import defaultdict

    def wrapped(head: str, names: list[str], more: str = "", limit: int = SHOWN_PER_GROUP) -> list[Text]:
        shown = names[:limit]
        rest = len(names) - len(shown)
        text = ", ".join(shown) + (f" and {rest} more" if rest else "") + more
        lines = textwrap.wrap(text, width=width - 4, initial_indent=head, subsequent_indent="      ",
                              break_long_words=False, break_on_hyphens=False)
        return [Text("  " + line) for line in lines]

    out = [Text("distributions", style="bold")]
    for info in sorted(infos, key=lambda i: i.distribution):
        if info.error is not None:
            out.append(Text(f"  {info.distribution} {info.version or '-'}: failed to load: {info.error}", style="red"))
        else:
            out.append(Text(f"  {info.distribution} {info.version or '-'}"))
    by_kind: dict[str, dict[str, list[str]]] = defaultdict(lambda: defaultdict(list))
    unavailable: dict[tuple[str, str], list[str]] = defaultdict(list)
    for info in infos:
        for kind, names in info.registers.items():
            for name in names:
                if name in info.unavailable:
                    namespace, _, rest = name.partition("/")
                    unavailable[(namespace, info.unavailable[name])].append(rest)
                elif kind == "envs":
                    namespace, _, rest = name.partition("/")
                    by_kind[kind][namespace + "/"].append(rest)
                else:
                    by_kind[kind][""].append(name)
    for kind in sorted(by_kind, key=lambda k: (k != "envs", k)):
        groups = by_kind[kind]
        total = sum(len(v) for v in groups.values())
        out.append(Text(f"{kind.replace('_', ' ')} ({total})", style="bold"))
        for group, names in sorted(groups.items()):
            head = f"{group} ({len(names)}): " if group and len(names) > SHOWN_PER_GROUP else f"{group} " if group else ""
            out.extend(wrapped(head, sorted(names)))
    if unavailable:
        count = sum(len(v) for v in unavailable.values())
        out.append(Text(f"env ids that cannot be built here ({count})", style="bold"))
        for (namespace, why), names in sorted(unavailable.items()):
            out.extend(wrapped(f"{namespace}/ ({len(names)}): ", sorted(names), more=f" -- {why}", limit=3 * SHOWN_PER_GROUP))
    out.append(Text("opentinker plugins --json lists every name", style="dim"))
    return out


# ---- config -------------------------------------------------------------------------------


OverridesArg = Annotated[
    list[str] | None,
    typer.Argument(help="Config overrides KEY.PATH=VALUE (values as YAML, list items by index: stages.1.optimizer.lr=3e-4).", metavar="[KEY.PATH=VALUE]...", show_default=False),
]


@config_app.command("validate")
def config_validate(
    file: Annotated[Path, typer.Argument(help="A job config in YAML.")],
    overrides: OverridesArg = None,
    no_plugins: Annotated[
        bool, typer.Option("--no-plugins", help="Check only the schema, not env/estimator/loss/optimizer names.")
    ] = False,
) -> None:
    """Check a job config (with KEY.PATH=VALUE overrides applied); exit 2 listing every problem
    (field path, bad value, what is allowed)."""
    from tinker_core.config import OverrideError, load_config

    try:
        config = load_config(file, check_plugins=not no_plugins, overrides=overrides or ())
    except OverrideError as e:
        fail(str(e))
    except ConfigError as e:
        fail_config(file, e, "'opentinker config schema' prints every allowed key")
    except OpenTinkerError as e:
        fail(str(e))
    stages = ", ".join(f"{s.name} ({s.algorithm.steps} steps)" for s in config.resolved_stages())
    typer.echo(f"{file}: valid; stages: {stages}")


@config_app.command("schema")
def config_schema() -> None:
    """Print the JSON schema of job configs."""
    from tinker_core.config import json_schema

    typer.echo(json.dumps(json_schema(), indent=2))


# ---- jobs: submit, watch, list, cancel, pause, resume, logs ---------------------------------


def _follow(client: Any, job_id: str, *, logs_only: bool = False) -> int | None:
    from tinker_client.watch import follow

    return follow(client, job_id, logs_only=logs_only)


def _read_config_text(file: Path, overrides: list[str]) -> str:
    """The config text to submit: the file's own, or with ``overrides`` the merged mapping as JSON."""
    from tinker_core.config import OverrideError, apply_overrides, parse_config, read_config_data

    try:  # fail early, locally, before the round trip
        data, source = read_config_data(file)
        if overrides and isinstance(data, dict):
            data = apply_overrides(data, overrides)
        parse_config(data, source=source, check_plugins=False)
    except OverrideError as e:
        fail(str(e))
    except ConfigError as e:
        fail_config(file, e)
    return json.dumps(data, indent=1) if overrides else file.read_text(encoding="utf-8")


@app.command()
def submit(
    file: Annotated[Path, typer.Argument(help="A job config in YAML.")],
    overrides: OverridesArg = None,
    scheduler: SchedulerOpt = None,
    api_key: ApiKeyOpt = None,
    tls_ca: TlsCaOpt = None,
    priority: Annotated[int | None, typer.Option(help="Override the config's priority.")] = None,
    request_id: Annotated[str | None, typer.Option("--request-id", help="Idempotence key; a retry with it never creates two jobs.")] = None,
    watch_: Annotated[bool, typer.Option("--watch", help="Follow the job until it ends.")] = False,
) -> None:
    """Submit a job to a scheduler (with KEY.PATH=VALUE overrides applied); prints its id."""
    text = _read_config_text(file, list(overrides or []))
    with scheduler_client(scheduler, api_key, tls_ca) as client:
        job = client.submit(text, request_id=request_id, priority=priority)
        typer.echo(job.id)
        if watch_:
            raise typer.Exit(_follow(client, job.id) or 0)


def _job_command(name: str, action: Callable[[Any, str], int | None], doc: str) -> None:
    """Add command ``name`` (JOB_ID and the scheduler options) running ``action(client, job_id)``;
    an int it returns is the exit code."""

    def command(job_id: JobIdArg, scheduler: SchedulerOpt = None, api_key: ApiKeyOpt = None, tls_ca: TlsCaOpt = None) -> None:
        with scheduler_client(scheduler, api_key, tls_ca) as client:
            code = action(client, job_id)
        if code is not None:
            raise typer.Exit(code)

    command.__doc__ = doc
    app.command(name)(command)


_job_command(
    "watch",
    _follow,
    "Follow a job's state changes, metrics and logs until it ends (exit 0 when it succeeded).",
)
_job_command(
    "logs",
    lambda client, job_id: _follow(client, job_id, logs_only=True),
    "Print a job's log lines (following it while it runs).",
)


@app.command("list")
def list_jobs(
    state: Annotated[list[str] | None, typer.Option("--state", help="Only jobs in this state (repeatable): queued, running, paused, succeeded, failed, cancelled.")] = None,
    scheduler: SchedulerOpt = None,
    api_key: ApiKeyOpt = None,
    tls_ca: TlsCaOpt = None,
    limit: Annotated[int | None, typer.Option("--limit", min=1, help="Show at most N jobs (the newest).")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print a JSON list instead of a table.")] = False,
) -> None:
    """List your jobs, newest first: a table on a terminal, one line per job when piped
    (fetched page by page, so thousands of jobs are fine)."""
    from tinker_client.jobs import parse_state

    try:
        states = [parse_state(s) for s in state or []]
    except ValueError as e:
        fail(str(e))
    console = Console(highlight=False)
    with scheduler_client(scheduler, api_key, tls_ca) as client:
        if as_json:
            typer.echo(json.dumps([_job_dict(job) for job in client.list(states, limit=limit)], indent=2))
        elif console.is_terminal:
            console.print(_jobs_table(client.list(states, limit=limit)))
        else:  # piped: one line per job, as scripts expect
            for job in client.list(states, limit=limit):
                print_job(job)


def _job_dict(job: Any) -> dict[str, Any]:
    from tinker_client.jobs import state_name

    created = job.created_at.ToDatetime().isoformat() + "Z" if job.HasField("created_at") else None
    return {"id": job.id, "state": state_name(job.state).lower(), "priority": job.priority, "name": job.name,
            "tenant": job.tenant, "created_at": created, "reason": job.reason, "run_dir": job.run_dir}


def _jobs_table(jobs: Iterator[Any]) -> Table:
    from tinker_client.jobs import state_name

    styles = {"SUCCEEDED": "green", "FAILED": "red", "CANCELLED": "dim", "RUNNING": "cyan", "PAUSED": "yellow"}
    table = Table(title="Jobs (newest first)")
    table.add_column("id", no_wrap=True)
    for col in ("state", "prio", "name", "created (UTC)", "reason"):
        table.add_column(col, justify="right" if col == "prio" else "left", overflow="fold")
    for job in jobs:
        state = state_name(job.state)
        created = job.created_at.ToDatetime().strftime("%Y-%m-%d %H:%M:%S") if job.HasField("created_at") else ""
        table.add_row(job.id, Text(state, style=styles.get(state, "")), str(job.priority), job.name, created, job.reason)
    return table


_job_command(
    "cancel",
    lambda client, job_id: print_job(client.cancel(job_id)),
    "Cancel a queued, running or paused job (a running job checkpoints first).",
)
_job_command(
    "pause",
    lambda client, job_id: print_job(client.pause(job_id)),
    "Pause a job: it checkpoints at its next step boundary, frees its worker and waits until resumed.",
)
_job_command(
    "resume",
    lambda client, job_id: print_job(client.resume(job_id)),
    "Resume a paused job: it goes back to the queue and continues from its checkpoint.",
)


register_new_command(app)  # `opentinker new`, defined in tinker_client/new.py
register_view_command(app)  # `opentinker view`, defined in tinker_client/viewer/command.py
register_env_serve_command(env_app)  # `opentinker env serve`, defined in tinker_client/env_serve.py
register_doctor_command(app)  # `opentinker doctor`, defined in tinker_client/doctor.py
register_trace_command(app)  # `opentinker trace`, defined in tinker_client/trace.py
register_job_command(app)  # `opentinker job set`, defined in tinker_client/job_settings.py


# ---- plugin commands and entry --------------------------------------------------------------


PLUGIN_COMMANDS = {
    "train": ("tinker-algos", "or run it on a scheduler: 'opentinker train CONFIG --scheduler HOST:PORT'"),
    "scheduler": ("tinker-scheduler", None),
    "compare": ("tinker-algos", None),
    "fork": ("tinker-algos", None),
    "runs": ("tinker-algos", None),
    "serve": ("tinker-serve", "or pip install 'opentinker[serve]'"),
}
"""Commands that other packages add -> (the distribution to install, another way when there is one)."""

_missing_stubs: list[Any] = []


def _register_plugin_commands(cli: typer.Typer) -> None:
    from tinker_core.registry import plugin_system

    system = plugin_system()
    system.ensure_loaded()
    system.pm.hook.opentinker_register_commands(cli=cli)


def _command_names(cli: typer.Typer) -> set[str]:
    names = {c.name or c.callback.__name__.replace("_", "-") for c in cli.registered_commands if c.callback}
    return names | {g.name or g.typer_instance.info.name for g in cli.registered_groups}


def _add_install_hints(cli: typer.Typer) -> None:
    """A hidden command for each of :data:`PLUGIN_COMMANDS` no plugin added: it names the package to install, exit 2."""
    for stub in _missing_stubs:
        cli.registered_commands.remove(stub)
    _missing_stubs.clear()
    for name in PLUGIN_COMMANDS.keys() - _command_names(cli):
        settings = {"ignore_unknown_options": True, "allow_extra_args": True}
        cli.command(name, hidden=True, context_settings=settings)(_install_hint(name))
        _missing_stubs.append(cli.registered_commands[-1])


def _install_hint(name: str) -> Callable[[typer.Context], None]:
    distribution, alternative = PLUGIN_COMMANDS[name]

    def missing(ctx: typer.Context) -> None:
        if name == "train" and any(a in ("-s", "--scheduler") or a.startswith("--scheduler=") for a in ctx.args):
            # `train CONFIG --scheduler ADDR` is `submit CONFIG --watch`: no trainer needed here
            code = submit_command().main([*ctx.args, "--watch"], prog_name="opentinker train", standalone_mode=False)
            raise typer.Exit(code or 0)
        from rich.markup import escape

        hint = escape(f"pip install {distribution}" + (f"; {alternative}" if alternative else ""))  # keep [extras]
        fail(f"'opentinker {name}' needs {distribution}, which is not installed (or not allowed by OPENTINKER_LOAD_PLUGINS)", hint)

    return missing


def submit_command() -> Any:
    """The click command behind ``opentinker submit`` (``train --scheduler`` runs it)."""
    return typer.main.get_command(app).get_command(None, "submit")  # type: ignore[attr-defined]


def build_app() -> typer.Typer:
    """The root app with every plugin's commands added."""
    _register_plugin_commands(app)
    _add_install_hints(app)
    return app


def show_flags_as_flags(command: Any) -> Any:
    """Drop the ``<bool>`` placeholder typer's help shows beside every flag (``--fresh``, ``--help``),
    in ``command`` and all its subcommands; returns ``command``."""
    help_option = command.get_help_option(command.context_class(command, info_name=command.name))
    for param in [*command.params, *([help_option] if help_option is not None else [])]:
        if getattr(param, "is_flag", False) and param.metavar is None:
            param.metavar = ""
    for sub in getattr(command, "commands", {}).values():
        show_flags_as_flags(sub)
    return command


def main(argv: list[str] | None = None) -> Any:
    try:
        cli = show_flags_as_flags(typer.main.get_command(build_app()))
    except OpenTinkerError as e:
        err_console.print(f"[bold red]error:[/] {e}", markup=True)
        return sys.exit(EXIT_BAD_INPUT)
    try:
        return cli.main(args=argv, prog_name="opentinker", standalone_mode=True)
    except OpenTinkerError as e:  # a command let one through: still one line and exit 2
        err_console.print(f"[bold red]error:[/] {e}", markup=True)
        sys.exit(EXIT_BAD_INPUT)


if __name__ == "__main__":  # pragma: no cover
    main()
