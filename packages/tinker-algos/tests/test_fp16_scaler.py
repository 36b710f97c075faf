"""fp16-mixed on the CPU: fp16 autocast with a ``torch.amp.GradScaler`` in the trainer.

An overflowing step is skipped and halves the scale; a normal step matches fp32 (tolerances
measured on the tiny model: loss 3e-5 apart, grad norm 1e-4 relative, the AdamW update 3%
relative; the asserts allow about 10x that); the scaler's state survives a checkpoint exactly.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from tinker_algos.algorithms.update import optim_metrics
from tinker_algos.model.device import resolve_device
from tinker_algos.model.models import PolicyModel
from tinker_algos.training.trainer import Trainer, TrainerConfig

pytestmark = pytest.mark.usefixtures("only_tinker_algos_plugins")

PROMPTS, ANSWERS = ["12+3=", "7+8=", "40+2="], ["15", "15", "42"]


def trainer_in(tiny_dir, precision: str) -> Trainer:
    return Trainer(PolicyModel.load(tiny_dir, device="cpu", precision=precision), TrainerConfig(lr=1e-3))


def step(trainer: Trainer, batch, *, loss_scale: float = 1.0) -> dict[str, float]:
    metrics = trainer.forward_backward(batch, "cross_entropy", loss_scale=loss_scale)
    metrics.update(trainer.optim_step())
    return metrics


def test_fp16_mixed_runs_on_the_cpu_with_a_grad_scaler(tiny_dir):
    spec = resolve_device("cpu", "fp16-mixed")
    assert (spec.param_dtype, spec.autocast_dtype, spec.needs_grad_scaler) == (torch.float32, torch.float16, True)
    assert trainer_in(tiny_dir, "fp16-mixed").scaler is not None
    assert trainer_in(tiny_dir, "fp32").scaler is None
    assert not resolve_device("cpu", "bf16-mixed").needs_grad_scaler


def test_a_normal_fp16_step_matches_fp32(tiny_dir, batch_factory):
    runs = {}
    for precision in ("fp32", "fp16-mixed"):
        trainer = trainer_in(tiny_dir, precision)
        batch = batch_factory(trainer.policy.tokenizer, PROMPTS, ANSWERS)
        before = [p.detach().clone() for p in trainer.params]
        metrics = step(trainer, batch)
        delta = torch.cat([(p.detach() - b).reshape(-1) for p, b in zip(trainer.params, before, strict=True)])
        runs[precision] = (metrics, delta)
    (m32, d32), (m16, d16) = runs["fp32"], runs["fp16-mixed"]
    assert m16["skipped"] == 0.0 and m16["grad_scale"] == 65536.0  # the default initial scale, kept
    assert "grad_scale" not in m32
    assert abs(m16["loss"] - m32["loss"]) < 1e-3
    # the reported norm is of the unscaled gradients, not 65536 times larger
    assert abs(m16["grad_norm"] - m32["grad_norm"]) / m32["grad_norm"] < 1e-3
    assert float((d16 - d32).norm() / d32.norm()) < 0.3


def test_an_overflowing_step_is_skipped_and_halves_the_scale(tiny_dir, batch_factory):
    trainer = trainer_in(tiny_dir, "fp16-mixed")
    batch = batch_factory(trainer.policy.tokenizer, PROMPTS, ANSWERS)
    before = [p.detach().clone() for p in trainer.params]
    # loss * 1e34 is a finite float32, times the scale 65536 it is not: the gradients overflow
    m = step(trainer, batch, loss_scale=1e34)
    assert np.isfinite(m["loss"]) and m["nonfinite"] == 0.0
    assert (m["skipped"], m["skipped_steps"], m["step"], m["grad_scale"]) == (1.0, 1.0, 0.0, 32768.0)
    assert not np.isfinite(m["grad_norm"])
    for p, b in zip(trainer.params, before, strict=True):
        assert torch.equal(p, b)  # the weights are untouched
    assert all(not s for s in trainer.optimizer.state.values())  # and AdamW's moments never started
    assert optim_metrics(m)["optim/grad_scale"] == 32768.0 and optim_metrics(m)["optim/skipped_steps"] == 1.0
    m = step(trainer, batch)  # a normal step then applies at the halved scale
    assert (m["skipped"], m["skipped_steps"], m["step"], m["grad_scale"]) == (0.0, 1.0, 1.0, 32768.0)
    assert any(not torch.equal(p, b) for p, b in zip(trainer.params, before, strict=True))


def test_a_nan_loss_skips_the_step_and_keeps_the_scale(tiny_dir, batch_factory):
    trainer = trainer_in(tiny_dir, "fp16-mixed")
    batch = batch_factory(trainer.policy.tokenizer, PROMPTS, ANSWERS)
    batch.advantages_B_T = np.where(batch.loss_mask_B_T > 0, np.inf, 0.0).astype(np.float32)
    trainer.forward_backward(batch, "importance_sampling")
    m = trainer.optim_step()
    assert (m["skipped"], m["skipped_steps"], m["grad_scale"]) == (1.0, 1.0, 65536.0)


def test_the_scaler_state_resumes_exactly(tiny_dir, batch_factory, tmp_path):
    first = trainer_in(tiny_dir, "fp16-mixed")
    batch = batch_factory(first.policy.tokenizer, PROMPTS, ANSWERS)
    step(first, batch)
    step(first, batch, loss_scale=1e34)  # overflow: scale 32768, one skipped step
    ckpt = first.save_state(tmp_path / "ckpt")
    assert torch.load(ckpt / "trainer_state.pt", weights_only=False)["grad_scaler"]["scale"] == 32768.0
    expected = [step(first, batch), step(first, batch, loss_scale=1e34), step(first, batch)]

    resumed = trainer_in(tiny_dir, "fp16-mixed")
    resumed.load_state(ckpt)
    assert resumed.scaler.get_scale() == 32768.0 and resumed.skipped_steps == 1
    got = [step(resumed, batch), step(resumed, batch, loss_scale=1e34), step(resumed, batch)]
    np.testing.assert_equal(got, expected)  # every metric exactly (NaN grad_norm equal to NaN)
    assert [m["grad_scale"] for m in got] == [32768.0, 16384.0, 16384.0]
    for a, b in zip(first.params, resumed.params, strict=True):
        assert torch.equal(a, b)
    # an fp32 trainer loads the same checkpoint (no scaler there: the state is ignored)
    fp32 = trainer_in(tiny_dir, "fp32")
    fp32.load_state(ckpt)
    assert fp32.step == 1 and fp32.scaler is None
