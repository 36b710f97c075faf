"""Shared helpers for the benchmark scripts (not a benchmark itself: the nox session runs
``bench_*.py`` only).

Every script accepts the same options, so ``uv run nox -s bench -- --quick`` passes them to all:

* ``--threads 1,2`` -- the torch intra-op thread counts to measure (default: 1 and ``nproc``);
* ``--quick`` -- fewer repeats and no mid-size models (a smoke run, numbers not for the docs);
* ``--results DIR`` -- where the JSON goes (default ``bench/results``);
* ``--wait-idle SECONDS`` -- before each measured case wait (up to this long) for the CPUs to be
  idle; for shared machines (default 0: don't wait).

Timing method everywhere: ``time.perf_counter`` around the measured call, warm-up iterations
discarded, the median of the repeats reported (with min and max beside it). Nothing here
asserts on a time: benchmarks report, tests check.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

BENCH_DIR = Path(__file__).resolve().parent
RESULTS_DIR = BENCH_DIR / "results"

# keep the HF libraries offline and quiet before anything imports them
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


@dataclass
class BenchArgs:
    """The options every bench script understands."""

    threads: list[int]
    quick: bool
    results: Path
    load_at_start: dict[str, float]
    wait_idle: float = 0.0


def parse_args(description: str, argv: Sequence[str] | None = None) -> BenchArgs:
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument(
        "--threads",
        default=None,
        help="comma-separated torch intra-op thread counts to measure (default: 1 and nproc)",
    )
    parser.add_argument("--quick", action="store_true", help="fewer repeats, tiny model only (smoke run)")
    parser.add_argument("--results", type=Path, default=RESULTS_DIR, help="directory for the JSON results")
    parser.add_argument(
        "--wait-idle",
        type=float,
        default=0.0,
        metavar="SECONDS",
        help="before each measured case, wait up to this long for the CPUs to go idle (shared machines)",
    )
    ns = parser.parse_args(argv)
    if ns.threads is None:
        threads = sorted({1, os.cpu_count() or 1})
    else:
        try:
            threads = [int(x) for x in str(ns.threads).split(",") if x.strip()]
        except ValueError:
            parser.error(f"--threads takes comma-separated integers (e.g. 1,2), got {ns.threads!r}")
        if not threads or min(threads) < 1:
            parser.error(f"--threads needs counts >= 1, got {ns.threads!r}")
    load = load_snapshot()
    print(
        f"load before the run: loadavg {load['loadavg_1m']:.2f} (1 min), "
        f"{100 * load['cpu_busy_1s']:.0f}% of the CPUs busy over 1 s",
        flush=True,
    )
    return BenchArgs(
        threads=threads, quick=bool(ns.quick), results=ns.results, load_at_start=load, wait_idle=ns.wait_idle
    )


# ---------------------------------------------------------------------------------------------
# the machine
# ---------------------------------------------------------------------------------------------
def cpu_model() -> str:
    """``model name`` from /proc/cpuinfo (else ``platform.processor()``)."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.lower().startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def machine_info(*, with_torch: bool = True) -> dict[str, Any]:
    """What the numbers were measured on (the CPU, core count, library versions)."""
    info: dict[str, Any] = {
        "nproc": os.cpu_count(),
        "cpu_model": cpu_model(),
        "platform": platform.platform(),
        "python": platform.python_version(),
        "PYTHONDONTWRITEBYTECODE": os.environ.get("PYTHONDONTWRITEBYTECODE", ""),
        # as this process's OpenMP runtime read it (tinker_algos.model.openmp sets it on import from the load)
        "omp_wait_policy": os.environ.get("OMP_WAIT_POLICY", "default"),
    }
    if with_torch:
        import torch

        info["torch"] = torch.__version__
        info["torch_default_threads"] = torch.get_num_threads()
        info["torch_interop_threads"] = torch.get_num_interop_threads()
        info["cuda_available"] = torch.cuda.is_available()
        try:
            import transformers

            info["transformers"] = transformers.__version__
        except ImportError:  # pragma: no cover
            pass
        try:
            import peft

            info["peft"] = peft.__version__
        except ImportError:  # pragma: no cover
            pass
    return info


