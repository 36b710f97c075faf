"""``Trainer.forward_backward(..., return_logprobs=True)``: the logprobs of the gradient pass equal
``Trainer.forward`` on the same batch, with and without micro-batching, and cost no behaviour change."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from tinker_algos.model.models import LoraSpec
from tinker_algos.training.trainer import Trainer, TrainerConfig

pytestmark = pytest.mark.usefixtures("only_tinker_algos_plugins")

PROMPTS = ["1+1=", "hello", "The sky is", "x", "abc"]
COMPLETIONS = ["2", " world", " blue today", " y z", " d"]


@pytest.fixture
def batch(policy, batch_factory):
    b = batch_factory(policy.tokenizer, PROMPTS, COMPLETIONS)
    b.loss_mask_B_T[3] = 0.0  # a row with no trained token: a micro-batch of its own is skipped
    return b


def grads(trainer: Trainer) -> list[torch.Tensor]:
    return [p.grad.clone() if p.grad is not None else torch.zeros_like(p) for p in trainer.params]


@pytest.mark.parametrize("micro_batch_size", [None, 1, 2])
@pytest.mark.parametrize("lora", [False, True], ids=["full", "lora"])
def test_returned_logprobs_equal_forward_and_change_nothing_else(policy, batch, micro_batch_size, lora):
    config = TrainerConfig(micro_batch_size=micro_batch_size)
    kw = {"adapter": "policy", "lora": LoraSpec(rank=4), "adapter_seed": 0} if lora else {}
    trainer = Trainer(policy, config, **kw)
    expect_B_T = trainer.forward(batch)

    plain = trainer.forward_backward(batch, "cross_entropy", agg="token-sum")
    assert isinstance(plain, dict)  # the default return type is unchanged
    plain_grads = grads(trainer)
    trainer.zero_grad()

    metrics, logprobs_B_T = trainer.forward_backward(batch, "cross_entropy", agg="token-sum", return_logprobs=True)
    assert isinstance(logprobs_B_T, np.ndarray)
    assert logprobs_B_T.shape == batch.shape and logprobs_B_T.dtype == np.float32
    np.testing.assert_allclose(logprobs_B_T, expect_B_T, rtol=0, atol=1e-5)
    real = batch.attention_mask_B_T > 0
    assert np.all(logprobs_B_T[:, 0] == 0.0) and np.all(logprobs_B_T[~real] == 0.0)
    assert np.all(logprobs_B_T[3, 1:][real[3, 1:]] < 0)  # the untrained row is scored too
    assert metrics == plain
    for a, b in zip(plain_grads, grads(trainer), strict=True):
        torch.testing.assert_close(a, b, rtol=0, atol=0)
    # the cross-entropy loss is the negated sum of the returned logprobs over trained tokens
    trained = batch.loss_mask_B_T * batch.attention_mask_B_T
    assert metrics["loss"] == pytest.approx(-float((logprobs_B_T * trained).sum()), rel=1e-5)


def test_rows_after_a_nonfinite_loss_are_still_scored(policy, batch):
    trainer = Trainer(policy, TrainerConfig(micro_batch_size=2))
    expect_B_T = trainer.forward(batch)
    advantages_B_T = np.ones(batch.shape, dtype=np.float32)
    advantages_B_T[0] = np.nan  # the first micro-batch's loss is NaN: no backward from here on
    metrics, logprobs_B_T = trainer.forward_backward(
        batch, "importance_sampling", advantages_B_T=advantages_B_T, return_logprobs=True
    )
    assert metrics["nonfinite"] == 1.0
    assert all(p.grad is None for p in trainer.params)
    np.testing.assert_allclose(logprobs_B_T, expect_B_T, rtol=0, atol=1e-5)
