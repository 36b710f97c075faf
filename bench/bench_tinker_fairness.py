"""Fair sharing between Tinker SDK users: four tenants, each with its own official ``tinker`` SDK
client, training LoRA adapters on one base model through the gateway at once, vs each alone.

One in-process :class:`~tinker_scheduler.Scheduler` (``training_host_backend="local"``: one model
host in this process, one copy of the ``tiny`` base) serves the Tinker API on a free port; four
tenants (``t0`` .. ``t3``, each its own key) each create a LoRA (r=8) and call
``forward_backward(batch, "cross_entropy").result()`` back to back (a batch of 4 sequences x 64
random token ids, gradients accumulating) for a fixed window. Three phases:

1. **alone**: each tenant by itself for the window (the others idle);
2. **together**: the four at once for the window;
3. **greedy**: the same four, but ``t0`` runs four adapters (four SDK training clients, four
   threads), each keeping four requests in flight (a long queue of 16), while ``t1`` .. ``t3``
   keep one each. A per-session round-robin would give ``t0`` four turns for every one of the
   others' (four sevenths of the host); the host's executor shares turns per tenant first
   (:mod:`tinker_scheduler.host_executor`), so a request of ``t1`` waits for at most one of
   ``t0``'s, and ``t0`` gets the turns the others leave (while their clients turn a result into
   the next request).

Per tenant and phase: the calls completed within the window, the throughput (those calls / the
window), the ``forward_backward`` latency (median, p90; from a request's submit to its result,
the requests in flight at the window's end included) and the share of the window's calls; per phase, the fairness
``max share / min share`` (1.0 is perfectly even). The machine's load is recorded at the start
and end of every phase (``os.getloadavg()``).

    uv run --locked python bench/bench_tinker_fairness.py [--quick] [--window 15] [--per-session-turns]

``--per-session-turns`` measures the policy this replaced (every session its own turn, whoever's
it is), for comparison.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import sys
import tempfile
import threading
import time
from collections import deque
from pathlib import Path
from typing import Any

os.environ.setdefault("RAY_ENABLE_UV_RUN_RUNTIME_ENV", "0")
os.environ.setdefault("RAY_AUTH_MODE", "disabled")
os.environ.setdefault("RAY_TMPDIR", "/tmp/rb-bench")
os.environ.setdefault("TINKER_TELEMETRY", "0")

from _common import parse_args, print_table, set_threads, write_results  # noqa: E402

TENANTS = ("t0", "t1", "t2", "t3")
BATCH, SEQ_LEN, LORA_RANK = 4, 64, 8
GREEDY_SESSIONS = 4  # adapters t0 runs in the greedy phase
GREEDY_DEPTH = 4  # requests each of them keeps in flight (a long queue: 16 in all)


def percentile(values: list[float], q: float) -> float:
    """The ``q`` quantile (0..1) of ``values``, linear between order statistics."""
    ordered = sorted(values)
    pos = (len(ordered) - 1) * q
    low = int(pos)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (pos - low)


def batch_data() -> list[Any]:
    import numpy as np
    from tinker import types

    seqs = np.random.default_rng(0).integers(4, 64, size=(BATCH, SEQ_LEN), dtype=np.int64).tolist()  # ids tiny has
    return [types.Datum(model_input=types.ModelInput.from_ints(s[:-1]),
                        loss_fn_inputs={"target_tokens": s[1:], "weights": [1.0] * (SEQ_LEN - 1)}) for s in seqs]


def run_phase(name: str, clients: dict[str, list[tuple[Any, int]]], window: float) -> dict[str, Any]:
    """Every client ``(training client, depth)`` of every tenant keeps ``depth`` forward_backward
    requests in flight for ``window`` seconds (all threads start together); per tenant: calls,
    throughput, latency (a request's submit to its result), share of all calls."""
    data = batch_data()
    latencies: dict[str, list[float]] = {t: [] for t in clients}
    in_window: dict[str, int] = dict.fromkeys(clients, 0)  # results that came within the window
    lock = threading.Lock()
    start = threading.Barrier(sum(len(cs) for cs in clients.values()) + 1)
    began = 0.0

    def loop(tenant: str, client: Any, depth: int) -> None:
        start.wait()
        stop_at = began + window
        flight = deque((time.perf_counter(), client.forward_backward(data, "cross_entropy")) for _ in range(depth))
        while flight:
            t0, future = flight.popleft()
            future.result()
            done = time.perf_counter()
            with lock:
                latencies[tenant].append(done - t0)
                in_window[tenant] += done < stop_at
            if done < stop_at:
                flight.append((time.perf_counter(), client.forward_backward(data, "cross_entropy")))

    threads = [threading.Thread(target=loop, args=(t, c, d)) for t, cs in clients.items() for c, d in cs]
    for th in threads:
        th.start()
    load_start = list(os.getloadavg())
    began = time.perf_counter()
    start.wait()
    for th in threads:
        th.join()
    total = sum(in_window.values())
    tenants = {}
    for t, lat in latencies.items():
        tenants[t] = {"sessions": len(clients[t]), "in_flight": sum(d for _, d in clients[t]), "calls": in_window[t],
                      "calls_per_s": in_window[t] / window, "share": in_window[t] / total,
                      "latency_median_s": statistics.median(lat), "latency_p90_s": percentile(lat, 0.9),
                      "latencies_measured": len(lat)}
    shares = [v["share"] for v in tenants.values()]
    return {"phase": name, "window_s": window, "tenants": tenants, "calls": total,
            "fairness_max_over_min_share": max(shares) / min(shares) if len(shares) > 1 else 1.0,
            "loadavg_start": load_start, "loadavg_end": list(os.getloadavg())}


def main() -> None:
    extra = argparse.ArgumentParser(add_help=False)
    extra.add_argument("--window", type=float, default=None, help="seconds each phase runs (default 15; 5 with --quick)")
    extra.add_argument("--per-session-turns", action="store_true",
                       help="turn the executor's tenant groups off (each session its own turn, the policy before "
                            "tenants took turns); writes tinker_fairness.per-session-turns.json")
    known, rest = extra.parse_known_args()
    sys.argv = [sys.argv[0], *rest]
    args = parse_args(__doc__.splitlines()[0])
    window = known.window or (5.0 if args.quick else 15.0)
    import tinker

    from tinker_scheduler import Scheduler
    from tinker_scheduler.host_executor import TurnExecutor

    if known.per_session_turns:
        open_queue = TurnExecutor.open
        TurnExecutor.open = lambda self, qid, group=None: open_queue(self, qid)  # type: ignore[method-assign]
    from tinker_scheduler.tinker_api import serve

    threads = set_threads(args.threads[0])
    workdir = Path(tempfile.mkdtemp(prefix="bench-tinker-fairness-"))
    scheduler = Scheduler(port=0, db=workdir / "s.db", runs_dir=workdir / "runs", paused=True, num_cpus=1,
                          training_host_backend="local", training_host_cpus=float(threads)).start()
    keys = {t: "tml-" + scheduler.store.add_tenant(t) for t in TENANTS}
    gateway = serve(scheduler)
    services = {t: tinker.ServiceClient(base_url=gateway.url, api_key=keys[t]) for t in TENANTS}

    def lora(t: str, seed: int) -> Any:
        return services[t].create_lora_training_client(base_model="tiny", rank=LORA_RANK, seed=seed).result()

    one = {t: lora(t, i) for i, t in enumerate(TENANTS)}
    extra_t0 = [lora("t0", 10 + i) for i in range(GREEDY_SESSIONS - 1)]
    for c in [*one.values(), *extra_t0]:  # warm-up: each adapter's first step
        c.forward_backward(batch_data(), "cross_entropy").result()
    phases = []
    for t in TENANTS:
        phases.append(run_phase(f"alone:{t}", {t: [(one[t], 1)]}, window))
    phases.append(run_phase("together", {t: [(one[t], 1)] for t in TENANTS}, window))
    greedy = [(c, GREEDY_DEPTH) for c in (one["t0"], *extra_t0)]
    phases.append(run_phase("greedy", {"t0": greedy, **{t: [(one[t], 1)] for t in TENANTS[1:]}}, window))

    alone = {t: phases[i]["tenants"][t] for i, t in enumerate(TENANTS)}
    rows = []
    for phase in phases[len(TENANTS):]:
        for t, v in phase["tenants"].items():
            rows.append([phase["phase"], t, v["sessions"], v["in_flight"], v["calls"], v["calls_per_s"], alone[t]["calls_per_s"],
                         v["latency_median_s"] * 1e3, v["latency_p90_s"] * 1e3, alone[t]["latency_median_s"] * 1e3,
                         v["share"]])
    table = print_table(
        f"forward_backward ({BATCH} x {SEQ_LEN} tokens, LoRA r={LORA_RANK} on tiny, {threads} thread(s)), "
        f"{window:.0f} s per phase",
        ["phase", "tenant", "sessions", "in flight", "calls", "calls/s", "alone calls/s", "median ms", "p90 ms",
         "alone median ms", "share"], rows)
    for phase in phases[len(TENANTS):]:
        print(f"{phase['phase']}: fairness max/min share {phase['fairness_max_over_min_share']:.3f}, "
              f"load {phase['loadavg_start'][0]:.2f} -> {phase['loadavg_end'][0]:.2f}")
    write_results(args, "tinker_fairness.per-session-turns" if known.per_session_turns else "tinker_fairness", {
        "per_session_turns": known.per_session_turns,
        "tenants": list(TENANTS), "batch": BATCH, "seq_len": SEQ_LEN, "lora_rank": LORA_RANK, "threads": threads,
        "window_s": window, "greedy_sessions": GREEDY_SESSIONS, "greedy_depth": GREEDY_DEPTH, "alone": alone, "phases": phases, "table": table})
    for service in services.values():
        with contextlib.suppress(Exception):
            service.close("success").result(timeout=30)
    gateway.stop()
    scheduler.stop()


if __name__ == "__main__":
    main()
