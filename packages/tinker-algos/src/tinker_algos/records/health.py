"""Health signals of an RL stage: a few numbers per step that say whether the policy still has
something to learn from, and one warning line each time one crosses its threshold.

Per step (GRPO stages; in ``metrics.jsonl``, the trackers and the viewer like any metric):

* ``policy/entropy`` -- the policy's mean token entropy (nats, temperature 1) over the step's
  sampled tokens, from the sampler's own log-probabilities (logged by the rollout);
* ``health/reward_spread`` -- the mean over groups of the reward's standard deviation within the
  group (0: every group tied, no group-relative signal);
* ``health/tied_frac`` -- the share of the trained groups whose rewards all tie;
* ``health/grad_norm_ratio`` -- ``optim/grad_norm`` over the median of the previous
  :data:`GRAD_WINDOW` steps' (from :data:`GRAD_MIN_HISTORY` of them; 1 before);
* ``losses/clipfrac`` (clipped losses) and ``rollout/logprob_mean_abs_diff`` / ``kl/sample_train``
  (the sampler-trainer gap, :func:`logprob_agreement`) come from the update itself.

Warnings (one ``warning:`` line in the run's log, and ``health/warn/<name>: 1`` in that step's
metrics), each once per crossing -- given when the signal crosses its threshold, given again only
after it came back:

* ``entropy_collapse``: ``policy/entropy`` below :data:`ENTROPY_COLLAPSE_FRAC` of its value at
  the stage's first step;
* ``all_tied``: every trained group tied for :data:`TIED_STEPS` steps in a row;
* ``grad_norm_spike``: ``health/grad_norm_ratio`` above :data:`GRAD_SPIKE_RATIO`;
* ``clipfrac_high``: ``losses/clipfrac`` above :data:`CLIPFRAC_HIGH`.

The monitor's memory is checkpointed with the stage, so a resumed run logs what an uninterrupted
one would.

**The tied-rewards hint** (:class:`TiedRewardsHint`): when every group's rewards tied for
:data:`FLAT_STEPS` steps in a row the stage logs :data:`FLAT_HINT` once, a ``hint:`` line naming
the likely fixes. (It lived in ``tinker_algos.algorithms.hints`` until wave 4; that path still
imports this module.)
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
from numpy.typing import ArrayLike

ENTROPY_COLLAPSE_FRAC = 0.1
"""``entropy_collapse``: the entropy fell below this share of the stage's first step's."""
TIED_STEPS = 3
"""``all_tied``: every group's rewards tied for this many steps in a row."""
GRAD_WINDOW = 10
GRAD_MIN_HISTORY = 5
GRAD_SPIKE_RATIO = 10.0
"""``grad_norm_spike``: the grad norm is this many times the recent median."""
CLIPFRAC_HIGH = 0.3
"""``clipfrac_high``: more than this share of tokens clipped (the update moves the policy too far
from the sampler's per step: lower the lr or raise the clip range)."""

MESSAGES = {
    "entropy_collapse": "warning: policy entropy {value:.4f} nats is below {frac:.0%} of the stage's first step's ({first:.4f}): "
                        "the policy is collapsing onto few tokens (raise rollout.temperature, lower the lr, or add a KL term)",
    "all_tied": "warning: every group's rewards tied for {n} steps in a row: no group-relative signal (see the hint; "
                "rollout.dynamic_sampling refills the step with groups that differ)",
    "grad_norm_spike": "warning: optim/grad_norm {value:.3g} is {ratio:.1f}x the median of the last steps' (above {limit:g}x)",
    "clipfrac_high": "warning: losses/clipfrac {value:.3f} is above {limit:g}: the update moves far from the sampler's policy",
}


def reward_spread(rewards_B: np.ndarray, group_ids_B: np.ndarray) -> tuple[float, float]:
    """``(mean within-group standard deviation of the rewards, share of groups whose rewards tie)``."""
    rewards_B, group_ids_B = np.asarray(rewards_B, dtype=np.float64), np.asarray(group_ids_B)
    groups = [rewards_B[group_ids_B == g] for g in np.unique(group_ids_B)]
    if not groups:
        return 0.0, 0.0
    return float(np.mean([g.std() for g in groups])), float(np.mean([np.ptp(g) == 0 for g in groups]))


