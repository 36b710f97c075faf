"""How torch's OpenMP threads wait for work: chosen once, before torch loads (no torch import here).

libgomp's default makes an idle thread spin for a while before it sleeps. On a machine whose
cores other processes keep busy, the spinning threads take turns with preempted partners and a
step slows several-fold; ``OMP_WAIT_POLICY=PASSIVE`` makes them sleep at once, which costs about a
quarter of a step's speed on an idle machine (docs/performance.md, "Threads on a shared
machine"). The wait policy changes timing only, never results, so choosing it from the machine's
load keeps same-seed runs identical.
"""

from __future__ import annotations

import os
import sys


def wait_policy_for(load_1m: float, cores: int) -> str | None:
    """``"PASSIVE"`` when at least half the ``cores`` are already busy (1-minute load average
    ``load_1m``), else None (libgomp's spin-then-sleep default)."""
    return "PASSIVE" if load_1m >= max(1.0, cores / 2) else None


def choose_wait_policy() -> str | None:
    """Set ``OMP_WAIT_POLICY`` from the machine's load unless the user set it or torch already
    loaded (then it is too late to matter); returns what it set."""
    if "torch" in sys.modules or "OMP_WAIT_POLICY" in os.environ:
        return None
    try:
        load = os.getloadavg()[0]
    except OSError:  # no load average on this platform
        return None
    policy = wait_policy_for(load, os.cpu_count() or 1)
    if policy is not None:
        os.environ["OMP_WAIT_POLICY"] = policy
    return policy
