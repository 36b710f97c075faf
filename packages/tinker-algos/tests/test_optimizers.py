"""Optimizers through the plugin registry: learning, Lion's exact update, config errors, state."""

from __future__ import annotations

import copy

import pytest
import torch

import tinker_core
import tinker_core.registry

OPTIMIZER_CONFIGS = {
    "adamw": {"lr": 0.1, "weight_decay": 0.0},
    "sgd": {"lr": 0.1, "momentum": 0.9, "nesterov": True},
    "lion": {"lr": 0.05},
}


pytestmark = pytest.mark.usefixtures("only_tinker_algos_plugins")


def make(name: str, params, **config) -> torch.optim.Optimizer:
    opt = tinker_core.registry.get_optimizer(name).obj(params, **config)
    assert isinstance(opt, torch.optim.Optimizer)
    return opt


def quadratic_run(name: str, steps: int = 200, **config) -> tuple[float, float, torch.Tensor]:
    target = torch.tensor([1.0, -2.0, 0.5, 3.0])
    x = torch.zeros(4, requires_grad=True)
    opt = make(name, [x], **config)

    def f() -> torch.Tensor:
        return ((x - target) ** 2).sum()

    start = f().item()
    for _ in range(steps):
        opt.zero_grad()
        f().backward()
        opt.step()
    return start, f().item(), x.detach().clone()


@pytest.mark.parametrize("name", sorted(OPTIMIZER_CONFIGS))
def test_optimizers_minimise_a_quadratic(name):
    start, end, _ = quadratic_run(name, **OPTIMIZER_CONFIGS[name])
    assert start == pytest.approx(14.25)
    assert end < 0.01 * start


@pytest.mark.parametrize("name", sorted(OPTIMIZER_CONFIGS))
def test_optimizers_are_deterministic(name):
    a = quadratic_run(name, steps=20, **OPTIMIZER_CONFIGS[name])[2]
    b = quadratic_run(name, steps=20, **OPTIMIZER_CONFIGS[name])[2]
    assert torch.equal(a, b)


def test_lion_matches_a_hand_computed_update():
    p = torch.tensor([1.0, -2.0, 0.5], dtype=torch.float64, requires_grad=True)
    opt = make("lion", [p], lr=0.1, betas=(0.9, 0.99), weight_decay=0.1)
    # step 1: m = 0, so c = 0.1 * g1 and the update is sign(g1)
    p.grad = torch.tensor([0.3, -0.1, 0.0], dtype=torch.float64)
    opt.step()
    # p1 = p0 * (1 - 0.1 * 0.1) - 0.1 * sign(g1)
    torch.testing.assert_close(p.detach(), torch.tensor([0.89, -1.88, 0.495], dtype=torch.float64))
    # m1 = 0.99 * 0 + 0.01 * g1 = [0.003, -0.001, 0]
    # step 2: c = 0.9 * m1 + 0.1 * g2 = [0.0017, -0.0509, 0.02] -> sign [+1, -1, +1]; the first
    # coordinate follows the momentum although g2 points the other way
    p.grad = torch.tensor([-0.01, -0.5, 0.2], dtype=torch.float64)
    opt.step()
    torch.testing.assert_close(
        p.detach(), torch.tensor([0.7811, -1.7612, 0.39005], dtype=torch.float64)
    )
    torch.testing.assert_close(
        opt.state[p]["exp_avg"], torch.tensor([0.00287, -0.00599, 0.002], dtype=torch.float64)
    )


def test_lion_parameter_groups_and_state_dict_round_trip():
    torch.manual_seed(0)
    w1, w2 = torch.randn(3, requires_grad=True), torch.randn(2, requires_grad=True)
    opt = make("lion", [{"params": [w1], "lr": 0.1}, {"params": [w2]}], lr=0.01, weight_decay=0.5)
    assert [g["lr"] for g in opt.param_groups] == [0.1, 0.01]

    def step(o, a, b):
        o.zero_grad()
        ((a**2).sum() + (b**3).sum()).backward()
        o.step()

    step(opt, w1, w2)
    # a copy restored from the state dict continues exactly like the original
    v1, v2 = w1.detach().clone().requires_grad_(), w2.detach().clone().requires_grad_()
    opt2 = make("lion", [{"params": [v1], "lr": 0.1}, {"params": [v2]}], lr=0.01, weight_decay=0.5)
    opt2.load_state_dict(copy.deepcopy(opt.state_dict()))
    for _ in range(3):
        step(opt, w1, w2)
        step(opt2, v1, v2)
    assert torch.equal(w1, v1) and torch.equal(w2, v2)


