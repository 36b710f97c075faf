"""What a progress display shows of a run: the headline metrics and the time left.

Shared by ``opentinker train`` (tinker-algos) and ``opentinker watch`` (tinker-client), which
draw it with rich; this module is plain text, so both show the same numbers the same way.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping

HEADLINE_METRICS: dict[str, str] = {
    "env/reward_mean": "reward",
    "eval/accuracy": "eval acc",
    "losses/total": "loss",
    "optim/grad_norm": "grad",
    "kl/sample_train": "kl",
    "rollout/tokens_per_s": "tok/s",
}
"""The metrics a progress bar shows, in this order, with their short labels."""


def headline(metrics: Mapping[str, float], limit: int = 4) -> str:
    """The first ``limit`` headline metrics present in ``metrics``: ``reward 0.25  loss 1.2 ...``."""
    shown = [f"{label} {metrics[key]:.3g}" for key, label in HEADLINE_METRICS.items() if key in metrics]
    return "  ".join(shown[:limit])


def format_duration(seconds: float) -> str:
    """``75.2`` -> ``1:15``; ``3725`` -> ``1:02:05``."""
    s = max(0, round(seconds))
    h, rest = divmod(s, 3600)
    m, s = divmod(rest, 60)
    return f"{h}:{m:02d}:{s:02d}" if h else f"{m}:{s:02d}"


class StepTimes:
    """The time left, from the seconds each reported step took (``time/step_s`` plus
    ``time/eval_s``), averaged over the last ``window`` reports.

    Read from the metrics rather than the wall clock, so a watcher that replays a job's history
    (every report arriving at once) estimates the same as one that followed it live.
    """

    def __init__(self, window: int = 20) -> None:
        self.recent: deque[float] = deque(maxlen=window)

    def add(self, metrics: Mapping[str, float]) -> None:
        step_s = metrics.get("time/step_s")
        if step_s is not None:
            self.recent.append(float(step_s) + float(metrics.get("time/eval_s", 0.0)))

    def eta(self, done: int, total: int | None) -> str:
        """``eta 1:15`` for the steps left, or ``""`` before a step was timed (or without a total)."""
        if not self.recent or total is None:
            return ""
        left = max(total - done, 0) * sum(self.recent) / len(self.recent)
        return f"eta {format_duration(left)}"
