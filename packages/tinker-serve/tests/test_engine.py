"""The continuous-batching engine on the tiny model: the same tokens as the project's sampler
whatever joins or leaves the batch, mixed adapters in one decode step, cancellation, stops."""

from __future__ import annotations

import pytest
import torch

from tinker_algos.sampling.sampler import SamplingParams, sample
from tinker_serve.engine import Engine, Event, Request

PROMPTS = ["12+35=", "7+8=", "a much longer prompt than the others, to need padding: 3+4="]


class Collector:
    def __init__(self) -> None:
        self.events: list[Event] = []

    def __call__(self, ev: Event) -> None:
        self.events.append(ev)

    def tokens(self, sample: int = 0) -> list[int]:
        return [t.id for ev in self.events if ev.sample == sample for t in ev.tokens]

    def text(self, sample: int = 0) -> str:
        return "".join(ev.text for ev in self.events if ev.sample == sample)

    def reason(self, sample: int = 0) -> str | None:
        return next((ev.finish_reason for ev in self.events if ev.sample == sample and ev.finish_reason), None)


def request(policy, prompt: str, *, adapter=None, **params) -> tuple[Request, Collector]:
    out = Collector()
    ids = policy.tokenizer.encode(prompt)
    return Request(ids, SamplingParams(**{"max_new_tokens": 12, "temperature": 0.0, **params}), out, adapter), out


def run_all(engine: Engine, limit: int = 500) -> None:
    for _ in range(limit):
        if not engine.active_rows and not engine.waiting:
            return
        engine.step()
    raise AssertionError("the engine did not finish")


def solo(policy, prompt: str, adapter=None, n: int = 12) -> list[int]:
    params = SamplingParams(max_new_tokens=n, temperature=0.0)
    return sample(policy, prompt, params, adapter=adapter)[0][0].tokens


def test_greedy_tokens_equal_the_samplers_when_requests_join_mid_flight(policy):
    engine = Engine(policy, max_batch=8)
    first, out_first = request(policy, PROMPTS[0])
    engine.submit(first)
    engine.step()
    engine.step()
    engine.step()  # three tokens in, the others join
    others = [request(policy, p) for p in PROMPTS[1:]]
    for req, _ in others:
        engine.submit(req)
    run_all(engine)
    assert out_first.tokens() == solo(policy, PROMPTS[0])
    for (_, out), prompt in zip(others, PROMPTS[1:], strict=True):
        assert out.tokens() == solo(policy, prompt)
        assert out.reason() in ("stop", "length")
    assert engine.largest_batch == 3


def lora_pair(policy):
    """Two adapters whose weights differ from zero (so each changes the model's outputs)."""
    gen = torch.Generator().manual_seed(0)
    for name in ("left", "right"):
        policy.add_adapter(name, seed=1)
        with torch.no_grad():
            for p in policy.adapter_parameters(name):
                p.copy_(torch.randn(p.shape, generator=gen) * 0.5)
    policy.module.eval()


def test_rows_of_different_adapters_share_a_decode_step_and_match_each_adapter_alone(policy):
    lora_pair(policy)
    expected = {a: solo(policy, PROMPTS[0], adapter=a) for a in ("left", "right")}
    with policy.adapters_disabled():
        expected[None] = solo(policy, PROMPTS[0])
    assert len({tuple(v) for v in expected.values()}) == 3, "the adapters should change the greedy answer"
    engine = Engine(policy, max_batch=8)
    outs = {}
    for a in ("left", None, "right"):
        req, outs[a] = request(policy, PROMPTS[0], adapter=a)
        engine.submit(req)
    run_all(engine)
    assert engine.largest_batch == 3
    assert {a: out.tokens() for a, out in outs.items()} == expected


def test_a_cancelled_request_leaves_the_batch_and_frees_its_rows(policy):
    engine = Engine(policy, max_batch=4)
    long_req, out = request(policy, PROMPTS[0], max_new_tokens=400, temperature=1.0, stop_at_eos=False)
    engine.submit(long_req)
    for _ in range(3):
        engine.step()
    assert engine.active_rows == 1
    engine.cancel(long_req)
    engine.step()
    assert engine.active_rows == 0 and len(out.tokens()) == 3


def test_n_samples_with_a_seed_are_reproducible_and_rows_wait_for_room(policy):
    engine = Engine(policy, max_batch=4)
    a, out_a = request(policy, PROMPTS[1], n=3, temperature=1.0, seed=5)
    b, out_b = request(policy, PROMPTS[1], n=3, temperature=1.0, seed=5)
    engine.submit(a)
    engine.submit(b)
    engine.step()
    assert engine.active_rows == 3 and engine.waiting == 1  # b waits: 3 + 3 rows > 4
    run_all(engine)
    assert [out_a.tokens(s) for s in range(3)] == [out_b.tokens(s) for s in range(3)]
    assert len({tuple(out_a.tokens(s)) for s in range(3)}) > 1


def test_a_stop_string_is_cut_from_the_text_and_never_streamed(policy):
    engine = Engine(policy, max_batch=2)
    free, out_free = request(policy, PROMPTS[0], max_new_tokens=12)
    engine.submit(free)
    run_all(engine)
    text = out_free.text()
    assert len(text) >= 4, text
    stop = text[2:4]
    cut, out_cut = request(policy, PROMPTS[0], max_new_tokens=12, stop=[stop])
    engine.submit(cut)
    run_all(engine)
    assert out_cut.text() == text[: text.find(stop)] and out_cut.reason() == "stop"


def test_too_many_samples_for_the_batch_is_refused(policy):
    req, _ = request(policy, PROMPTS[0], n=5)
    with pytest.raises(ValueError, match="batch of 4"):
        Engine(policy, max_batch=4).submit(req)
