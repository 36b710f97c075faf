"""The head route (tinker_algos.model.head_logprobs): the LM head and the log-softmax only at the
positions asked for, a chunk at a time, give the plain pass's logprobs and gradients (the oracle:
the model's own forward and its full logits), and backward keeps no chunk's logits."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from tinker_algos.model import head_logprobs
from tinker_algos.model.head_logprobs import head_route
from tinker_algos.model.models import LoraSpec, PolicyModel, sequence_logprobs
from tinker_algos.training.shared_prefix import batch_logprobs
from tinker_algos.training.trainer import Trainer, TrainerConfig


def ragged_batch(seed: int, vocab: int, *, left_pad_row: bool = False) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``(tokens, attention, trained)``: 6 right-padded rows of random length, a random part of each trained
    (a gap in the middle of one row: an untrained environment reply), optionally one left-padded row."""
    g = np.random.default_rng(seed)
    B, T = 6, 17
    tok = torch.from_numpy(g.integers(3, vocab, size=(B, T)))
    att, tr = torch.zeros(B, T), torch.zeros(B, T)
    for b in range(B):
        n = int(g.integers(5, T + 1))
        att[b, :n] = 1
        start = int(g.integers(1, n - 1))
        tr[b, start:n] = 1
    tr[0, 3:5] = 0
    if left_pad_row:
        att[-1] = 0
        att[-1, 4:] = 1
        tr[-1] = 0
        tr[-1, 9:] = 1
    return tok, att, tr * att


