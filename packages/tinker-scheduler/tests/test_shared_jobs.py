"""Whole LoRA jobs on one shared model host: interleaved, each exactly as if it ran alone.

``ModelHost.run_job`` runs ``tinker_algos.train(..., shared=...)`` in a thread of the host; the
jobs take turns (a training step each) in the host's round-robin. These tests run the host in
this process; ``test_shared_jobs_e2e`` (below) routes jobs through the scheduler onto a Ray host.
"""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path

import pytest

import tinker_core
import tinker_core.registry
from tinker_algos import train
from tinker_algos.records.metrics import is_timing
from tinker_core.run_files import read_rollouts
from tinker_core.traces import read_trace
from tinker_scheduler.model_host import ModelHost, job_adapter_name

pytestmark = pytest.mark.slow


@pytest.fixture(autouse=True)
def _plugins(monkeypatch):
    monkeypatch.setenv("OPENTINKER_LOAD_PLUGINS", "tinker-algos,tinker-env-echo")
    tinker_core.registry.reset_plugins()
    yield
    tinker_core.registry.reset_plugins()


def lora_job(seed: int, *, two_stages: bool = True, **over) -> dict:
    stages = [{"name": "warm", "algorithm": {"name": "sft", "steps": 2, "batch_size": 8, "eval_size": 4}}]
    if two_stages:
        stages.append({"name": "rl", "algorithm": {"name": "grpo", "steps": 2, "eval_size": 4, "eval_every": 1}})
    cfg = {
        "name": f"shared-{seed}",
        "seed": seed,
        "model": {"name": "tiny", "device": "cpu"},
        "lora": {"rank": 4, "alpha": 8, "dropout": 0.1},  # dropout draws from the global torch RNG
        "env": {"id": "echo/echo-v0", "kwargs": {"words": ["ab", "cd", "ef"]}},
        "stages": stages,
        "rollout": {"prompts_per_step": 3, "group_size": 4, "max_new_tokens": 4, "stop": ["\n"]},
        "optimizer": {"lr": 0.003},
        "checkpoint": {"every": 2, "keep": 5},
        "logging": {"tensorboard": False, "plot": False},
    }
    cfg.update(over)
    return cfg


def metrics_of(run_dir: Path) -> list[dict]:
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    return [{k: v for k, v in r.items() if not is_timing(k)} for r in rows]


class StopAfter:
    def __init__(self, n: int) -> None:
        self.n, self.seen = n, 0

    def on_metrics(self, step, metrics):
        self.seen = step

    def should_stop(self):
        return self.seen >= self.n


class Drainer:
    """Plays the scheduler's part: drains each job's reports and acknowledges them (a job waits
    at each checkpoint until its reports up to there are acknowledged)."""

    def __init__(self, host: ModelHost) -> None:
        self.host = host
        self.events: dict[str, list[dict]] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(0.02):
            for job_id in self.host.job_ids():
                seen = self.events.setdefault(job_id, [])
                stored = seen[-1]["seq"] if seen else 0
                seen.extend(self.host.drain_job(job_id, stored))

    def wait_for_metrics(self, job_id: str) -> None:
        while not any(e["kind"] == "metrics" for e in self.events.get(job_id, [])):
            time.sleep(0.02)

    def close(self) -> None:
        self._stop.set()
        self._thread.join()


def run_together(host: ModelHost, jobs: dict[str, tuple[dict, Path]], events: dict | None = None) -> dict[str, dict]:
    """Run the jobs at once on the host; ``events`` (if given) receives what was drained."""
    results: dict[str, dict] = {}

    def run(job_id: str, config: dict, run_dir: Path) -> None:
        results[job_id] = host.run_job(job_id, "tinker_algos.train", config, str(run_dir))

    drainer = Drainer(host)
    threads = [threading.Thread(target=run, args=(jid, cfg, rd)) for jid, (cfg, rd) in jobs.items()]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=600)
    drainer.close()
    if events is not None:
        events.update(drainer.events)
    return results


