"""The shared-prefix training pass: a prompt several rows share runs once, with the same logprobs
and gradients as one full pass per row (tinker_algos.training.shared_prefix)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from tinker_algos.model.models import LoraSpec, PolicyModel, sequence_logprobs
from tinker_algos.training.shared_prefix import batch_logprobs, plan, shares_safely
from tinker_algos.training.trainer import Trainer, TrainerConfig


def grpo_like(prompts: list[list[int]], completions: list[list[list[int]]]) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``(tokens, attention, trained)`` of a right-padded batch: each prompt followed by each of its completions."""
    rows, trained = [], []
    for prompt, comps in zip(prompts, completions, strict=True):
        for comp in comps:
            rows.append(prompt + comp)
            trained.append([0] * len(prompt) + [1] * len(comp))
    B, T = len(rows), max(map(len, rows))
    tok, att, tr = torch.zeros(B, T, dtype=torch.long), torch.zeros(B, T), torch.zeros(B, T)
    for b, (r, t) in enumerate(zip(rows, trained, strict=True)):
        tok[b, : len(r)] = torch.tensor(r)
        att[b, : len(r)] = 1
        tr[b, : len(t)] = torch.tensor(t, dtype=torch.float32)
    return tok, att, tr


def random_groups(seed: int, n_prompts: int, group: int, vocab: int, prompt_len: tuple[int, int] = (4, 9)) -> tuple[torch.Tensor, ...]:
    g = np.random.default_rng(seed)
    prompts = [g.integers(3, vocab, size=int(g.integers(*prompt_len))).tolist() for _ in range(n_prompts)]
    comps = [[g.integers(3, vocab, size=int(g.integers(1, 6))).tolist() for _ in range(group)] for _ in range(n_prompts)]
    return grpo_like(prompts, comps)


def logprobs_and_grads(module: torch.nn.Module, params: list[torch.nn.Parameter], fn: Any, tok: torch.Tensor, tr: torch.Tensor) -> tuple[torch.Tensor, list[torch.Tensor]]:
    """The logprobs of ``fn()`` and the gradients of a weighted sum of them over the trained tokens."""
    for p in params:
        p.grad = None
    lp = fn()
    weights = torch.randn(tok.shape, generator=torch.Generator().manual_seed(1))
    (lp * tr * weights).sum().backward()
    return lp.detach(), [p.grad.clone() for p in params]


def count_calls(module: torch.nn.Module) -> tuple[list[int], Any]:
    """Rows of every model call (a forward pre-hook on the decoder, which every route runs), and the hook's handle."""
    rows: list[int] = []
    base = module.get_base_model() if hasattr(module, "get_base_model") else module
    handle = base.get_decoder().register_forward_pre_hook(lambda m, a, kw: rows.append(kw["input_ids"].shape[0]), with_kwargs=True)
    return rows, handle


@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_logprobs_and_gradients_equal_one_pass_per_row(policy: PolicyModel, temperature: float) -> None:
    module = policy.module
    module.train()
    params = [p for p in module.parameters() if p.requires_grad]
    tok, att, tr = random_groups(0, n_prompts=6, group=4, vocab=60)
    lp_plain, g_plain = logprobs_and_grads(module, params, lambda: sequence_logprobs(module, tok, att, temperature=temperature), tok, tr)
    rows, handle = count_calls(module)
    try:
        lp_shared, g_shared = logprobs_and_grads(module, params, lambda: batch_logprobs(module, tok, att, tr, temperature=temperature), tok, tr)
    finally:
        handle.remove()
    assert rows == [6, 24]  # the distinct prompts once, then every row's completion on their cache
    torch.testing.assert_close(lp_shared, lp_plain, atol=1e-5, rtol=0)  # every position, the prompts' too
    for a, b in zip(g_plain, g_shared, strict=True):
        torch.testing.assert_close(b, a, atol=1e-5, rtol=1e-4)
    assert max(float(g.abs().max()) for g in g_plain) > 1e-2  # the gradients compared are not all ~0


