"""The decode loop's KV cache with room reserved up front (``tinker_algos.sampling.turn_cache``): the same
keys, values and samples as ``transformers.DynamicCache``'s ``torch.cat`` growth."""

from __future__ import annotations

import pytest
import torch
from transformers.cache_utils import DynamicLayer

from tinker_algos.sampling import sampler as sampler_mod
from tinker_algos.sampling.sampler import SamplingParams, sample
from tinker_algos.sampling.turn_cache import ReservedLayer, reserve


def kv(gen: torch.Generator, B: int, t: int) -> tuple[torch.Tensor, torch.Tensor]:
    return torch.randn(B, 2, t, 4, generator=gen), torch.randn(B, 2, t, 4, generator=gen)


def test_a_reserved_layer_holds_what_a_dynamic_layer_holds_through_every_cache_operation():
    gen = torch.Generator().manual_seed(0)
    plain, room = DynamicLayer(), ReservedLayer(capacity=8)

    def both(op, *args):
        outs = [getattr(layer, op)(*args) for layer in (plain, room)]
        assert torch.equal(plain.keys, room.keys) and torch.equal(plain.values, room.values), op
        assert plain.get_seq_length() == room.get_seq_length()
        return outs

    (pk, pv), (rk, rv) = both("update", *kv(gen, 2, 5))  # prefill
    assert torch.equal(pk, rk) and torch.equal(pv, rv)
    first_room = room._key_room
    for _ in range(3):  # decode steps write into the same room
        both("update", *kv(gen, 2, 1))
    assert room._key_room is first_room and room.keys.data_ptr() == first_room.data_ptr()
    both("batch_repeat_interleave", 3)  # the shared-prefix copy: keys replaced, next update reserves again
    both("update", *kv(gen, 6, 1))
    both("reorder_cache", torch.tensor([5, 4, 3, 2, 1, 0]))
    both("update", *kv(gen, 6, 1))
    both("crop", -2)  # a shorter view of the same room; the next column goes after it
    both("update", *kv(gen, 6, 1))
    both("update", *kv(gen, 6, 4))  # past the capacity: more room, nothing lost
    assert room.get_seq_length() == 13 and room._key_room.shape[-2] >= 13


def test_reserve_converts_a_caches_plain_layers_and_the_ones_it_adds_later():
    from transformers import DynamicCache

    gen = torch.Generator().manual_seed(1)
    k, v = kv(gen, 2, 3)
    cache = DynamicCache()
    cache.update(k, v, layer_idx=0)
    reserve(cache, 10)
    assert type(cache.layers[0]) is ReservedLayer and torch.equal(cache.layers[0].keys, k)
    cache.update(*kv(gen, 2, 1), layer_idx=1)  # a layer the model writes first now
    assert type(cache.layers[1]) is ReservedLayer and cache.layers[1].capacity == 10


@pytest.mark.parametrize("n", [1, 4])
def test_sampling_with_reserved_room_gives_the_samples_of_torch_cat_growth(policy, monkeypatch, n):
    prompts = ["12+34=", "hello world\n", "a", "The quick brown fox jumps"]
    params = SamplingParams(max_new_tokens=12, n=n, seed=5, stop_at_eos=False)
    reserved = sample(policy, prompts, params)
    monkeypatch.setattr(sampler_mod, "reserve", lambda cache, capacity: cache)
    grown = sample(policy, prompts, params)
    for a, b in zip(reserved, grown, strict=True):
        assert [s.tokens for s in a] == [s.tokens for s in b]
        for sa, sb in zip(a, b, strict=True):
            torch.testing.assert_close(torch.tensor(sa.raw_logprobs), torch.tensor(sb.raw_logprobs), rtol=0, atol=1e-6)


def test_smollm2_chat_samples_are_the_same_with_reserved_room(smollm2_dir, monkeypatch):
    from tinker_algos.model.models import PolicyModel

    smollm2 = PolicyModel.load(smollm2_dir, device="cpu", precision="fp32")
    msgs = [[{"role": "user", "content": f"{a}+{b}="}] for a, b in [(12, 7), (3, 45), (60, 6)]]
    params = SamplingParams(max_new_tokens=10, n=2, seed=0, stop_at_eos=False)
    reserved = sample(smollm2, msgs, params)
    monkeypatch.setattr(sampler_mod, "reserve", lambda cache, capacity: cache)
    grown = sample(smollm2, msgs, params)
    assert [[s.tokens for s in g] for g in reserved] == [[s.tokens for s in g] for g in grown]
