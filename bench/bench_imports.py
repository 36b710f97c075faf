"""Import times, each in a fresh Python process (median of 5 after one untimed warm-up run;
3 for the targets that import torch).

Two numbers per target:

* ``import_s`` -- ``time.perf_counter()`` around the import statement inside the child (what
  the import itself costs; the issue's budget for ``import tinker_core`` is 0.5 s);
* ``process_s`` -- the wall time of the whole ``python -c`` child seen from the parent
  (interpreter start-up + import + exit: what a user waits for at the command line).

The child also reports which heavy libraries the import pulled in (torch, transformers, peft,
grpc, ray), so a lazy-import regression shows up as a changed flag, not only as time. For
``tinker_core`` and ``tinker_client.cli`` the slowest modules from ``python -X importtime``
(cumulative microseconds) are listed too.

The children inherit this environment; on these machines ``PYTHONDONTWRITEBYTECODE=1`` is set,
so the workspace's own sources are compiled on every run while site-packages carry ``.pyc``
files (``compile-bytecode = true`` under ``[tool.uv]``).

    uv run --no-sync python bench/bench_imports.py [--quick]
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
import time
from typing import Any

from _common import BenchArgs, parse_args, print_table, wait_for_idle, write_results

HEAVY = ("torch", "transformers", "peft", "grpc", "ray", "numpy", "typer", "pydantic")

# (label, statement, heavy); the statement runs timed in a fresh interpreter. Light targets
# get 5 timed runs, heavy ones (torch and up, seconds each) 3, to keep the script near 2 minutes.
TARGETS: list[tuple[str, str, bool]] = [
    ("python (no import)", "pass", False),
    ("tinker_core", "import tinker_core", False),
    ("tinker_core.remote (gRPC)", "import tinker_core.remote", False),
    ("tinker_client.cli", "import tinker_client.cli", False),
    ("tinker_algos (lazy, no torch)", "import tinker_algos", False),
    ("torch", "import torch", True),
    ("tinker_algos.training.trainer (torch)", "import tinker_algos.training.trainer", True),
    (
        "tinker_algos + transformers + peft",
        "import tinker_algos.training.trainer, transformers, peft; from transformers import LlamaForCausalLM",
        True,
    ),
]

CHILD = """
import sys, time, json
t0 = time.perf_counter()
{stmt}
dt = time.perf_counter() - t0
print(json.dumps({{"import_s": dt, "loaded": {{m: m in sys.modules for m in {heavy!r}}}}}))
"""


def run_child(stmt: str) -> dict[str, Any]:
    code = CHILD.format(stmt=stmt, heavy=HEAVY)
    t0 = time.perf_counter()
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    wall = time.perf_counter() - t0
    if out.returncode != 0:
        raise RuntimeError(f"child for {stmt!r} failed ({out.returncode}):\n{out.stderr}")
    doc = json.loads(out.stdout.strip().splitlines()[-1])
    doc["process_s"] = wall
    return doc


def _importtime(stmt: str) -> list[dict[str, Any]]:
    out = subprocess.run(
        [sys.executable, "-X", "importtime", "-c", stmt], capture_output=True, text=True, check=False
    )
    rows = []
    for line in out.stderr.splitlines():
        if not line.startswith("import time:") or "cumulative" in line:
            continue
        # "import time:       123 |        456 |   package.module"
        self_part, cum_part, name = line.removeprefix("import time:").split("|", 2)
        rows.append({"module": name.strip(), "self_us": int(self_part), "cumulative_us": int(cum_part)})
    return rows


def importtime_top(module: str, n: int = 8) -> list[dict[str, Any]]:
    """The ``n`` modules with the largest cumulative time under ``python -X importtime``,
    leaving out what the interpreter imports at start-up anyway (``site`` and friends)."""
    startup = {r["module"] for r in _importtime("pass")}
    rows = [r for r in _importtime(f"import {module}") if r["module"] not in startup]
    rows.sort(key=lambda r: -r["cumulative_us"])
    return rows[:n]


def main(args: BenchArgs) -> None:
    results = []
    for label, stmt, heavy in TARGETS:
        repeats = 2 if args.quick else (3 if heavy else 5)
        wait_for_idle(args)
        run_child(stmt)  # warm-up: the OS file cache
        docs = [run_child(stmt) for _ in range(repeats)]
        r = {
            "target": label,
            "statement": stmt,
            "repeats": repeats,
            "import_s_median": statistics.median(d["import_s"] for d in docs),
            "process_s_median": statistics.median(d["process_s"] for d in docs),
            "import_s_all": [round(d["import_s"], 4) for d in docs],
            "process_s_all": [round(d["process_s"], 4) for d in docs],
            "loaded": docs[-1]["loaded"],
        }
        results.append(r)
        print(f"{label:38s} import {r['import_s_median']:.3f} s   process {r['process_s_median']:.3f} s", flush=True)
    top = {m: importtime_top(m) for m in ("tinker_core", "tinker_client.cli")}

    print_table(
        "Import time in a fresh process (median of the repeats)",
        ["import", "repeats", "import s", "process s", "pulls in"],
        [
            [r["target"], r["repeats"], r["import_s_median"], r["process_s_median"],
             ", ".join(m for m, on in r["loaded"].items() if on) or "-"]
            for r in results
        ],
    )
    for module, rows in top.items():
        print_table(
            f"python -X importtime -c 'import {module}': largest cumulative times",
            ["module", "cumulative ms", "self ms"],
            [[x["module"], x["cumulative_us"] / 1e3, x["self_us"] / 1e3] for x in rows],
        )
    core = next(r for r in results if r["target"] == "tinker_core")
    budget = 0.5
    print(f"import tinker_core: {core['import_s_median']:.3f} s (issue budget {budget} s)")
    write_results(
        args,
        "imports",
        {"tinker_core_budget_s": budget, "results": results, "importtime_top": top},
        with_torch=False,
    )


if __name__ == "__main__":
    main(parse_args(__doc__.splitlines()[0]))
