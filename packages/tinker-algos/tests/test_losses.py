"""Losses (through the plugin registry), KL estimators and loss aggregation, against the oracles."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import tinker_core
import tinker_core.registry
from tinker_algos.builtins.kl import k1 as kl1
from tinker_algos.builtins.kl import k2 as kl2
from tinker_algos.builtins.kl import k3 as kl3
from tinker_algos.builtins.kl import kl_estimate
from tinker_algos.builtins.losses import preference_metrics
from tinker_algos.training.gradient_pass import aggregate
from tinker_core.contracts import AGGREGATION_MODES, LossInputs, LossOutputs

LOSS_NAMES = [
    "cross_entropy",
    "importance_sampling",
    "ppo",
    "cispo",
    "dro",
    "gspo",
    "stable_reinforce",
    "dpo",
    "cdpo",
    "ipo",
    "value",
    "k1",
    "k2",
    "k3",
]


pytestmark = pytest.mark.usefixtures("only_tinker_algos_plugins")


def run_loss(name: str, inputs: LossInputs, **config) -> LossOutputs:
    out = tinker_core.registry.get_loss(name).obj(inputs, **config)
    assert isinstance(out, LossOutputs)
    assert out.loss_B_T.shape == inputs.mask_B_T.shape
    assert all(isinstance(v, float) for v in out.metrics.values())
    return out


def t(x) -> torch.Tensor:
    return torch.tensor(x, dtype=torch.float64)


def policy_inputs(adv, rho, logp=None) -> LossInputs:
    """One token per row with the given advantage and importance ratio."""
    adv, rho = t(adv).reshape(-1, 1), t(rho).reshape(-1, 1)
    lp = (
        t(logp).reshape(-1, 1) if logp is not None else torch.full_like(adv, -1.0)
    ).requires_grad_()
    return LossInputs(
        logprobs_B_T=lp,
        mask_B_T=torch.ones_like(adv),
        sampling_logprobs_B_T=lp.detach() - torch.log(rho),
        advantages_B_T=adv,
    )


# ---- policy losses ------------------------------------------------------------------------


def test_ppo_oracles_with_and_without_dual_clip():
    inputs = policy_inputs([1.0, -1.0, -1.0], [1.5, 0.5, 5.0])
    plain = run_loss("ppo", inputs, eps_low=0.2, dual_clip=None).loss_B_T[:, 0]
    torch.testing.assert_close(plain, t([-1.2, 0.8, 5.0]))
    dual = run_loss("ppo", inputs, eps_low=0.2).loss_B_T[:, 0]  # dual clip c = 3 by default
    torch.testing.assert_close(dual, t([-1.2, 0.8, 3.0]))
    custom = run_loss("ppo", inputs, dual_clip=4.0).loss_B_T[:, 0]
    torch.testing.assert_close(custom, t([-1.2, 0.8, 4.0]))


def test_ppo_asymmetric_clip_and_metrics():
    inputs = policy_inputs([1.0, 1.0, -1.0, -1.0], [1.5, 1.1, 0.5, 5.0])
    out = run_loss("ppo", inputs, eps_low=0.2, eps_high=0.28)
    torch.testing.assert_close(out.loss_B_T[:, 0], t([-1.28, -1.1, 0.8, 3.0]))
    # clipped term active: (A=1, rho=1.5) and (A=-1, rho=0.5); dual clip: (A=-1, rho=5)
    assert out.metrics["clipfrac"] == pytest.approx(0.5)
    assert out.metrics["dual_clipfrac"] == pytest.approx(0.25)
    rho = np.array([1.5, 1.1, 0.5, 5.0])
    assert out.metrics["approx_kl"] == pytest.approx(np.mean(rho - 1 - np.log(rho)))


def test_ppo_gradient_vanishes_where_clipped_and_log_ratio_is_clamped():
    inputs = policy_inputs([1.0, 1.0, 1.0], [1.5, 1.0, math.exp(50.0)])
    out = run_loss("ppo", inputs)
    out.loss_B_T.sum().backward()
    g = inputs.logprobs_B_T.grad[:, 0]
    assert g[0] == 0.0 and g[2] == 0.0  # clipped above 1 + eps: no gradient
    assert g[1] == pytest.approx(-1.0)  # d(-A * rho)/d logp at rho = 1
    assert torch.isfinite(out.loss_B_T).all()


def test_importance_sampling_is_tinkers_unclipped_loss():
    inputs = policy_inputs([2.0, -1.0], [1.5, 0.25])
    out = run_loss("importance_sampling", inputs)
    torch.testing.assert_close(out.loss_B_T[:, 0], t([-3.0, 0.25]))
    out.loss_B_T.sum().backward()
    torch.testing.assert_close(inputs.logprobs_B_T.grad[:, 0], t([-3.0, 0.25]))  # dl/dlogp = -rho*A


def test_cispo_weights_are_clipped_and_stop_gradient():
    inputs = policy_inputs([1.0, 1.0, -2.0], [1.5, 1.1, 0.1], logp=[-0.5, -1.0, -2.0])
    out = run_loss("cispo", inputs, eps_high=0.2)
    w = t([1.2, 1.1, 0.1])  # eps_low = 1 by default: no lower bound
    torch.testing.assert_close(out.loss_B_T[:, 0], -w * t([1.0, 1.0, -2.0]) * t([-0.5, -1.0, -2.0]))
    out.loss_B_T.sum().backward()
    torch.testing.assert_close(inputs.logprobs_B_T.grad[:, 0], -w * t([1.0, 1.0, -2.0]))
    assert out.metrics["clipfrac"] == pytest.approx(1 / 3)


def test_cross_entropy_defaults_weights_to_the_mask():
    lp = t([[-0.5, -1.0, -2.0]]).requires_grad_()
    mask = t([[0.0, 1.0, 1.0]])
    out = run_loss("cross_entropy", LossInputs(logprobs_B_T=lp, mask_B_T=mask))
    torch.testing.assert_close(out.loss_B_T, t([[0.0, 1.0, 2.0]]))
    weighted = run_loss(
        "cross_entropy",
        LossInputs(logprobs_B_T=lp, mask_B_T=mask, weights_B_T=t([[9.0, 0.5, 2.0]])),
    )
    torch.testing.assert_close(weighted.loss_B_T, t([[0.0, 0.5, 4.0]]))
    assert out.metrics["nll"] == pytest.approx(1.5)


def test_value_loss_oracles():
    values = t([[1.0, 1.0, 2.0]]).requires_grad_()
    inputs = LossInputs(
        logprobs_B_T=None,
        mask_B_T=torch.ones(1, 3),
        values_B_T=values,
        old_values_B_T=t([[0.5, 0.9, 1.0]]),
        returns_B_T=t([[2.0, 0.0, 0.0]]),
    )
    out = run_loss("value", inputs, clip_eps=0.2)
    # 0.5*max((1-2)^2, (0.7-2)^2); 0.5*max(1, 1^2); 0.5*max(4, 1.2^2)
    torch.testing.assert_close(out.loss_B_T, t([[0.845, 0.5, 2.0]]))
    assert out.metrics["clipfrac"] == pytest.approx(1 / 3)
    out.loss_B_T.sum().backward()
    torch.testing.assert_close(values.grad, t([[0.0, 1.0, 2.0]]))  # clipped branch: no gradient
    unclipped = run_loss("value", inputs, clip_eps=None)
    torch.testing.assert_close(unclipped.loss_B_T, t([[0.5, 0.5, 2.0]]))


def test_missing_inputs_are_named():
    lp = torch.zeros(1, 2, requires_grad=True)
    with pytest.raises(ValueError, match="sampling_logprobs_B_T"):
        run_loss(
            "ppo",
            LossInputs(logprobs_B_T=lp, mask_B_T=torch.ones(1, 2), advantages_B_T=torch.ones(1, 2)),
        )
    with pytest.raises(ValueError, match="ref_logprobs_B_T"):
        run_loss(
            "dpo",
            LossInputs(
                logprobs_B_T=torch.zeros(2, 2, requires_grad=True), mask_B_T=torch.ones(2, 2)
            ),
        )
    with pytest.raises(ValueError, match="old_values_B_T.*clip_eps=None"):
        run_loss(
            "value",
            LossInputs(
                logprobs_B_T=None,
                mask_B_T=torch.ones(1, 2),
                values_B_T=torch.zeros(1, 2),
                returns_B_T=torch.zeros(1, 2),
            ),
        )
    with pytest.raises(TypeError, match=r"loss 'ppo' got unknown config key\(s\) 'clip'.*eps_low"):
        run_loss("ppo", policy_inputs([1.0], [1.0]), clip=0.2)


# ---- preference losses --------------------------------------------------------------------


def pair_inputs(delta: float = 2.0) -> LossInputs:
    """One pair: the chosen row's summed logp - ref_logp is `delta`, the rejected row's is 0.

    The rows have different lengths and masked prompt/padding positions.
    """
    lp = t([[-9.0, -1.0, -0.5, -2.0], [-9.0, -3.0, -1.0, 0.0]]).requires_grad_()
    mask = t([[0, 1, 1, 1], [0, 1, 1, 0]])
    ref = lp.detach().clone()
    ref[0, 1] -= delta  # chosen: (lp - ref) sums to delta over its trained tokens
    ref[0, 0] += 100.0  # masked differences must not count
    return LossInputs(logprobs_B_T=lp, mask_B_T=mask, ref_logprobs_B_T=ref)


@pytest.mark.parametrize(
    ("name", "config", "expected"),
    [
        ("dpo", {"beta": 0.1}, 0.598139),
        ("cdpo", {"beta": 0.1}, 0.618139),
        ("cdpo", {"beta": 0.1, "label_smoothing": 0.1}, 0.618139),
        ("dpo", {"beta": 0.1, "label_smoothing": 0.1}, 0.618139),
        ("ipo", {"beta": 0.1}, 9.0),
    ],
)
def test_preference_oracles(name, config, expected):
    inputs = pair_inputs(2.0)
    entry = tinker_core.registry.get_loss(name)
    assert entry.loss_kind == "preference"
    out = run_loss(name, inputs, **config)
    assert out.metrics["loss"] == pytest.approx(expected, abs=1e-6)
    # every trained token of both rows carries the pair loss; nothing elsewhere
    on = inputs.mask_B_T > 0
    torch.testing.assert_close(
        out.loss_B_T[on], torch.full((5,), expected, dtype=torch.float64), atol=1e-6, rtol=0
    )
    assert torch.all(out.loss_B_T[~on] == 0)
    assert aggregate(out.loss_B_T, inputs.mask_B_T, "seq-mean-token-mean").item() == pytest.approx(
        expected, abs=1e-6
    )
    assert set(out.metrics) == {"loss", "accuracy", "reward_margin", "chosen_reward", "rejected_reward"}
    assert out.metrics["accuracy"] == 1.0
    assert out.metrics["reward_margin"] == pytest.approx(config["beta"] * 2.0)
    assert out.metrics["chosen_reward"] == pytest.approx(config["beta"] * 2.0) and out.metrics["rejected_reward"] == 0.0


def test_dpo_gradient_through_seq_mean_token_mean_is_the_pair_gradient():
    beta = 0.1
    losses = []
    for delta in (2.0, -1.0):  # two pairs stacked: rows 0/1 and 2/3
        losses.append(pair_inputs(delta))
    lp = torch.cat([x.logprobs_B_T.detach() for x in losses]).requires_grad_()
    inputs = LossInputs(
        lp,
        torch.cat([x.mask_B_T for x in losses]),
        ref_logprobs_B_T=torch.cat([x.ref_logprobs_B_T for x in losses]),
    )
    out = run_loss("dpo", inputs, beta=beta)
    aggregate(out.loss_B_T, inputs.mask_B_T, "seq-mean-token-mean").backward()
    # mean over 2 pairs of -log sigmoid(beta * Delta): d/dlogp(chosen) = -beta * sigmoid(-beta*Delta) / 2
    for pair, delta in enumerate((2.0, -1.0)):
        g = beta * torch.sigmoid(t(-beta * delta)) / 2
        chosen, rejected = lp.grad[2 * pair], lp.grad[2 * pair + 1]
        torch.testing.assert_close(chosen, -g * inputs.mask_B_T[2 * pair])
        torch.testing.assert_close(rejected, g * inputs.mask_B_T[2 * pair + 1])
    assert out.metrics["accuracy"] == 0.5


def test_preference_losses_check_their_batch_layout():
    lp = torch.zeros(3, 2, requires_grad=True)
    with pytest.raises(ValueError, match="even number of rows"):
        run_loss("dpo", LossInputs(lp, torch.ones(3, 2), ref_logprobs_B_T=torch.zeros(3, 2)))
    mask = t([[1, 1], [0, 0]])
    with pytest.raises(ValueError, match=r"row\(s\) \[1\] have no trained token"):
        run_loss(
            "ipo",
            LossInputs(
                torch.zeros(2, 2, requires_grad=True), mask, ref_logprobs_B_T=torch.zeros(2, 2)
            ),
        )


# ---- KL ------------------------------------------------------------------------------------


KL_ORACLE = {"k1": 0.693147, "k2": 0.240227, "k3": 0.193147}


@pytest.mark.parametrize("name", ["k1", "k2", "k3"])
def test_kl_oracles_through_the_registry(name):
    lp = torch.full((1, 2), math.log(0.5), dtype=torch.float64, requires_grad=True)
    ref = torch.full((1, 2), math.log(0.25), dtype=torch.float64)
    entry = tinker_core.registry.get_loss(name)
    assert entry.loss_kind == "kl"
    out = run_loss(name, LossInputs(lp, t([[1.0, 0.0]]), ref_logprobs_B_T=ref))
    assert out.loss_B_T[0, 0].item() == pytest.approx(KL_ORACLE[name], abs=1e-6)
    assert out.loss_B_T[0, 1].item() == 0.0
    assert out.metrics["kl"] == pytest.approx(KL_ORACLE[name], abs=1e-6)


def test_kl_functions_on_numpy_torch_and_floats():
    lp, ref = math.log(0.5), math.log(0.25)
    for fn, name in ((kl1, "k1"), (kl2, "k2"), (kl3, "k3")):
        assert float(fn(lp, ref)) == pytest.approx(KL_ORACLE[name], abs=1e-6)
        arr = fn(np.array([lp, 0.0]), np.array([ref, 0.0]))
        assert isinstance(arr, np.ndarray) and arr[1] == 0.0
        ten = fn(torch.tensor([lp]), torch.tensor([ref]))
        assert isinstance(ten, torch.Tensor)
        assert ten.item() == pytest.approx(KL_ORACLE[name], abs=1e-6)
        assert float(kl_estimate(lp, ref, name)) == pytest.approx(KL_ORACLE[name], abs=1e-6)
    with pytest.raises(ValueError, match="unknown KL estimator 'k4'"):
        kl_estimate(lp, ref, "k4")
    assert np.isfinite(kl3(np.array([-500.0]), np.array([0.0]))).all()  # clamped exponent


# ---- aggregation --------------------------------------------------------------------------

AGG_ORACLE = {
    "token-mean": 2.5,
    "seq-mean-token-mean": 3.0,
    "seq-mean-token-sum": 5.0,
    "seq-mean-token-sum-norm": 5.0 / 3.0,
}


@pytest.mark.parametrize("mode", AGGREGATION_MODES)
def test_aggregation_oracles(mode):
    loss = [[1.0, 2.0, 3.0], [4.0, 0.0, 0.0]]
    mask = [[1.0, 1.0, 1.0], [1.0, 0.0, 0.0]]
    out = aggregate(torch.tensor(loss), torch.tensor(mask), mode)
    assert out.ndim == 0 and out.item() == pytest.approx(AGG_ORACLE[mode], abs=1e-6)
    assert aggregate(np.array(loss), np.array(mask), mode) == pytest.approx(
        AGG_ORACLE[mode], abs=1e-9
    )
    # B' ignores fully masked rows; masked NaN/inf never leak
    loss3 = torch.tensor(loss + [[float("nan"), float("inf"), 7.0]])
    mask3 = torch.tensor(mask + [[0.0, 0.0, 0.0]])
    assert aggregate(loss3, mask3, mode).item() == pytest.approx(AGG_ORACLE[mode], abs=1e-6)


def test_aggregation_constant_T_and_empty_batch():
    loss = torch.tensor([[1.0, 2.0, 3.0], [4.0, 0.0, 0.0]], requires_grad=True)
    mask = torch.tensor([[1.0, 1.0, 1.0], [1.0, 0.0, 0.0]])
    assert aggregate(loss, mask, "seq-mean-token-sum-norm", T=10).item() == pytest.approx(0.5)
    empty = aggregate(loss, torch.zeros(2, 3), "seq-mean-token-mean")
    assert empty.item() == 0.0
    empty.backward()
    assert torch.all(loss.grad == 0)


def test_aggregation_errors_name_the_mode_and_the_allowed_modes():
    with pytest.raises(
        ValueError, match=r"unknown loss aggregation mode 'mean'.*token-mean, seq-mean-token-mean"
    ):
        aggregate(torch.zeros(1, 1), torch.ones(1, 1), "mean")
    with pytest.raises(ValueError, match="one 2-D shape"):
        aggregate(torch.zeros(1, 2), torch.ones(1, 3), "token-mean")


# ---- gradients at masked positions ---------------------------------------------------------


def full_inputs(
    name: str, logprobs: torch.Tensor, mask: torch.Tensor, values: torch.Tensor
) -> LossInputs:
    g = torch.Generator().manual_seed(0)
    shape = mask.shape
    return LossInputs(
        logprobs_B_T=logprobs,
        mask_B_T=mask,
        sampling_logprobs_B_T=logprobs.detach()
        + 0.3 * torch.randn(shape, generator=g, dtype=logprobs.dtype),
        advantages_B_T=torch.randn(shape, generator=g, dtype=logprobs.dtype),
        ref_logprobs_B_T=logprobs.detach()
        + 0.3 * torch.randn(shape, generator=g, dtype=logprobs.dtype),
        weights_B_T=mask.clone(),
        values_B_T=values,
        old_values_B_T=values.detach()
        + 0.3 * torch.randn(shape, generator=g, dtype=logprobs.dtype),
        returns_B_T=torch.randn(shape, generator=g, dtype=logprobs.dtype),
    )


@pytest.mark.parametrize("name", LOSS_NAMES)
@pytest.mark.parametrize("mode", AGGREGATION_MODES)
def test_gradient_wrt_logits_is_exactly_zero_at_masked_positions(name, mode):
    """Prompt, environment and padding tokens get exactly zero gradient, and trained ones finite."""
    torch.manual_seed(0)
    B, T, V = 4, 6, 11
    logits = torch.randn(B, T, V, dtype=torch.float64, requires_grad=True)
    targets = torch.randint(0, V, (B, T))
    logprobs = torch.log_softmax(logits, -1).gather(-1, targets[..., None])[..., 0]
    # padding positions hold -inf logprobs, as a careless trainer might leave them
    mask = torch.tensor(
        [[0, 0, 1, 1, 0, 1], [0, 1, 1, 0, 0, 0], [0, 0, 0, 1, 1, 1], [1, 1, 0, 1, 0, 0]],
        dtype=torch.float64,
    )
    padding = torch.zeros(B, T, dtype=torch.bool)
    padding[3, 4:] = True  # masked in row 3
    logprobs = torch.where(padding, torch.tensor(float("-inf"), dtype=torch.float64), logprobs)
    values = torch.randn(B, T, dtype=torch.float64, requires_grad=True)
    out = run_loss(name, full_inputs(name, logprobs, mask, values))
    assert torch.all(out.loss_B_T[mask == 0] == 0)
    assert torch.isfinite(out.loss_B_T).all()
    aggregate(out.loss_B_T, mask, mode).backward()
    grad = values.grad if name == "value" else logits.grad.abs().sum(-1)
    assert torch.isfinite(grad).all()
    assert torch.all(grad[mask == 0] == 0)
    assert grad[mask > 0].abs().sum() > 0


# ---- properties ---------------------------------------------------------------------------

floats = st.floats(-3.0, 3.0, allow_nan=False)


@settings(max_examples=80, deadline=None)
@given(
    adv=floats,
    log_rho=st.floats(-30.0, 30.0, allow_nan=False),
    eps_low=st.floats(0.0, 0.5),
    eps_high=st.floats(0.0, 0.5),
)
def test_ppo_is_bounded_and_agrees_with_importance_sampling_inside_the_trust_region(
    adv, log_rho, eps_low, eps_high
):
    inputs = policy_inputs([adv], [1.0], logp=[-1.0])
    inputs.sampling_logprobs_B_T = t([[-1.0 - log_rho]])
    loss = run_loss("ppo", inputs, eps_low=eps_low, eps_high=eps_high).loss_B_T.item()
    assert math.isfinite(loss)
    rho = math.exp(max(-20.0, min(20.0, log_rho)))
    if adv < 0:
        assert loss <= 3.0 * -adv + 1e-9  # dual clip
    else:
        assert loss >= -adv * (1 + eps_high) - 1e-9
    if 1 - eps_low <= rho <= 1 + eps_high:
        assert loss == pytest.approx(-adv * rho, rel=1e-9, abs=1e-12)


def test_preference_metrics_are_one_function_for_numpy_and_torch():
    """The losses and the DPO algorithm report the same statistics under the same keys."""
    chosen, rejected = [2.0, -1.0, 0.5], [0.0, 1.0, 0.5]
    expected = {"accuracy": 1 / 3, "reward_margin": 0.0, "chosen_reward": 0.1 * 1.5 / 3, "rejected_reward": 0.1 * 1.5 / 3}
    for c, r in ((np.array(chosen), np.array(rejected)), (torch.tensor(chosen), torch.tensor(rejected))):
        assert preference_metrics(c, r, beta=0.1) == pytest.approx(expected)


def test_the_losses_declared_to_vanish_at_zero_advantage_do_and_the_others_do_not() -> None:
    """``vanishes_at_zero_advantage`` (what the zero-advantage fast path trusts) is a promise about
    the math: loss and gradient exactly 0 where ``A = 0``, whatever the logprobs."""
    g = torch.Generator().manual_seed(0)
    entries = [e for e in tinker_core.registry.get_registry("losses").entries() if e.loss_kind == "policy"]
    declared = {e.name for e in entries if e.vanishes_at_zero_advantage}
    assert declared == {"importance_sampling", "ppo", "cispo", "gspo"}
    # stable_reinforce vanishes only with kl_coeff = 0 (its default): its KL term does not
    configs = {"stable_reinforce": {"kl_coeff": 0.1}}
    for entry in entries:
        lp = (-torch.rand(3, 5, generator=g, dtype=torch.float64) * 3).requires_grad_(True)
        old = -torch.rand(3, 5, generator=g, dtype=torch.float64) * 3
        mask = torch.ones(3, 5, dtype=torch.float64)
        out = run_loss(entry.name, LossInputs(lp, mask, sampling_logprobs_B_T=old, advantages_B_T=torch.zeros_like(mask)),
                       **configs.get(entry.name, {}))
        out.loss_B_T.sum().backward()
        vanishes = bool(torch.all(out.loss_B_T == 0)) and bool(torch.all(lp.grad == 0))
        assert vanishes == (entry.name in declared), entry.name


# ---- GSPO and StableReinforce --------------------------------------------------------------


def test_gspo_oracle_sequence_ratio_is_the_geometric_mean_and_clips_whole_rows():
    # token log-ratios [0.2, -0.1, 0.5] -> sequence log-ratio 0.2, s = e^0.2 = 1.221403 on every token
    lp = t([[-1.0, -0.5, -2.0], [-1.0, -0.5, -2.0], [-1.0, -2.0, -3.0]]).requires_grad_()
    old = t([[-1.2, -0.4, -2.5], [-1.2, -0.4, -2.5], [-6.0, -2.1, -2.9]])
    adv = t([[1.0, 1.0, 1.0], [-1.0, -1.0, -1.0], [2.0, 2.0, 2.0]])
    ratio_mask = t([[1.0, 1.0, 1.0], [1.0, 1.0, 1.0], [0.0, 1.0, 1.0]])  # row 3: mean(0.1, -0.1) = 0 -> s = 1
    inputs = LossInputs(logprobs_B_T=lp, mask_B_T=torch.ones_like(lp), sampling_logprobs_B_T=old,
                        advantages_B_T=adv, weights_B_T=ratio_mask)
    out = run_loss("gspo", inputs, eps_low=0.2)
    s = math.exp(0.2)
    # A = 1: max(-s, -1.2) = -1.2 (clipped, no gradient); A = -1: max(s, 1.2) = s (gradient -A * s)
    torch.testing.assert_close(out.loss_B_T, t([[-1.2] * 3, [s] * 3, [-2.0] * 3]))
    out.loss_B_T.sum().backward()
    torch.testing.assert_close(lp.grad, t([[0.0] * 3, [s] * 3, [-2.0] * 3]))
    assert out.metrics["clipfrac"] == pytest.approx(3 / 9)
    assert out.metrics["seq_ratio_mean"] == pytest.approx((2 * s + 1) / 3)


def test_gspo_ratio_defaults_to_the_mask_and_padding_is_out():
    lp = t([[-1.0, -0.5, 0.0]]).requires_grad_()
    old = t([[-1.1, -0.4, 7.0]])  # log-ratios [0.1, -0.1] on the mask; the padded 7.0 never counts
    inputs = LossInputs(logprobs_B_T=lp, mask_B_T=t([[1.0, 1.0, 0.0]]), sampling_logprobs_B_T=old,
                        advantages_B_T=t([[1.0, 1.0, 0.0]]))
    out = run_loss("gspo", inputs)
    torch.testing.assert_close(out.loss_B_T, t([[-1.0, -1.0, 0.0]]))


def test_stable_reinforce_oracle_masks_tokens_outside_the_ratio_band():
    inputs = policy_inputs([1.0, 1.0, -1.0], [1.5, 3.0, 0.4], logp=[-0.5, -1.0, -2.0])
    out = run_loss("stable_reinforce", inputs)  # band [0.5, 2]: only the first token is kept
    torch.testing.assert_close(out.loss_B_T[:, 0], t([0.75, 0.0, 0.0]))  # -1.5 * 1 * -0.5
    out.loss_B_T.sum().backward()
    torch.testing.assert_close(inputs.logprobs_B_T.grad[:, 0], t([-1.5, 0.0, 0.0]))
    assert out.metrics["maskfrac"] == pytest.approx(2 / 3)


def test_stable_reinforce_kl_coeff_adds_the_k3_penalty():
    inputs = policy_inputs([1.0, 1.0, -1.0], [1.5, 3.0, 0.4], logp=[-0.5, -1.0, -2.0])
    out = run_loss("stable_reinforce", inputs, kl_coeff=0.1)
    k3 = t([0.5 - math.log(1.5), 2.0 - math.log(3.0), -0.6 - math.log(0.4)])
    torch.testing.assert_close(out.loss_B_T[:, 0], t([0.75, 0.0, 0.0]) + 0.1 * k3)
    out.loss_B_T.sum().backward()  # d k3 / d lp = rho - 1
    torch.testing.assert_close(inputs.logprobs_B_T.grad[:, 0], t([-1.5 + 0.05, 0.2, -0.06]))
    with pytest.raises(ValueError, match="ratio_low"):
        run_loss("stable_reinforce", inputs, ratio_low=1.5)
