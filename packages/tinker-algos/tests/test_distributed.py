"""One job over several processes (``execution``): rollout workers and data-parallel learners as
real Ray actors, weight records, the sync check and its self-test, staleness, and faults.

The jobs are the tiny model on 1-digit sums, three GRPO steps; every comparison is exact unless
it says otherwise (a seed fixes a run's metrics on one machine, whatever the topology's timing).
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from tinker_algos.distributed.faults import ENV as FAULTS_ENV
from tinker_algos.distributed.faults import Faults
from tinker_algos.distributed.learners import row_shares
from tinker_algos.distributed.staleness import StalenessBound, staleness_metrics
from tinker_algos.distributed.weights import (
    WeightDirectory,
    WeightRecord,
    WeightSyncError,
    copy_into,
    pack,
    params_digest,
    unpack,
)
from tinker_algos.run.job import train
from tinker_core.config import parse_config
from tinker_core.errors import ConfigError

NEW_KEYS = ("sync/", "staleness/", "rollout/reissued_groups")


@pytest.fixture(scope="module")
def ray_local() -> Iterator[None]:
    """One local Ray for the module (4 logical CPUs: a job's actors ask for one each)."""
    import ray

    os.environ.setdefault("RAY_ENABLE_UV_RUN_RUNTIME_ENV", "0")
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    os.environ.setdefault("RAY_TMPDIR", str(Path(tempfile.gettempdir()) / "opentinker-algos-tests-ray"))
    Path(os.environ["RAY_TMPDIR"]).mkdir(parents=True, exist_ok=True)
    ray.init(address="local", num_cpus=4, include_dashboard=False, log_to_driver=False, namespace="opentinker-algos-tests")
    yield
    ray.shutdown()


def job(execution: dict[str, Any] | None = None, **rollout: Any) -> dict[str, Any]:
    out: dict[str, Any] = {
        "name": "dist",
        "seed": 0,
        "model": {"name": "tiny"},
        "env": {"id": "math/arithmetic-v0", "kwargs": {"digits": 1, "ops": ["+"]}},
        "algorithm": {"name": "grpo", "steps": 3, "eval_every": 0, "eval_size": 8},
        "rollout": {"prompts_per_step": 4, "group_size": 4, "max_new_tokens": 4, "stop": ["\n"], **rollout},
        "optimizer": {"lr": 0.003},
        "checkpoint": {"every": 1, "keep": 5},
        "logging": {"tensorboard": False, "plot": False},
    }
    if execution is not None:
        out["execution"] = execution
    return out


def shared_metrics(run_dir: Path) -> list[dict[str, float]]:
    """The deterministic metrics a one-process run has too (the distributed keys left out)."""
    from tinker_algos.records.metrics import is_timing, read_metrics

    rows = read_metrics(run_dir / "metrics.jsonl")
    return [{k: v for k, v in r.items() if not is_timing(k) and not k.startswith(NEW_KEYS)} for r in rows]


def all_metrics(run_dir: Path) -> list[dict[str, float]]:
    from tinker_algos.records.metrics import is_timing, read_metrics

    return [{k: v for k, v in r.items() if not is_timing(k)} for r in read_metrics(run_dir / "metrics.jsonl")]


class Logs:
    def __init__(self) -> None:
        self.lines: list[str] = []

    def on_log(self, line: str) -> None:
        self.lines.append(line)


# ---- pieces without models or Ray ---------------------------------------------------------------


def test_admission_follows_the_formula_at_s_0_1_2() -> None:
    """A group starts only while accepted + running < (S + version + 1) * B (AReaL's formula)."""
    B = 4
    for S in (0, 1, 2):
        bound = StalenessBound(S, B)
        for version in range(4):
            admitted = [g for g in range(40) if bound.admits(g, version)]
            assert admitted == list(range((S + version + 1) * B))
            assert bound.last_admitted_step(version) == version + S
        assert [bound.min_version(step) for step in range(4)] == [max(0, s - S) for s in range(4)]
    bound = StalenessBound(1, B)
    assert bound.stale([5, 4, 3, 2], train_version=5) == [2, 3]
    assert staleness_metrics([5, 4, 4, 3], 5) == {
        "staleness/min": 0.0, "staleness/mean": 1.0, "staleness/max": 2.0, "staleness/version_span_max": 0.0,
    }
    with pytest.raises(ValueError, match="max_staleness"):
        StalenessBound(-1, 4)


def test_a_weight_record_proves_its_bytes_and_a_model_its_weights(tmp_path: Path) -> None:
    gen = torch.Generator().manual_seed(0)
    named = {"a.weight": torch.randn(3, 4, generator=gen), "b.bias": torch.randn(5, generator=gen)}
    record = pack(named.items(), version=7, kind="full")
    assert record.manifest.sha256 == hashlib.sha256(record.payload).hexdigest()
    assert record.manifest.names == ("a.weight", "b.bias") and record.manifest.nbytes == len(record.payload)
    assert {k: v.tolist() for k, v in unpack(record).items()} == {k: v.tolist() for k, v in named.items()}
    # a damaged transfer is refused
    damaged = WeightRecord(record.manifest, record.payload[:-1] + bytes([record.payload[-1] ^ 1]))
    with pytest.raises(WeightSyncError, match="damaged"):
        unpack(damaged)
    # what a model holds: equal to the manifest exactly when the weights are the record's
    params = {k: torch.nn.Parameter(torch.zeros_like(v)) for k, v in named.items()}
    assert params_digest(params.items()) != record.manifest.sha256
    copy_into(params, unpack(record))
    assert params_digest(params.items()) == record.manifest.sha256
    with torch.no_grad():
        params["b.bias"][0] += 1e-7
    assert params_digest(params.items()) != record.manifest.sha256
    with pytest.raises(WeightSyncError, match="does not fit"):
        copy_into({"a.weight": params["a.weight"]}, unpack(record))
    # the durable copies: complete once the marker exists; old ones retired
    d = WeightDirectory(tmp_path / "weights")
    for v in (1, 2, 3):
        d.write(pack(named.items(), version=v, kind="full"))
    (tmp_path / "weights" / "v-00000009").mkdir()  # a half-written record: no marker
    assert d.versions() == [1, 2, 3]
    assert d.read(2).manifest.version == 2 and unpack(d.read(2)).keys() == named.keys()
    d.retire(keep_from=3)
    assert d.versions() == [3]
    with pytest.raises(WeightSyncError, match="no complete weight record v9"):
        d.read(9)


def test_row_shares_split_contiguously_and_keep_pairs() -> None:
    assert [s.tolist() for s in row_shares(5, 2)] == [[0, 1, 2], [3, 4]]
    assert [s.tolist() for s in row_shares(6, 2, pairs=True)] == [[0, 1, 2, 3], [4, 5]]
    assert [s.tolist() for s in row_shares(1, 3)] == [[0], [], []]


def test_faults_parse_fire_once_per_run_dir(tmp_path: Path) -> None:
    f = Faults.parse("rollout-1:exit@3, learner-1:exit@2,rollout-1:keep-weights@1", "rollout-1", tmp_path)
    assert f.at == {"exit": 3, "keep-weights": 1}
    assert not f.due("exit", 2) and f.due("exit", 3) and not f.due("exit", 4)
    assert f.active("keep-weights", 1) and not f.active("keep-weights", 0)
    with pytest.raises(ValueError, match=FAULTS_ENV):
        Faults.parse("rollout-1:explode@3", "rollout-1", None)


def test_topology_is_checked_against_the_stages() -> None:
    with pytest.raises(Exception, match=r"execution.learners: 20 learners but algorithm trains on 16 rows"):
        parse_config(job({"learners": 20}))
    with pytest.raises(Exception, match=r"execution.rollout_workers: 5 workers but algorithm samples 4 groups"):
        parse_config(job({"rollout_workers": 5}))
    ppo = job({"rollout_workers": 1})
    ppo["algorithm"]["name"] = "ppo"
    with pytest.raises(Exception, match=r"algorithm is ppo, which samples in the job's process"):
        parse_config(ppo)
    with pytest.raises(Exception, match="staleness_strategy"):
        parse_config(job({"staleness_strategy": "later"}))
    assert not parse_config(job()).execution.distributed


# ---- real actors -----------------------------------------------------------------------------------


@pytest.mark.usefixtures("algos_and_math_plugins", "ray_local")
def test_two_learners_equal_one_on_the_same_batch(policy: Any, batch_factory: Any) -> None:
    """verl's gloo equivalence test in our shape: the weights after one update agree to 1e-6.
    (SGD: Adam divides by the gradient's scale, so float noise in a near-zero gradient becomes a
    full step; the gradients are what the learners share.)"""
    import copy

    from tinker_algos.distributed.cluster import Placement
    from tinker_algos.distributed.learners import DataParallelTrainer, start_group
    from tinker_algos.training.trainer import Trainer, TrainerConfig

    batch = batch_factory(policy.tokenizer, ["1+2=", "3+4=", "5+6=", "7+1=", "2+2="], ["3", "7", "11", "8", "4"])
    config = parse_config({**job({"learners": 2}), "model": {"name": str(policy.model_id)}})
    twin = copy.deepcopy(policy)
    single = Trainer(policy, TrainerConfig(optimizer="sgd", lr=0.5, micro_batch_size=2))
    single.forward_backward(batch, "cross_entropy")
    expected = single.optim_step()
    placement = Placement.for_job(config)
    group = start_group(config, twin.device, placement, 1, "", "")
    try:
        dp = DataParallelTrainer(twin, TrainerConfig(optimizer="sgd", lr=0.5, micro_batch_size=2)).attach(group)
        metrics, logprobs = dp.forward_backward(batch, "cross_entropy", return_logprobs=True)
        out = dp.optim_step()
        assert metrics["num_tokens"] == float(batch.loss_mask_B_T.sum()) and logprobs.shape == batch.tokens_B_T.shape
        assert out["grad_norm"] == pytest.approx(expected["grad_norm"], rel=1e-6) and out["grad_norm"] > 0
        for (n, a), b in zip(policy.model.named_parameters(), twin.model.named_parameters(), strict=True):
            assert torch.allclose(a, b[1], atol=1e-6, rtol=0), n
        remote = group.call([group.actors[0].digest.remote()])[0]
        assert remote == params_digest(twin.model.named_parameters())  # learner 1 holds what learner 0 holds
    finally:
        group.close()
        placement.close()


@pytest.mark.usefixtures("algos_and_math_plugins", "ray_local")
def test_one_rollout_worker_on_policy_gives_the_one_process_metrics_bit_for_bit(tmp_path: Path) -> None:
    logs = Logs()
    train(job(), run_dir=tmp_path / "alone")
    result = train(job({"rollout_workers": 1, "learners": 1}), run_dir=tmp_path / "workers", callbacks=logs)
    assert result.status == "completed"
    assert shared_metrics(tmp_path / "workers") == shared_metrics(tmp_path / "alone")
    rows = all_metrics(tmp_path / "workers")
    assert [r["staleness/max"] for r in rows] == [0.0, 0.0, 0.0]
    assert all(r["sync/workers"] == 1.0 and r["sync/probe_gap_max"] < 1e-5 for r in rows)
    # the self-test ran: a scrambled worker was caught before the first step
    assert any("weight sync self-test: a scrambled rollout-0 is caught" in line for line in logs.lines)
    assert (tmp_path / "workers" / "weights" / "stage-0").is_dir()


@pytest.mark.usefixtures("algos_and_math_plugins", "ray_local")
def test_sampling_one_step_ahead_on_a_worker_equals_sampling_ahead_in_process_and_resumes_exactly(tmp_path: Path, stop_after: Any) -> None:
    train(job(max_staleness=1), run_dir=tmp_path / "alone")
    train(job({"rollout_workers": 1}, max_staleness=1), run_dir=tmp_path / "workers")
    assert shared_metrics(tmp_path / "workers") == shared_metrics(tmp_path / "alone")
    full = all_metrics(tmp_path / "workers")
    assert [r["staleness/max"] for r in full] == [0.0, 1.0, 1.0]
    # stopped after step 1 (step 2's batch already sampled ahead), resumed: the same run
    assert train(job({"rollout_workers": 1}, max_staleness=1), run_dir=tmp_path / "part", callbacks=stop_after(1)).status == "interrupted"
    train(job({"rollout_workers": 1}, max_staleness=1), run_dir=tmp_path / "part")
    # a resumed run's new worker loads its weights again, so it logs a probe gap the first run had
    # no reason to (a worker probes when it loads): every other key is the same
    reprobed = [{k: v for k, v in r.items() if k != "sync/probe_gap_max"} for r in all_metrics(tmp_path / "part")]
    assert reprobed == [{k: v for k, v in r.items() if k != "sync/probe_gap_max"} for r in full]


@pytest.mark.usefixtures("algos_and_math_plugins", "ray_local")
def test_a_worker_that_keeps_old_weights_fails_the_job_naming_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(FAULTS_ENV, "rollout-1:keep-weights@1")
    with pytest.raises(WeightSyncError, match=r"rollout worker rollout-1 reports weights v[12], but its parameters hash to .* the update did not reach its model"):
        train(job({"rollout_workers": 2}), run_dir=tmp_path / "run")


@pytest.mark.usefixtures("algos_and_math_plugins", "ray_local")
def test_killed_workers_and_learners_lose_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Two workers and two learners; the same job with a rollout worker killed mid-step (its
    groups sampled again once Ray restarted it) and with a learner killed (the job restarts
    from its newest checkpoint) gives the same metrics, every step once."""
    topology = {"rollout_workers": 2, "learners": 2}
    train(job(topology), run_dir=tmp_path / "quiet")
    quiet = all_metrics(tmp_path / "quiet")
    monkeypatch.setenv(FAULTS_ENV, "rollout-1:exit@1")
    logs = Logs()
    assert train(job(topology), run_dir=tmp_path / "worker", callbacks=logs).status == "completed"
    worker = all_metrics(tmp_path / "worker")
    assert worker[1]["rollout/reissued_groups"] == 2.0 and any("rollout worker rollout-1 died during step 1" in x for x in logs.lines)
    assert [{k: v for k, v in r.items() if k != "rollout/reissued_groups"} for r in worker] == [
        {k: v for k, v in r.items() if k != "rollout/reissued_groups"} for r in quiet
    ]
    monkeypatch.setenv(FAULTS_ENV, "learner-1:exit@2")
    logs = Logs()
    assert train(job(topology), run_dir=tmp_path / "learner", callbacks=logs).status == "completed"
    assert any("restarting the learners from the newest checkpoint" in x for x in logs.lines)
    lines = (tmp_path / "learner" / "metrics.jsonl").read_text().splitlines()
    assert [json.loads(x)["step"] for x in lines] == [1, 2, 3]
    assert all_metrics(tmp_path / "learner") == quiet


@pytest.mark.usefixtures("algos_and_math_plugins", "ray_local")
def test_drop_samples_a_late_workers_groups_again(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A worker whose weights arrive late (fault: lag) samples step 2 with v1; at S = 0 its
    groups are too stale, dropped and sampled again with v2 -- the step trains on fresh ones."""
    monkeypatch.setenv(FAULTS_ENV, "rollout-0:lag@2")
    logs = Logs()
    train(job({"rollout_workers": 2, "staleness_strategy": "drop"}), run_dir=tmp_path / "drop", callbacks=logs)
    rows = all_metrics(tmp_path / "drop")
    assert [r["staleness/dropped_groups"] for r in rows] == [0.0, 0.0, 2.0]
    assert [r["staleness/max"] for r in rows] == [0.0, 0.0, 0.0]
    assert any("fault: lag" in x for x in logs.lines)


def test_a_job_without_ray_installed_is_told_what_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    import builtins

    from tinker_algos.distributed.cluster import ensure_ray

    real_import = builtins.__import__

    def no_ray(name: str, *args: Any, **kwargs: Any) -> Any:
        if name == "ray":
            raise ImportError("no ray")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_ray)
    with pytest.raises(ConfigError, match=r"pip install 'tinker-algos\[distributed\]'"):
        ensure_ray(parse_config(job({"rollout_workers": 1})))


def test_np_shares_cover_every_row_once() -> None:
    for rows in range(1, 12):
        for learners in range(1, 5):
            for pairs in (False, True):
                n = rows - rows % 2 if pairs else rows
                got = np.concatenate(row_shares(n, learners, pairs=pairs))
                assert got.tolist() == list(range(n))
