"""Tests of the policy loss ``{{ cookiecutter.__registered_name }}``: hand-worked numbers (the conformance kit and the registration are in test_plugin.py)."""

from __future__ import annotations

import math

import pytest
import torch
from tinker_core import LossInputs

from {{ cookiecutter.__module }}.loss import loss


def inputs(logprobs, sampling, advantages, mask):
    return LossInputs(
        logprobs_B_T=torch.tensor([logprobs], requires_grad=True),
        mask_B_T=torch.tensor([mask], dtype=torch.float32),
        sampling_logprobs_B_T=torch.tensor([sampling]),
        advantages_B_T=torch.tensor([advantages]),
    )


def test_on_policy_it_is_reinforce():
    x = inputs([-1.0, -0.5, -2.0], [-1.0, -0.5, -2.0], [2.0, 2.0, 9.0], [1, 1, 0])
    out = loss(x)
    torch.testing.assert_close(out.loss_B_T, torch.tensor([[2.0 * -1.0 * -1, 2.0 * -1.0 * -0.5, 0.0]]))
    (out.loss_B_T * x.mask_B_T).sum().backward()
    torch.testing.assert_close(x.logprobs_B_T.grad, torch.tensor([[-2.0, -2.0, 0.0]]))  # -A on the mask
    assert out.metrics["ratio_mean"] == pytest.approx(1.0)


def test_the_importance_weight_is_capped():
    # the first token became e^1 times likelier since sampling: weight min(e, 2) = 2
    x = inputs([0.0, -1.0], [-1.0, -0.5], [1.0, 1.0], [1, 1])
    out = loss(x, cap=2.0)
    out.loss_B_T.sum().backward()
    torch.testing.assert_close(x.logprobs_B_T.grad, torch.tensor([[-2.0, -math.exp(-0.5)]]))
    assert out.metrics["capped_frac"] == pytest.approx(0.5)


def test_bad_settings_are_refused():
    x = inputs([-1.0], [-1.0], [1.0], [1])
    with pytest.raises(ValueError, match="cap"):
        loss(x, cap=0.0)
    with pytest.raises(ValueError, match="advantages_B_T"):
        loss(LossInputs(logprobs_B_T=x.logprobs_B_T, mask_B_T=x.mask_B_T, sampling_logprobs_B_T=x.logprobs_B_T))
