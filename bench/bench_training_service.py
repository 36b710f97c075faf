"""TrainingService overhead: ``forward_backward`` through the service vs the same call in-process.

The call: ``cross_entropy`` on a batch of 32 sequences x 64 tokens (random ids, every token real,
every token but the first trained) for a LoRA adapter (r=8, alpha 8, all linear layers) on the
``tiny`` preset. Three cases, measured at each ``--threads`` count:

* ``in-process`` -- ``Trainer.forward_backward(batch, "cross_entropy", agg="token-sum",
  weights_B_T=..., return_logprobs=True)`` on the ``Batch`` the model host builds from the
  request: the exact call the host makes, logprobs included;
* ``service, local host`` -- ``TrainingClient.forward_backward(data, "cross_entropy").result()``
  against a :class:`~tinker_scheduler.Scheduler` with ``training_host_backend="local"`` (the
  model host runs in the scheduler's process, beside the client): gRPC over localhost, request
  and response conversion, the host's queue. This scheduler and its client run in a child
  process that this script starts and drives over a pipe (the child times its own calls): with
  two threads, torch work that alternates between two threads of one process (our in-process
  calls and the host's executor thread) slowed both by 10-70% in our trials (CPU/wall about 1.5 instead
  of 2), an artefact of sharing a process that no real deployment has;
* ``service, Ray host`` -- the same against a scheduler in this process with
  ``training_host_backend="ray"``: the model host is a Ray actor in its own process (the
  production set-up), one more hop.

The hosts' torch threads equal the in-process case's: the local host's process sets them with
``torch.set_num_threads`` before its scheduler starts, the Ray host gets ``training_host_cpus``
= the thread count, which it turns into its ``num_threads``. Warm-up calls are discarded; then
the cases' repeats are interleaved (in-process, local, Ray, in-process, ...) so that a
disturbance hits all three; each case's median is reported with its ratio to the in-process
median, and the median of the per-round ratios (each call over the same round's in-process
call). ``--wait-idle`` waits for idle CPUs before each round. Gradients accumulate over the
calls in every case alike (no ``optim_step``). The first call's loss is recorded for each case:
the three agree (a new LoRA adapter is the identity), a check that they do the same work.

    uv run --no-sync python bench/bench_training_service.py [--threads 1,2] [--quick] [--wait-idle 30]
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

# Ray on this machine: no per-session uv virtualenv for the workers, no token auth, a short
# temp path (Ray's socket paths have a length limit). Set before anything imports ray.
os.environ.setdefault("RAY_ENABLE_UV_RUN_RUNTIME_ENV", "0")
os.environ.setdefault("RAY_AUTH_MODE", "disabled")
os.environ.setdefault("RAY_TMPDIR", "/tmp/rb-bench")

from _common import (  # noqa: E402
    BENCH_DIR,
    BenchArgs,
    Timing,
    parse_args,
    print_table,
    set_threads,
    wait_for_idle,
    write_results,
)

BATCH = 32
SEQ_LEN = 64
LORA_RANK = 8
LOSS = "cross_entropy"
CASES = ("in-process", "service, local host", "service, Ray host")


def make_sequences(vocab_size: int, seed: int = 0) -> Any:
    """32 x 64 random token ids (special ids excluded)."""
    import numpy as np

    return np.random.default_rng(seed).integers(4, vocab_size, size=(BATCH, SEQ_LEN), dtype=np.int64)


def host_batch(sequences_B_T: Any) -> tuple[Any, dict[str, Any]]:
    """The ``Batch`` and loss inputs the model host builds for these sequences sent as
    ``Datum.from_sequence(seq, prompt_len=1)`` with ``cross_entropy`` (see ``ModelHost._batch``):
    every position but the first trained with weight 1."""
    import numpy as np

    from tinker_core.contracts import Batch

    B, T = sequences_B_T.shape
    attn = np.ones((B, T), dtype=np.float32)
    mask = attn.copy()
    mask[:, 0] = 0.0
    zeros = np.zeros((B, T), dtype=np.float32)
    batch = Batch(
        tokens_B_T=sequences_B_T, attention_mask_B_T=attn, loss_mask_B_T=mask,
        sampler_logprobs_B_T=zeros, rewards_B=np.zeros(B, np.float32), group_ids_B=np.arange(B),
        advantages_B_T=zeros.copy(),
    )
    return batch, {"weights_B_T": (mask != 0).astype(np.float32)}


class InProcess:
    """The host's call on a trainer of our own (same model, same LoRA spec, same optimizer config)."""

    def __init__(self, sequences_B_T: Any) -> None:
        from tinker_algos.model.models import LoraSpec, PolicyModel
        from tinker_algos.training.trainer import Trainer, TrainerConfig

        policy = PolicyModel.load("tiny", device="cpu", precision="fp32")
        self.trainer = Trainer(
            policy, TrainerConfig(optimizer="adamw", lr=1e-4, max_grad_norm=None),
            adapter="bench", lora=LoraSpec(rank=LORA_RANK, alpha=LORA_RANK, target_modules="all-linear"),
            adapter_seed=0,
        )
        self.batch, self.extra = host_batch(sequences_B_T)

    def __call__(self) -> float:
        from tinker_algos.training.trainer import TOKEN_SUM

        metrics, _ = self.trainer.forward_backward(
            self.batch, LOSS, agg=TOKEN_SUM, return_logprobs=True, **self.extra
        )
        return float(metrics["loss"])

    def timed(self) -> tuple[float, float, float]:
        return timed_call(self)

    def close(self) -> None:
        pass


