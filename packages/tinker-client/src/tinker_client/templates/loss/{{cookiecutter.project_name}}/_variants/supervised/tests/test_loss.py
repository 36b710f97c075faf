"""Tests of the supervised loss ``{{ cookiecutter.__registered_name }}``: the conformance kit, then hand-worked numbers."""

from __future__ import annotations

import math
import subprocess
import sys

import pytest
import tinker_core
import torch
from tinker_core.algos import LossInputs
from tinker_core.testing import check_loss

from {{ cookiecutter.__module }}.loss import loss
from {{ cookiecutter.__module }}.plugin import KIND, NAME


@pytest.mark.parametrize("config", [{}, {"gamma": 0.0}, {"gamma": 0.5}])
def test_the_loss_passes_the_conformance_kit(config):
    check_loss(loss, kind=KIND, config=config)


def test_the_installed_plugin_registers_the_loss():
    # Goes through the entry point in pyproject.toml: fails until `pip install -e .`
    entry = tinker_core.get_loss(NAME)
    assert entry.distribution == "{{ cookiecutter.project_name }}"
    assert entry.options["kind"] == "supervised"
    check_loss(NAME)


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


def test_listing_the_plugin_does_not_import_torch():
    code = "import sys, {{ cookiecutter.__module }}.plugin; sys.exit('torch' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", code]).returncode == 0
