"""Environment call latency: ``echo/echo-v0`` in-process vs over gRPC (``serve_env`` + ``RemoteEnv``).

Three set-ups, each running the same episodes (``reset(seed=i)`` then one ``step`` with the
word shown, so every step earns reward 1):

* ``local`` -- ``tinker_core.make_env("echo/echo-v0")`` in this process;
* ``gRPC, server thread`` -- ``serve_env`` in this process (its own threads), ``RemoteEnv``
  client over localhost TCP;
* ``gRPC, server process`` -- ``serve_env`` in a child Python process, the realistic case of
  an env server beside the trainer.

Each call is timed on its own; the table shows median, p90 and p99 per call kind. Session
creation (``RemoteEnv(...)``: channel, ``CreateSession``) is timed separately, as is a
remote ``close``.

    uv run --no-sync python bench/bench_remote_env.py [--quick]
"""

from __future__ import annotations

import statistics
import subprocess
import sys
import time
from typing import Any

from _common import BenchArgs, parse_args, print_table, wait_for_idle, write_results

ENV_ID = "echo/echo-v0"

SERVER_CHILD = f"""
import sys
from tinker_core.remote import serve_env
server = serve_env({ENV_ID!r}, idle_timeout_s=None)
print(server.port, flush=True)
sys.stdin.read()          # until the parent closes our stdin
server.stop(grace=0.5)
"""


def percentile(xs: list[float], q: float) -> float:
    s = sorted(xs)
    return s[min(len(s) - 1, int(round(q * (len(s) - 1))))]


def summarize(xs: list[float]) -> dict[str, Any]:
    return {
        "calls": len(xs),
        "median_ms": statistics.median(xs) * 1e3,
        "p90_ms": percentile(xs, 0.9) * 1e3,
        "p99_ms": percentile(xs, 0.99) * 1e3,
        "mean_ms": statistics.fmean(xs) * 1e3,
    }


def run_episodes(env: Any, episodes: int, warmup: int = 20) -> dict[str, list[float]]:
    """Time each reset and step; the first ``warmup`` episodes are not recorded."""
    resets: list[float] = []
    steps: list[float] = []
    for i in range(warmup + episodes):
        t0 = time.perf_counter()
        _, info = env.reset(seed=i)
        t1 = time.perf_counter()
        _, reward, terminated, _, _ = env.step(info["target"])
        t2 = time.perf_counter()
        if reward != 1.0 or not terminated:
            raise RuntimeError(f"echo env: expected reward 1 and the end of the episode, got {reward}, {terminated}")
        if i >= warmup:
            resets.append(t1 - t0)
            steps.append(t2 - t1)
    return {"reset": resets, "step": steps}


def bench_remote(address: str, episodes: int, sessions: int) -> dict[str, Any]:
    from tinker_core.remote import RemoteEnv

    opens: list[float] = []
    closes: list[float] = []
    calls: dict[str, list[float]] = {"reset": [], "step": []}
    for _ in range(sessions):
        t0 = time.perf_counter()
        env = RemoteEnv(address, ENV_ID)
        opens.append(time.perf_counter() - t0)
        try:
            got = run_episodes(env, episodes // sessions)
        finally:
            t0 = time.perf_counter()
            env.close()
            closes.append(time.perf_counter() - t0)
        for k, v in got.items():
            calls[k] += v
    return {"calls": calls, "open": opens, "close": closes}


def main(args: BenchArgs) -> None:
    import tinker_core
    from tinker_core.remote import serve_env

    episodes = 200 if args.quick else 1000
    sessions = 5
    results: dict[str, Any] = {}

    wait_for_idle(args)
    env = tinker_core.make_env(ENV_ID)
    results["local"] = {"calls": run_episodes(env, episodes), "open": [], "close": []}
    env.close()

    wait_for_idle(args)
    with serve_env(ENV_ID, idle_timeout_s=None) as server:
        results["gRPC, server thread"] = bench_remote(f"127.0.0.1:{server.port}", episodes, sessions)

    wait_for_idle(args)
    child = subprocess.Popen(
        [sys.executable, "-c", SERVER_CHILD], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    try:
        assert child.stdout is not None and child.stdin is not None
        port = int(child.stdout.readline().strip())
        results["gRPC, server process"] = bench_remote(f"127.0.0.1:{port}", episodes, sessions)
    finally:
        if child.stdin is not None:
            child.stdin.close()
        try:
            child.wait(timeout=10)
        except subprocess.TimeoutExpired:
            child.kill()
            child.wait()

    rows = []
    out: dict[str, Any] = {}
    for setup, r in results.items():
        out[setup] = {k: summarize(v) for k, v in r["calls"].items()}
        if r["open"]:
            out[setup]["open_session"] = summarize(r["open"])
            out[setup]["close_session"] = summarize(r["close"])
        for kind, s in out[setup].items():
            rows.append([setup, kind, s["calls"], s["median_ms"] * 1e3, s["p90_ms"] * 1e3, s["p99_ms"] * 1e3])
    print_table(
        f"{ENV_ID}: per-call latency",
        ["setup", "call", "calls", "median µs", "p90 µs", "p99 µs"],
        rows,
    )
    local_step = out["local"]["step"]["median_ms"]
    for setup in ("gRPC, server thread", "gRPC, server process"):
        extra = out[setup]["step"]["median_ms"] - local_step
        print(f"{setup}: a step costs {extra * 1e3:.0f} µs more than in-process (median)")
    write_results(args, "remote_env", {"env_id": ENV_ID, "episodes": episodes, "sessions": sessions, "latency": out}, with_torch=False)


if __name__ == "__main__":
    main(parse_args(__doc__.splitlines()[0]))
