"""A separate virtual environment with the registry's ``tinker`` and ``tinker-cookbook`` (the
pins below), for running Tinker code unmodified against an OpenTinker gateway.

Made with ``uv venv`` + ``uv pip install`` once per machine and pin set, under
``$OPENTINKER_CACHE/tinker-sdk-venv/<key>`` (the key hashes the pins, the Python version and the
constraints), then reused. The packages both environments share (torch, transformers, numpy...)
are held to the versions of the environment running this (``uv pip freeze``) as constraints, so
uv links them from its cache instead of downloading torch again; the resolver still checks them
against the cookbook's own requirements. ``tml-renderers`` is left out: tinker-cookbook 0.6.1
requires ``>=0.4.1``, the registry has only 0.2.1, and the cookbook imports it only for
Inkling/Kimi-K3 models (``tokenizer_utils``), which these runs do not use. The extras: ``math-rl``
(the math graders) and ``multiplayer-rl`` (``textarena``, for the tic-tac-toe recipe).

``python sdk_venv.py`` prints the environment's Python (making it first if needed).
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
from pathlib import Path

#: The tested versions (the registry's newest when this was written).
PINS = ("tinker==0.38.*", "tinker-cookbook[math-rl,multiplayer-rl]==0.6.*")
#: Requirements dropped from the cookbook's (a marker that is never true removes them).
OVERRIDES = ('tml-renderers>=0 ; sys_platform == "never"',)
#: Distributions of this workspace that never go into the separate environment.
_OWN = ("tinker", "tinker-cookbook", "opentinker", "tinker-core", "tinker-client", "tinker-algos", "tinker-scheduler",
        "tinker-serve", "tinker-env-echo", "tinker-env-math", "tinker-env-games")


def cache_dir() -> Path:
    root = os.environ.get("OPENTINKER_CACHE") or str(Path.home() / ".cache" / "opentinker")
    return Path(root) / "tinker-sdk-venv"


def constraints(python: str = sys.executable) -> str:
    """``name==version`` of every registry distribution in ``python``'s environment."""
    out = subprocess.run(["uv", "pip", "freeze", "--no-config", "-p", python], capture_output=True, text=True, check=True).stdout
    keep = []
    for line in out.splitlines():
        name = line.split("==")[0].strip().lower().replace("_", "-")
        if "==" in line and " @ " not in line and not line.startswith("-e") and name not in _OWN:
            keep.append(line.strip())
    return "\n".join(sorted(keep)) + "\n"


def venv_python(log: Path | None = None) -> Path:
    """The environment's Python, made (about 5 s with a warm uv cache) if this machine has none yet."""
    cons = constraints()
    key = hashlib.sha256("\n".join([*PINS, *OVERRIDES, sys.version, cons]).encode()).hexdigest()[:12]
    target = cache_dir() / key
    python = target / "bin" / "python"
    if (target / ".complete").exists():
        return python
    shutil.rmtree(target, ignore_errors=True)  # an unfinished one
    target.mkdir(parents=True)
    (target / "constraints.txt").write_text(cons)
    (target / "overrides.txt").write_text("\n".join(OVERRIDES) + "\n")
    # --no-config: not the workspace's uv settings (its compile-bytecode costs 3 minutes here)
    steps = [["uv", "venv", "--no-config", "-q", "--allow-existing", "-p", sys.executable, str(target)],
             ["uv", "pip", "install", "--no-config", "-p", str(python), "-c", str(target / "constraints.txt"),
              "--override", str(target / "overrides.txt"), *PINS]]
    for cmd in steps:
        r = subprocess.run(cmd, capture_output=True, text=True)
        if log is not None:
            with log.open("a") as f:
                f.write(f"$ {' '.join(cmd)}\n{r.stdout}{r.stderr}")
        if r.returncode:
            raise RuntimeError(f"{' '.join(cmd[:3])} failed:\n{r.stderr[-3000:]}")
    (target / ".complete").write_text(" ".join(PINS) + "\n")
    for old in cache_dir().iterdir():  # older pin or constraint sets
        if old.is_dir() and old.name != key:
            shutil.rmtree(old, ignore_errors=True)
    return python


if __name__ == "__main__":
    print(venv_python())
