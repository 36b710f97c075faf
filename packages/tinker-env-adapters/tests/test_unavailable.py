"""An ecosystem whose package is missing: its env ids are still registered, marked unavailable
with the install line, and building one says the same. The package is made unimportable in a
fresh interpreter (``sys.modules[name] = None``, which makes ``import`` raise ImportError)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

PROBE = """
import json, sys
sys.modules["textarena"] = None  # as if textarena were not installed
import tinker_core
from tinker_core.registry import list_plugins
info = next(p for p in list_plugins() if p.distribution == "tinker-env-adapters")
try:
    tinker_core.make_env("textarena/TicTacToe-v0")
    error = None
except Exception as e:
    error = f"{type(e).__name__}: {e}"
print(json.dumps({"info": info.to_dict(), "error": error}))
"""


def test_a_missing_ecosystem_package_marks_its_ids_with_the_install_line():
    env = {**os.environ, "OPENTINKER_LOAD_PLUGINS": "tinker-env-adapters"}
    out = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, env=env, timeout=120, check=True)
    result = json.loads(out.stdout)
    unavailable = result["info"]["unavailable"]
    textarena = [e for e in result["info"]["registers"]["envs"] if e.startswith("textarena/")]
    assert textarena and all(unavailable.get(e) == "needs the Python package 'textarena': pip install 'tinker-env-adapters[textarena]'"
                             for e in textarena)
    assert not [e for e in unavailable if e.startswith("reasoning_gym/")]  # installed: buildable
    assert result["error"].startswith("AdapterError:") and "pip install 'tinker-env-adapters[textarena]'" in result["error"]
