"""Trainer primitives: forward alignment, gradient accumulation, optim_step, NaN skips, LoRA."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

import tinker_core
import tinker_core.registry
from tinker_algos.model.models import LoraSpec, PolicyModel
from tinker_algos.sampling.sampler import SamplingParams, sample
from tinker_algos.training.trainer import Trainer, TrainerConfig, lr_multiplier
from tinker_core.contracts import Batch
from tinker_core.errors import UnknownNameError

pytestmark = pytest.mark.usefixtures("only_tinker_algos_plugins")

PROMPTS = ["1+1=", "hello", "The sky is", "x"]
COMPLETIONS = ["2", " world", " blue today", " y z"]


@pytest.fixture
def batch(policy, batch_factory):
    return batch_factory(policy.tokenizer, PROMPTS, COMPLETIONS)


def grads(trainer):
    return [p.grad.clone() if p.grad is not None else torch.zeros_like(p) for p in trainer.params]


def snapshot(params):
    return [p.detach().clone() for p in params]


# ---- forward --------------------------------------------------------------------------------------
def test_forward_logprobs_are_aligned_with_the_tokens(policy, batch):
    trainer = Trainer(policy)
    lp_B_T = trainer.forward(batch)
    assert lp_B_T.shape == batch.shape and lp_B_T.dtype == np.float32
    for i in range(batch.shape[0]):
        n = int(batch.attention_mask_B_T[i].sum())
        ids = torch.as_tensor(batch.tokens_B_T[i, :n])
        with torch.no_grad():
            logits = policy.model(input_ids=ids[None]).logits[0]  # the sequence alone, unpadded
        expect = torch.log_softmax(logits[:-1], -1).gather(-1, ids[1:, None]).squeeze(-1)
        assert lp_B_T[i, 0] == 0.0
        np.testing.assert_allclose(lp_B_T[i, 1:n], expect.numpy(), atol=1e-5)
        assert np.all(lp_B_T[i, n:] == 0.0)  # padding
    hot = trainer.forward(batch, temperature=2.0)
    real = batch.attention_mask_B_T[:, 1:] > 0
    assert np.all(hot[:, 1:][real] != lp_B_T[:, 1:][real])


# ---- forward_backward -----------------------------------------------------------------------------
def test_two_halves_accumulate_to_the_whole_with_token_sum(policy, batch_factory):
    tok = policy.tokenizer
    whole = batch_factory(tok, PROMPTS, COMPLETIONS)
    first, second = batch_factory(tok, PROMPTS[:2], COMPLETIONS[:2]), batch_factory(tok, PROMPTS[2:], COMPLETIONS[2:])
    trainer = Trainer(policy)
    m1 = trainer.forward_backward(first, "cross_entropy", agg="token-sum")
    m2 = trainer.forward_backward(second, "cross_entropy", agg="token-sum")
    halves = grads(trainer)
    trainer.zero_grad()
    mw = trainer.forward_backward(whole, "cross_entropy", agg="token-sum")
    for a, b in zip(halves, grads(trainer), strict=True):
        torch.testing.assert_close(a, b, atol=1e-6, rtol=1e-5)
    assert m1["loss"] + m2["loss"] == pytest.approx(mw["loss"], rel=1e-6)
    assert m1["num_tokens"] + m2["num_tokens"] == mw["num_tokens"] == sum(len(c) + 1 for c in COMPLETIONS)


def test_loss_scale_turns_parts_into_a_global_token_mean(policy, batch_factory):
    tok = policy.tokenizer
    whole = batch_factory(tok, PROMPTS, COMPLETIONS)
    parts = [batch_factory(tok, PROMPTS[:1], COMPLETIONS[:1]), batch_factory(tok, PROMPTS[1:], COMPLETIONS[1:])]
    trainer = Trainer(policy)
    total = float(whole.loss_mask_B_T.sum())
    for part in parts:
        trainer.forward_backward(part, "cross_entropy", agg="token-mean", loss_scale=float(part.loss_mask_B_T.sum()) / total)
    scaled = grads(trainer)
    trainer.zero_grad()
    trainer.forward_backward(whole, "cross_entropy", agg="token-mean")
    for a, b in zip(scaled, grads(trainer), strict=True):
        torch.testing.assert_close(a, b, atol=1e-6, rtol=1e-5)


@pytest.mark.parametrize("agg", ["token-mean", "seq-mean-token-mean", "seq-mean-token-sum", "seq-mean-token-sum-norm"])
def test_micro_batching_gives_the_same_gradient_in_every_mode(policy, batch, agg):
    whole = Trainer(policy)
    whole.forward_backward(batch, "cross_entropy", agg=agg)
    expect = grads(whole)
    whole.zero_grad()
    micro = Trainer(policy, TrainerConfig(micro_batch_size=1))
    m = micro.forward_backward(batch, "cross_entropy", agg=agg)
    for a, b in zip(expect, grads(micro), strict=True):
        torch.testing.assert_close(a, b, atol=1e-6, rtol=1e-5)
    assert math.isfinite(m["loss"])


def test_token_mean_loss_is_the_mean_nll(policy, batch):
    trainer = Trainer(policy)
    lp = trainer.forward(batch)
    m = trainer.forward_backward(batch, "cross_entropy", agg="token-mean")
    mask = batch.loss_mask_B_T
    assert m["loss"] == pytest.approx(float(-(lp * mask).sum() / mask.sum()), rel=1e-5)
    assert m["num_sequences"] == 4.0 and m["nonfinite"] == 0.0


def test_policy_losses_read_advantages_from_the_batch_and_report_namespaced_metrics(policy, batch):
    trainer = Trainer(policy)
    batch.sampler_logprobs_B_T = trainer.forward(batch)
    batch.advantages_B_T = np.where(batch.loss_mask_B_T > 0, 1.0, 0.0).astype(np.float32)
    m = trainer.forward_backward(batch, "ppo", eps_low=0.2, eps_high=0.28)
    assert m["loss"] == pytest.approx(-1.0, abs=1e-5)  # rho = 1 everywhere: -A
    assert any(k.startswith("ppo/") for k in m)
    with pytest.raises(TypeError, match="unknown config"):
        trainer.forward_backward(batch, "ppo", epsilon=0.2)


def test_bad_batches_and_names_fail_clearly(policy, batch):
    trainer = Trainer(policy)
    masked = Batch(batch.tokens_B_T, batch.attention_mask_B_T, np.zeros_like(batch.loss_mask_B_T),
                   batch.sampler_logprobs_B_T, batch.rewards_B, batch.group_ids_B)
    with pytest.raises(ValueError, match="no trained tokens"):
        trainer.forward_backward(masked, "cross_entropy")
    empty = Batch(np.zeros((0, 0), dtype=np.int64), *(np.zeros((0, 0)),) * 3, np.zeros(0), np.zeros(0))
    with pytest.raises(ValueError, match="non-empty"):
        trainer.forward_backward(empty, "cross_entropy")
    with pytest.raises(ValueError, match="non-empty"):
        trainer.forward(empty)
    with pytest.raises(UnknownNameError, match="did you mean 'cross_entropy'"):
        trainer.forward_backward(batch, "cross_entropi")
    with pytest.raises(ValueError, match="unknown aggregation 'mean'"):
        trainer.forward_backward(batch, "cross_entropy", agg="mean")
    big = Batch(batch.tokens_B_T + 1000, *(getattr(batch, f) for f in
                ("attention_mask_B_T", "loss_mask_B_T", "sampler_logprobs_B_T", "rewards_B", "group_ids_B")))
    with pytest.raises(ValueError, match="outside"):
        trainer.forward_backward(big, "cross_entropy")
    with pytest.raises(ValueError, match="call forward_backward first"):
        trainer.optim_step()
    with pytest.raises(ValueError, match="advantages_B_T has shape"):
        trainer.forward_backward(batch, "importance_sampling", advantages_B_T=np.zeros((2, 2)))


# ---- optim_step -----------------------------------------------------------------------------------
def test_optim_step_changes_weights_and_lowers_the_loss(policy, batch):
    trainer = Trainer(policy, TrainerConfig(lr=1e-2))
    before = snapshot(trainer.params)
    first = trainer.forward_backward(batch, "cross_entropy")
    m = trainer.optim_step()
    assert m["skipped"] == 0.0 and m["step"] == 1.0 and trainer.step == 1
    assert all(p.grad is None for p in trainer.params)
    assert any(not torch.equal(a, b) for a, b in zip(before, trainer.params, strict=True))
    for _ in range(5):
        last = trainer.forward_backward(batch, "cross_entropy")
        trainer.optim_step()
    assert last["loss"] < first["loss"]


def test_grad_norm_is_reported_and_clipped(policy, batch):
    trainer = Trainer(policy, TrainerConfig(optimizer="sgd", lr=1.0, max_grad_norm=1e-3))
    trainer.forward_backward(batch, "cross_entropy")
    norm = float(torch.sqrt(sum((p.grad.double() ** 2).sum() for p in trainer.params)).detach())
    before = snapshot(trainer.params)
    m = trainer.optim_step()
    assert m["grad_norm"] == pytest.approx(norm, rel=1e-5) and norm > 1e-3
    step = float(torch.sqrt(sum(((a.double() - b.detach().double()) ** 2).sum() for a, b in zip(before, trainer.params, strict=True))))
    assert step == pytest.approx(1e-3, rel=1e-3)  # SGD, lr 1: the update is the clipped gradient


def test_weight_decay_applies_to_matrices_only(policy, batch):
    trainer = Trainer(policy, TrainerConfig(optimizer="adamw", lr=0.1, weight_decay=0.5))
    before = snapshot(trainer.params)
    trainer.forward_backward(batch, "cross_entropy", loss_scale=0.0)  # zero gradient: only decay acts
    trainer.optim_step()
    for b, p in zip(before, trainer.params, strict=True):
        expect = b * (1 - 0.1 * 0.5) if p.ndim >= 2 else b
        torch.testing.assert_close(p.detach(), expect, atol=1e-7, rtol=1e-6)


def test_lr_schedule_oracles_and_metrics(policy, batch):
    assert [lr_multiplier(s, warmup_steps=2) for s in range(3)] == [0.5, 1.0, 1.0]
    cos = dict(schedule="cosine", warmup_steps=2, total_steps=10)
    assert lr_multiplier(2, **cos) == 1.0
    assert lr_multiplier(6, **cos) == pytest.approx(0.5)
    assert lr_multiplier(10, **cos) == pytest.approx(0.0) and lr_multiplier(50, **cos) == pytest.approx(0.0)
    assert lr_multiplier(6, schedule="linear", warmup_steps=2, total_steps=10, min_lr_ratio=0.2) == pytest.approx(0.6)
    with pytest.raises(ValueError, match="total_steps"):
        TrainerConfig(schedule="cosine").validate()
    trainer = Trainer(policy, TrainerConfig(optimizer="sgd", lr=0.01, schedule="linear", warmup_steps=1, total_steps=3))
    lrs = []
    for _ in range(4):
        trainer.forward_backward(batch, "cross_entropy")
        lrs.append(trainer.optim_step()["lr"])
    assert lrs == pytest.approx([0.01, 0.01, 0.005, 0.0])
    trainer.forward_backward(batch, "cross_entropy")
    m = trainer.optim_step(lr=0.123, momentum=0.5)
    assert m["lr"] == 0.123 and trainer.optimizer.param_groups[0]["momentum"] == 0.5
    trainer.forward_backward(batch, "cross_entropy")
    with pytest.raises(ValueError, match="not a setting"):
        trainer.optim_step(betas=(0.9, 0.9))


def test_a_nan_loss_skips_the_step_and_is_counted(policy, batch):
    trainer = Trainer(policy, TrainerConfig(lr=1e-2))
    before = snapshot(trainer.params)
    batch.advantages_B_T = np.where(batch.loss_mask_B_T > 0, np.nan, 0.0).astype(np.float32)
    m = trainer.forward_backward(batch, "importance_sampling")
    assert m["nonfinite"] == 1.0 and math.isnan(m["loss"])
    # a finite call afterwards does not rescue the step
    trainer.forward_backward(batch, "cross_entropy")
    s = trainer.optim_step()
    assert s["skipped"] == 1.0 and s["skipped_steps"] == 1.0 and trainer.step == 0
    assert all(torch.equal(a, b) for a, b in zip(before, trainer.params, strict=True))
    assert not trainer.optimizer.state  # the optimizer never saw the bad step
    trainer.forward_backward(batch, "cross_entropy")
    s = trainer.optim_step()
    assert s["skipped"] == 0.0 and trainer.step == 1 and trainer.skipped_steps == 1


def test_an_infinite_gradient_skips_the_step(policy, batch):
    trainer = Trainer(policy)
    before = snapshot(trainer.params)
    trainer.forward_backward(batch, "cross_entropy")
    trainer.params[3].grad.view(-1)[0] = float("inf")
    s = trainer.optim_step()
    assert s["skipped"] == 1.0 and not math.isfinite(s["grad_norm"])
    assert all(torch.equal(a, b) for a, b in zip(before, trainer.params, strict=True))


@pytest.mark.parametrize("name", ["sgd", "lion"])
def test_other_registered_optimizers_train(policy, batch, name):
    trainer = Trainer(policy, TrainerConfig(optimizer=name, lr=1e-3, optimizer_config={"momentum": 0.9} if name == "sgd" else {}))
    before = snapshot(trainer.params)
    trainer.forward_backward(batch, "cross_entropy")
    trainer.optim_step()
    assert any(not torch.equal(a, b) for a, b in zip(before, trainer.params, strict=True))
    with pytest.raises(UnknownNameError, match="did you mean 'adamw'"):
        Trainer(policy, TrainerConfig(optimizer="adamm"))
    assert tinker_core.registry.get_optimizer(name).distribution == "tinker-algos"


def test_sft_learns_to_answer_and_stop_with_eos(policy, batch_factory):
    """A short real learning run: greedy sampling reproduces the target and stops at <eos>."""
    torch.manual_seed(0)
    data = batch_factory(policy.tokenizer, ["Q:"] * 4, ["hi!\n"] * 4)
    trainer = Trainer(policy, TrainerConfig(lr=3e-3))
    for _ in range(30):
        trainer.forward_backward(data, "cross_entropy")
        trainer.optim_step()
    s = sample(policy, "Q:", SamplingParams(max_new_tokens=10, temperature=0.0))[0][0]
    assert s.text == "hi!\n" and s.stop_reason == "eos" and s.tokens[-1] == policy.eos_token_id


# ---- LoRA -----------------------------------------------------------------------------------------
def test_lora_trainer_trains_only_its_adapter(policy, batch):
    base_lp = Trainer(policy).forward(batch)
    base = [p.detach().clone() for n, p in policy.model.named_parameters()]
    trainer = Trainer(policy, TrainerConfig(lr=1e-2), adapter="student", lora=LoraSpec(rank=4), adapter_seed=0)
    np.testing.assert_array_equal(trainer.forward(batch), base_lp)  # LoRA starts as the identity
    assert trainer.param_names and all(".student." in n for n in trainer.param_names)
    for _ in range(3):
        trainer.forward_backward(batch, "cross_entropy")
        trainer.optim_step()
    assert np.abs(trainer.forward(batch) - base_lp).max() > 1e-3
    np.testing.assert_allclose(trainer.forward(batch, reference=True), base_lp, atol=1e-6)
    frozen = [p for n, p in policy.model.named_parameters() if "lora_" not in n]
    assert all(torch.equal(a, b) for a, b in zip(base, frozen, strict=True))
    with pytest.raises(ValueError, match="full model"):
        Trainer.forward(_full_trainer_before_adapters(policy), batch)


def _full_trainer_before_adapters(policy):
    t = object.__new__(Trainer)
    t.policy, t.adapter = policy, None
    return t


def test_two_named_adapters_train_independently_on_one_base(tiny_dir, batch_factory):
    cfg = TrainerConfig(lr=1e-2)
    # reference run: adapter "alice" alone on its own copy of the model
    solo = PolicyModel.load(tiny_dir, device="cpu")
    tok = solo.tokenizer
    data_a = batch_factory(tok, ["a:"] * 2, ["aaaa"] * 2)
    data_b = batch_factory(tok, ["b:"] * 2, ["bbbb", "bb"])
    alone = Trainer(solo, cfg, adapter="alice", lora=LoraSpec(rank=4), adapter_seed=1)
    for _ in range(3):
        alone.forward_backward(data_a, "cross_entropy")
        alone.optim_step()
    # shared run: "alice" and "bob" on one base model, steps interleaved
    shared = PolicyModel.load(tiny_dir, device="cpu")
    alice = Trainer(shared, cfg, adapter="alice", lora=LoraSpec(rank=4), adapter_seed=1)
    bob = Trainer(shared, cfg, adapter="bob", lora=LoraSpec(rank=8, alpha=8), adapter_seed=2)
    assert shared.adapter_names == ["alice", "bob"]
    for _ in range(3):
        alice.forward_backward(data_a, "cross_entropy")
        bob.forward_backward(data_b, "cross_entropy")  # bob's pass between alice's backward and step
        alice.optim_step()
        bob.optim_step()
    for a, b in zip(alone.params, alice.params, strict=True):
        assert torch.equal(a, b)  # bob's presence changed nothing for alice
    np.testing.assert_array_equal(alone.forward(data_a), alice.forward(data_a))
    assert np.abs(alice.forward(data_b) - bob.forward(data_b)).max() > 1e-3
    # sampling picks the adapter by name
    p = SamplingParams(max_new_tokens=6, temperature=0.0, stop_at_eos=False)
    by_alice = sample(shared, "a:", p, adapter="alice")[0][0].tokens
    assert by_alice == sample(solo, "a:", p, adapter="alice")[0][0].tokens
    assert shared.active_adapter == "bob"  # sample() restored the previously active adapter