class HealthMonitor:
    """Adds the health metrics to a step's metrics and logs each warning once per crossing."""

    def __init__(self, log: Callable[[str], None]) -> None:
        self.log = log
        self.first_entropy: float | None = None
        self.grad_norms: list[float] = []
        self.tied_steps = 0
        self.active: set[str] = set()

    def observe(self, metrics: dict[str, float]) -> dict[str, float]:
        """The health metrics and warning flags for one step's ``metrics`` (read, not changed)."""
        out: dict[str, float] = {}
        crossed: dict[str, dict[str, Any]] = {}
        entropy = metrics.get("policy/entropy")
        if entropy is not None:
            if self.first_entropy is None:
                self.first_entropy = float(entropy)
            if self.first_entropy > 0 and entropy < ENTROPY_COLLAPSE_FRAC * self.first_entropy:
                crossed["entropy_collapse"] = {"value": entropy, "frac": ENTROPY_COLLAPSE_FRAC, "first": self.first_entropy}
        if "health/tied_frac" in metrics:
            self.tied_steps = self.tied_steps + 1 if metrics["health/tied_frac"] >= 1.0 else 0
            if self.tied_steps >= TIED_STEPS:
                crossed["all_tied"] = {"n": TIED_STEPS}
        grad = metrics.get("optim/grad_norm")
        if grad is not None and np.isfinite(grad):
            recent = [g for g in self.grad_norms[-GRAD_WINDOW:] if g > 0]
            ratio = float(grad) / float(np.median(recent)) if len(recent) >= GRAD_MIN_HISTORY else 1.0
            out["health/grad_norm_ratio"] = ratio
            if ratio > GRAD_SPIKE_RATIO:
                crossed["grad_norm_spike"] = {"value": grad, "ratio": ratio, "limit": GRAD_SPIKE_RATIO}
            self.grad_norms = [*self.grad_norms, float(grad)][-GRAD_WINDOW:]
        clipfrac = metrics.get("losses/clipfrac")
        if clipfrac is not None and clipfrac > CLIPFRAC_HIGH:
            crossed["clipfrac_high"] = {"value": clipfrac, "limit": CLIPFRAC_HIGH}
        for name, values in crossed.items():
            if name not in self.active:
                self.log(MESSAGES[name].format(**values))
                out[f"health/warn/{name}"] = 1.0
        self.active = set(crossed)
        return out

    def state_dict(self) -> dict[str, Any]:
        return {"health": {"first_entropy": self.first_entropy, "grad_norms": list(self.grad_norms),
                           "tied_steps": self.tied_steps, "active": sorted(self.active)}}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        saved = state.get("health")
        if saved is not None:
            self.first_entropy = saved["first_entropy"]
            self.grad_norms = [float(g) for g in saved["grad_norms"]]
            self.tied_steps = int(saved["tied_steps"])
            self.active = set(saved["active"])


FLAT_STEPS = 3
"""Steps in a row with every group's rewards tied before the stage says so (once)."""
FLAT_HINT = (
    "hint: for {n} steps in a row every group's episodes got the same reward, so every advantage "
    "is 0 and the policy learns nothing from the rewards (optim/grad_norm 0). Likely fixes: "
    "warm-start with an SFT stage, a larger rollout.group_size, an easier env (env.kwargs), or "
    "reward shaping (partial credit)."
)


def all_groups_tied(rewards_B: np.ndarray, group_ids_B: np.ndarray) -> bool:
    """Whether the episodes of each group all got the same reward (no group has a learning signal)."""
    rewards_B, group_ids_B = np.asarray(rewards_B), np.asarray(group_ids_B)
    return all(np.ptp(rewards_B[group_ids_B == g]) == 0 for g in np.unique(group_ids_B))


class TiedRewardsHint:
    """Logs :data:`FLAT_HINT` through ``log`` once, when every group's rewards tied for
    :data:`FLAT_STEPS` steps in a row (a group-relative estimator then gives no signal)."""

    def __init__(self, log: Callable[[str], None], steps: int = FLAT_STEPS) -> None:
        self.log = log
        self.steps = steps
        self.tied_steps = 0
        self.given = False

    def observe(self, rewards_B: np.ndarray, group_ids_B: np.ndarray) -> None:
        """One step's episode rewards and their groups."""
        self.tied_steps = self.tied_steps + 1 if all_groups_tied(rewards_B, group_ids_B) else 0
        if self.tied_steps >= self.steps and not self.given:
            self.given = True
            self.log(FLAT_HINT.format(n=self.steps))


def logprob_agreement(
    sampler_logprobs_B_T: ArrayLike, trainer_logprobs_B_T: ArrayLike, mask_B_T: ArrayLike
) -> dict[str, float]:
    """How well sampler logprobs match the trainer's for the same tokens (on the mask).

    With ``x = trainer - sampler`` per token: ``mean_abs_diff`` and ``max_abs_diff`` of ``|x|``,
    and the sampler-to-trainer KL estimated on the sampled tokens: ``kl_k1 = mean(-x)`` and
    ``kl_k3 = mean(exp(x) - x - 1)`` (non-negative, low variance).
    """
    s = np.asarray(sampler_logprobs_B_T, dtype=np.float64)
    t = np.asarray(trainer_logprobs_B_T, dtype=np.float64)
    m = np.asarray(mask_B_T, dtype=np.float64) > 0
    if s.shape != t.shape or s.shape != m.shape:
        raise ValueError(f"shapes differ: sampler {s.shape}, trainer {t.shape}, mask {m.shape}")
    if not m.any():
        raise ValueError("mask_B_T selects no tokens")
    x = (t - s)[m]
    return {
        "mean_abs_diff": float(np.abs(x).mean()),
        "max_abs_diff": float(np.abs(x).max()),
        "kl_k1": float((-x).mean()),
        "kl_k3": float((np.exp(x) - x - 1.0).mean()),
    }