def groups(seed: int, n_prompts: int, group: int, vocab: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """A GRPO-shaped right-padded batch: each random prompt ``group`` times, each copy with its own
    random completion (trained)."""
    g = np.random.default_rng(seed)
    rows = []
    for _ in range(n_prompts):
        prompt = g.integers(3, vocab, size=int(g.integers(4, 9))).tolist()
        rows += [(prompt, g.integers(3, vocab, size=int(g.integers(1, 6))).tolist()) for _ in range(group)]
    B, T = len(rows), max(len(p) + len(c) for p, c in rows)
    tok, att, tr = torch.zeros(B, T, dtype=torch.long), torch.zeros(B, T), torch.zeros(B, T)
    for b, (p, c) in enumerate(rows):
        tok[b, : len(p) + len(c)] = torch.tensor(p + c)
        att[b, : len(p) + len(c)] = 1
        tr[b, len(p) : len(p) + len(c)] = 1
    return tok, att, tr


def values_and_grads(params: list[torch.nn.Parameter], fn, weights: torch.Tensor) -> tuple[torch.Tensor, list[torch.Tensor]]:
    for p in params:
        p.grad = None
    lp = fn()
    (lp * weights).sum().backward()
    return lp.detach(), [p.grad.clone() for p in params]


def head_calls(policy: PolicyModel) -> tuple[list[int], object]:
    rows: list[int] = []
    handle = policy.base_model.get_output_embeddings().register_forward_pre_hook(lambda m, a: rows.append(a[0].shape[0]))
    return rows, handle


@pytest.fixture(params=["full", "lora"])
def trained_policy(request: pytest.FixtureRequest, tiny_dir: Path) -> tuple[PolicyModel, list[torch.nn.Parameter]]:
    policy = PolicyModel.load(tiny_dir, device="cpu", precision="fp32")
    adapter = None
    if request.param == "lora":
        policy.add_adapter("policy", LoraSpec(rank=4), seed=0)
        policy.set_adapter("policy")
        adapter = "policy"
    params = [p for _, p in policy.trainable_parameters(adapter)]
    for p in params:
        p.requires_grad_(True)
    if adapter is not None:  # a freshly initialised LoRA B is 0: move it so its A gets a gradient too
        with torch.no_grad():
            for p in params:
                p.add_(0.05 * torch.randn(p.shape, generator=torch.Generator().manual_seed(p.numel())))
    policy.module.train()
    return policy, params


@pytest.mark.parametrize("rows", [1, 5, 7, 1000])
@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_chunked_logprobs_and_gradients_equal_the_full_logits(trained_policy, rows: int, temperature: float, monkeypatch: pytest.MonkeyPatch) -> None:
    policy, params = trained_policy
    module = policy.module
    vocab = policy.base_model.get_output_embeddings().weight.shape[0]
    monkeypatch.setattr(head_logprobs, "HEAD_CHUNK_ELEMENTS", rows * vocab)
    tok, att, tr = ragged_batch(0, vocab, left_pad_row=True)
    weights = torch.randn(tok.shape, generator=torch.Generator().manual_seed(1)) * tr
    plain, g_plain = values_and_grads(params, lambda: sequence_logprobs(module, tok, att, temperature=temperature, chunked=False), weights)
    calls, handle = head_calls(policy)
    try:
        lp, g = values_and_grads(params, lambda: sequence_logprobs(module, tok, att, temperature=temperature, positions_B_T=tr), weights)
    finally:
        handle.remove()
    wanted = int((tr[:, 1:] * att[:, :-1]).sum())
    # forward: the head saw exactly the wanted positions, at most `rows` at a time; backward recomputed each chunk once
    assert sum(calls) == 2 * wanted and max(calls) == min(rows, wanted)
    torch.testing.assert_close(lp, plain * tr, atol=1e-5, rtol=0)
    assert bool((lp[tr == 0] == 0).all())  # positions not asked for are 0
    scale = max(float(x.abs().max()) for x in g_plain)
    assert scale > 1e-3  # the gradients compared are not all ~0
    for a, b in zip(g_plain, g, strict=True):
        torch.testing.assert_close(b, a, atol=1e-5 * scale, rtol=1e-4)


def test_every_real_token_when_no_positions_are_named(policy: PolicyModel) -> None:
    module = policy.module
    tok, att, _ = ragged_batch(1, 101, left_pad_row=True)
    with torch.no_grad():
        chunked = sequence_logprobs(module, tok, att, temperature=1.3)
        plain = sequence_logprobs(module, tok, att, temperature=1.3, chunked=False)
    torch.testing.assert_close(chunked, plain, atol=1e-5, rtol=0)
    assert bool((plain[:, 1:][(att[:, 1:] * att[:, :-1]) != 0] != 0).all())  # every real token with a real one before it is filled


@pytest.mark.parametrize("chunked", [True, False])
def test_the_rest_is_filled_detached(trained_policy, chunked: bool) -> None:
    """``rest=True``: every real token's logprob, but the gradient only through the named positions."""
    policy, params = trained_policy
    module = policy.module
    tok, att, tr = ragged_batch(5, 101)
    everywhere = torch.randn(tok.shape, generator=torch.Generator().manual_seed(3))
    plain, _ = values_and_grads(params, lambda: sequence_logprobs(module, tok, att, chunked=False), everywhere)
    _, g_trained = values_and_grads(params, lambda: sequence_logprobs(module, tok, att, chunked=False), everywhere * tr)
    lp, g = values_and_grads(params, lambda: sequence_logprobs(module, tok, att, positions_B_T=tr, rest=True, chunked=chunked), everywhere)
    torch.testing.assert_close(lp, plain, atol=1e-5, rtol=0)
    scale = max(float(x.abs().max()) for x in g_trained)
    for a, b in zip(g_trained, g, strict=True):
        torch.testing.assert_close(b, a, atol=1e-5 * scale, rtol=1e-4)


@pytest.mark.parametrize("only_trained", [True, False])
def test_the_shared_prefix_pass_on_the_head_route_equals_the_plain_pass(trained_policy, only_trained: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    policy, params = trained_policy
    module = policy.module
    monkeypatch.setattr(head_logprobs, "HEAD_CHUNK_ELEMENTS", 7 * 101)
    tok, att, tr = groups(0, n_prompts=5, group=4, vocab=60)
    weights = torch.randn(tok.shape, generator=torch.Generator().manual_seed(2)) * tr
    plain, g_plain = values_and_grads(params, lambda: sequence_logprobs(module, tok, att, temperature=0.7, chunked=False), weights)
    calls, handle = head_calls(policy)
    try:
        lp, g = values_and_grads(params, lambda: batch_logprobs(module, tok, att, tr, temperature=0.7, only_trained=only_trained), weights)
    finally:
        handle.remove()
    assert calls and max(calls) <= 7
    if only_trained:
        assert sum(calls) == 2 * int(tr.sum())  # the trained tokens only, and no prefix logits at all
        plain = plain * tr
    torch.testing.assert_close(lp, plain, atol=1e-5, rtol=0)
    scale = max(float(x.abs().max()) for x in g_plain)
    for a, b in zip(g_plain, g, strict=True):
        torch.testing.assert_close(b, a, atol=1e-5 * scale, rtol=1e-4)


def test_backward_keeps_no_chunk_of_logits(policy: PolicyModel, monkeypatch: pytest.MonkeyPatch) -> None:
    """What autograd saves for backward during the forward pass: the plain pass keeps ``[B, T, V]``
    logits, the head route nothing with more than one chunk's rows over the vocabulary."""
    module = policy.module
    module.train()
    vocab = 101
    monkeypatch.setattr(head_logprobs, "HEAD_CHUNK_ELEMENTS", 4 * vocab)
    tok, att, tr = ragged_batch(3, vocab)

    def largest_saved_logits(chunked: bool) -> int:
        sizes: list[int] = []

        def pack(t: torch.Tensor) -> torch.Tensor:
            if t.ndim and t.shape[-1] == vocab:
                sizes.append(t.numel() // vocab)
            return t

        with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
            sequence_logprobs(module, tok, att, positions_B_T=tr, chunked=chunked).sum().backward()
        return max(sizes, default=0)

    assert largest_saved_logits(chunked=False) >= tok.shape[0] * (tok.shape[1] - 1)  # the control: the check sees full logits
    assert largest_saved_logits(chunked=True) == 0  # only the chunks' inputs (hidden states) are kept


def test_the_route_is_taken_only_where_logits_are_the_head_of_the_last_hidden_state(tiny_dir: Path) -> None:
    from transformers import GPT2Config, GPT2LMHeadModel

    policy = PolicyModel.load(tiny_dir, device="cpu", precision="fp32")
    route = head_route(policy.module)
    assert route is not None and route.vocab == 101
    assert head_route(policy.module, chunked=False) is None
    policy.add_adapter("policy", LoraSpec(rank=4), seed=0)
    assert head_route(policy.module) is not None  # through the peft wrapper: the LoRA layers sit inside the decoder
    gpt2 = GPT2LMHeadModel(GPT2Config(vocab_size=50, n_embd=16, n_layer=1, n_head=2, n_positions=32, bos_token_id=0, eos_token_id=0)).eval()
    assert head_route(gpt2) is None  # not on the list: the plain route, the model's own forward
    tok, att, tr = ragged_batch(4, 50)
    lp = sequence_logprobs(gpt2, tok, att, positions_B_T=tr)
    with torch.no_grad():
        logits = gpt2(input_ids=tok, attention_mask=att.long(), position_ids=(att.cumsum(-1) - 1).clamp(min=0).long()).logits
    oracle = torch.log_softmax(logits[:, :-1].float(), -1).gather(-1, tok[:, 1:, None])[..., 0]
    torch.testing.assert_close(lp[:, 1:], oracle * tr[:, 1:] * att[:, :-1], atol=1e-5, rtol=0)


@pytest.mark.parametrize("adapter", [None, "policy"])
def test_a_trainer_step_is_the_same_with_and_without_chunked_logprobs(tiny_dir: Path, batch_factory, adapter: str | None, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(head_logprobs, "HEAD_CHUNK_ELEMENTS", 5 * 101)
    out = {}
    for chunked in (True, False):
        policy = PolicyModel.load(tiny_dir, device="cpu", precision="fp32")
        batch = batch_factory(policy.tokenizer, ["12+35=", "7+8=", "12+35=", "40+2="], ["47", "15", "48", "42"])
        batch.advantages_B_T = np.where(batch.loss_mask_B_T != 0, np.array([[1.0], [-0.5], [-1.0], [0.5]]), 0.0).astype(np.float32)
        config = TrainerConfig(lr=1e-2, chunked_logprobs=chunked, micro_batch_size=3)
        trainer = Trainer(policy, config, adapter=adapter, lora=LoraSpec(rank=4) if adapter else None, adapter_seed=0 if adapter else None)
        metrics, lp = trainer.forward_backward(batch, "ppo", temperature=0.8, return_logprobs=True)
        grads = [p.grad.clone() for p in trainer.params]
        trainer.optim_step()
        out[chunked] = (metrics, lp, grads, trainer.forward(batch))
    (m1, lp1, g1, f1), (m0, lp0, g0, f0) = out[True], out[False]
    assert m1.keys() == m0.keys() and all(m1[k] == pytest.approx(m0[k], rel=1e-4, abs=1e-6) for k in m0)
    np.testing.assert_allclose(lp1, lp0, atol=1e-5)  # asked for: every token, not just the trained ones
    np.testing.assert_allclose(f1, f0, atol=1e-4)
    for a, b in zip(g0, g1, strict=True):
        torch.testing.assert_close(b, a, atol=1e-6, rtol=1e-4)


@pytest.mark.parametrize("chunked", [True, False])
def test_the_job_config_field_reaches_the_trainer(chunked: bool) -> None:
    from tinker_algos.run.job import trainer_config
    from tinker_core.config import parse_config

    job = parse_config({
        "name": "t", "model": {"name": "tiny"}, "env": {"id": "echo/echo-v0"},
        "algorithm": {"name": "grpo", "steps": 2, "chunked_logprobs": chunked}, "optimizer": {"name": "adamw", "lr": 1e-3},
    })
    assert trainer_config(job.resolved_stages()[0]).chunked_logprobs is chunked