def test_jobs_sharing_a_host_get_exactly_their_solo_metrics(tmp_path):
    configs = {"a": lora_job(1), "b": lora_job(2), "c": lora_job(3, two_stages=False)}
    solo = {}
    for jid, cfg in configs.items():
        train(cfg, run_dir=tmp_path / "solo" / jid)
        solo[jid] = metrics_of(tmp_path / "solo" / jid)

    host = ModelHost("tiny", device="cpu")
    try:
        drained: dict[str, list[dict]] = {}
        results = run_together(host, {jid: (cfg, tmp_path / "shared" / jid) for jid, cfg in configs.items()}, drained)
        assert {jid: r["status"] for jid, r in results.items()} == dict.fromkeys(configs, "completed")
        for jid in configs:
            assert metrics_of(tmp_path / "shared" / jid) == solo[jid], jid
            # each job records its own episodes and phases into its own run dir, as alone
            assert read_rollouts(tmp_path / "shared" / jid) == read_rollouts(tmp_path / "solo" / jid), jid
            steps = [e["args"]["step"] for e in read_trace(tmp_path / "shared" / jid) if e["name"] == "step"]
            assert steps == [row["step"] for row in solo[jid]], jid
        # they really were interleaved: turns of different jobs alternate while all run
        turns = [sid for sid in host.served if sid.startswith("job:")]
        switches = sum(1 for x, y in zip(turns, turns[1:], strict=False) if x != y)
        assert switches >= 2 * len(configs), turns
        # finished jobs leave nothing on the host: adapters unloaded, queues gone
        assert host.job_ids() == []
        assert host.policy.adapter_names == []
        # a finished job's last reports are kept for one final drain, then it is forgotten
        last = drained.get("a", []) + host.drain_job("a")
        assert any(e.get("text", "").startswith("completed after 4 steps") for e in last), last[-3:]
        assert host.drain_job("a") == []
    finally:
        host.close()


def test_a_job_resumed_on_a_shared_host_continues_exactly(tmp_path):
    """Checkpoints do not depend on the adapter's name: stop a solo run, resume it on a host."""
    cfg = lora_job(5)
    train(cfg, run_dir=tmp_path / "full")
    part = train(cfg, run_dir=tmp_path / "resumed", callbacks=StopAfter(2))
    assert part.status == "interrupted"
    host = ModelHost("tiny", device="cpu")
    try:
        results = run_together(host, {"r": (cfg, tmp_path / "resumed"), "other": (lora_job(6), tmp_path / "other")})
        assert results["r"]["status"] == "completed", results
        assert metrics_of(tmp_path / "resumed") == metrics_of(tmp_path / "full")
    finally:
        host.close()


def test_stop_and_abort_a_job_on_a_host(tmp_path):
    host = ModelHost("tiny", device="cpu")
    drainer = Drainer(host)
    try:
        long = lora_job(7, two_stages=False)
        long["stages"][0]["algorithm"]["steps"] = 500
        done: dict[str, dict] = {}
        t = threading.Thread(target=lambda: done.update(r=host.run_job("long", "tinker_algos.train", long, str(tmp_path / "long"))))
        t.start()
        drainer.wait_for_metrics("long")
        host.stop_job("long")
        t.join(timeout=120)
        assert done["r"]["status"] == "interrupted" and done["r"]["checkpoint"]
        assert job_adapter_name("long") not in host.policy.adapter_names
        first, second = (e["text"] for e in drainer.events["long"][:2])
        assert first.startswith("on a shared model host for tiny (adapter j-long; 0 other job(s)")
        assert second.startswith("job started")

        t = threading.Thread(target=lambda: done.update(r=host.run_job("long2", "tinker_algos.train", long, str(tmp_path / "long2"))))
        t.start()
        drainer.wait_for_metrics("long2")
        host.abort_job("long2")  # a cancel that timed out: ends at the next turn, no checkpoint
        t.join(timeout=120)
        assert done["r"]["status"] == "failed" and "JobAborted" in done["r"]["error"]
        assert host.job_ids() == [] and host.policy.adapter_names == []
    finally:
        drainer.close()
        host.close()