def test_without_prompt_logprobs_only_the_prompts_tokens_are_left_at_zero(policy: PolicyModel) -> None:
    module = policy.module
    tok, att, tr = random_groups(1, n_prompts=4, group=3, vocab=60)
    with torch.no_grad():
        plain = sequence_logprobs(module, tok, att)
        lean = batch_logprobs(module, tok, att, tr, only_trained=True)
    split = plan(tok.numpy(), att.numpy(), tr.numpy())
    assert split is not None
    for b in range(tok.shape[0]):
        s = int(split.split_B[b])
        assert torch.all(lean[b, : s + 1] == 0)  # tokens 1..split come from the prefix pass, not run for logits
        torch.testing.assert_close(lean[b, s + 1 :], plain[b, s + 1 :], atol=1e-5, rtol=0)
    assert bool(((lean != 0) == (tr != 0)).all())  # exactly the trained tokens are filled here


def test_rows_without_a_trained_token_and_groups_of_one_are_scored_like_the_plain_pass(policy: PolicyModel) -> None:
    module = policy.module
    # two groups of 4 that pay for the split, a prompt alone, and a row with nothing trained
    tok, att, tr = grpo_like(
        [[5, 6, 7, 8, 9, 10, 11], [12, 13, 14, 15, 16, 17], [20, 21], [30, 31, 32]],
        [[[40], [41, 42], [43, 44, 45], [46]], [[47, 48], [49], [50], [51, 52]], [[53, 54, 55]], [[56, 57]]],
    )
    tr[-1] = 0
    split = plan(tok.numpy(), att.numpy(), tr.numpy())
    assert split is not None and split.split_B[-1] == 0 and len(split.first_of) == 4  # two groups, the lone prompt, the untrained row
    with torch.no_grad():
        torch.testing.assert_close(batch_logprobs(module, tok, att, tr), sequence_logprobs(module, tok, att), atol=1e-5, rtol=0)


def test_the_plan_falls_back_where_sharing_does_not_pay_or_apply() -> None:
    tok, att, tr = random_groups(2, n_prompts=8, group=4, vocab=60)
    assert plan(tok.numpy(), att.numpy(), tr.numpy()) is not None
    distinct, att1, tr1 = random_groups(3, n_prompts=32, group=1, vocab=60)  # every prompt once: nothing to share
    assert plan(distinct.numpy(), att1.numpy(), tr1.numpy()) is None
    assert plan(tok.numpy(), att.numpy(), np.zeros_like(tr.numpy())) is None  # nothing trained: no split
    assert plan(tok.numpy(), att.numpy(), att.numpy()) is None  # everything trained from token 1: no prompt
    left = np.flip(att.numpy(), axis=1).copy()  # left-padded rows are not this pass's layout
    assert plan(tok.numpy(), left, tr.numpy()) is None
    assert plan(tok[:1].numpy(), att[:1].numpy(), tr[:1].numpy()) is None  # one row


def test_dropout_in_training_mode_and_gradient_checkpointing_take_the_plain_pass(tiny_dir: Path) -> None:
    dropped = PolicyModel.load(tiny_dir, device="cpu", precision="fp32")
    dropped.add_adapter("policy", LoraSpec(rank=4, dropout=0.1), seed=0)
    module = dropped.module
    module.train()
    assert not shares_safely(module)  # each row would draw its own dropout mask on the prompt
    tok, att, tr = random_groups(4, n_prompts=4, group=4, vocab=60)
    rows, handle = count_calls(module)
    try:
        batch_logprobs(module, tok, att, tr)
        module.eval()
        assert shares_safely(module)  # no dropout at evaluation
        with torch.no_grad():
            batch_logprobs(module, tok, att, tr)
    finally:
        handle.remove()
    assert rows == [16, 4, 16]
    plain = PolicyModel.load(tiny_dir, device="cpu", precision="fp32")
    plain.module.train()
    assert shares_safely(plain.module)
    plain.base_model.gradient_checkpointing_enable()
    assert not shares_safely(plain.module)


