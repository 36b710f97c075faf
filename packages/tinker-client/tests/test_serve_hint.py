"""``opentinker serve`` without tinker-serve names the package to install (as train and scheduler do)."""

from __future__ import annotations

import os
import subprocess
import sys


def test_serve_without_tinker_serve_names_the_package_and_exits_2():
    result = subprocess.run(
        [sys.executable, "-m", "tinker_client.cli", "serve", "tiny", "--port", "0"],
        capture_output=True, text=True, timeout=120, env={**os.environ, "OPENTINKER_LOAD_PLUGINS": "tinker-env-echo"},
    )
    assert result.returncode == 2
    assert "'opentinker serve' needs tinker-serve" in result.stderr
    assert "hint: pip install tinker-serve; or pip install 'opentinker[serve]'" in result.stderr
    assert "Traceback" not in result.stderr
