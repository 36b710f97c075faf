"""Load and soak of the Tinker gateway: N official-``tinker``-SDK clients of M tenants train and
sample through ``opentinker scheduler start --tinker-port`` for a while, one of them sending the
largest requests the limits allow.

The scheduler is started as a user would (its own process, Ray model hosts, bound to 127.0.0.1
only), with M tenants made by ``scheduler add-tenant``. Each client (a thread here, with its own
``tinker.ServiceClient`` and tenant key; client i belongs to tenant i mod M) creates a LoRA
(r=8) on the ``tiny`` preset, then loops until the time is up: ``forward_backward`` of 4
sequences x 32 tokens, ``optim_step``, and ``sample`` (2 samples of 8 tokens) from a sampling
client it refreshes with ``save_weights_and_get_sampling_client`` every 10 steps. Client 0 instead
sends the largest requests the default limits allow (``RequestLimits``: 1,024 data and 65,536
tokens per request): a ``forward_backward`` of 1,024 sequences x 63 tokens (1,024 x 64 model
inputs with the last target), and a ``sample`` of ``num_samples`` 1,024 of an 8-token prompt with
``max_tokens`` 56 (1,024 x 64 tokens).

Every HTTP request the SDK sends (retries and heartbeats included) is timed in this process (a
wrapper of ``httpx.AsyncClient.send``: request out to the answer's body in) and counted by route
and status, so a 5xx the SDK retried still shows. Reported: per route the count, p50/p95/max
latency and the statuses; per SDK call (``forward_backward(...).result()`` etc.) the same; errors
the clients saw; sessions lost (a client whose model cannot be used after the soak, or that got
404 for its own model during it: must be 0); the server's RSS (the scheduler process and all its
descendants, Ray's model hosts included) idle before the clients start, once every client's model
is loaded and has stepped ("warm"), its peak (sampled every 5 s) and at the end; and
``os.getloadavg()`` at start and end. Each failed request's time is kept too (``failures``), and
the figures are taken before the clients close, so a request cut off by the shutdown is apart
(``failures.after_summary``). ``nox -s bench`` without ``--quick`` runs the full 10 minutes.

    uv run --no-sync python bench/bench_gateway_soak.py [--minutes 10] [--clients 20] [--tenants 4]
    uv run --no-sync python bench/bench_gateway_soak.py --quick   # 1 minute, 4 clients; .quick.json

Results: ``bench/results/gateway_soak.json`` (``gateway_soak.quick.json`` for ``--quick``).
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from pathlib import Path
from typing import Any

os.environ.setdefault("TINKER_TELEMETRY", "0")

from _common import RESULTS_DIR, BenchArgs, load_snapshot, print_table, wait_for_idle, write_results  # noqa: E402

LORA_RANK = 8
#: (sequences, tokens) of a normal client's forward_backward, and of the largest one.
NORMAL_BATCH = (4, 32)
LARGE_BATCH = (1024, 63)
#: (prompt tokens, num_samples, max_tokens) of a normal and of the largest sample.
NORMAL_SAMPLE = (8, 2, 8)
LARGE_SAMPLE = (8, 1024, 56)
REFRESH_EVERY = 10
VOCAB = 100  # token ids drawn below the tiny preset's vocabulary of 101


class Recorder:
    """Latencies and outcomes by key (an HTTP route or an SDK call), thread-safe."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.times: dict[str, list[float]] = collections.defaultdict(list)
        self.outcomes: dict[str, collections.Counter[str]] = collections.defaultdict(collections.Counter)
        #: (seconds since the recorder was made, key, outcome) of each outcome that is not a 200 or "ok"
        self.failures: list[tuple[float, str, str]] = []
        self.t0 = time.monotonic()

    def add(self, key: str, seconds: float, outcome: str) -> None:
        with self.lock:
            self.times[key].append(seconds)
            self.outcomes[key][outcome] += 1
            if outcome not in ("200", "ok"):
                self.failures.append((round(time.monotonic() - self.t0, 3), key, outcome))

    def summary(self) -> dict[str, Any]:
        with self.lock:
            return {k: {"n": len(v), **percentiles(v), "outcomes": dict(self.outcomes[k])}
                    for k, v in sorted(self.times.items())}