def test_a_lora_trainer_gets_the_same_update_with_and_without_sharing(tiny_dir: Path) -> None:
    tok, att, tr = random_groups(5, n_prompts=4, group=4, vocab=60)
    from tinker_core.contracts import Batch

    advantages = np.random.default_rng(0).normal(size=tok.shape).astype(np.float32) * tr.numpy()
    B = tok.shape[0]
    batch = Batch(tokens_B_T=tok.numpy(), attention_mask_B_T=att.numpy(), loss_mask_B_T=tr.numpy(),
                  sampler_logprobs_B_T=np.zeros(tok.shape, dtype=np.float32), rewards_B=np.zeros(B, dtype=np.float32),
                  group_ids_B=np.arange(B) // 4, advantages_B_T=advantages)
    out = {}
    for share in (True, False):
        policy = PolicyModel.load(tiny_dir, device="cpu", precision="fp32")
        trainer = Trainer(policy, TrainerConfig(lr=1e-2, share_prefix=share), adapter="policy", lora=LoraSpec(rank=4), adapter_seed=0)
        metrics, logprobs = trainer.forward_backward(batch, "importance_sampling", return_logprobs=True)
        grads = [p.grad.clone() for p in trainer.params]
        trainer.optim_step()
        out[share] = (metrics, logprobs, grads, [p.detach().clone() for p in trainer.params], trainer.forward(batch))
    (m1, lp1, g1, w1, f1), (m0, lp0, g0, w0, f0) = out[True], out[False]
    assert m1.keys() == m0.keys() and all(m1[k] == pytest.approx(m0[k], rel=1e-4, abs=1e-6) for k in m0)
    np.testing.assert_allclose(lp1, lp0, atol=1e-5)
    np.testing.assert_allclose(f1, f0, atol=1e-5)  # forward() after the update: the same weights
    for a, b in zip(g0, g1, strict=True):
        torch.testing.assert_close(b, a, atol=1e-6, rtol=1e-4)
    for a, b in zip(w0, w1, strict=True):  # Adam divides by sqrt(v): a near-0 gradient's rounding shows more
        torch.testing.assert_close(b, a, atol=1e-4, rtol=1e-5)


def test_smollm2_chat_prompts_with_lora_match_one_pass_per_row(smollm2_dir: Path) -> None:
    """The real model (grouped-query attention, RoPE, 30 layers) under its chat template, a LoRA adapter training."""
    policy = PolicyModel.load(smollm2_dir, device="cpu", precision="fp32")
    policy.add_adapter("policy", LoraSpec(rank=8), seed=0)
    policy.set_adapter("policy")
    tok_ = policy.tokenizer
    prompts = [
        tok_.apply_chat_template([{"role": "user", "content": q}], add_generation_prompt=True, tokenize=True)
        for q in ("What is 12+35?", "Name a colour.", "2+2=")
    ]
    prompts = [list(p["input_ids"]) if isinstance(p, dict) or hasattr(p, "keys") else list(p) for p in prompts]
    answers = [[tok_.encode(a) for a in ("47<|im_end|>", "It is 47.<|im_end|>")], [tok_.encode(a) for a in ("Blue<|im_end|>", "Red.<|im_end|>")],
               [tok_.encode(a) for a in ("4<|im_end|>", "Four<|im_end|>")]]
    tok, att, tr = grpo_like(prompts, answers)
    module = policy.module
    module.train()
    params = [p for _, p in policy.trainable_parameters("policy")]
    for p in params:
        p.requires_grad_(True)
    lp_plain, g_plain = logprobs_and_grads(module, params, lambda: sequence_logprobs(module, tok, att, temperature=0.7), tok, tr)
    lp_shared, g_shared = logprobs_and_grads(module, params, lambda: batch_logprobs(module, tok, att, tr, temperature=0.7), tok, tr)
    torch.testing.assert_close(lp_shared, lp_plain, atol=1e-4, rtol=0)
    scale = max(float(g.abs().max()) for g in g_plain)
    assert scale > 0
    for a, b in zip(g_plain, g_shared, strict=True):
        torch.testing.assert_close(b, a, atol=1e-4 * scale, rtol=1e-3)


@pytest.mark.parametrize("share", [True, False])
def test_the_job_config_field_reaches_the_trainer(share: bool) -> None:
    from tinker_algos.run.job import trainer_config
    from tinker_core.config import parse_config

    job = parse_config({
        "name": "t", "model": {"name": "tiny"}, "env": {"id": "echo/echo-v0"},
        "algorithm": {"name": "grpo", "steps": 2, "share_prefix": share}, "optimizer": {"name": "adamw", "lr": 1e-3},
    })
    assert trainer_config(job.resolved_stages()[0]).share_prefix is share