class ThroughService:
    """A LoRA session on a scheduler of our own; each call is ``forward_backward(...).result()``."""

    def __init__(
        self, sequences_B_T: Any, *, backend: str, threads: int, workdir: Path, ray_address: str | None = None
    ) -> None:
        from tinker_client.training import Datum, ServiceClient
        from tinker_scheduler import Scheduler

        self.scheduler = Scheduler(
            port=0, db=workdir / f"{backend}-{threads}.db", runs_dir=workdir / f"runs-{backend}", paused=True,
            training_host_backend=backend, training_host_cpus=float(threads), ray_address=ray_address,
        ).start()
        self.service = ServiceClient(self.scheduler.address)
        self.client = self.service.create_lora_training_client("tiny", rank=LORA_RANK, seed=0)
        self.data = [Datum.from_sequence(seq, prompt_len=1) for seq in sequences_B_T]

    def __call__(self) -> float:
        out = self.client.forward_backward(self.data, LOSS).result()
        return float(out.metrics["loss"])

    def timed(self) -> tuple[float, float, float]:
        return timed_call(self)

    def close(self) -> None:
        self.client.close()
        self.service.close()
        self.scheduler.stop()


def timed_call(fn: Any) -> tuple[float, float, float]:
    """``(wall seconds, CPU seconds of this process, fn's loss)`` of one call."""
    c0, w0 = time.process_time(), time.perf_counter()
    loss = fn()
    return time.perf_counter() - w0, time.process_time() - c0, loss


MARK = "@@bench "


def local_host_child(threads: int, ray_address: str, workdir: str) -> None:
    """The ``service, local host`` case in a process of its own (see the module docstring):
    answers each ``call`` line on stdin with one timed call, as a JSON line on stdout."""
    import numpy as np

    set_threads(threads)
    sequences_B_T = np.load(Path(workdir) / "sequences.npy")
    run = ThroughService(
        sequences_B_T, backend="local", threads=threads, workdir=Path(workdir), ray_address=ray_address
    )
    print(MARK + json.dumps({"ready": True}), flush=True)
    try:
        for line in sys.stdin:
            if line.strip() != "call":
                break
            print(MARK + json.dumps(run.timed()), flush=True)
    finally:
        run.close()