def cpu_busy(seconds: float = 1.0) -> float:
    """The fraction of all CPUs busy over ``seconds`` (from /proc/stat), measured *before* a
    benchmark: on a shared machine other processes steal cores, and the numbers suffer."""
    def read() -> tuple[int, int]:
        fields = [int(x) for x in Path("/proc/stat").read_text().splitlines()[0].split()[1:]]
        idle = fields[3] + (fields[4] if len(fields) > 4 else 0)
        return sum(fields), idle

    try:
        total0, idle0 = read()
        time.sleep(seconds)
        total1, idle1 = read()
    except (OSError, ValueError, IndexError):
        return float("nan")
    dt = total1 - total0
    return 1.0 - (idle1 - idle0) / dt if dt > 0 else float("nan")


def load_snapshot() -> dict[str, float]:
    """Load averages and the current busy fraction, to judge whether a run was disturbed."""
    one, five, fifteen = os.getloadavg()
    return {"loadavg_1m": one, "loadavg_5m": five, "loadavg_15m": fifteen, "cpu_busy_1s": cpu_busy(1.0)}


def git_revision() -> str | None:
    try:
        out = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], cwd=BENCH_DIR, capture_output=True, text=True, timeout=5
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() or None


# ---------------------------------------------------------------------------------------------
# timing
# ---------------------------------------------------------------------------------------------
@dataclass
class Timing:
    """Seconds per repeat of one measured call (warm-up excluded), and the CPU time this
    process used in it (all its threads): ``cpu_per_wall`` well below the thread count means
    the OS gave our threads less than the cores they asked for -- another process was running."""

    seconds: list[float]
    cpu_seconds: list[float]

    @property
    def median(self) -> float:
        return statistics.median(self.seconds)

    def summary(self) -> dict[str, Any]:
        return {
            "median_s": self.median,
            "min_s": min(self.seconds),
            "max_s": max(self.seconds),
            "repeats": len(self.seconds),
            "all_s": [round(s, 6) for s in self.seconds],
            "cpu_per_wall": sum(self.cpu_seconds) / sum(self.seconds),
        }


def time_calls(fn: Callable[[], Any], *, warmup: int, repeats: int) -> Timing:
    """Call ``fn`` ``warmup`` times untimed, then ``repeats`` times timed one by one."""
    for _ in range(warmup):
        fn()
    seconds, cpu = [], []
    for _ in range(repeats):
        c0, t0 = time.process_time(), time.perf_counter()
        fn()
        seconds.append(time.perf_counter() - t0)
        cpu.append(time.process_time() - c0)
    return Timing(seconds, cpu)


class PhaseTimer:
    """Wall seconds spent in wrapped callables, by phase: ``wrap(key, fn)`` adds each call's time
    to ``spent[key]``; calls that share a ``group`` count once, for the outermost one (a trainer
    call made inside another); ``counter(args, kwargs, result)`` sees each call's result."""

    def __init__(self, *keys: str) -> None:
        self.spent = dict.fromkeys(keys, 0.0)
        self._active: set[str] = set()

    def wrap(self, key: str, fn: Callable[..., Any], group: str | None = None,
             counter: Callable[[Any, Any, Any], None] | None = None) -> Callable[..., Any]:
        def wrapper(*a: Any, **k: Any) -> Any:
            if group is not None and group in self._active:
                return fn(*a, **k)
            if group is not None:
                self._active.add(group)
            t0 = time.perf_counter()
            try:
                out = fn(*a, **k)
                if counter is not None:
                    counter(a, k, out)
                return out
            finally:
                self.spent[key] += time.perf_counter() - t0
                self._active.discard(group)

        return wrapper


def wait_for_idle(args: BenchArgs, *, threshold: float = 0.2) -> float:
    """Wait (at most ``--wait-idle`` seconds) until under ``threshold`` of the CPUs are busy
    over one second; return the last busy fraction seen. A no-op with ``--wait-idle 0``."""
    deadline = time.monotonic() + args.wait_idle
    busy = float("nan")
    while args.wait_idle > 0:
        busy = cpu_busy(1.0)
        if busy < threshold or time.monotonic() >= deadline:
            break
    return busy


def set_threads(n: int) -> int:
    """Set torch's intra-op threads to ``n``; return what torch reports back."""
    import torch

    torch.set_num_threads(n)
    return torch.get_num_threads()


def matmul_flops(n: int, *, repeats: int, warmup: int = 2) -> dict[str, Any]:
    """fp32 ``torch.matmul`` of two ``n x n`` matrices: ``2 n^3`` FLOPs per call."""
    import torch

    gen = torch.Generator().manual_seed(0)
    a = torch.randn(n, n, generator=gen)
    b = torch.randn(n, n, generator=gen)
    out = torch.empty(n, n)
    timing = time_calls(lambda: torch.matmul(a, b, out=out), warmup=warmup, repeats=repeats)
    flops = 2.0 * n**3
    return {"n": n, "flops_per_call": flops, "gflops": flops / timing.median / 1e9, **timing.summary()}


