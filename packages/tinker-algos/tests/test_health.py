"""Health signals (issue 44): the numbers against hand computations, each warning once per
crossing, and the signals in a real GRPO run's metrics."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from tinker_algos import train
from tinker_algos.records.health import (
    CLIPFRAC_HIGH,
    ENTROPY_COLLAPSE_FRAC,
    GRAD_MIN_HISTORY,
    TIED_STEPS,
    HealthMonitor,
    reward_spread,
)
from tinker_algos.records.metrics import read_metrics
from tinker_algos.sampling.token_draw import token_entropy_B


def test_token_entropy_by_hand():
    V = 8
    logp = torch.log_softmax(torch.stack([torch.zeros(V), torch.tensor([0.0] + [-math.inf] * (V - 1)),
                                          torch.log(torch.tensor([0.5, 0.25, 0.25] + [0.0] * (V - 3)))]), dim=-1)
    # uniform over 8: log 8; one token: 0; (1/2, 1/4, 1/4): 1/2 log 2 + 2 * 1/4 log 4 = 1.5 log 2
    assert token_entropy_B(logp).tolist() == pytest.approx([math.log(8), 0.0, 1.5 * math.log(2)])


def test_reward_spread_by_hand():
    rewards = np.array([1.0, 1.0, 0.0, 1.0, 0.5, 0.5, 0.5, 0.5])
    groups = np.array([0, 0, 1, 1, 2, 2, 3, 3])
    spread, tied = reward_spread(rewards, groups)
    assert spread == pytest.approx((0 + 0.5 + 0 + 0) / 4)  # population std of [0, 1] is 0.5
    assert tied == 0.75


def test_each_warning_is_logged_once_per_crossing():
    lines: list[str] = []
    m = HealthMonitor(lines.append)
    first = 2.0
    steps = [
        {"policy/entropy": first},
        {"policy/entropy": ENTROPY_COLLAPSE_FRAC * first * 0.5},   # crosses: warned
        {"policy/entropy": ENTROPY_COLLAPSE_FRAC * first * 0.4},   # still below: quiet
        {"policy/entropy": first},                                 # back above
        {"policy/entropy": ENTROPY_COLLAPSE_FRAC * first * 0.5},   # crosses again: warned again
    ]
    flags = [m.observe(s).get("health/warn/entropy_collapse") for s in steps]
    assert flags == [None, 1.0, None, None, 1.0]
    assert len(lines) == 2 and all(line.startswith("warning: policy entropy") for line in lines)

    lines.clear()
    m = HealthMonitor(lines.append)
    tied = [1.0] * (TIED_STEPS + 1) + [0.5] + [1.0] * TIED_STEPS
    flags = [m.observe({"health/tied_frac": t}).get("health/warn/all_tied") for t in tied]
    assert flags == [None] * (TIED_STEPS - 1) + [1.0, None, None] + [None] * (TIED_STEPS - 1) + [1.0]
    assert len(lines) == 2

    lines.clear()
    m = HealthMonitor(lines.append)
    norms = [1.0, 2.0, 1.0, 2.0, 1.0]  # median 1.0 after GRAD_MIN_HISTORY steps
    assert len(norms) == GRAD_MIN_HISTORY
    out = [m.observe({"optim/grad_norm": g}) for g in [*norms, 15.0, 0.5]]
    assert [o["health/grad_norm_ratio"] for o in out[:5]] == [1.0] * 5
    assert out[5]["health/grad_norm_ratio"] == pytest.approx(15.0) and out[5]["health/warn/grad_norm_spike"] == 1.0
    assert out[6]["health/grad_norm_ratio"] == pytest.approx(0.5 / 1.5)  # median of 1, 2, 1, 2, 1, 15
    assert m.observe({"losses/clipfrac": CLIPFRAC_HIGH + 0.1})["health/warn/clipfrac_high"] == 1.0
    state = m.state_dict()
    again = HealthMonitor(lines.append)
    again.load_state_dict(state)
    assert again.state_dict() == state


@pytest.mark.usefixtures("algos_and_math_plugins")
def test_a_grpo_run_logs_the_health_signals(tmp_path):
    job = {
        "name": "health", "seed": 0, "model": {"name": "tiny", "threads": 1},
        "env": {"id": "math/arithmetic-v0", "kwargs": {"digits": 1}},
        "algorithm": {"name": "grpo", "steps": 2, "eval_every": 0},
        "rollout": {"prompts_per_step": 2, "group_size": 4, "max_new_tokens": 3},
        "checkpoint": {"every": 0}, "logging": {"tensorboard": False, "plot": False},
    }
    train(job, run_dir=tmp_path)
    rows = read_metrics(tmp_path / "metrics.jsonl")
    for r in rows:
        # the tiny model's vocabulary is small; the entropy of a real distribution lies in (0, log V]
        assert 0 < r["policy/entropy"] <= math.log(512)
        assert 0 <= r["health/tied_frac"] <= 1 and r["health/reward_spread"] >= 0
        assert r["health/grad_norm_ratio"] == 1.0  # fewer than GRAD_MIN_HISTORY steps before
