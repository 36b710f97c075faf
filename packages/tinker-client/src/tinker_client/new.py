"""``opentinker new``: scaffold a plugin package from a cookiecutter template.

Four templates ship inside the tinker-client distribution, under ``tinker_client/templates/``
(this directory is their only copy; the repository's top-level ``templates/`` points here), so
``opentinker new`` works from a plain ``pip install tinker-client``:

=======================  ==========================================  ========================
kind                     what the package registers                  option that shapes it
=======================  ==========================================  ========================
``env``                  an environment (``<name>/<task>-v0``)        ``env_type``
``advantage-estimator``  an advantage estimator (``<name>``)          ``needs_critic``
``optimizer``            an optimizer (``<name>``)                    ``implementation``
``loss``                 a loss (``<name>``)                          ``loss_kind``
=======================  ==========================================  ========================

Each template renders a standalone, publishable package (``tinker-<kind>-<name>``, ``src/``
layout, entry point in the ``opentinker`` group, a dependency on the released tinker packages
by version range) whose tests use :mod:`tinker_core.testing`. In the names, ``-`` in ``NAME``
becomes ``_`` where Python or a registry name needs it (``word-count`` -> module
``tinker_env_word_count``, estimator ``word_count``).

Python use::

    from tinker_client.new import render
    project_dir = render("env", "word-count", output_dir="plugins", options={"env_type": "multi-turn"})

Bad input raises :class:`TemplateInputError` (the CLI prints its one-line message and exits 2).
"""

from __future__ import annotations

import json
import logging
import re
import shlex
import tempfile
from collections.abc import Mapping, Sequence
from importlib import metadata
from pathlib import Path
from typing import Annotated, Any

import typer

from tinker_client.console import fail
from tinker_core.errors import did_you_mean
from tinker_core.names import PLUGIN_NAME_RULE, is_plugin_name

__all__ = [
    "EDIT_FILE",
    "KINDS",
    "TEMPLATES_DIR",
    "TemplateInputError",
    "normalize_name",
    "parse_options",
    "register",
    "render",
    "template_dir",
    "template_options",
    "tinker_version_range",
]

TEMPLATES_DIR = Path(__file__).resolve().parent / "templates"
"""Where the templates live: ``tinker_client/templates/<kind>/`` (shipped in the wheel)."""

KINDS: dict[str, str] = {
    "env": "an environment: single-turn, multi-turn or a multi-agent game",
    "advantage-estimator": "an advantage estimator, with or without a critic",
    "optimizer": "an optimizer: a new update rule, or a configured torch optimizer",
    "loss": "a loss: a policy-gradient or a supervised loss",
}
"""Template kind -> what its package provides."""

MAX_NAME_LENGTH = 40
_RESERVED_PREFIXES = ("tinker-", "opentinker-")


class TemplateInputError(ValueError):
    """Bad input to :func:`render` (unknown kind, bad name, unknown or invalid option).

    ``str(error)`` is a one-line reason; ``hint`` says what to do (may be empty).
    """

    def __init__(self, reason: str, hint: str = "") -> None:
        super().__init__(reason)
        self.reason = reason
        self.hint = hint


def _suggest(word: str, choices: Sequence[str]) -> str:
    close = did_you_mean(word, choices)
    return f"; did you mean {close!r}?" if close else ""


def template_dir(kind: str) -> Path:
    """The directory of the template ``kind`` (raise :class:`TemplateInputError` when unknown)."""
    if kind not in KINDS:
        raise TemplateInputError(
            f"unknown template kind {kind!r}{_suggest(kind, list(KINDS))}",
            f"kinds are {', '.join(KINDS)}",
        )
    path = TEMPLATES_DIR / kind
    if not (path / "cookiecutter.json").is_file():  # pragma: no cover - a broken installation
        raise FileNotFoundError(f"template {kind!r} is missing from {TEMPLATES_DIR}; reinstall tinker-client")
    return path


def template_options(kind: str) -> dict[str, Any]:
    """The options (``--option key=value``) of a template and their defaults.

    A list means a choice (the first item is the default); a string is free text, which may
    be a Jinja expression over earlier options (e.g. ``project_name``). ``name`` is set with
    ``--name`` and is not listed; keys starting with ``_`` are derived and cannot be set.
    """
    context = json.loads((template_dir(kind) / "cookiecutter.json").read_text(encoding="utf-8"))
    return {k: v for k, v in context.items() if not k.startswith("_") and k != "name"}