# ---------------------------------------------------------------------------------------------
# models
# ---------------------------------------------------------------------------------------------
MID_CONFIGS: dict[str, dict[str, Any]] = {
    # the tiny preset's shape (4 layers, GQA 2:1, tied embeddings) at 2x and 4x the width
    "mid-256": {"hidden_size": 256, "num_attention_heads": 4, "num_key_value_heads": 2, "intermediate_size": 1024},
    "mid-512": {"hidden_size": 512, "num_attention_heads": 8, "num_key_value_heads": 4, "intermediate_size": 2048},
}


def build_variant(path: Path, **overrides: Any) -> Path:
    """A tiny-preset-shaped Llama with ``overrides`` and the char tokenizer, saved to ``path``."""
    import torch
    from transformers import LlamaForCausalLM

    from tinker_algos.model.models import tiny_config
    from tinker_algos.model.tokenizer import build_char_tokenizer

    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        model = LlamaForCausalLM(tiny_config(**overrides))
    model.save_pretrained(path)
    build_char_tokenizer().save_pretrained(path)
    return path


def model_shape(module: Any) -> dict[str, Any]:
    """Layer count, widths and parameter counts of a Llama-style transformers model."""
    base = module.get_base_model() if hasattr(module, "get_base_model") else module
    cfg = base.config
    heads = cfg.num_attention_heads
    head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // heads
    params_total = sum(p.numel() for p in base.parameters())
    embed = base.get_input_embeddings().weight.numel()
    tied = bool(getattr(cfg, "tie_word_embeddings", False))
    return {
        "hidden_size": cfg.hidden_size,
        "num_layers": cfg.num_hidden_layers,
        "num_heads": heads,
        "num_kv_heads": cfg.num_key_value_heads,
        "head_dim": head_dim,
        "intermediate_size": cfg.intermediate_size,
        "vocab_size": cfg.vocab_size,
        "tied_embeddings": tied,
        "params_total": params_total,
        "params_embedding": embed,
    }


# ---------------------------------------------------------------------------------------------
# output
# ---------------------------------------------------------------------------------------------
def fmt(value: Any) -> str:
    if isinstance(value, float):
        if value == 0:
            return "0"
        if abs(value) >= 100:
            return f"{value:,.0f}"
        if abs(value) >= 0.1:
            return f"{value:.2f}"
        return f"{value:.3g}"
    if isinstance(value, int):
        return f"{value:,}"
    return str(value)


def print_table(title: str, columns: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    """Print (and return) a Markdown table, ready to paste into a page of docs/explanation/experiments/."""
    cells = [[fmt(v) for v in row] for row in rows]
    widths = [max(len(c), *(len(r[i]) for r in cells)) if cells else len(c) for i, c in enumerate(columns)]
    lines = [
        "| " + " | ".join(c.ljust(w) for c, w in zip(columns, widths, strict=True)) + " |",
        "|" + "|".join("-" * (w + 2) for w in widths) + "|",
    ]
    lines += ["| " + " | ".join(v.rjust(w) for v, w in zip(r, widths, strict=True)) + " |" for r in cells]
    text = f"\n{title}\n\n" + "\n".join(lines) + "\n"
    print(text, flush=True)
    return text


def write_results(args: BenchArgs, name: str, payload: dict[str, Any], *, with_torch: bool = True) -> Path:
    """Write ``payload`` plus machine info to ``<results>/<name>.json`` (``<name>.quick.json``
    for ``--quick`` runs, so a smoke run never overwrites the documented numbers)."""
    args.results.mkdir(parents=True, exist_ok=True)
    path = args.results / (f"{name}.quick.json" if args.quick else f"{name}.json")
    doc = {
        "benchmark": name,
        "command": " ".join([Path(sys.executable).name, *sys.argv]),
        "git_revision": git_revision(),
        "date_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "quick": args.quick,
        "wait_idle_s": args.wait_idle,
        "machine": machine_info(with_torch=with_torch),
        "load_at_start": args.load_at_start,
        "load_at_end": load_snapshot(),
        **payload,
    }
    path.write_text(json.dumps(doc, indent=2) + "\n")
    print(f"wrote {path}", flush=True)
    return path
