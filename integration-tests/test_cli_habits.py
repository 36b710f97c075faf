"""The ``opentinker`` command as the whole workspace shows it (every package's commands and plugins
installed): ``plugins`` grouped and readable, the output options, usage lines and shell
completion on every command, plugins' commands included. tinker-client's own tests check the
same with only its own commands."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import typer
from typer.testing import CliRunner

from tinker_client.cli import build_app


def opentinker(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "tinker_client.cli", *args], capture_output=True, text=True,
                          env={**os.environ, **(env or {})}, timeout=120)


def every_command(command, path=()):
    yield path, command
    for name, sub in getattr(command, "commands", {}).items():
        yield from every_command(sub, (*path, name))


def test_plugins_listing_is_grouped_by_kind_fits_80_columns_and_never_breaks_a_name():
    result = opentinker("plugins", env={"COLUMNS": "80"})
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    plugins = json.loads(opentinker("plugins", "--json").stdout)
    assert len(lines) < 100 and all(len(line) <= 80 for line in lines), result.stdout
    heads = [line for line in lines if not line.startswith(" ")]
    buildable = sum(len(set(p["registers"].get("envs", [])) - set(p["unavailable"])) for p in plugins)
    assert heads[0] == "distributions" and heads[1] == f"envs ({buildable})"
    assert {"advantage estimators (6)", "losses (14)", "optimizers (3)"} <= set(heads)
    names = {name.partition("/")[2] or name for p in plugins for names in p["registers"].values() for name in names}
    words = {w.strip(",:()") for line in lines for w in line.split()}
    shown = {w for w in words if "/" not in w and (w.endswith(("-v0", "-v1", "-v4")) or w in ("importance_sampling", "reinforce_pp_baseline"))}
    assert shown and shown <= names, shown - names  # every name-like word is a whole name
    assert {"FrozenLake-v1", "echo-v0", "arithmetic-v0"} <= shown


def test_plugins_marks_gym_ids_that_cannot_build_here_with_the_reason():
    lines = opentinker("plugins", env={"COLUMNS": "200"}).stdout.splitlines()
    start = lines.index(next(line for line in lines if line.startswith("env ids that cannot be built here")))
    marked = "\n".join(lines[start:])
    assert "Pendulum-v1" in marked and "no text form (Box observations)" in marked
    gym = next(line for line in lines[:start] if line.startswith("  gym/ "))
    assert "FrozenLake-v1" in gym and "Pendulum" not in gym and "CartPole" not in gym


def test_every_command_and_group_takes_the_output_options():
    root = typer.main.get_command(build_app())
    seen = list(every_command(root))
    assert {"train", "plugins", "eval", "serve", "scheduler"} <= {path[0] for path, _ in seen if path}  # plugins' commands too
    for path, command in seen:
        options = {opt for p in command.params for opt in getattr(p, "opts", [])}
        assert {"-q", "--quiet", "-v", "--verbose", "--log-level"} <= options, path


def test_usage_lines_name_arguments_in_capitals_not_braces():
    root = typer.main.get_command(build_app())
    usages = {}
    for path, command in every_command(root):
        if path and not getattr(command, "commands", None):
            ctx = command.make_context(path[-1], ["--help"], resilient_parsing=True)
            usages[" ".join(path)] = " ".join(command.collect_usage_pieces(ctx))
    assert usages["train"] == "[OPTIONS] FILE [KEY.PATH=VALUE]..."
    assert usages["export"] == "[OPTIONS] SOURCE"
    assert usages["view"] == "[OPTIONS] RUN_DIR..."
    assert not [u for u in usages.values() if "{" in u], usages
    shown = CliRunner().invoke(build_app(), ["train", "--help"], env={"COLUMNS": "200"}).output
    assert "Usage: opentinker train [OPTIONS] FILE [KEY.PATH=VALUE]..." in shown


def test_shell_completion_is_on_and_completes_commands_and_options():
    import os
    import subprocess
    import sys

    def complete(words: str, cword: int) -> list[str]:
        env = {**os.environ, "_OPENTINKER_COMPLETE": "complete_bash", "COMP_WORDS": words, "COMP_CWORD": str(cword)}
        out = subprocess.run([sys.executable, "-m", "tinker_client.cli"], capture_output=True, text=True, env=env, timeout=120)
        assert out.returncode == 0, out.stderr
        return out.stdout.split()

    assert complete("opentinker tra", 1) == ["trace", "train"]
    assert complete("opentinker plugins --j", 2) == ["--json"]
    assert complete("opentinker train job.yaml --log", 3) == ["--log-level"]
    help_text = CliRunner().invoke(build_app(), ["--help"]).output
    assert "--install-completion" in help_text and "--show-completion" in help_text
