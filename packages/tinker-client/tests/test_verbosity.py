"""``-q`` / ``-v`` / ``--log-level``: on every ``opentinker`` command (plugins' included), applied
to the logging config and to what progress displays show."""

from __future__ import annotations

import logging

import pytest
import typer
from typer.testing import CliRunner

import tinker_core.registry
from tinker_client.cli import build_app
from tinker_core.progress import is_quiet, is_verbose, set_verbosity, verbosity


@pytest.fixture(autouse=True)
def restore():
    tinker_core.registry.reset_plugins()
    root_level = logging.getLogger().level
    yield
    set_verbosity(logging.WARNING)
    logging.getLogger().setLevel(root_level)
    tinker_core.registry.reset_plugins()


def every_command(command, path=()):
    yield path, command
    for name, sub in getattr(command, "commands", {}).items():
        yield from every_command(sub, (*path, name))


def test_every_command_and_group_takes_the_output_options():
    root = typer.main.get_command(build_app())
    seen = list(every_command(root))
    assert {"train", "plugins", "eval", "serve", "scheduler"} <= {path[0] for path, _ in seen if path}  # plugins' commands too
    for path, command in seen:
        options = {opt for p in command.params for opt in getattr(p, "opts", [])}
        assert {"-q", "--quiet", "-v", "--verbose", "--log-level"} <= options, path


@pytest.mark.parametrize(
    ("args", "level"),
    [
        (["plugins", "--json", "-q"], logging.ERROR),
        (["-q", "plugins", "--json"], logging.ERROR),
        (["plugins", "--json", "-v"], logging.INFO),
        (["plugins", "--json", "-vv"], logging.DEBUG),
        (["--log-level", "debug", "plugins", "--json"], logging.DEBUG),
        (["plugins", "--json", "--log-level", "CRITICAL"], logging.CRITICAL),
        (["plugins", "--json", "-q", "--log-level", "info"], logging.INFO),  # the last one given wins
    ],
)
def test_the_options_set_the_logging_level_and_the_display(args, level):
    result = CliRunner().invoke(build_app(), args)
    assert result.exit_code == 0, result.output
    assert verbosity() == level and logging.getLogger().level == level
    assert is_quiet() == (level >= logging.ERROR) and is_verbose() == (level <= logging.INFO)


def test_without_an_option_the_logging_config_is_left_alone():
    logging.getLogger().setLevel(logging.WARNING)
    result = CliRunner().invoke(build_app(), ["plugins", "--json"])
    assert result.exit_code == 0
    assert verbosity() == logging.WARNING and logging.getLogger().level == logging.WARNING


def test_a_bad_level_exits_2_naming_the_option_and_the_choices():
    result = CliRunner().invoke(build_app(), ["plugins", "--log-level", "loud"])
    assert result.exit_code == 2
    assert "--log-level" in result.output and "debug" in result.output and "critical" in result.output


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
