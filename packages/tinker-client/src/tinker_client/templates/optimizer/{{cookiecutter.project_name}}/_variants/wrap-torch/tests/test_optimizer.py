"""Tests of the optimizer ``{{ cookiecutter.__registered_name }}``: its grouping (the conformance kit and the registration are in test_plugin.py)."""

from __future__ import annotations

import torch

from {{ cookiecutter.__module }}.optimizer import build, split_decay_groups


def test_matrices_are_decayed_and_vectors_are_not():
    layer = torch.nn.Linear(3, 2)
    norm = torch.nn.LayerNorm(2)
    opt = build([*layer.parameters(), *norm.parameters()], weight_decay=0.1)
    decay = {id(p): g["weight_decay"] for g in opt.param_groups for p in g["params"]}
    assert decay[id(layer.weight)] == 0.1
    assert decay[id(layer.bias)] == decay[id(norm.weight)] == decay[id(norm.bias)] == 0.0


def test_a_parameter_groups_own_settings_are_kept():
    w, b = torch.zeros(2, 2), torch.zeros(2)
    decayed, undecayed = split_decay_groups([{"params": [w, b], "lr": 0.5}], weight_decay=0.1)
    assert decayed["params"][0] is w and (decayed["lr"], decayed["weight_decay"]) == (0.5, 0.1)
    assert undecayed["params"][0] is b and (undecayed["lr"], undecayed["weight_decay"]) == (0.5, 0.0)


def test_on_matrices_alone_it_steps_exactly_like_adamw():
    torch.manual_seed(0)
    start = torch.randn(3, 4)
    ours, theirs = start.clone().requires_grad_(True), start.clone().requires_grad_(True)
    opt_ours = build([ours], lr=0.01, weight_decay=0.1)
    opt_theirs = torch.optim.AdamW([theirs], lr=0.01, weight_decay=0.1)
    for _ in range(3):
        for p, opt in ((ours, opt_ours), (theirs, opt_theirs)):
            opt.zero_grad()
            (p**2).sum().backward()
            opt.step()
    assert torch.equal(ours, theirs)
