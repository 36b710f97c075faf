"""``-q`` / ``-v`` / ``--log-level``: on every ``opentinker`` command (plugins' included), applied
to the logging config and to what progress displays show."""

from __future__ import annotations

import logging

import pytest
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


