"""Every ``opentinker`` help screen, with every package's commands installed: flags shown as flags
(no ``<bool>`` placeholder) and defaults written in help texts kept (rich markup ate ``[default: ...]``)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

HELP_SCREENS = r"""
import contextlib, io, json, sys
import typer
from tinker_client.cli import build_app, main

def paths(command, prefix=()):
    yield prefix
    for name, sub in sorted(getattr(command, "commands", {}).items()):
        if not sub.hidden:
            yield from paths(sub, (*prefix, name))

screens = {}
for path in paths(typer.main.get_command(build_app())):
    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.suppress(SystemExit):
        main([*path, "--help"])
    screens[" ".join(path)] = out.getvalue()
print(json.dumps(screens))
"""


@pytest.fixture(scope="module")
def screens() -> dict[str, str]:
    pytest.importorskip("tinker_scheduler", reason="needs every package's commands (the integration session installs them)")
    env = {**os.environ, "COLUMNS": "160", "TTY_COMPATIBLE": "0"}
    out = subprocess.run([sys.executable, "-c", HELP_SCREENS], capture_output=True, text=True, env=env, timeout=300)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def test_no_help_screen_shows_a_bool_placeholder(screens):
    assert {"", "train", "plugins", "scheduler start", "list", "watch"} <= set(screens)
    assert all("--help" in text for text in screens.values())
    shown = {path: text for path, text in screens.items() if "<bool>" in text}
    assert not shown, f"<bool> in the help of: {sorted(shown)}"
    assert "--fresh " in screens["train"] and "--check " in screens["plugins"]


def test_scheduler_start_help_keeps_the_db_and_runs_dir_defaults(screens):
    text = " ".join(screens["scheduler start"].replace("│", " ").split())
    assert "SQLite job store (default $OPENTINKER_HOME/scheduler.db)" in text
    assert "(default $OPENTINKER_HOME/runs)" in text