def percentiles(values: list[float]) -> dict[str, float]:
    """p50, p95 and max of ``values`` in milliseconds (nearest-rank)."""
    s = sorted(values)

    def rank(p: float) -> float:
        return 1000 * s[min(len(s) - 1, max(0, int(round(p * len(s) + 0.5)) - 1))]

    return {"p50_ms": rank(0.50), "p95_ms": rank(0.95), "max_ms": 1000 * s[-1]} if s else {}


_ID = re.compile(r"^(?=.*\d)[A-Za-z0-9_.:-]{16,}$")


def route(method: str, path: str) -> str:
    """``METHOD /path`` with id-like segments as ``{id}``."""
    return method + " " + "/".join("{id}" if _ID.match(p) else p for p in path.split("/"))


def instrument_httpx(http: Recorder) -> None:
    """Time every ``httpx.AsyncClient.send`` in this process into ``http``, by route and status."""
    import httpx

    original = httpx.AsyncClient.send

    async def send(self: Any, request: Any, *args: Any, **kwargs: Any) -> Any:
        start = time.perf_counter()
        key = route(request.method, request.url.path)
        try:
            response = await original(self, request, *args, **kwargs)
            if kwargs.get("stream"):
                await response.aread()
        except Exception as e:
            http.add(key, time.perf_counter() - start, type(e).__name__)
            raise
        http.add(key, time.perf_counter() - start, str(response.status_code))
        return response

    httpx.AsyncClient.send = send


def tree_rss_mb(pid: int) -> dict[str, float]:
    """RSS (MB) of process ``pid`` and of it plus every descendant (from /proc)."""
    children: dict[int, list[int]] = collections.defaultdict(list)
    rss: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        with contextlib.suppress(OSError, ValueError, IndexError):
            stat = (entry / "stat").read_text()
            ppid = int(stat.rsplit(")", 1)[1].split()[1])
            children[ppid].append(int(entry.name))
            for line in (entry / "status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    rss[int(entry.name)] = int(line.split()[1])
    total, stack, count = 0, [pid], 0
    while stack:
        p = stack.pop()
        total += rss.get(p, 0)
        count += 1
        stack.extend(children.get(p, ()))
    return {"scheduler_mb": rss.get(pid, 0) / 1024, "tree_mb": total / 1024, "processes": count}


class Gateway:
    """``opentinker scheduler start --tinker-port 0`` in its own process group, with tenants."""

    def __init__(self, tenants: int) -> None:
        from tinker_algos.model.models import build_tiny_model

        self.tmp = Path(tempfile.mkdtemp(prefix="bench-soak-"))
        self.ray_tmp = tempfile.mkdtemp(prefix="ot-ray-")  # short: Ray's unix sockets live here
        build_tiny_model(self.tmp / "models" / "tiny")
        self.env = {**os.environ, "RAY_ENABLE_UV_RUN_RUNTIME_ENV": "0", "RAY_AUTH_MODE": "disabled",
                    "RAY_TMPDIR": self.ray_tmp, "HF_HUB_OFFLINE": "1", "OPENTINKER_CACHE": str(self.tmp / "cache")}
        cli = [sys.executable, "-m", "tinker_client.cli", "scheduler"]
        db = str(self.tmp / "db.sqlite")
        self.keys = []
        for i in range(tenants):
            key = subprocess.run([*cli, "add-tenant", f"tenant{i}", "--db", db], capture_output=True, text=True,
                                 env=self.env, check=True, timeout=300).stdout.strip()
            self.keys.append("tml-" + key)
        self.log = open(self.tmp / "scheduler.log", "w")  # noqa: SIM115 (closed in stop)
        self.proc = subprocess.Popen(
            [*cli, "start", "--host", "127.0.0.1", "--port", "0", "--tinker-port", "0", "--metrics-port", "-1",
             "--num-cpus", "2", "--db", db, "--runs-dir", str(self.tmp / "runs"),
             "--model-root", str(self.tmp / "models")],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=self.env, start_new_session=True,
        )
        deadline, self.url = time.monotonic() + 300, None
        while self.url is None:
            line = self.proc.stdout.readline()
            self.log.write(line)
            if m := re.search(r"tinker API at (http://\S+)", line):
                self.url = m.group(1)
            elif (not line and self.proc.poll() is not None) or time.monotonic() > deadline:
                self.log.flush()
                raise RuntimeError("scheduler did not start:\n" + (self.tmp / "scheduler.log").read_text()[-3000:])
        if not self.url.startswith("http://127.0.0.1:"):
            raise RuntimeError(f"the gateway is not on loopback only: {self.url}")
        self._pump = threading.Thread(target=self._drain, daemon=True)
        self._pump.start()

    def _drain(self) -> None:
        for line in self.proc.stdout:
            self.log.write(line)

    def rss(self) -> dict[str, float]:
        return tree_rss_mb(self.proc.pid)

    def log_lines(self, pattern: str) -> list[str]:
        self.log.flush()
        return [x for x in (self.tmp / "scheduler.log").read_text().splitlines() if re.search(pattern, x)]

    def stop(self) -> None:
        self.proc.send_signal(signal.SIGTERM)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(timeout=60)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGKILL)  # Ray's helpers too
        self._pump.join(timeout=5)
        self.log.close()
        shutil.rmtree(self.ray_tmp, ignore_errors=True)
        shutil.rmtree(self.tmp, ignore_errors=True)


