"""How much of the code base one GRPO step reads: the files, functions and function lines of
OpenTinker's own packages that a real step enters.

A 2-step GRPO job of the tiny model on ``math/arithmetic-v0`` (the main job's rollout settings,
fewer prompts) runs with a profile hook (``sys.setprofile``) switched on around the second
step's ``Algorithm.step`` (the first warms caches up); every Python function of ``tinker_*``
entered then is counted once, with its file and its length in lines (the code object's line
span). Run from the repository root:

    uv run --no-sync python scripts/grpo_step_footprint.py [--json]
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
from collections import defaultdict
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ROOT / "packages"


def footprint() -> dict[str, Any]:
    import torch

    from tinker_algos.algorithms.grpo import GRPO
    from tinker_algos.run.job import train

    torch.set_num_threads(1)
    seen: dict[tuple[str, str, int], int] = {}
    calls = {"n": 0}
    real_step = GRPO.step

    def hook(frame: Any, event: str, arg: Any) -> None:
        if event != "call":
            return
        code = frame.f_code
        path = code.co_filename
        if not path.startswith(str(PACKAGES)):
            return
        key = (path, code.co_qualname, code.co_firstlineno)
        if key not in seen:
            lines = [n for _, _, n in code.co_lines() if n is not None]
            seen[key] = (max(lines) - code.co_firstlineno + 1) if lines else 1

    def traced_step(self: GRPO, step: int) -> dict[str, float]:
        calls["n"] += 1
        if calls["n"] != 2:
            return real_step(self, step)
        sys.setprofile(hook)
        try:
            return real_step(self, step)
        finally:
            sys.setprofile(None)

    GRPO.step = traced_step  # type: ignore[method-assign]
    job = {
        "name": "footprint", "seed": 0, "model": {"name": "tiny"},
        "env": {"id": "math/arithmetic-v0", "kwargs": {"digits": 2, "ops": ["+"]}},
        "algorithm": {"name": "grpo", "steps": 2, "estimator": "grpo", "loss": "importance_sampling", "eval_every": 0, "eval_size": 4},
        "rollout": {"prompts_per_step": 8, "group_size": 8, "max_new_tokens": 5, "stop": ["\n"]},
        "logging": {"tensorboard": False, "plot": False},
    }
    with tempfile.TemporaryDirectory() as tmp:
        train(job, run_dir=tmp)
    GRPO.step = real_step  # type: ignore[method-assign]
    files: dict[str, list[str]] = defaultdict(list)
    for (path, name, _), _n in seen.items():
        files[str(Path(path).relative_to(ROOT))].append(name)
    return {
        "files": len(files), "functions": len(seen), "function_lines": sum(seen.values()),
        "by_file": {f: sorted(names) for f, names in sorted(files.items())},
    }


def main() -> None:
    out = footprint()
    if "--json" in sys.argv:
        print(json.dumps(out, indent=1))
        return
    for f, names in out["by_file"].items():
        print(f"{len(names):4d}  {f}")
    print(f"one GRPO step: {out['files']} files, {out['functions']} functions, {out['function_lines']} function lines")


if __name__ == "__main__":
    main()
