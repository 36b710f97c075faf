"""Tests of the optimizer ``{{ cookiecutter.__registered_name }}``: hand-worked steps (the conformance kit and the registration are in test_plugin.py)."""

from __future__ import annotations

import pytest
import torch

from {{ cookiecutter.__module }}.optimizer import build


def steps(grad, n, **config):
    """``n`` steps from p = [1, -2] with a constant gradient; the parameter after each."""
    p = torch.tensor([1.0, -2.0], requires_grad=True)
    opt = build([p], **config)
    out = []
    for _ in range(n):
        p.grad = torch.tensor(grad)
        opt.step()
        out.append(p.detach().clone())
    return out


def test_momentum_accumulates_the_gradients():
    first, second = steps([0.5, 1.0], 2, lr=0.1, momentum=0.9)
    torch.testing.assert_close(first, torch.tensor([0.95, -2.1]))                # b = g
    torch.testing.assert_close(second, torch.tensor([0.95 - 0.095, -2.1 - 0.19]))  # b = 1.9 g


def test_weight_decay_is_decoupled_from_the_gradient():
    (first,) = steps([0.5, 1.0], 1, lr=0.1, momentum=0.9, weight_decay=0.5)
    torch.testing.assert_close(first, torch.tensor([0.95 - 0.05, -1.9 - 0.1]))  # p *= 1 - lr*wd, then - lr*g


def test_bad_settings_are_refused():
    with pytest.raises(ValueError, match="momentum"):
        build([torch.zeros(1, requires_grad=True)], momentum=1.5)
    with pytest.raises(TypeError, match="betas"):
        build([torch.zeros(1, requires_grad=True)], betas=(0.9, 0.99))