def test_the_scheduler_routes_lora_jobs_with_one_base_model_onto_one_host(make_scheduler, tmp_path):
    from tinker_core.proto import jobs_pb2
    from tinker_scheduler.config import DEFAULT_RUNNER
    from tinker_scheduler.testing import JobStub

    configs = {"x": lora_job(11, two_stages=False), "y": lora_job(12, two_stages=False)}
    full = lora_job(13, two_stages=False, lora=None)  # full fine-tuning: a worker of its own
    scheduler = make_scheduler(runner=DEFAULT_RUNNER, host_idle_timeout_s=0.5)
    logs: dict[str, list[str]] = {}
    with JobStub(scheduler.address) as client:
        ids = {name: client.submit(json.dumps({**cfg, "resources": {"cpus": 1}})).id for name, cfg in configs.items()}
        ids["full"] = client.submit(json.dumps({**full, "resources": {"cpus": 1}})).id
        for name, job_id in ids.items():
            events = list(client.watch(job_id, timeout=600))
            logs[name] = [e.log.text for e in events if e.WhichOneof("event") == "log"]
            final = client.get(job_id)
            assert final.state == jobs_pb2.JOB_STATE_SUCCEEDED, (name, final.reason, logs[name][-20:])
    pids = {name: next(t.split("pid ")[1].split(",")[0] for t in lines if t.startswith("job started")) for name, lines in logs.items()}
    assert pids["x"] == pids["y"] != pids["full"]  # one host process for both LoRA jobs
    assert all(any("on a shared model host" in t for t in logs[n]) for n in ("x", "y"))
    for name in ("x", "y"):  # nothing the job reported at its very end is lost
        assert any(t.startswith("completed after 2 steps") for t in logs[name]), logs[name][-5:]
    assert not any("on a shared model host" in t for t in logs["full"])
    for name, cfg in configs.items():  # each equals its run alone
        train(cfg, run_dir=tmp_path / "solo" / name)
        assert metrics_of(scheduler.runs_dir / "local" / ids[name]) == metrics_of(tmp_path / "solo" / name), name
    deadline = time.monotonic() + 30
    while scheduler.hosts.host_count() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert scheduler.hosts.host_count() == 0  # the idle host shut down, its CPU is free again


def test_multi_agent_jobs_on_a_host_unload_every_adapter_they_added(tmp_path, monkeypatch):
    """A learners job adds an adapter per role and a league job one per snapshot, all named after
    the job's adapter: when they end, the host unloads them with it."""
    pytest.importorskip("tinker_env_games", reason="these jobs play tinker-env-games' tic-tac-toe")
    monkeypatch.setenv("OPENTINKER_LOAD_PLUGINS", "tinker-algos,tinker-env-echo,tinker-env-games")
    tinker_core.registry.reset_plugins()

    def game_job(multi_agent: dict) -> dict:
        cfg = lora_job(0, two_stages=False, env={"id": "games/tictactoe-v0", "kwargs": {"max_illegal_moves": 2}})
        cfg["stages"] = [{"algorithm": {"name": "grpo", "steps": 2, "eval_size": 2, "params": {"multi_agent": multi_agent}}}]
        cfg["rollout"] = {"prompts_per_step": 2, "group_size": 2, "max_new_tokens": 3, "stop": ["\n"], "max_error_rate": 0.5}
        return cfg

    jobs = {
        "learners": game_job({"mode": "learners", "eval_opponent": "random"}),
        "league": game_job({"mode": "league", "eval_opponent": "random", "league": {"pool_size": 2, "snapshot_every": 1}}),
    }
    host = ModelHost("tiny", device="cpu")
    try:
        results = run_together(host, {jid: (cfg, tmp_path / jid) for jid, cfg in jobs.items()})
        assert {jid: r["status"] for jid, r in results.items()} == dict.fromkeys(jobs, "completed"), results
        assert any(k.startswith("roles/x/") for k in metrics_of(tmp_path / "learners")[-1])
        assert metrics_of(tmp_path / "league")[-1]["league/snapshots"] == 2.0
        assert host.job_ids() == [] and host.policy.adapter_names == []
    finally:
        host.close()