class Client(threading.Thread):
    """One SDK client: a LoRA of its tenant, trained and sampled until ``stop_at``."""

    def __init__(self, index: int, url: str, key: str, tenant: int, stop_at: float, calls: Recorder,
                 large: bool) -> None:
        super().__init__(name=f"client{index}", daemon=True)
        self.index, self.url, self.key, self.tenant, self.stop_at = index, url, key, tenant, stop_at
        self.calls, self.large = calls, large
        self.errors: collections.Counter[str] = collections.Counter()
        self.error_samples: list[str] = []
        self.steps = 0
        self.model_id: str | None = None
        self.lost: str | None = None
        self.service: Any = None
        self.training: Any = None

    def call(self, name: str, fn: Any) -> Any:
        start = time.perf_counter()
        try:
            out = fn()
        except Exception as e:
            status = getattr(e, "status_code", None)
            what = f"{type(e).__name__}" + (f" {status}" if status else "")
            self.calls.add(name, time.perf_counter() - start, what)
            self.errors[f"{name}: {what}"] += 1
            if len(self.error_samples) < 5:
                self.error_samples.append(f"{name}: {what}: {str(e)[:300]}")
            if status == 404 or "expired" in str(e).lower():
                self.lost = self.lost or f"{name}: {str(e)[:300]}"
            return None
        self.calls.add(name, time.perf_counter() - start, "ok")
        return out

    def run(self) -> None:
        import numpy as np
        import tinker
        from tinker import types

        rng = np.random.default_rng(self.index)
        n, t = LARGE_BATCH if self.large else NORMAL_BATCH
        p, num_samples, max_tokens = LARGE_SAMPLE if self.large else NORMAL_SAMPLE
        tag = "large " if self.large else ""
        try:
            self.service = tinker.ServiceClient(base_url=self.url, api_key=self.key)
            self.training = self.service.create_lora_training_client(base_model="tiny", rank=LORA_RANK,
                                                                     seed=self.index).result()
            self.model_id = self.training.model_id
        except Exception as e:
            self.lost = f"create: {type(e).__name__}: {str(e)[:300]}"
            self.errors[f"create: {type(e).__name__}"] += 1
            return
        sampler = None
        while time.monotonic() < self.stop_at:
            data = []
            for _ in range(n):
                seq = rng.integers(1, VOCAB, size=t + 1).tolist()
                data.append(types.Datum(model_input=types.ModelInput.from_ints(seq[:-1]),
                                        loss_fn_inputs={"target_tokens": seq[1:], "weights": [1.0] * t}))
            self.call(tag + "forward_backward", lambda d=data: self.training.forward_backward(d, "cross_entropy").result())
            self.call(tag + "optim_step",
                      lambda: self.training.optim_step(types.AdamParams(learning_rate=1e-3)).result())
            self.steps += 1
            if sampler is None or self.steps % REFRESH_EVERY == 0:
                sampler = self.call("save_weights_and_get_sampling_client",
                                    lambda: self.training.save_weights_and_get_sampling_client().result()) or sampler
            if sampler is not None and time.monotonic() < self.stop_at:
                prompt = types.ModelInput.from_ints(rng.integers(1, VOCAB, size=p).tolist())
                params = types.SamplingParams(max_tokens=max_tokens, temperature=1.0)
                self.call(tag + "sample", lambda s=sampler, pr=prompt, pa=params: s.sample(
                    pr, num_samples=num_samples, sampling_params=pa).result())

    def final_check(self) -> None:
        """The session is still there: a forward on the client's own model answers."""
        if self.training is None or self.lost:
            return
        from tinker import types

        datum = types.Datum(model_input=types.ModelInput.from_ints([1, 2, 3]),
                            loss_fn_inputs={"target_tokens": [2, 3, 4], "weights": [1.0] * 3})
        try:
            self.training.forward([datum], "cross_entropy").result()
        except Exception as e:
            self.lost = f"final forward: {type(e).__name__}: {str(e)[:300]}"


