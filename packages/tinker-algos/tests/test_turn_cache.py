"""Multi-turn rollouts reuse each conversation's KV cache across turns (:mod:`tinker_algos.sampling.turn_cache`).

The oracle is the path without reuse (every turn prefills the whole conversation) and, for
logprobs, the trainer's forward pass. Each test also checks that the cache was really used (the
tokens fed to the model shrink), so a reuse that silently fell back to full prefills would fail.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from transformers import DynamicCache

import tinker_algos.sampling.engine as engine_module
from tinker_algos.model.models import PolicyModel
from tinker_algos.rollout.episodes import RolloutResult, rollout
from tinker_algos.sampling.sampler import SamplingParams, _DecodeLoop, sample
from tinker_algos.sampling.turn_cache import CachedPrefix, TurnCache
from tinker_algos.training.trainer import Trainer, TrainerConfig


# ---------------------------------------------------------------------------------------------
# helpers
# ---------------------------------------------------------------------------------------------
class Fed:
    """The ``input_ids`` shapes the model is called with (one entry per forward call)."""

    def __init__(self, policy: PolicyModel) -> None:
        self.shapes: list[tuple[int, int]] = []
        self.handle = policy.base_model.get_input_embeddings().register_forward_hook(self._record)

    def _record(self, _module: Any, inputs: Any, _output: Any) -> None:
        self.shapes.append(tuple(inputs[0].shape))

    @property
    def tokens(self) -> int:
        return sum(b * t for b, t in self.shapes)

    def close(self) -> None:
        self.handle.remove()


def fed_while(policy: PolicyModel, fn: Any) -> tuple[Any, Fed]:
    fed = Fed(policy)
    try:
        return fn(), fed
    finally:
        fed.close()


def calculator() -> Any:
    pytest.importorskip("tinker_env_math", reason="math/calculator-v0 comes from tinker-env-math")
    from tinker_core.registry import make_env

    return lambda: make_env("math/calculator-v0", digits=1, num_terms=2, max_turns=3)


def assert_same_episodes(a: RolloutResult, b: RolloutResult, *, logprob_atol: float) -> None:
    assert len(a.episodes) == len(b.episodes)
    for ea, eb in zip(a.episodes, b.episodes, strict=True):
        assert (ea.error, ea.turns, ea.reward, ea.success, ea.transcript) == (eb.error, eb.turns, eb.reward, eb.success, eb.transcript)
        assert ea.trajectory is not None and eb.trajectory is not None
        np.testing.assert_array_equal(ea.trajectory.tokens_T, eb.trajectory.tokens_T)
        np.testing.assert_array_equal(ea.trajectory.loss_mask_T, eb.trajectory.loss_mask_T)
        assert ea.trajectory.turn_rewards == eb.trajectory.turn_rewards
        np.testing.assert_allclose(ea.trajectory.sampler_logprobs_T, eb.trajectory.sampler_logprobs_T, rtol=0, atol=logprob_atol)


@pytest.fixture
def cache_sizes(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[int]]:
    """Per ``sample`` call of a rollout: how many episodes had a cache when it was called."""
    sizes: list[int] = []
    real = engine_module.sample

    def spy(*args: Any, **kw: Any) -> Any:
        cache = kw.get("turn_cache")
        sizes.append(-1 if cache is None else len(cache))
        return real(*args, **kw)

    monkeypatch.setattr(engine_module, "sample", spy)
    yield sizes


# ---------------------------------------------------------------------------------------------
# (a) greedy rollouts: identical with and without reuse
# ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("which", ["tiny", "chat"])
def test_greedy_multi_turn_rollouts_are_identical_with_and_without_reuse(
    which: str, policy: PolicyModel, chat_model_dir: Path, algos_and_math_plugins: None, cache_sizes: list[int]
) -> None:
    pol = policy if which == "tiny" else PolicyModel.load(chat_model_dir, device="cpu", precision="fp32")
    factory = calculator()
    params = SamplingParams(max_new_tokens=8, temperature=0.0, stop=("\n",) if which == "tiny" else (), seed=0)
    seeds = [0, 1, 2, 3]
    reused, fed_reused = fed_while(pol, lambda: rollout(pol, factory, seeds, params, group_size=2))
    assert cache_sizes == [0, 8, 8]  # turn 1 starts with no cache; later turns with every episode's
    fresh, fed_fresh = fed_while(pol, lambda: rollout(pol, factory, seeds, params, group_size=2, reuse_kv_cache=False))
    assert cache_sizes[3:] == [-1, -1, -1]
    assert max(ep.turns for ep in reused.episodes) == 3, "needs episodes of several turns"
    assert not reused.errors
    assert_same_episodes(reused, fresh, logprob_atol=0.0)  # greedy: the sampled logprob is 0
    # turn 1 is the same call; later turns prefill only the env's reply and the last sampled token
    assert fed_reused.shapes[0] == fed_fresh.shapes[0]
    assert fed_reused.tokens < fed_fresh.tokens


def test_evaluate_takes_the_switch(policy: PolicyModel, algos_and_math_plugins: None, cache_sizes: list[int]) -> None:
    from tinker_algos.rollout.episodes import evaluate

    on = evaluate(policy, calculator(), 3, seed=0, max_new_tokens=6, max_turns=3)
    assert cache_sizes == [0, 3, 3]
    off = evaluate(policy, calculator(), 3, seed=0, max_new_tokens=6, max_turns=3, reuse_kv_cache=False)
    assert cache_sizes[3:] == [-1, -1, -1] and on == off


# ---------------------------------------------------------------------------------------------
# (b) sampling at temperature 1: the same samples, logprobs within 1e-4, and the trainer agrees
# ---------------------------------------------------------------------------------------------
def test_sampled_rollouts_agree_with_no_reuse_and_with_the_trainer(policy: PolicyModel, algos_and_math_plugins: None) -> None:
    factory = calculator()
    params = SamplingParams(max_new_tokens=8, temperature=1.0, stop=("\n",), seed=5)
    seeds = [3, 4, 5]
    reused, fed_reused = fed_while(policy, lambda: rollout(policy, factory, seeds, params, group_size=3))
    fresh, fed_fresh = fed_while(policy, lambda: rollout(policy, factory, seeds, params, group_size=3, reuse_kv_cache=False))
    assert max(ep.turns for ep in reused.episodes) >= 2
    assert_same_episodes(reused, fresh, logprob_atol=1e-4)
    assert fed_reused.tokens < fed_fresh.tokens
    batch = reused.batch(pad_token_id=policy.pad_token_id)
    trainer_lp_B_T = Trainer(policy, TrainerConfig()).forward(batch)
    on = batch.loss_mask_B_T > 0
    assert on.sum() > 20
    np.testing.assert_allclose(batch.sampler_logprobs_B_T[on], trainer_lp_B_T[on], rtol=0, atol=1e-4)
    assert np.all(batch.sampler_logprobs_B_T[on] < 0)  # real logprobs, not zeros


# ---------------------------------------------------------------------------------------------
# (c) the cached-prefix decode equals a fresh decode of the full prompt
# ---------------------------------------------------------------------------------------------
def turn_two(policy: PolicyModel, texts: list[str], extra: list[str]) -> tuple[TurnCache, list[list[int]]]:
    """Turn 1 of ``texts`` with a cache (keys 0..n-1); the turn-2 prompts: each full turn 1 plus ``extra``."""
    tok = policy.tokenizer
    cache = TurnCache()
    first = sample(policy, [tok.encode(t) for t in texts], SamplingParams(max_new_tokens=5, seed=1), turn_cache=cache, cache_keys=list(range(len(texts))))
    return cache, [o[0].full_tokens + tok.encode(x, add_special_tokens=False) for o, x in zip(first, extra, strict=True)]


def test_stored_keys_and_values_are_a_fresh_forward_passs(policy: PolicyModel) -> None:
    cache, _ = turn_two(policy, ["What is 2+3?\n", "Count down from 9.\n9\n8\n"], ["", ""])
    for key in (0, 1):
        entry = cache.get(key)
        assert entry is not None and entry.kv_2_L_T_H_D.shape[:3] == (2, policy.base_model.config.num_hidden_layers, len(entry))
        dc = DynamicCache()
        with torch.no_grad():
            policy.base_model(input_ids=torch.tensor([entry.tokens]), use_cache=True, cache=dc)
        for i, layer in enumerate(dc.layers):
            torch.testing.assert_close(entry.kv_2_L_T_H_D[0, i], layer.keys[0].transpose(0, 1), rtol=0, atol=1e-5)
            torch.testing.assert_close(entry.kv_2_L_T_H_D[1, i], layer.values[0].transpose(0, 1), rtol=0, atol=1e-5)


@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_cached_prefix_decode_equals_a_fresh_decode(policy: PolicyModel, temperature: float) -> None:
    tok = policy.tokenizer
    # rows with caches of different lengths, and a third row that has none
    cache, prompts = turn_two(policy, ["What is 2+3?\n", "Count down from 9.\n9\n8\n7\n6\n"], ["\nok, and 4+4?\n", "5\n"])
    lengths = [len(cache.get(0)), len(cache.get(1))]  # type: ignore[arg-type]
    assert lengths[0] != lengths[1]
    prompts.append(tok.encode("Hi\n"))
    keys = [0, 1, 2]
    params = SamplingParams(max_new_tokens=6, temperature=temperature, seed=7)
    prefixes = [cache.lookup(k, p) for k, p in zip(keys, prompts, strict=True)]
    assert prefixes[0] is not None and prefixes[1] is not None and prefixes[2] is None
    # the first-step logits: only the suffixes are prefilled, the logits are a fresh prefill's
    with torch.no_grad():
        warm = _DecodeLoop(policy, prompts, params, use_cache=True, prefixes=prefixes)
        (logits_warm, fed_warm) = fed_while(policy, lambda: warm.logits(0))
        cold = _DecodeLoop(policy, prompts, params, use_cache=True)
        (logits_cold, fed_cold) = fed_while(policy, lambda: cold.logits(0))
    torch.testing.assert_close(logits_warm, logits_cold, rtol=0, atol=1e-5)
    suffix_width = max(len(prompts[0]) - lengths[0], len(prompts[1]) - lengths[1], len(prompts[2]))
    assert fed_warm.shapes == [(3, suffix_width)] and fed_cold.shapes[0][1] > suffix_width
    # whole decodes: the same tokens and logprobs, with the cache and in a batch, and one prompt alone
    got = sample(policy, prompts, params, turn_cache=cache, cache_keys=keys)
    want = sample(policy, prompts, params)
    for g, w in zip(got, want, strict=True):
        assert g[0].tokens == w[0].tokens and g[0].stop_reason == w[0].stop_reason
        np.testing.assert_allclose(g[0].raw_logprobs, w[0].raw_logprobs, rtol=0, atol=1e-5)
        np.testing.assert_allclose(g[0].logprobs, w[0].logprobs, rtol=0, atol=1e-5)
    alone_cache, alone_prompts = turn_two(policy, ["What is 2+3?\n"], ["\nand 7+1?\n"])
    got1 = sample(policy, alone_prompts, params, turn_cache=alone_cache, cache_keys=[0])[0][0]
    want1 = sample(policy, alone_prompts, params)[0][0]
    assert got1.tokens == want1.tokens
    np.testing.assert_allclose(got1.raw_logprobs, want1.raw_logprobs, rtol=0, atol=1e-5)
    # every row's cache now holds its turn-2 conversation (the last sampled token was never fed)
    for k, (p, g) in enumerate(zip(prompts, got, strict=True)):
        assert cache.get(k) is not None and cache.get(k).tokens == (*p, *g[0].tokens[:-1])  # type: ignore[union-attr]


# ---------------------------------------------------------------------------------------------
# (d) a prompt that does not extend its cache is prefilled in full
# ---------------------------------------------------------------------------------------------
def test_a_prompt_that_does_not_extend_its_cache_falls_back_to_a_full_prefill(policy: PolicyModel) -> None:
    tok = policy.tokenizer
    cache, prompts = turn_two(policy, ["What is 2+3?\n", "Count down from 9.\n9\n"], ["\nthen?\n", "8\n"])
    entry = cache.get(1)
    assert entry is not None
    edited = list(prompts[1])
    edited[3] = edited[3] + 1 if edited[3] + 1 < len(tok) else edited[3] - 1  # an edit inside the cached tokens
    assert not entry.extended_by(edited) and cache.lookup(1, edited) is None
    assert not entry.extended_by(list(entry.tokens)), "a prompt equal to the cached tokens has nothing to prefill"
    rows = [prompts[0], edited]
    params = SamplingParams(max_new_tokens=5, temperature=0.0)
    got, fed = fed_while(policy, lambda: sample(policy, rows, params, turn_cache=cache, cache_keys=[0, 1]))
    want = sample(policy, rows, params)
    # the prefill covered row 1's whole prompt (row 0 still used its cache)
    assert fed.shapes[0] == (2, len(edited))
    for g, w in zip(got, want, strict=True):
        assert g[0].tokens == w[0].tokens
        np.testing.assert_allclose(g[0].raw_logprobs, w[0].raw_logprobs, rtol=0, atol=1e-5)
    assert cache.get(1).tokens[: len(edited)] == tuple(edited)  # type: ignore[union-attr]  # replaced


def test_turn_cache_bookkeeping(policy: PolicyModel) -> None:
    cache, prompts = turn_two(policy, ["a\n", "bb\n"], ["c", "d"])
    assert len(cache) == 2 and 0 in cache and cache.nbytes > 0
    cache.drop(0)
    cache.drop(0)  # no error
    assert 0 not in cache and len(cache) == 1
    with pytest.raises(ValueError, match="params.n must be 1"):
        sample(policy, prompts, SamplingParams(n=2), turn_cache=cache, cache_keys=[0, 1])
    with pytest.raises(ValueError, match="one cache key per prompt"):
        sample(policy, prompts, SamplingParams(), turn_cache=cache, cache_keys=[0])
    with pytest.raises(ValueError, match="kv_2_L_T_H_D"):
        CachedPrefix((1, 2, 3), torch.zeros(2, 4, 2, 2, 8))
    cache.clear()
    assert len(cache) == 0


def test_rollout_frees_the_caches_of_ended_episodes(policy: PolicyModel, algos_and_math_plugins: None, monkeypatch: pytest.MonkeyPatch) -> None:
    caches: list[TurnCache] = []
    real = engine_module.sample

    def spy(*args: Any, **kw: Any) -> Any:
        caches.append(kw["turn_cache"])
        return real(*args, **kw)

    monkeypatch.setattr(engine_module, "sample", spy)
    res = rollout(policy, calculator(), [0, 1], SamplingParams(max_new_tokens=6, stop=("\n",), seed=2), max_turns=2)
    assert len({id(c) for c in caches}) == 1 and max(ep.turns for ep in res.episodes) == 2
    assert len(caches[0]) == 0  # every episode ended: nothing is kept


@pytest.mark.parametrize("reuse", [True, False])
def test_the_config_switch_reaches_the_training_and_evaluation_rollouts(
    reuse: bool, tmp_path: Path, algos_and_math_plugins: None, cache_sizes: list[int]
) -> None:
    from tinker_algos import train

    pytest.importorskip("tinker_env_math", reason="math/calculator-v0 comes from tinker-env-math")
    cfg = {
        "name": "calc", "seed": 0, "model": {"name": "tiny"},
        "env": {"id": "math/calculator-v0", "kwargs": {"digits": 1, "num_terms": 2, "max_turns": 2}},
        "stages": [{"name": "rl", "algorithm": {"name": "grpo", "steps": 1, "eval_size": 2}}],
        "rollout": {"prompts_per_step": 2, "group_size": 2, "max_new_tokens": 4, "stop": ["\n"], "reuse_kv_cache": reuse},
        "logging": {"tensorboard": False, "plot": False},
    }
    assert train(cfg, run_dir=tmp_path).status == "completed"
    # the step's rollout and the evaluation's, each of 2 turns: the second turn of each finds caches, or none is kept
    assert cache_sizes == ([0, 4, 0, 2] if reuse else [-1] * 4)


def test_the_last_turn_reads_the_caches_but_stores_none(policy: PolicyModel, algos_and_math_plugins: None, monkeypatch: pytest.MonkeyPatch) -> None:
    """No episode continues after its last turn, so the sampler does not copy its keys and values
    out (a single-turn env's every turn is its last)."""
    import tinker_algos.sampling.sampler as sampler_module
    from tinker_core.registry import make_env

    extracted: list[int] = []
    real_extract = sampler_module.extract_rows
    monkeypatch.setattr(sampler_module, "extract_rows", lambda cache, keep: (extracted.append(int(keep.shape[0])), real_extract(cache, keep))[1])
    cache, prompts = turn_two(policy, ["a\n", "bb\n"], ["c", "d"])
    assert len(cache) == 2 and extracted == [2]  # turn 1 stored both rows
    stored = TurnCache()
    for key in (0, 1):
        entry = cache.get(key)
        assert entry is not None
        stored.store(key, entry)
    params = SamplingParams(max_new_tokens=4, temperature=0.0, stop_at_eos=False)
    last = sample(policy, prompts, params, turn_cache=cache, cache_keys=[0, 1], store_cache=False)
    assert len(cache) == 0 and extracted == [2]  # read, then dropped: nothing copied out
    kept = sample(policy, prompts, params, turn_cache=stored, cache_keys=[0, 1])
    assert len(stored) == 2 and extracted == [2, 2]
    assert [s[0].tokens for s in last] == [s[0].tokens for s in kept]  # the cache was used alike
    single = rollout(policy, lambda: make_env("math/arithmetic-v0"), [0, 1], SamplingParams(max_new_tokens=4, stop=("\n",), seed=0), group_size=2)
    assert not single.errors and len(single.episodes) == 4 and extracted == [2, 2]  # one turn: nothing stored
