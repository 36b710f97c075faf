"""Penalties and logits processors: OpenAI's formula by hand, the sampler against an independent
greedy loop that applies it, a processor's mask obeyed, the raw logprobs left the model's own."""

from __future__ import annotations

import collections

import pytest
import torch

from tinker_algos.sampling.sampler import SamplingParams, sample
from tinker_algos.sampling.token_draw import adjust_logits, apply_penalties, token_counts

PROMPTS = ["12+34=", "hello world\n"]


def test_the_penalties_are_openais_formula_by_hand():
    logits_B_V = torch.tensor([[1.0, 2.0, 3.0, 4.0, 5.0, 6.0], [0.0] * 6])
    generated_B = [[3, 3, 5], []]
    out = adjust_logits(logits_B_V, generated_B, frequency_penalty=0.5, presence_penalty=1.0)
    # token 3: twice -> 4 - 2*0.5 - 1; token 5: once -> 6 - 0.5 - 1; the rest and the empty row as they were
    assert out.tolist() == [[1.0, 2.0, 3.0, 2.0, 5.0, 4.5], [0.0] * 6]
    assert logits_B_V[0, 3] == 4.0  # the input is left alone
    negative = apply_penalties(logits_B_V[:1], token_counts([[1]], 6), -2.0, -2.0)
    assert negative[0, 1] == 2.0 + 2.0 + 2.0


def test_penalties_out_of_openais_range_are_named():
    for name in ("frequency_penalty", "presence_penalty"):
        with pytest.raises(ValueError, match=name):
            SamplingParams(**{name: 2.5}).validate()
        with pytest.raises(ValueError, match=name):
            SamplingParams(**{name: float("nan")}).validate()


def _greedy_with_penalties(policy, prompt: str, steps: int, frequency: float, presence: float) -> list[int]:
    """An independent oracle: the whole sequence through the model each step (no cache, no
    batching), the penalty computed from a Counter of the generated tokens, argmax."""
    ids = policy.tokenizer.encode(prompt)
    out: list[int] = []
    with torch.no_grad():
        for _ in range(steps):
            seq = torch.tensor([ids + out])
            logits = policy.module(input_ids=seq, attention_mask=torch.ones_like(seq)).logits[0, -1].float()
            counts = collections.Counter(out)
            for tok, c in counts.items():
                logits[tok] -= c * frequency + presence
            out.append(int(logits.argmax()))
    return out


@pytest.mark.parametrize(("frequency", "presence"), [(1.5, 0.0), (0.0, 2.0), (0.7, 0.4)])
def test_the_sampler_applies_the_penalties_as_the_oracle_does(policy, frequency, presence):
    params = SamplingParams(max_new_tokens=24, temperature=0.0, stop_at_eos=False, frequency_penalty=frequency,
                            presence_penalty=presence)
    got = sample(policy, PROMPTS, params)
    plain = sample(policy, PROMPTS, SamplingParams(max_new_tokens=24, temperature=0.0, stop_at_eos=False))
    for prompt, group, alone in zip(PROMPTS, got, plain, strict=True):
        assert group[0].tokens == _greedy_with_penalties(policy, prompt, 24, frequency, presence)
        assert group[0].tokens != alone[0].tokens  # the penalty changed the answer (the tiny model repeats itself)


class _Forbid:
    """A processor that forbids ``banned`` tokens and records what its row generated."""

    def __init__(self, banned: list[int], seen: list[list[int]]) -> None:
        self.banned, self.seen = banned, seen

    def __call__(self, generated, logits_V):
        self.seen.append(list(generated))
        logits_V[self.banned] = float("-inf")
        return logits_V


def test_a_processor_masks_what_is_drawn_and_leaves_the_raw_logprobs(policy):
    plain = sample(policy, "hello", SamplingParams(max_new_tokens=12, temperature=0.0, stop_at_eos=False))[0][0]
    banned = sorted(set(plain.tokens))
    seen: list[list[int]] = []
    params = SamplingParams(max_new_tokens=12, temperature=0.0, stop_at_eos=False,
                            logits_processors=(lambda: _Forbid(banned, seen),))
    masked = sample(policy, "hello", params)[0][0]
    assert not set(masked.tokens) & set(banned)
    assert seen[0] == [] and seen[-1] == masked.tokens[:-1]  # each step sees the row's tokens so far
    # the raw logprobs are the model's own: the trainer's numbers for the tokens drawn
    ids = policy.tokenizer.encode("hello")
    seq = torch.tensor([ids + masked.tokens])
    with torch.no_grad():
        logp = torch.log_softmax(policy.module(input_ids=seq, attention_mask=torch.ones_like(seq)).logits[0].float(), -1)
    want = [float(logp[len(ids) - 1 + t, tok]) for t, tok in enumerate(masked.tokens)]
    assert masked.raw_logprobs == pytest.approx(want, abs=1e-4)
