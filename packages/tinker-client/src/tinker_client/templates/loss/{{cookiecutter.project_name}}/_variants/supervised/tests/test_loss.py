"""Tests of the supervised loss ``{{ cookiecutter.__registered_name }}``: hand-worked numbers (the conformance kit and the registration are in test_plugin.py)."""

from __future__ import annotations

import math

import pytest
import torch
from tinker_core import LossInputs

from {{ cookiecutter.__module }}.loss import loss


def inputs(probs, mask, weights=None):
    return LossInputs(
        logprobs_B_T=torch.tensor([probs]).log().requires_grad_(True),
        mask_B_T=torch.tensor([mask], dtype=torch.float32),
        weights_B_T=None if weights is None else torch.tensor([weights]),
    )


def test_gamma_0_is_the_weighted_cross_entropy():
    x = inputs([0.5, 0.25, 0.1], [1, 1, 0], weights=[1.0, 2.0, 5.0])
    out = loss(x, gamma=0.0)
    torch.testing.assert_close(out.loss_B_T, torch.tensor([[math.log(2), 2 * math.log(4), 0.0]]))


def test_the_focal_weight_and_its_gradient():
    x = inputs([0.5], [1])
    out = loss(x, gamma=2.0)
    assert out.loss_B_T[0, 0].item() == pytest.approx(0.25 * math.log(2))  # (1 - 0.5)^2 * -log 0.5
    out.loss_B_T.sum().backward()
    # d/dlogp of -(1 - e^logp)^2 logp = -(1 - p)^2 + 2 (1 - p) p logp
    assert float(x.logprobs_B_T.grad[0, 0]) == pytest.approx(-0.25 + 2 * 0.5 * 0.5 * math.log(0.5))


def test_well_predicted_tokens_count_less():
    out = loss(inputs([0.9, 0.1], [1, 1]))
    easy, hard = out.loss_B_T[0].tolist()
    assert easy < 0.01 * hard


def test_bad_settings_are_refused():
    with pytest.raises(ValueError, match="gamma"):
        loss(inputs([0.5], [1]), gamma=-1.0)