def test_lion_skips_parameters_without_gradients():
    a, b = torch.ones(2, requires_grad=True), torch.ones(2, requires_grad=True)
    opt = make("lion", [a, b], lr=0.1)
    a.grad = torch.ones(2)
    opt.step()
    assert torch.equal(b.detach(), torch.ones(2)) and b not in opt.state


def test_factories_pass_their_config_through():
    p = [torch.zeros(2, requires_grad=True)]
    adamw = make("adamw", p, lr=0.5, betas=[0.8, 0.9], eps=1e-6, weight_decay=0.0, amsgrad=True)
    assert isinstance(adamw, torch.optim.AdamW)
    group = adamw.param_groups[0]
    assert (group["lr"], group["betas"], group["eps"], group["weight_decay"], group["amsgrad"]) == (
        0.5,
        (0.8, 0.9),
        1e-6,
        0.0,
        True,
    )
    sgd = make("sgd", p, lr=0.2, momentum=0.5, weight_decay=0.1, nesterov=True)
    assert isinstance(sgd, torch.optim.SGD)
    assert (sgd.param_groups[0]["momentum"], sgd.param_groups[0]["nesterov"]) == (0.5, True)


@pytest.mark.parametrize("name", sorted(OPTIMIZER_CONFIGS))
def test_unknown_config_keys_are_refused_with_the_allowed_keys(name):
    with pytest.raises(
        TypeError,
        match=rf"optimizer '{name}' got unknown config key\(s\) 'lrr'.*allowed keys are lr",
    ):
        make(name, [torch.zeros(1, requires_grad=True)], lrr=0.1)


@pytest.mark.parametrize(
    ("name", "config", "message"),
    [
        ("sgd", {"nesterov": True}, "nesterov=True needs momentum > 0"),
        ("adamw", {"betas": (0.9, 1.0)}, "beta2 must be in"),
        ("lion", {"betas": 0.9}, "betas must be two numbers"),
        ("lion", {"lr": 0.0}, "lr must be > 0"),
        ("adamw", {"weight_decay": -1.0}, "weight_decay must be >= 0"),
    ],
)
def test_bad_values_are_explained(name, config, message):
    with pytest.raises(ValueError, match=message):
        make(name, [torch.zeros(1, requires_grad=True)], **config)


def test_adamw_fused_asks_for_the_fused_kernel_with_the_same_update_and_restores_its_choice():
    from tinker_algos.builtins.optimizers import fused_supported

    torch.manual_seed(0)
    init = [torch.randn(16, 8), torch.randn(8)]
    grads = [[torch.randn_like(t) for t in init] for _ in range(5)]
    runs = {}
    for fused in (True, None):
        ps = [torch.nn.Parameter(t.clone()) for t in init]
        groups = [{"params": ps[:1], "weight_decay": 0.1}, {"params": ps[1:], "weight_decay": 0.0}]
        opt = make("adamw", groups, lr=0.05, betas=(0.9, 0.99), eps=1e-8, weight_decay=0.1, fused=fused is True)
        assert bool(opt.param_groups[0]["fused"]) is bool(fused)
        for g in grads:
            for p, gp in zip(ps, g, strict=True):
                p.grad = gp.clone()
            opt.step()
        runs[fused] = (ps, opt)
    for a, b in zip(runs[True][0], runs[None][0], strict=True):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)  # the same AdamW update, one kernel
    # a checkpoint's state brings its kernel choice back: a resumed run keeps the kernel it ran with
    ps, opt = runs[True]
    fresh = [torch.nn.Parameter(p.detach().clone()) for p in ps]
    again = make("adamw", [{"params": fresh[:1]}, {"params": fresh[1:]}], lr=0.05, fused=True)
    assert again.param_groups[0]["fused"]
    again.load_state_dict(copy.deepcopy(runs[None][1].state_dict()))
    assert not again.param_groups[0]["fused"]
    # the default is the unfused path (the documented learning results were measured on it)
    assert not make("adamw", [torch.nn.Parameter(torch.zeros(2))], lr=0.05).param_groups[0]["fused"]
    # integer tensors (or none) have no fused kernel: asking for it names the field
    assert fused_supported([torch.zeros(2)]) and not fused_supported([torch.zeros(2, dtype=torch.long)]) and not fused_supported([])
    with pytest.raises(ValueError, match="'fused: true'"):
        make("adamw", [torch.zeros(2, dtype=torch.long)], lr=0.05, fused=True)