class LocalHostInChild:
    """Drives :func:`local_host_child` over pipes; the child times its own calls."""

    def __init__(self, sequences_B_T: Any, threads: int, ray_address: str, workdir: Path) -> None:
        import numpy as np

        np.save(workdir / "sequences.npy", sequences_B_T)
        code = (
            f"import sys; sys.path.insert(0, {str(BENCH_DIR)!r}); import bench_training_service as b; "
            f"b.local_host_child({threads}, {ray_address!r}, {str(workdir)!r})"
        )
        self.proc = subprocess.Popen(
            [sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
        )
        self._read()

    def _read(self) -> Any:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            if line.startswith(MARK):
                return json.loads(line[len(MARK):])
        raise RuntimeError(f"the local-host child process exited (code {self.proc.wait()}); see its stderr above")

    def timed(self) -> tuple[float, float, float]:
        assert self.proc.stdin is not None
        self.proc.stdin.write("call\n")
        self.proc.stdin.flush()
        wall, cpu, loss = self._read()
        return float(wall), float(cpu), float(loss)

    def close(self) -> None:
        if self.proc.stdin is not None:
            self.proc.stdin.close()
        try:
            self.proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


def bench_threads(
    args: BenchArgs, threads: int, sequences_B_T: Any, workdir: Path, *, warmup: int, repeats: int
) -> dict[str, Any]:
    """Interleaved repeats of the three cases at ``threads`` torch threads."""
    import ray

    got = set_threads(threads)
    t0 = time.perf_counter()
    runners: dict[str, Any] = {}
    try:
        runners[CASES[0]] = InProcess(sequences_B_T)
        runners[CASES[1]] = LocalHostInChild(
            sequences_B_T, threads, ray.get_runtime_context().gcs_address, workdir
        )
        runners[CASES[2]] = ThroughService(sequences_B_T, backend="ray", threads=threads, workdir=workdir)
        setup_s = time.perf_counter() - t0
        # first calls: the same weights (a LoRA adapter starts as the identity), so the same loss
        first_loss = {name: run.timed()[2] for name, run in runners.items()}
        for _ in range(warmup - 1):
            for run in runners.values():
                run.timed()
        seconds: dict[str, list[float]] = {name: [] for name in runners}
        cpu: dict[str, list[float]] = {name: [] for name in runners}
        busy: list[float] = []
        for _ in range(repeats):
            busy.append(wait_for_idle(args))  # before each round of the three cases
            for name, run in runners.items():
                wall, cpu_s, _ = run.timed()
                seconds[name].append(wall)
                cpu[name].append(cpu_s)
    finally:
        for run in runners.values():
            run.close()
    base = statistics.median(seconds[CASES[0]])
    cases = []
    for name in runners:
        timing = Timing(seconds[name], cpu[name])
        cases.append({
            "case": name,
            "call": timing.summary(),
            "ratio_to_in_process": timing.median / base,
            # the same round's calls: robust to slow spells, which hit one round's three calls alike
            "paired_ratio_median": statistics.median(
                x / y for x, y in zip(seconds[name], seconds[CASES[0]], strict=True)
            ),
            "overhead_ms": (timing.median - base) * 1e3,
            "first_loss": first_loss[name],
        })
    return {"threads": got, "setup_s": setup_s, "cpu_busy_before_rounds": busy, "cases": cases}


def main(args: BenchArgs) -> None:
    import ray

    from tinker_algos.model.models import PolicyModel

    warmup, repeats = (1, 3) if args.quick else (3, 25)
    vocab = PolicyModel.load("tiny", device="cpu", precision="fp32").model.get_input_embeddings().weight.shape[0]
    sequences_B_T = make_sequences(vocab)
    Path(os.environ["RAY_TMPDIR"]).mkdir(parents=True, exist_ok=True)
    ray.init(
        address="local", num_cpus=max(args.threads), include_dashboard=False, log_to_driver=False,
        namespace="opentinker-bench",
    )
    runs: list[dict[str, Any]] = []
    try:
        with tempfile.TemporaryDirectory(prefix="opentinker-bench-") as tmp:
            for threads in args.threads:
                r = bench_threads(args, threads, sequences_B_T, Path(tmp), warmup=warmup, repeats=repeats)
                runs.append(r)
                for c in r["cases"]:
                    print(
                        f"threads={r['threads']} {c['case']:20s} {c['call']['median_s'] * 1e3:7.1f} ms "
                        f"x{c['ratio_to_in_process']:.3f}  (loss {c['first_loss']:.4f}, "
                        f"CPU/wall here {c['call']['cpu_per_wall']:.2f})",
                        flush=True,
                    )
    finally:
        ray.shutdown()

    print_table(
        f"forward_backward, LoRA r={LORA_RANK} on tiny, batch {BATCH} x {SEQ_LEN}, {LOSS} (median)",
        ["threads", "case", "ms per call", "min ms", "max ms", "vs in-process", "paired ratio", "overhead ms"],
        [
            [
                r["threads"], c["case"], c["call"]["median_s"] * 1e3, c["call"]["min_s"] * 1e3,
                c["call"]["max_s"] * 1e3, f"{c['ratio_to_in_process']:.3f}x", f"{c['paired_ratio_median']:.3f}x",
                c["overhead_ms"],
            ]
            for r in runs for c in r["cases"]
        ],
    )
    write_results(
        args,
        "training_service",
        {
            "model": "tiny",
            "batch": BATCH,
            "seq_len": SEQ_LEN,
            "loss": LOSS,
            "lora": {"rank": LORA_RANK, "alpha": LORA_RANK, "target_modules": "all-linear"},
            "warmup": warmup,
            "repeats": repeats,
            "order": "interleaved: " + ", ".join(CASES) + ", repeated",
            "cpu_per_wall_note": (
                "CPU time of this process only: the Ray host's work runs in another process, so the "
                "Ray case's cpu_per_wall is near 0"
            ),
            "target_ratio": 1.2,
            "runs": runs,
        },
    )


if __name__ == "__main__":
    main(parse_args(__doc__.splitlines()[0]))