def normalize_name(name: str) -> str:
    """Check a ``--name`` (:data:`tinker_core.names.PLUGIN_NAME_RE`, ``_`` read as ``-``) and
    return its hyphenated form (``word_count`` -> ``word-count``)."""
    if not isinstance(name, str) or not name.strip():
        raise TemplateInputError("--name is empty", "give a short name such as 'word-count'")
    hyphenated = name.strip().replace("_", "-")
    if not is_plugin_name(hyphenated):
        raise TemplateInputError(
            f"bad name {name!r}: {PLUGIN_NAME_RULE}",
            "e.g. --name word-count",
        )
    if len(hyphenated) > MAX_NAME_LENGTH:
        raise TemplateInputError(f"bad name {name!r}: longer than {MAX_NAME_LENGTH} characters")
    for prefix in _RESERVED_PREFIXES:
        if hyphenated.startswith(prefix):
            short = hyphenated[len(prefix):]
            raise TemplateInputError(
                f"bad name {name!r}: give the short name without {prefix!r}; the distribution "
                "name gets its 'tinker-<kind>-' prefix from the template",
                f"e.g. --name {short or 'word-count'}",
            )
    return hyphenated


def parse_options(kind: str, pairs: Sequence[str]) -> dict[str, str]:
    """``["key=value", ...]`` -> a dict, each key checked against the template's options."""
    known = template_options(kind)
    out: dict[str, str] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        key = key.strip()
        if not sep or not key:
            raise TemplateInputError(f"--option {pair!r} is not of the form key=value",
                                     f"options of {kind!r}: {', '.join(known)}")
        if key == "name":
            raise TemplateInputError("--option name=... is not allowed", "set the name with --name")
        if key not in known:
            raise TemplateInputError(
                f"unknown option {key!r} for template {kind!r}{_suggest(key, list(known))}",
                f"options of {kind!r}: {', '.join(known)}",
            )
        choices = known[key]
        if isinstance(choices, list) and value not in choices:
            raise TemplateInputError(
                f"option {key}={value!r} is not one of {', '.join(map(str, choices))}"
                f"{_suggest(value, [str(c) for c in choices])}"
            )
        out[key] = value
    return out


def tinker_version_range(version: str) -> str:
    """The version range a generated package depends on: the minor series of ``version``.

    The tinker packages are released together with one version. Before 1.0 a minor release may
    change a contract, so ``0.1.3`` gives ``>=0.1,<0.2``; from 1.0 on, ``1.4.0`` gives
    ``>=1.4,<2``.
    """
    match = re.match(r"^(\d+)\.(\d+)", version)
    if not match:
        raise ValueError(f"cannot read a version range from {version!r}")
    major, minor = int(match[1]), int(match[2])
    upper = f"{major}.{minor + 1}" if major == 0 else f"{major + 1}"
    return f">={major}.{minor},<{upper}"


def _installed_tinker_range() -> str:
    try:
        version = metadata.version("tinker-core")
    except metadata.PackageNotFoundError:  # pragma: no cover - tinker-core is a dependency
        from tinker_core import __version__ as version
    return tinker_version_range(version)


def local_sources(dists: Sequence[str] = ("tinker-core", "tinker-client")) -> list[str]:
    """``uv pip install`` arguments that find ``dists`` (tinker-core, tinker-client) where this machine got
    them when that was not a package index (PEP 610's ``direct_url.json``): a wheel's folder as
    ``--find-links DIR``, a source directory as its path. Empty for packages from an index, so the
    printed install command is the plain one after a release and still works before it."""
    from urllib.parse import unquote, urlparse

    args: list[str] = []
    for dist in dists:
        try:
            text = metadata.distribution(dist).read_text("direct_url.json")
        except metadata.PackageNotFoundError:
            continue
        url = json.loads(text).get("url", "") if text else ""
        if not url.startswith("file://"):
            continue
        path = Path(unquote(urlparse(url).path))
        more = ["--find-links", str(path.parent)] if path.suffix == ".whl" else [str(path)]
        if more[-1] not in args:
            args += more
    return args


def _quiet_cookiecutter_logs() -> None:
    log = logging.getLogger("cookiecutter")
    if not log.handlers:
        log.addHandler(logging.NullHandler())
    log.propagate = False


