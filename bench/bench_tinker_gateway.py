"""The Tinker gateway's overhead: one ``forward_backward`` round trip through the official
``tinker`` SDK and the HTTP gateway vs the same call through our own gRPC ``TrainingClient``.

One in-process :class:`~tinker_scheduler.Scheduler` (``training_host_backend="local"``: the model
host runs in this process) serves both: the gRPC ``TrainingService`` and, on a free port, the
Tinker API (:func:`tinker_scheduler.tinker_api.serve`). Each client creates a LoRA (r=8, seed 0)
on the ``tiny`` preset — both adapters share one model host — and calls
``forward_backward(batch, "cross_entropy").result()`` on the same batch of random token ids,
every token but the first trained (``Datum.from_sequence(seq, prompt_len=1)`` for
ours; ``target_tokens`` = the shifted sequence and ``weights`` = 1 for the SDK). Gradients
accumulate (no ``optim_step``); the first call's loss of each must agree (both adapters start as
the identity), a check that both do the same work. Two batches: 8 sequences x 64 tokens (a
small training step) and 1 x 8 (almost no compute: the round trip's own cost shows).

Warm-up calls are discarded; then the two cases alternate (gRPC, SDK, gRPC, ...) so a
disturbance hits both; each round records ``os.getloadavg()``. Reported: each case's median (with
min and max), the ratio of the medians, and the median of the per-round ratios (SDK call over
the same round's gRPC call). The target is a ratio of at most 1.2.

    uv run --no-sync python bench/bench_tinker_gateway.py [--threads 1] [--quick] [--wait-idle 30]
"""

from __future__ import annotations

import os
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("RAY_ENABLE_UV_RUN_RUNTIME_ENV", "0")
os.environ.setdefault("RAY_AUTH_MODE", "disabled")
os.environ.setdefault("RAY_TMPDIR", "/tmp/rb-bench")
os.environ.setdefault("TINKER_TELEMETRY", "0")

from _common import parse_args, print_table, set_threads, wait_for_idle, write_results  # noqa: E402

#: (sequences, tokens per sequence) of the measured batches.
BATCHES = ((8, 64), (1, 8))
LORA_RANK = 8
LOSS = "cross_entropy"
CASES = ("gRPC TrainingClient", "tinker SDK + gateway")


def main() -> None:
    args = parse_args(__doc__.splitlines()[0])
    import tinker

    from tinker_client.training import ServiceClient
    from tinker_scheduler import Scheduler
    from tinker_scheduler.tinker_api import serve

    warmup, repeats = (2, 5) if args.quick else (3, 25)
    threads = args.threads[0]
    set_threads(threads)
    workdir = Path(tempfile.mkdtemp(prefix="bench-tinker-gateway-"))
    scheduler = Scheduler(port=0, db=workdir / "s.db", runs_dir=workdir / "runs", paused=True, num_cpus=1,
                          training_host_backend="local", training_host_cpus=float(threads)).start()
    gateway = serve(scheduler)
    ours = ServiceClient(scheduler.address)
    grpc_client = ours.create_lora_training_client("tiny", rank=LORA_RANK, seed=0)
    sdk = tinker.ServiceClient(base_url=gateway.url, api_key="tml-local")
    sdk_client = sdk.create_lora_training_client(base_model="tiny", rank=LORA_RANK, seed=0).result()
    results = [measure(args, grpc_client, sdk_client, n, t, warmup, repeats, threads) for n, t in BATCHES]
    write_results(args, "tinker_gateway", {"lora_rank": LORA_RANK, "threads": threads, "warmup": warmup,
                                           "repeats": repeats, "batches": results})
    grpc_client.close()
    ours.close()
    gateway.stop()
    scheduler.stop()


def measure(args: Any, grpc_client: Any, sdk_client: Any, batch: int, seq_len: int, warmup: int, repeats: int,
            threads: int) -> dict[str, Any]:
    """The two cases on one batch, interleaved; their timings and ratios."""
    import numpy as np
    from tinker import types

    from tinker_client.training import Datum

    seqs = np.random.default_rng(0).integers(4, 64, size=(batch, seq_len), dtype=np.int64).tolist()  # ids tiny has
    grpc_data = [Datum.from_sequence(s, prompt_len=1) for s in seqs]
    sdk_data = [types.Datum(model_input=types.ModelInput.from_ints(s[:-1]),
                            loss_fn_inputs={"target_tokens": s[1:], "weights": [1.0] * (seq_len - 1)}) for s in seqs]

    def call_grpc() -> float:
        return float(grpc_client.forward_backward(grpc_data, LOSS).result().metrics["loss"])

    def call_sdk() -> float:
        return float(sdk_client.forward_backward(sdk_data, LOSS).result().metrics["loss:sum"])

    calls = {CASES[0]: call_grpc, CASES[1]: call_sdk}
    first_loss = {name: fn() for name, fn in calls.items()}
    for _ in range(warmup - 1):
        for fn in calls.values():
            fn()
    seconds: dict[str, list[float]] = {name: [] for name in CASES}
    rounds: list[dict[str, Any]] = []
    for _ in range(repeats):
        wait_for_idle(args)
        row: dict[str, Any] = {"loadavg": list(os.getloadavg())}
        for name, fn in calls.items():
            t0 = time.perf_counter()
            fn()
            row[name] = time.perf_counter() - t0
            seconds[name].append(row[name])
        rounds.append(row)
    med = {name: statistics.median(seconds[name]) for name in CASES}
    ratio_of_medians = med[CASES[1]] / med[CASES[0]]
    round_ratio = statistics.median(r[CASES[1]] / r[CASES[0]] for r in rounds)
    table = print_table(
        f"forward_backward round trip, {batch} x {seq_len} tokens, LoRA r={LORA_RANK} on tiny, {threads} thread(s), "
        f"median of {repeats} (load 1m {rounds[0]['loadavg'][0]:.2f} -> {rounds[-1]['loadavg'][0]:.2f})",
        ["case", "median ms", "min ms", "max ms", "first loss"],
        [[name, med[name] * 1e3, min(seconds[name]) * 1e3, max(seconds[name]) * 1e3, first_loss[name]]
         for name in CASES],
    )
    print(f"SDK + gateway / gRPC: {ratio_of_medians:.3f} (ratio of medians), {round_ratio:.3f} (median per-round ratio)")
    return {"batch": batch, "seq_len": seq_len, "first_loss": first_loss, "median_s": med,
            "ratio_of_medians": ratio_of_medians, "median_round_ratio": round_ratio, "rounds": rounds, "table": table}


if __name__ == "__main__":
    main()