def main() -> None:
    parser = argparse.ArgumentParser(description=" ".join(__doc__.split("\n\n")[0].split()))
    parser.add_argument("--minutes", type=float, default=None, help="soak length (default 10; --quick: 1)")
    parser.add_argument("--clients", type=int, default=None, help="SDK clients (default 20; --quick: 4)")
    parser.add_argument("--tenants", type=int, default=4, help="tenants the clients belong to (default 4)")
    parser.add_argument("--quick", action="store_true", help="1 minute, 4 clients; writes gateway_soak.quick.json")
    parser.add_argument("--results", type=Path, default=RESULTS_DIR, help="directory for the JSON results")
    # the options every bench script takes (``nox -s bench -- ...`` passes them to all)
    parser.add_argument("--threads", default=None, help="accepted for the bench session; the server sets its own")
    parser.add_argument("--wait-idle", type=float, default=0.0, metavar="SECONDS",
                        help="first wait up to this long for the CPUs to go idle (shared machines)")
    ns = parser.parse_args()
    minutes = ns.minutes if ns.minutes is not None else (1.0 if ns.quick else 10.0)
    clients = ns.clients if ns.clients is not None else (4 if ns.quick else 20)
    if minutes <= 0 or clients < 1 or not 1 <= ns.tenants <= clients:
        parser.error("--minutes must be > 0, --clients >= 1 and 1 <= --tenants <= --clients")
    args = BenchArgs(threads=[], quick=ns.quick, results=ns.results, load_at_start=load_snapshot(),
                     wait_idle=ns.wait_idle)
    wait_for_idle(args)
    loadavg_start = os.getloadavg()
    print(f"load average at start: {loadavg_start}", flush=True)

    http, calls = Recorder(), Recorder()
    instrument_httpx(http)
    gateway = Gateway(ns.tenants)
    print(f"gateway at {gateway.url}; {clients} clients of {ns.tenants} tenants for {minutes:g} min", flush=True)
    try:
        rss_before = gateway.rss()
        started = time.monotonic()
        stop_at = started + 60 * minutes
        threads = [Client(i, gateway.url, gateway.keys[i % ns.tenants], i % ns.tenants, stop_at, calls, large=i == 0)
                   for i in range(clients)]
        for c in threads:
            c.start()
        peak, rss_warm = dict(rss_before), None
        timeline: list[tuple[float, float, float]] = []  # (seconds, scheduler MB, tree MB) every 5 s
        while any(c.is_alive() for c in threads):
            time.sleep(5)
            now = gateway.rss()
            timeline.append((round(time.monotonic() - started, 1), round(now["scheduler_mb"], 1), round(now["tree_mb"], 1)))
            if rss_warm is None and all(c.steps >= 1 or not c.is_alive() for c in threads):
                rss_warm = dict(now, at_s=time.monotonic() - started)  # every model loaded and stepped once
            if now["tree_mb"] > peak["tree_mb"]:
                peak = now
            if time.monotonic() > stop_at + 900:
                raise RuntimeError("clients still running 15 minutes after the end: "
                                   + ", ".join(c.name for c in threads if c.is_alive()))
        elapsed = time.monotonic() - started
        for c in threads:
            c.final_check()
        rss_after = gateway.rss()
        loadavg_end = os.getloadavg()
        expired = gateway.log_lines(r"expired|Traceback")
        # what the server answered while it ran: taken before the clients close and it stops, so
        # requests that die with the server (a heartbeat in flight) are not counted as its errors
        http_summary, call_summary = http.summary(), calls.summary()
        failures = {"http": list(http.failures), "sdk": list(calls.failures),
                    "soak_end_s": round(stop_at - http.t0, 3), "summary_at_s": round(time.monotonic() - http.t0, 3)}
        for c in threads:
            with contextlib.suppress(Exception):
                c.service.close()
    except Exception:
        traceback.print_exc()
        gateway.stop()
        raise
    gateway.stop()
    failures["after_summary"] = [f for f in http.failures if f[0] > failures["summary_at_s"]]

    statuses: collections.Counter[str] = collections.Counter()
    for v in http_summary.values():
        statuses.update(v["outcomes"])
    lost = {c.name: c.lost for c in threads if c.lost}
    payload = {
        "minutes": minutes, "clients": clients, "tenants": ns.tenants, "lora_rank": LORA_RANK,
        "elapsed_s": elapsed,
        "normal": {"batch": NORMAL_BATCH, "sample": NORMAL_SAMPLE},
        "large": {"batch": LARGE_BATCH, "sample": LARGE_SAMPLE},
        "loadavg_start": loadavg_start, "loadavg_end": loadavg_end,
        "rss_before": rss_before, "rss_warm": rss_warm, "rss_peak": peak, "rss_after": rss_after,
        "rss_timeline": timeline, "rss_at_5min": rss_at(timeline, 300.0), "rss_growth": rss_growth(timeline),
        "http_routes": http_summary, "http_statuses": dict(statuses),
        "server_errors_5xx": sum(v for k, v in statuses.items() if k.startswith("5")),
        "sdk_calls": call_summary, "failures": failures,
        "client_errors": {c.name: dict(c.errors) for c in threads if c.errors},
        "client_error_samples": {c.name: c.error_samples for c in threads if c.error_samples},
        "steps": {c.name: c.steps for c in threads},
        "sessions_lost": len(lost), "lost": lost,
        "scheduler_log_expired_or_traceback": expired[:20],
    }
    print_table("HTTP routes (every request the SDK sent)", ["route", "n", "p50 ms", "p95 ms", "max ms", "statuses"],
                [[k, v["n"], v["p50_ms"], v["p95_ms"], v["max_ms"], str(v["outcomes"])] for k, v in http_summary.items()])
    print_table("SDK calls (to .result())", ["call", "n", "p50 ms", "p95 ms", "max ms", "outcomes"],
                [[k, v["n"], v["p50_ms"], v["p95_ms"], v["max_ms"], str(v["outcomes"])] for k, v in call_summary.items()])
    print(f"sessions lost: {len(lost)} {lost or ''}; 5xx: {payload['server_errors_5xx']}; "
          f"RSS {rss_before['tree_mb']:.0f} (idle) -> {(rss_warm or rss_before)['tree_mb']:.0f} (warm) -> "
          f"{rss_after['tree_mb']:.0f} MB (end; peak {peak['tree_mb']:.0f}); "
          f"load {loadavg_start[0]:.1f} -> {loadavg_end[0]:.1f}", flush=True)
    growth = payload["rss_growth"]
    print(f"RSS at 5 min: {payload['rss_at_5min']}; growth over the second half: scheduler "
          f"{growth['scheduler_mb_per_min']:+.2f} MB/min, tree {growth['tree_mb_per_min']:+.2f} MB/min", flush=True)
    write_results(args, "gateway_soak" if minutes == 10 else f"gateway_soak_{minutes:g}min", payload, with_torch=False)


