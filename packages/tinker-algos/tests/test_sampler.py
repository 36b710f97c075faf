"""The sampler: determinism, stopping, n samples, KV cache, and agreement with the trainer."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from tinker_algos.model.models import sequence_logprobs
from tinker_algos.sampling.sampler import (
    SampledSequence,
    SamplingParams,
    logprob_agreement,
    sample,
    sequences_to_batch,
)

PROMPTS = ["12+34=", "hello world\n", "a", "The quick brown fox jumps"]  # ragged: left padding


def tokens_of(result):
    return [[s.tokens for s in group] for group in result]


def trainer_logprobs(policy, batch):
    with torch.no_grad():
        lp = sequence_logprobs(
            policy.module, torch.as_tensor(batch.tokens_B_T), torch.as_tensor(batch.attention_mask_B_T)
        )
    return lp.numpy()


def test_same_seed_same_samples_other_seed_other_samples(policy):
    p = SamplingParams(max_new_tokens=16, n=2, seed=11)
    a, b = sample(policy, PROMPTS, p), sample(policy, PROMPTS, p)
    assert tokens_of(a) == tokens_of(b)
    assert [[s.logprobs for s in g] for g in a] == [[s.logprobs for s in g] for g in b]
    c = sample(policy, PROMPTS, SamplingParams(max_new_tokens=16, n=2, seed=12))
    assert tokens_of(c) != tokens_of(a)


def test_seed_none_follows_the_global_torch_rng(policy):
    p = SamplingParams(max_new_tokens=8)
    torch.manual_seed(5)
    a = sample(policy, PROMPTS, p)
    torch.manual_seed(5)
    assert tokens_of(sample(policy, PROMPTS, p)) == tokens_of(a)


def test_n_samples_per_prompt(policy):
    res = sample(policy, PROMPTS, SamplingParams(max_new_tokens=5, n=3, seed=0, stop_at_eos=False))
    assert len(res) == len(PROMPTS) and all(len(g) == 3 for g in res)
    for pi, group in enumerate(res):
        assert [s.sample_index for s in group] == [0, 1, 2]
        assert all(s.prompt_index == pi for s in group)
        assert all(s.prompt_tokens == policy.tokenizer.encode(PROMPTS[pi]) for s in group)
        assert all(len(s.tokens) == len(s.logprobs) == len(s.raw_logprobs) == 5 for s in group)
        assert all(s.stop_reason == "length" for s in group)
        assert len({tuple(s.tokens) for s in group}) > 1  # independent draws


def test_logprobs_agree_with_the_trainer_at_temperature_one(policy):
    res = sample(policy, PROMPTS, SamplingParams(max_new_tokens=24, n=2, seed=3))
    for group in res:
        for s in group:
            assert s.logprobs == s.raw_logprobs  # T=1, no filtering: the same distribution
    batch = sequences_to_batch(res, pad_token_id=policy.pad_token_id)
    m = logprob_agreement(batch.sampler_logprobs_B_T, trainer_logprobs(policy, batch), batch.loss_mask_B_T)
    assert m["mean_abs_diff"] < 1e-4 and m["max_abs_diff"] < 1e-3
    assert 0 <= m["kl_k3"] < 1e-6 and abs(m["kl_k1"]) < 1e-4


def test_raw_logprobs_agree_with_the_trainer_under_temperature_and_top_k(policy):
    p = SamplingParams(max_new_tokens=16, n=2, seed=4, temperature=0.7, top_k=20, top_p=0.9)
    res = sample(policy, PROMPTS, p)
    batch = sequences_to_batch(res, pad_token_id=policy.pad_token_id, raw=True)
    m = logprob_agreement(batch.sampler_logprobs_B_T, trainer_logprobs(policy, batch), batch.loss_mask_B_T)
    assert m["mean_abs_diff"] < 1e-4
    # the sampled distribution is sharper and truncated: its logprobs are larger than the raw ones
    # at every sampled token (each sampled token lies inside the kept set)
    for s in (s for g in res for s in g):
        assert all(lp >= raw - 1e-6 for lp, raw in zip(s.logprobs, s.raw_logprobs, strict=True))
        assert all(lp <= 0 for lp in s.logprobs)


def test_kv_cache_greedy_equals_no_cache_and_hf_generate(policy):
    p = SamplingParams(max_new_tokens=20, temperature=0.0, stop_at_eos=False)
    cached = sample(policy, PROMPTS, p)
    uncached = sample(policy, PROMPTS, p, use_cache=False)
    assert tokens_of(cached) == tokens_of(uncached)
    for g1, g2 in zip(cached, uncached, strict=True):
        np.testing.assert_allclose(g1[0].raw_logprobs, g2[0].raw_logprobs, atol=1e-5)
        assert g1[0].logprobs == [0.0] * 20  # greedy: a point mass
    # independent oracle: transformers' own generate() on each prompt alone (no padding)
    for prompt, group in zip(PROMPTS, cached, strict=True):
        ids = torch.tensor([policy.tokenizer.encode(prompt)])
        out = policy.model.generate(
            input_ids=ids, attention_mask=torch.ones_like(ids), max_new_tokens=20, do_sample=False,
            eos_token_id=None, pad_token_id=policy.pad_token_id,
        )
        assert out[0, ids.shape[1]:].tolist() == group[0].tokens


def test_a_prompts_samples_do_not_depend_on_its_batch_neighbours(policy):
    p = SamplingParams(max_new_tokens=12, temperature=0.0, stop_at_eos=False)
    alone = sample(policy, ["a"], p)[0][0]
    batched = sample(policy, PROMPTS, p)[2][0]
    assert alone.tokens == batched.tokens
    np.testing.assert_allclose(alone.raw_logprobs, batched.raw_logprobs, atol=1e-5)


def test_top_k_one_and_tiny_top_p_are_greedy(policy):
    greedy = tokens_of(sample(policy, PROMPTS, SamplingParams(max_new_tokens=10, temperature=0.0, stop_at_eos=False)))
    k1 = sample(policy, PROMPTS, SamplingParams(max_new_tokens=10, top_k=1, seed=1, stop_at_eos=False))
    p0 = sample(policy, PROMPTS, SamplingParams(max_new_tokens=10, top_p=1e-6, seed=1, stop_at_eos=False))
    assert tokens_of(k1) == greedy == tokens_of(p0)
    assert all(lp == 0.0 for g in k1 for s in g for lp in s.logprobs)


def test_stop_token_ids_end_the_sample_and_are_kept(policy):
    greedy = sample(policy, "hello", SamplingParams(max_new_tokens=20, temperature=0.0, stop_at_eos=False))[0][0]
    k = 5
    stop_id = greedy.tokens[k]
    first = greedy.tokens.index(stop_id)
    s = sample(policy, "hello", SamplingParams(max_new_tokens=20, temperature=0.0, stop_token_ids=[stop_id]))[0][0]
    assert s.stop_reason == "stop_id"
    assert s.tokens == greedy.tokens[: first + 1] and s.tokens[-1] == stop_id


def test_stop_strings_end_the_sample_and_stay_in_the_text(policy):
    greedy = sample(policy, "hello", SamplingParams(max_new_tokens=20, temperature=0.0, stop_at_eos=False))[0][0]
    text = greedy.text
    stop = text[6:8]
    end = text.index(stop) + len(stop)
    s = sample(policy, "hello", SamplingParams(max_new_tokens=20, temperature=0.0, stop=[stop, "\x00never"]))[0][0]
    assert s.stop_reason == "stop_string"
    assert s.text == text[:end] and s.text.endswith(stop)
    assert len(s.tokens) == end  # one token per character


def test_eos_stops_with_reason_eos(policy):
    # make <eos> the most likely next token everywhere: raise its output-embedding row's alignment
    # with every hidden state by adding a large bias through the (tied) embedding is not possible,
    # so use an explicit output bias on lm_head instead
    head = policy.model.lm_head
    head.bias = torch.nn.Parameter(torch.zeros(head.out_features))
    with torch.no_grad():
        head.bias[policy.eos_token_id] = 100.0
    s = sample(policy, PROMPTS, SamplingParams(max_new_tokens=10, seed=0))
    assert all(g[0].tokens == [policy.eos_token_id] and g[0].stop_reason == "eos" for g in s)
    assert all(g[0].text == "" for g in s)
    s = sample(policy, "x", SamplingParams(max_new_tokens=3, seed=0, stop_at_eos=False))[0][0]
    assert s.stop_reason == "length" and s.tokens == [policy.eos_token_id] * 3


def test_prompts_as_ids_messages_and_strings(policy):
    p = SamplingParams(max_new_tokens=6, temperature=0.0)
    ids = policy.tokenizer.encode("hi there")
    by_text = sample(policy, "hi there", p)[0][0]
    by_ids = sample(policy, [ids], p)[0][0]
    assert by_text.tokens == by_ids.tokens and by_ids.prompt_tokens == ids
    chat = sample(policy, [[{"role": "user", "content": "hi"}]], p)[0][0]
    assert policy.tokenizer.decode(chat.prompt_tokens, skip_special_tokens=True) == "user: hi\nassistant: "


def test_bad_parameters_are_named(policy):
    with pytest.raises(ValueError, match="max_new_tokens"):
        sample(policy, "a", SamplingParams(max_new_tokens=0))
    with pytest.raises(ValueError, match="top_p"):
        sample(policy, "a", SamplingParams(top_p=0.0))
    with pytest.raises(ValueError, match="max_position_embeddings"):
        sample(policy, "a", SamplingParams(max_new_tokens=5000))
    with pytest.raises(TypeError, match="stop"):
        sample(policy, "a", SamplingParams(stop="\n"))  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="no tokens"):
        sample(policy, [[]], SamplingParams())


def test_sequences_to_batch_alignment(policy):
    seq = SampledSequence(
        prompt_tokens=[1, 10, 11], tokens=[12, 2], logprobs=[-0.5, -0.25], raw_logprobs=[-0.6, -0.3],
        stop_reason="eos", text="x",
    )
    short = SampledSequence(prompt_tokens=[1], tokens=[5], logprobs=[-1.0], raw_logprobs=[-1.0],
                            stop_reason="length", text="y", prompt_index=1)
    b = sequences_to_batch([seq, short], pad_token_id=0, rewards=[1.0, 0.0])
    assert b.tokens_B_T.tolist() == [[1, 10, 11, 12, 2], [1, 5, 0, 0, 0]]
    assert b.loss_mask_B_T.tolist() == [[0, 0, 0, 1, 1], [0, 1, 0, 0, 0]]
    np.testing.assert_allclose(b.sampler_logprobs_B_T[0], [0, 0, 0, -0.5, -0.25])
    assert b.rewards_B.tolist() == [1.0, 0.0] and b.group_ids_B.tolist() == [0, 1]
    raw = sequences_to_batch([seq], raw=True)
    np.testing.assert_allclose(raw.sampler_logprobs_B_T[0], [0, 0, 0, -0.6, -0.3])
    traj = seq.to_trajectory([0.5, 0.5])
    assert traj.reward == 1.0 and traj.info["stop_reason"] == "eos"


def test_logprob_agreement_oracle():
    s = np.log([[1.0, 0.5, 0.5]])
    t = np.log([[1.0, 0.25, 0.5]])
    m = np.array([[0, 1, 0]])
    out = logprob_agreement(s, t, m)
    assert out["mean_abs_diff"] == pytest.approx(np.log(2))
    assert out["kl_k1"] == pytest.approx(0.693147, abs=1e-6)
    assert out["kl_k3"] == pytest.approx(0.193147, abs=1e-6)  # docs/reference/oracles.md: k3 for 0.5 vs 0.25


@pytest.mark.parametrize(
    "params",
    [
        SamplingParams(max_new_tokens=12, seed=3, n=2, stop_at_eos=False),  # T=1: one log_softmax
        SamplingParams(max_new_tokens=12, seed=4, temperature=0.7, top_k=6, top_p=0.9),
        SamplingParams(max_new_tokens=12, seed=5, stop=["I", "*"], stop_token_ids=[87]),  # rows stop apart
    ],
)
def test_shared_prefix_and_cache_give_the_reference_paths_samples(policy, params):
    # a chat template puts the same system prompt before every prompt: the cached path runs that
    # prefix once and repeats its cache; the no-cache path recomputes every left-padded row each step
    system = "You are a careful calculator. Answer with the number only.\n"
    prompts = [system + p for p in ["12+34=", "7-2=", "100+1=", "x"]]
    same_length = [system + p for p in ["12+34=", "56+78="]]  # no padding: no attention mask
    for batch in (prompts, same_length, PROMPTS):
        fast = sample(policy, batch, params)
        ref = sample(policy, batch, params, use_cache=False)
        assert tokens_of(fast) == tokens_of(ref)
        for g1, g2 in zip(fast, ref, strict=True):
            for a, b in zip(g1, g2, strict=True):
                assert (a.stop_reason, a.text) == (b.stop_reason, b.text)
                np.testing.assert_allclose(a.logprobs, b.logprobs, atol=1e-5)
                np.testing.assert_allclose(a.raw_logprobs, b.raw_logprobs, atol=1e-5)
    # and a prompt's samples are those it gets alone (greedy: no RNG shared with neighbours)
    greedy = SamplingParams(max_new_tokens=10, temperature=0.0, stop_at_eos=False)
    alone = sample(policy, prompts[1], greedy)[0][0]
    batched = sample(policy, prompts, greedy)[1][0]
    assert alone.tokens == batched.tokens
    np.testing.assert_allclose(alone.raw_logprobs, batched.raw_logprobs, atol=1e-5)


@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_a_model_whose_weights_diverged_is_a_precondition_error_not_torchs(policy, temperature):
    # found by the TrainingService fuzzer: a session whose weights went to NaN answered Sample
    # with INTERNAL "probability tensor contains either inf, nan or element < 0"
    from tinker_core.errors import PreconditionError

    with torch.no_grad():
        policy.base_model.get_output_embeddings().weight.fill_(float("nan"))
    with pytest.raises(PreconditionError, match="not finite .* weights have diverged"):
        sample(policy, PROMPTS, SamplingParams(max_new_tokens=4, temperature=temperature, seed=0))


def test_a_large_vocabulary_draws_by_inverse_cdf_from_the_same_distribution():
    # SmolLM2-sized rows take one uniform each, not one exponential per vocabulary entry
    from tinker_algos.sampling.token_draw import INVERSE_CDF_MIN_VOCAB, draw

    V, rows = 3 * INVERSE_CDF_MIN_VOCAB, 20_000
    logits_V = torch.full((V,), float("-inf"))
    picks = {7: 0.5, 4_000: 0.25, V - 1: 0.125, 9_999: 0.0625, 12_000: 0.0625}
    for token, p in picks.items():
        logits_V[token] = float(np.log(p))
    logp_B_V = torch.log_softmax(logits_V, -1).expand(rows, V)
    drawn = draw(logp_B_V, torch.Generator().manual_seed(0))
    counts = torch.bincount(drawn, minlength=V)
    assert set(torch.nonzero(counts).flatten().tolist()) == set(picks)  # never a zero-probability token
    for token, p in picks.items():  # within 5 standard errors of the expected frequency
        assert abs(counts[token].item() / rows - p) < 5 * (p * (1 - p) / rows) ** 0.5, (token, counts[token])
    # seeded: the same generator state gives the same tokens; one-hot rows give their token
    again = draw(logp_B_V, torch.Generator().manual_seed(0))
    assert torch.equal(drawn, again)
    one_hot = torch.full((3, V), float("-inf"))
    one_hot[0, 0], one_hot[1, V - 1], one_hot[2, 5_000] = 0.0, 0.0, 0.0
    assert draw(one_hot, None).tolist() == [0, V - 1, 5_000]


def test_a_small_vocabulary_keeps_multinomial_so_tiny_runs_keep_their_samples():
    from tinker_algos.sampling.token_draw import INVERSE_CDF_MIN_VOCAB, draw

    logp_B_V = torch.log_softmax(torch.randn(8, INVERSE_CDF_MIN_VOCAB - 1, generator=torch.Generator().manual_seed(1)), -1)
    ours = draw(logp_B_V, torch.Generator().manual_seed(3))
    theirs = torch.multinomial(logp_B_V.exp(), 1, generator=torch.Generator().manual_seed(3)).squeeze(-1)
    assert torch.equal(ours, theirs)


@pytest.mark.parametrize("bad", [float("nan"), float("inf")])
def test_a_large_vocabulary_that_is_not_finite_is_a_precondition_error(bad):
    from tinker_algos.sampling.token_draw import INVERSE_CDF_MIN_VOCAB, draw
    from tinker_core.errors import PreconditionError

    logp_B_V = torch.zeros(2, INVERSE_CDF_MIN_VOCAB)
    logp_B_V[1, 3] = bad
    with pytest.raises(PreconditionError, match="not finite"):
        draw(logp_B_V, None)