def render(
    kind: str,
    name: str,
    *,
    output_dir: str | Path = ".",
    options: Mapping[str, str] | None = None,
    no_input: bool = True,
) -> Path:
    """Render the template ``kind`` for ``name`` into ``output_dir``; return the project directory.

    Args:
        kind: one of :data:`KINDS`.
        name: the short name (``word-count``); see :func:`normalize_name`.
        output_dir: where the project directory (``tinker-<kind>-<name>``) is created.
        options: template options (see :func:`template_options`), checked like ``--option``.
        no_input: take every default without asking; ``False`` prompts on the terminal (the
            values given here become the defaults offered).

    Raises:
        TemplateInputError: an unknown kind, a bad name or option, an existing project
            directory, or an answer the template's checks refuse.
    """
    from cookiecutter.exceptions import FailedHookException, OutputDirExistsException
    from cookiecutter.main import cookiecutter

    # cookiecutter logs a traceback when a hook refuses the answers; the hook has printed the
    # reason and the error below says what happened, so keep its log out of the terminal
    _quiet_cookiecutter_logs()
    path = template_dir(kind)
    hyphenated = normalize_name(name)
    extra: dict[str, Any] = {"name": hyphenated}
    extra.update(parse_options(kind, [f"{k}={v}" for k, v in (options or {}).items()]))
    extra["__tinker_range"] = _installed_tinker_range()
    out = Path(output_dir)
    if out.exists() and not out.is_dir():
        raise TemplateInputError(f"--output {out} exists and is not a directory")
    default_context = _user_default_context()
    created = not out.exists()
    out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="opentinker-new-") as scratch:
        config_file = _scratch_config(Path(scratch), default_context)
        try:
            project = cookiecutter(
                str(path),
                no_input=no_input,
                extra_context=extra,
                output_dir=str(out),
                config_file=str(config_file),
            )
        except OutputDirExistsException as e:
            reason = str(e).removeprefix("Error: ")  # '"DIR/tinker-env-x" directory already exists'
            raise TemplateInputError(reason, "choose another --output directory, or remove that one") from None
        except FailedHookException:
            raise TemplateInputError(
                "the template refused the answers (the reason is printed above)",
                "fix the value and run again",
            ) from None
        except (EOFError, KeyboardInterrupt):
            raise TemplateInputError(
                "stopped while asking for the template's options",
                "pass --no-input to take every default",
            ) from None
        finally:
            if created and out.is_dir() and not any(out.iterdir()):
                out.rmdir()  # leave no empty --output directory behind a failure
    return Path(project)


def _user_default_context() -> dict[str, Any]:
    """The default answers of the user's cookiecutter config (full_name, email ...)."""
    from cookiecutter.config import get_user_config

    try:
        return dict(get_user_config().get("default_context") or {})
    except Exception as e:  # a missing $COOKIECUTTER_CONFIG file, bad YAML ...
        raise TemplateInputError(
            f"cannot read your cookiecutter config: {e}",
            "fix ~/.cookiecutterrc (or the file $COOKIECUTTER_CONFIG names), or unset COOKIECUTTER_CONFIG",
        ) from None


def _scratch_config(scratch: Path, default_context: dict[str, Any]) -> Path:
    """A cookiecutter config file in ``scratch``: the user's default answers, but replay files go
    to the scratch directory rather than into the home directory."""
    config_file = scratch / "config.yaml"
    config_file.write_text(
        json.dumps(  # JSON is YAML
            {
                "default_context": default_context,
                "cookiecutters_dir": str(scratch / "cookiecutters"),
                "replay_dir": str(scratch / "replay"),
                "abbreviations": {},
            },
            default=str,
        ),
        encoding="utf-8",
    )
    return config_file


EDIT_FILE: dict[str, str] = {
    "env": "env.py",
    "advantage-estimator": "estimator.py",
    "optimizer": "optimizer.py",
    "loss": "loss.py",
}
"""The one file of a generated package that its author edits (in ``src/<module>/``)."""


def register(app: typer.Typer) -> None:
    """Add the ``new`` command to the ``opentinker`` app."""

    @app.command("new")
    def new(
        kind: Annotated[
            str,
            typer.Argument(metavar="|".join(KINDS), help="What to create.", show_default=False),
        ],
        name: Annotated[
            str | None,
            typer.Option("--name", "-n", metavar="NAME", show_default=False,
                         help="Short name, lower-case words joined by '-' (e.g. word-count)."),
        ] = None,
        output: Annotated[
            Path, typer.Option("--output", "-o", metavar="DIR", help="Directory to create the project in.")
        ] = Path("."),
        no_input: Annotated[bool, typer.Option("--no-input", help="Take every default; do not ask.")] = False,
        option: Annotated[
            list[str] | None,
            typer.Option("--option", metavar="KEY=VALUE", show_default=False,
                         help="Set a template option (repeatable); the reference lists each template's options."),
        ] = None,
    ) -> None:
        """Create a plugin package (env, advantage estimator, optimizer or loss) from a template."""
        try:
            template_dir(kind)
            if name is None:
                raise TemplateInputError("--name is required", f"e.g. opentinker new {kind} --name word-count")
            options = parse_options(kind, option or [])
            project = render(kind, name, output_dir=output, options=options, no_input=no_input)
        except TemplateInputError as e:
            fail(e.reason, e.hint or None)
        module = project.name.replace("-", "_").replace(".", "_")
        typer.echo(f"created {project}")
        typer.echo(f"edit:  src/{module}/{EDIT_FILE[kind]} (README.md explains what to change)")
        sources = "".join(f" {shlex.quote(a)}" for a in local_sources())  # before a release: where ours came from
        typer.echo(f"test:  cd {shlex.quote(str(project))} && uv venv && uv pip install -e . --group dev{sources} && .venv/bin/pytest")
