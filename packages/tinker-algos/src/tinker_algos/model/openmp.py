"""How torch's OpenMP threads wait for work: chosen once, before torch loads (no torch import here).

libgomp's default makes an idle thread spin for a while before it sleeps. On a machine whose
cores other processes keep busy, the spinning threads take turns with preempted partners and a
step slows several-fold; ``OMP_WAIT_POLICY=PASSIVE`` makes them sleep at once, which costs about a
quarter of a step's speed on an idle machine (docs/explanation/experiments/sampler.md,
"Threads on a shared machine"). The wait policy changes timing only, never results, so choosing it from the machine's
load keeps same-seed runs identical.

"Busy" is what the other processes run *now*: the kernel's count of runnable threads
(``/proc/loadavg``'s fourth field) less this process, the median of a few reads a millisecond
apart. The 1-minute load average (the fallback where there is no ``/proc``) lags: on an idle
2-core machine it still reads about 1 for a minute after the previous job ended, and a run
started then would sleep-wait for nothing (a quarter of its speed).
"""

from __future__ import annotations

import os
import statistics
import sys
import time

LOADAVG = "/proc/loadavg"


def wait_policy_for(busy: float, cores: int) -> str | None:
    """``"PASSIVE"`` when at least half the ``cores`` are already busy (``busy``: other processes'
    runnable threads, or the 1-minute load average), else None (libgomp's spin-then-sleep default)."""
    return "PASSIVE" if busy >= max(1.0, cores / 2) else None


def runnable_others(reads: int = 5, interval_s: float = 0.001) -> float | None:
    """How many threads of other processes are runnable now: the median over ``reads`` reads of
    ``/proc/loadavg`` (its ``running/total`` field counts this reading thread too); None where the
    file is missing or unreadable."""
    counts = []
    try:
        for i in range(reads):
            if i:
                time.sleep(interval_s)
            with open(LOADAVG) as f:
                counts.append(int(f.read().split()[3].split("/")[0]) - 1)
    except (OSError, ValueError, IndexError):
        return None
    return float(statistics.median(counts))


def choose_wait_policy() -> str | None:
    """Set ``OMP_WAIT_POLICY`` from how busy the machine is now unless the user set it or torch
    already loaded (then it is too late to matter); returns what it set."""
    if "torch" in sys.modules or "OMP_WAIT_POLICY" in os.environ:
        return None
    busy = runnable_others()
    if busy is None:
        try:
            busy = os.getloadavg()[0]
        except OSError:  # no load average on this platform
            return None
    policy = wait_policy_for(busy, os.cpu_count() or 1)
    if policy is not None:
        os.environ["OMP_WAIT_POLICY"] = policy
    return policy
