"""The ``hf`` rollout engine: the sampler behind tinker_core.engines' contract, bit for bit."""

from __future__ import annotations

import contextlib
import threading
import types
from collections.abc import Iterator
from typing import Any

import pytest

import tinker_core.registry
from tinker_algos import train
from tinker_algos.sampling.engine import HFEngine
from tinker_algos.sampling.sampler import SamplingParams, sample
from tinker_core import hookimpl
from tinker_core.engines import (
    EngineError,
    EngineHealth,
    GenerationParams,
    RolloutEngine,
    WeightUpdate,
)
from tinker_core.errors import ConfigError
from tinker_core.testing import StepHold, check_rollout_engine

PROMPTS = ["12+34=", "hello world\n", "a"]


def ids(policy: Any) -> list[list[int]]:
    return [policy.tokenizer.encode(p, add_special_tokens=False) for p in PROMPTS]


@contextlib.contextmanager
def hold_of(engine: HFEngine) -> Iterator[StepHold]:
    """The engine's next call, held after its first decode step (the conformance kit's ``hold``)."""
    h = StepHold()
    engine.step_hook = h.at_step
    try:
        yield h
    finally:
        engine.step_hook = None
        h.release()


def test_the_hf_engine_passes_the_conformance_kit(policy) -> None:
    engine = HFEngine(policy)
    assert isinstance(engine, RolloutEngine)
    assert check_rollout_engine(engine, ids(policy), hold=lambda: hold_of(engine)) == []


def test_generate_is_sample_bit_for_bit(policy) -> None:
    engine = HFEngine(policy)
    for params in (SamplingParams(max_new_tokens=8, n=3, seed=5, top_k=7), SamplingParams(max_new_tokens=6, temperature=0.0)):
        got, want = engine.generate(ids(policy), params), sample(policy, ids(policy), params)
        assert [[(s.tokens, s.logprobs, s.raw_logprobs, s.stop_reason, s.text) for s in g] for g in got] == [
            [(s.tokens, s.logprobs, s.raw_logprobs, s.stop_reason, s.text) for s in g] for g in want
        ]
    # the plain-typed params of tinker_core give the same samples as the sampler's own
    plain = engine.generate(ids(policy), GenerationParams(max_new_tokens=8, n=3, seed=5, top_k=7))
    assert [[s.tokens for s in g] for g in plain] == [[s.tokens for s in g] for g in sample(policy, ids(policy), SamplingParams(max_new_tokens=8, n=3, seed=5, top_k=7))]


def test_abort_keeps_the_tokens_sampled_before_it(policy) -> None:
    """An aborted call's tokens are the unpaused call's first tokens, with their logprobs."""
    engine = HFEngine(policy)
    params = SamplingParams(max_new_tokens=12, seed=3, stop_at_eos=False)
    full = engine.generate(ids(policy)[:1], params)[0][0]
    with hold_of(engine) as h:
        out: list[Any] = []
        t = threading.Thread(target=lambda: out.append(engine.generate(ids(policy)[:1], params)))
        t.start()
        assert h.wait_held()
        pauser = threading.Thread(target=engine.pause, args=("abort",))
        pauser.start()
        while engine.health().paused != "abort":
            threading.Event().wait(0.01)
        h.release()
        pauser.join()
        t.join()
    engine.resume()
    cut = out[0][0][0]
    assert cut.stop_reason == "abort" and 1 <= len(cut.tokens) < 12
    assert cut.tokens == full.tokens[: len(cut.tokens)] and cut.raw_logprobs == full.raw_logprobs[: len(cut.tokens)]


def test_weight_phases_refuse_calls_out_of_order(policy) -> None:
    engine = HFEngine(policy)
    with pytest.raises(EngineError, match="outside its update"):
        engine.update_weights(WeightUpdate(1))
    engine.start_weight_update(1)
    with pytest.raises(EngineError, match="still open"):
        engine.start_weight_update(2)
    with pytest.raises(EngineError, match="open update is v1"):
        engine.finish_weight_update(2)
    engine.finish_weight_update(1)
    assert engine.health().weight_version == 1