def rss_at(timeline: list[tuple[float, float, float]], seconds: float) -> dict[str, float] | None:
    """The RSS sample nearest ``seconds`` into the soak."""
    if not timeline:
        return None
    t, sched, tree = min(timeline, key=lambda row: abs(row[0] - seconds))
    return {"at_s": t, "scheduler_mb": sched, "tree_mb": tree}


def rss_growth(timeline: list[tuple[float, float, float]]) -> dict[str, float]:
    """Least-squares slope (MB per minute) of the scheduler's and the tree's RSS over the second
    half of the soak (after warm-up): about 0 when memory levels off."""
    half = timeline[len(timeline) // 2:]
    if len(half) < 2:
        return {"scheduler_mb_per_min": 0.0, "tree_mb_per_min": 0.0}
    ts = [row[0] / 60 for row in half]
    mean_t = sum(ts) / len(ts)

    def slope(col: int) -> float:
        ys = [row[col] for row in half]
        mean_y = sum(ys) / len(ys)
        den = sum((t - mean_t) ** 2 for t in ts)
        return sum((t - mean_t) * (y - mean_y) for t, y in zip(ts, ys, strict=True)) / den if den else 0.0

    return {"scheduler_mb_per_min": slope(1), "tree_mb_per_min": slope(2)}


if __name__ == "__main__":
    main()
