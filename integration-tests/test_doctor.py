"""`opentinker doctor` as a user runs it, against `opentinker scheduler start` in another process:
the scheduler's version and wire protocol arrive through the version handshake, and the
scheduler's own port is not reported busy."""

from __future__ import annotations

import json
import subprocess
import sys

from tinker_core.handshake import WIRE_VERSION, package_version


def test_doctor_reports_a_live_scheduler_s_version(scheduler):
    address, env, _ = scheduler
    done = subprocess.run([sys.executable, "-m", "tinker_client.cli", "doctor", "--scheduler", address, "--json"],
                          capture_output=True, text=True, env=env, timeout=300)
    findings = {f["check"]: f for f in json.loads(done.stdout)}
    found = findings[f"scheduler {address}"]
    assert found["severity"] == "ok", found
    assert found["detail"].startswith(f"reachable: tinker-scheduler {package_version('tinker-scheduler')}, wire {WIRE_VERSION}")
    assert f"port {address.rsplit(':', 1)[1]}" not in findings
    assert {"python", "packages", "plugins", "torch", "device", "model-cache"} <= set(findings)
    errors = [f for f in findings.values() if f["severity"] == "error"]
    assert done.returncode == (1 if errors else 0), (errors, done.stderr)
