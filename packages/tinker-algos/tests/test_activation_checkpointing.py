"""Activation checkpointing (``algorithm.activation_checkpointing``): the same training pass --
logprobs, loss and gradients equal the plain pass's (the oracle) -- while autograd keeps far less
for backward, and sampling, which records no graph, is untouched."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from tinker_algos.model.activation_checkpointing import (
    is_checkpointing,
    set_activation_checkpointing,
)
from tinker_algos.model.models import LoraSpec, PolicyModel
from tinker_algos.sampling.sampler import SamplingParams, sample, sequences_to_batch
from tinker_algos.training.shared_prefix import shares_safely
from tinker_algos.training.trainer import Trainer, TrainerConfig

pytestmark = pytest.mark.usefixtures("only_tinker_algos_plugins")


def rl_batch(policy: PolicyModel, adapter: str | None):
    """A GRPO-shaped batch sampled from the policy (two prompts, four copies each), advantages +-1."""
    torch.manual_seed(0)
    seqs = sample(policy, ["Q: 1+2=", "Q: 3+4="] * 4, SamplingParams(max_new_tokens=6, temperature=1.0), adapter=adapter)
    batch = sequences_to_batch(seqs, pad_token_id=policy.pad_token_id)
    signs = np.where(np.arange(batch.shape[0]) % 2 == 0, 1.0, -1.0).astype(np.float32)[:, None]
    batch.advantages_B_T = signs * batch.loss_mask_B_T
    return batch


def one_pass(tiny_dir: Path, *, checkpointing: bool, lora: bool) -> tuple[dict[str, float], np.ndarray, list[torch.Tensor], bool]:
    policy = PolicyModel.load(tiny_dir, device="cpu", precision="fp32")
    adapter = "policy" if lora else None
    config = TrainerConfig(lr=1e-2, activation_checkpointing=checkpointing)
    trainer = Trainer(policy, config, adapter=adapter, lora=LoraSpec(rank=4) if lora else None, adapter_seed=0 if lora else None)
    if lora:  # a fresh LoRA B is 0: move it so that A gets a gradient too
        with torch.no_grad():
            for p in trainer.params:
                p.add_(0.05 * torch.randn(p.shape, generator=torch.Generator().manual_seed(p.numel())))
    batch = rl_batch(policy, adapter)
    metrics, logprobs = trainer.forward_backward(batch, "importance_sampling", return_logprobs=True)
    grads = [p.grad.clone() for p in trainer.params]
    return metrics, np.asarray(logprobs), grads, is_checkpointing(policy.module)


@pytest.mark.parametrize("lora", [False, True], ids=["full", "lora"])
def test_checkpointed_pass_equals_the_plain_one(tiny_dir: Path, lora: bool) -> None:
    m0, lp0, g0, on0 = one_pass(tiny_dir, checkpointing=False, lora=lora)
    m1, lp1, g1, on1 = one_pass(tiny_dir, checkpointing=True, lora=lora)
    assert (on0, on1) == (False, True)
    np.testing.assert_allclose(lp1, lp0, atol=1e-5, rtol=0)
    assert m1["loss"] == pytest.approx(m0["loss"], abs=1e-6)
    scale = max(float(g.abs().max()) for g in g0)
    assert scale > 1e-4  # the gradients compared are not all ~0
    for a, b in zip(g0, g1, strict=True):
        torch.testing.assert_close(b, a, atol=1e-5 * scale, rtol=1e-4)


def saved_bytes(module: torch.nn.Module, tokens: torch.Tensor) -> int:
    """Bytes of the tensors autograd keeps for backward in one forward pass (each storage once)."""
    seen: dict[int, int] = {}

    def pack(t: torch.Tensor) -> torch.Tensor:
        storage = t.untyped_storage()
        seen[storage.data_ptr()] = storage.nbytes()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        out = module(input_ids=tokens, use_cache=False).logits
    out.float().sum().backward()
    return sum(seen.values())


def test_backward_keeps_a_fraction_of_the_activations(tiny_dir: Path) -> None:
    policy = PolicyModel.load(tiny_dir, device="cpu", precision="fp32")
    policy.module.train()
    tokens = torch.randint(3, 100, (8, 64), generator=torch.Generator().manual_seed(0))
    plain = saved_bytes(policy.module, tokens)
    set_activation_checkpointing(policy.module, True)
    checkpointed = saved_bytes(policy.module, tokens)
    # the tiny model's 4 layers keep their attention and MLP activations without it; with it only
    # what the layers' outside keeps (embeddings, final norm, head) and each layer's input
    assert checkpointed < 0.5 * plain, (checkpointed, plain)
    set_activation_checkpointing(policy.module, False)
    assert not is_checkpointing(policy.module)
    assert saved_bytes(policy.module, tokens) == plain


def test_sampling_is_untouched_and_the_shared_prompt_pass_steps_aside(tiny_dir: Path) -> None:
    policy = PolicyModel.load(tiny_dir, device="cpu", precision="fp32")
    params = SamplingParams(max_new_tokens=8, temperature=0.0)
    plain = [(s.tokens, s.logprobs) for group in sample(policy, ["Q: 5+6=", "Q: 7+1="], params) for s in group]
    assert shares_safely(policy.module)
    set_activation_checkpointing(policy.module, True)
    policy.module.train()  # checkpointing applies only to training-mode passes that record a graph
    assert [(s.tokens, s.logprobs) for group in sample(policy, ["Q: 5+6=", "Q: 7+1="], params) for s in group] == plain
    assert not shares_safely(policy.module)  # the cache is off inside checkpointed layers


def test_each_trainer_sets_it_as_its_config_says(tiny_dir: Path) -> None:
    """A later stage's trainer on the same policy does not inherit an earlier stage's setting."""
    policy = PolicyModel.load(tiny_dir, device="cpu", precision="fp32")
    policy.module.train()
    on = Trainer(policy, TrainerConfig(activation_checkpointing=True))
    assert is_checkpointing(policy.module)
    # its training passes take the setting from its config, read once; it is the model's
    assert shares_safely(policy.module, checkpointing=on.config.activation_checkpointing) is shares_safely(policy.module) is False
    off = Trainer(policy, TrainerConfig())
    assert not is_checkpointing(policy.module)
    assert shares_safely(policy.module, checkpointing=off.config.activation_checkpointing) is shares_safely(policy.module) is True
