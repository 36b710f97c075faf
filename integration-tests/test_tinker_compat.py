"""The generated Tinker SDK compatibility report is current: ``scripts/tinker_compat.py --check``
starts a scheduler with the Tinker gateway on loopback, calls every public method of the
installed ``tinker`` SDK's four clients again and fails when ``docs/reference/tinker-compat.md``,
its JSON or the README's count line differ from what it sees now. So the count moves only with
code (the gateway's or the SDK pin's), never by hand. About a minute on two CPUs.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "scripts" / "tinker_compat.py"


def test_the_committed_compatibility_report_is_what_a_fresh_run_sees() -> None:
    pytest.importorskip("tinker", reason="needs the tinker SDK (the integration session installs it)")
    pytest.importorskip("tinker_scheduler", reason="needs tinker-scheduler (the integration session installs it)")
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TINKER_TELEMETRY": "0"}
    r = subprocess.run([sys.executable, str(SCRIPT), "--check"], capture_output=True, text=True, env=env,
                       cwd=ROOT, timeout=600)
    assert r.returncode == 0, f"exit {r.returncode}:\n{r.stdout[-3000:]}\n{r.stderr[-6000:]}"


def test_the_report_covers_every_public_method_and_its_counts_add_up() -> None:
    tinker = pytest.importorskip("tinker", reason="needs the tinker SDK (the integration session installs it)")
    sys.path.insert(0, str(SCRIPT.parent))
    try:
        import tinker_compat
    finally:
        sys.path.remove(str(SCRIPT.parent))
    report = json.loads((ROOT / "docs" / "reference" / "tinker-compat.json").read_text())
    assert report["version"] == tinker.__version__
    listed = {(m["class"], m["method"]) for m in report["methods"]}
    expected = {(c, n) for c in tinker_compat.CLASSES for n in tinker_compat.public_methods(getattr(tinker, c))}
    assert listed == expected
    # every *_async twin is there with its sync method
    assert all((c, n.removesuffix("_async")) in listed for c, n in listed if n.endswith("_async"))
    counts = report["counts"]
    assert counts["supported"] == sum(m["status"] == "supported" for m in report["methods"])
    assert counts["gateway methods"] + counts["client only"] == len(report["methods"])
    assert counts["not exercised"] == 0, "give the new methods an argument builder in scripts/tinker_compat.py"
    readme = (ROOT / "README.md").read_text()
    assert f"**{counts['supported']} of {counts['gateway methods']}**" in readme