def test_follow_records_the_learners_version_and_never_moves_back(policy) -> None:
    engine = HFEngine(policy)  # shares the policy's model: following a version moves no weight
    engine.follow(3)
    assert engine.health().weight_version == 3
    engine.follow(2)  # an older version: nothing to record
    assert engine.health().weight_version == 3
    engine.follow(4)
    assert engine.health().weight_version == 4


# ---- the engine a job samples with -----------------------------------------------------------


class DirectSampler:
    """The pre-engine call site as an engine: ``sampler.sample`` on the job's policy, nothing else."""

    name = "direct"
    shares_policy = True

    def __init__(self, context: Any) -> None:
        self.policy, self.version = context.policy, None

    def generate(self, prompts: Any, params: Any, *, adapter: str | None = None, **hints: Any) -> Any:
        return sample(self.policy, prompts, params, adapter=adapter, **hints)

    def init_weight_transfer(self) -> None: ...
    def start_weight_update(self, version: int) -> None: ...
    def update_weights(self, update: WeightUpdate) -> None: ...
    def finish_weight_update(self, version: int) -> None: ...
    def pause(self, mode: str = "wait") -> None: ...
    def resume(self) -> None: ...
    def close(self) -> None: ...

    def health(self) -> EngineHealth:
        return EngineHealth(ok=True)


def direct_plugin() -> Any:
    return types.SimpleNamespace(opentinker_register_rollout_engines=hookimpl(lambda register: register("direct", DirectSampler)))


def job(engine: str, **rollout: Any) -> dict[str, Any]:
    return {
        "name": "engine-job", "seed": 3, "model": {"name": "tiny"},
        "env": {"id": "echo/echo-v0", "kwargs": {"words": ["ab", "cd"]}},
        "algorithm": {"name": "grpo", "steps": 2, "eval_size": 2},
        "rollout": {"prompts_per_step": 2, "group_size": 3, "max_new_tokens": 4, "engine": engine, **rollout},
        "logging": {"tensorboard": False, "plot": False},
    }


@pytest.fixture
def algos_echo_and_direct() -> Iterator[None]:
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("OPENTINKER_LOAD_PLUGINS", "tinker-algos,tinker-env-echo")
        tinker_core.registry.reset_plugins()
        tinker_core.registry.register_plugin(direct_plugin(), distribution="direct-dist")
        yield
    tinker_core.registry.reset_plugins()


def test_a_job_through_the_hf_engine_has_the_metrics_of_the_sampler_called_directly(
    tmp_path: Any, deterministic_metrics: Any, algos_echo_and_direct: None,
) -> None:
    hf = train(job("hf"), run_dir=tmp_path / "hf")
    direct = train(job("direct"), run_dir=tmp_path / "direct")
    assert hf.status == direct.status == "completed"
    assert deterministic_metrics(tmp_path / "hf") == deterministic_metrics(tmp_path / "direct")


def test_an_unknown_engine_is_a_config_error_naming_the_known_ones(tmp_path: Any, algos_echo_and_direct: None) -> None:
    with pytest.raises(ConfigError) as info:
        train(job("hff"), run_dir=tmp_path)
    assert "rollout.engine: unknown rollout engine 'hff'; did you mean 'hf'?" in info.value.problems
    with pytest.raises(ConfigError) as info:
        train(job("sglang"), run_dir=tmp_path)
    assert any(p.startswith("rollout.engine: unknown rollout engine 'sglang'; registered: direct, hf") for p in info.value.problems)


def test_an_engine_other_than_hf_refuses_what_it_cannot_sample(tmp_path: Any, algos_echo_and_direct: None) -> None:
    with pytest.raises(EngineError, match="set rollout.max_staleness: 0"):
        train(job("direct", max_staleness=1), run_dir=tmp_path)
