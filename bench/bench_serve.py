"""``opentinker serve`` under concurrent clients: total new tokens/s and request latency.

The server is the real app (:func:`tinker_serve.app.create_app`) under uvicorn on a localhost
port, in this process (the engine decodes in its own thread); clients are threads, each with
its own ``httpx.Client``, each sending requests one after another. A request is
``POST /v1/completions`` with a ``math/arithmetic-v0`` prompt (chat-templated for SmolLM2),
``max_tokens=32``, ``temperature=1``, ``ignore_eos=true``: every request makes exactly 32 new
tokens. At 1, 4 and 16 concurrent clients: total new tokens / wall seconds, p50 and p95 of the
request latency (send to full answer), and the largest batch one decode step carried. The load
average before and after each case is recorded: on a shared machine other processes steal cores.

Models: the tiny preset and SmolLM2-135M-Instruct (``smollm2-135m-instruct``, cached on first
use; skipped with ``--quick``). CPU, fp32, torch threads from ``--threads`` (the largest given).

    uv run --no-sync python bench/bench_serve.py [--quick] [--threads 2]
"""

from __future__ import annotations

import os
import statistics
import threading
import time
from typing import Any

from _common import load_snapshot, parse_args, print_table, set_threads, write_results

CONCURRENCY = (1, 4, 16)
MAX_TOKENS = 32


def percentile(values: list[float], q: float) -> float:
    s = sorted(values)
    k = (len(s) - 1) * q
    lo, hi = int(k), min(int(k) + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (k - lo)


def prompts(served: Any, n: int) -> list[list[int]]:
    from tinker_algos.model.tokenizer import encode_prompt
    from tinker_env_math.arithmetic import arithmetic_problems

    chat = served.renderer.chat
    return [encode_prompt(served.policy.tokenizer, p.prompt, chat=chat) for p in arithmetic_problems(n, 0, split="train")]


def run_case(url: str, model: str, ids: list[list[int]], clients: int, per_client: int) -> dict[str, Any]:
    import httpx

    latencies: list[float] = []
    tokens = [0]
    lock = threading.Lock()
    errors: list[str] = []

    def client(c: int) -> None:
        with httpx.Client(base_url=url, timeout=600) as http:
            for r in range(per_client):
                body = {"model": model, "prompt": ids[(c * per_client + r) % len(ids)], "max_tokens": MAX_TOKENS,
                        "temperature": 1.0, "ignore_eos": True, "seed": c * 1000 + r}
                t0 = time.perf_counter()
                resp = http.post("/v1/completions", json=body)
                dt = time.perf_counter() - t0
                if resp.status_code != 200:
                    errors.append(resp.text[:200])
                    continue
                with lock:
                    latencies.append(dt)
                    tokens[0] += resp.json()["usage"]["completion_tokens"]

    before = load_snapshot()
    threads = [threading.Thread(target=client, args=(c,)) for c in range(clients)]
    t0 = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.perf_counter() - t0
    after = os.getloadavg()[0]
    return {
        "clients": clients, "requests": len(latencies), "errors": errors, "new_tokens": tokens[0], "wall_s": wall,
        "tok_s": tokens[0] / wall, "p50_s": statistics.median(latencies), "p95_s": percentile(latencies, 0.95),
        "loadavg_before": before["loadavg_1m"], "cpu_busy_before": before["cpu_busy_1s"], "loadavg_after": after,
    }


def bench_model(name: str, path: str, quick: bool) -> dict[str, Any]:
    from tinker_serve.app import create_app
    from tinker_serve.served import ServedModels

    served = ServedModels.load(path, name=name, device="cpu", precision="fp32", max_batch=32)
    ids = prompts(served, 64)
    out = {"model": name, "prompt_tokens_mean": statistics.mean(len(i) for i in ids), "cases": []}
    with serving(create_app(served)) as url:
        run_case(url, name, ids, 1, 1)  # warm-up
        for clients in CONCURRENCY:
            per_client = max(2, (16 if not quick else 4) // clients)
            served.engine.largest_batch = 0
            case = run_case(url, name, ids, clients, per_client)
            case["largest_batch"] = served.engine.largest_batch
            out["cases"].append(case)
            print(f"{name}: {clients} clients: {case['tok_s']:.1f} tok/s, p50 {case['p50_s']:.2f} s, "
                  f"p95 {case['p95_s']:.2f} s (largest batch {case['largest_batch']})", flush=True)
    return out


class serving:  # noqa: N801 - used as a context manager, like contextlib's
    """uvicorn on a free localhost port in a thread."""

    def __init__(self, app: Any) -> None:
        import socket

        import uvicorn

        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        self.server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=self.port, log_level="warning"))
        self.thread = threading.Thread(target=self.server.run, daemon=True)

    def __enter__(self) -> str:
        self.thread.start()
        while not self.server.started:
            time.sleep(0.02)
        return f"http://127.0.0.1:{self.port}"

    def __exit__(self, *exc: Any) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=30)


def main(argv: list[str] | None = None) -> None:
    args = parse_args(__doc__.splitlines()[0], argv)
    threads = set_threads(max(args.threads))
    models = [("tiny", "tiny")] + ([] if args.quick else [("smollm2-135m-instruct", "smollm2-135m-instruct")])
    results = [bench_model(name, path, args.quick) for name, path in models]
    rows = [[r["model"], c["clients"], c["requests"], c["tok_s"], c["p50_s"], c["p95_s"], c["largest_batch"],
             f"{c['loadavg_before']:.2f}/{c['loadavg_after']:.2f}"] for r in results for c in r["cases"]]
    print_table(
        f"opentinker serve, CPU fp32, {threads} torch threads, {MAX_TOKENS} new tokens a request",
        ["model", "clients", "requests", "tok/s", "p50 s", "p95 s", "largest batch", "loadavg before/after"],
        rows,
    )
    write_results(args, "serve", {"threads": threads, "max_tokens": MAX_TOKENS, "models": results})


if __name__ == "__main__":
    main()
