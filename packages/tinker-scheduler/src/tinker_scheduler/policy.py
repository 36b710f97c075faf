"""The queue policy: which queued jobs start now. Pure functions over plain data, no Ray.

The policy is *work-conserving*: after :func:`plan` returns, no job left in the queue fits in
the resources that are still free. Within that rule it orders the starts by

1. **per-tenant fair share** (dominant resource fairness): the next start goes to the tenant
   whose running jobs (plus those started earlier in this round) hold the smallest *dominant
   share* -- the largest of its CPU, GPU and memory fractions of the cluster -- divided by the
   tenant's weight;
2. **priority** within a tenant (higher first), then **submission order** (older first);
3. **backfill**: a job that does not fit in the free resources is skipped, never waited for,
   so a small job starts while a large one waits (no head-of-line blocking).

Ties between tenants with equal shares go to the tenant whose candidate job has the higher
priority, then the earlier submission.

Backfill without reservations means a large job can be overtaken for as long as smaller jobs
keep arriving that fit in the gaps; that is the price of "no job waits while resources it fits in
are free". Raising the large job's priority does not change that (priority orders the jobs that
fit); a large job needs a moment when enough resources are free at once.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

EPSILON = 1e-9

#: Bytes in a GiB (``memory_gb`` is in GiB; Ray counts memory in bytes).
GIB = 1024**3


@dataclass(frozen=True)
class Resources:
    """An amount of cluster resources: CPU cores, GPUs (fractions allowed) and memory in GiB."""

    cpus: float = 0.0
    gpus: float = 0.0
    memory_gb: float = 0.0

    def __add__(self, other: Resources) -> Resources:
        return Resources(self.cpus + other.cpus, self.gpus + other.gpus, self.memory_gb + other.memory_gb)

    def __sub__(self, other: Resources) -> Resources:
        return Resources(self.cpus - other.cpus, self.gpus - other.gpus, self.memory_gb - other.memory_gb)

    def fits_in(self, available: Resources) -> bool:
        """Whether this demand fits in ``available`` (with a tolerance for float sums)."""
        return (
            self.cpus <= available.cpus + EPSILON
            and self.gpus <= available.gpus + EPSILON
            and self.memory_gb <= available.memory_gb + EPSILON
        )

    def dominant_share(self, capacity: Resources) -> float:
        """The largest fraction of ``capacity`` this amount takes (dimensions of size 0 skipped)."""
        shares = [
            used / total
            for used, total in (
                (self.cpus, capacity.cpus),
                (self.gpus, capacity.gpus),
                (self.memory_gb, capacity.memory_gb),
            )
            if total > EPSILON
        ]
        return max(shares, default=0.0)

    def exceeds(self, capacity: Resources) -> list[str]:
        """The fields of this demand that exceed ``capacity``, e.g. ``["cpus"]`` (for error messages)."""
        return [
            name
            for name, need, have in (
                ("cpus", self.cpus, capacity.cpus),
                ("gpus", self.gpus, capacity.gpus),
                ("memory_gb", self.memory_gb, capacity.memory_gb),
            )
            if need > have + EPSILON
        ]


@dataclass(frozen=True)
class QueuedJob:
    """What the policy needs to know about a queued job."""

    job_id: str
    tenant: str
    priority: int
    #: Submission order: smaller was submitted earlier (the job store's sequence number).
    seq: int
    demand: Resources


def tenant_order_key(job: QueuedJob) -> tuple[int, int]:
    """Order of jobs inside one tenant: higher priority first, then older first."""
    return (-job.priority, job.seq)


def plan(
    queued: Sequence[QueuedJob],
    free: Resources,
    capacity: Resources,
    running_by_tenant: Mapping[str, Resources] | None = None,
    weights: Mapping[str, float] | None = None,
) -> list[QueuedJob]:
    """The jobs to start now, in start order.

    :param queued: every queued job (any order).
    :param free: resources not held by running jobs.
    :param capacity: the cluster's total resources (the denominator of fair shares).
    :param running_by_tenant: resources each tenant's running jobs hold; absent tenants hold none.
    :param weights: fair-share weight per tenant (default 1.0); a tenant with weight 2 gets
        twice the share of a tenant with weight 1 before it stops being first in line.
    :returns: jobs whose demands, summed, fit in ``free``; every job not returned does not fit
        in what is left (``free`` minus the returned jobs' demands).
    """
    usage: dict[str, Resources] = dict(running_by_tenant or {})
    weights = weights or {}
    per_tenant: dict[str, list[QueuedJob]] = {}
    for job in sorted(queued, key=tenant_order_key):
        per_tenant.setdefault(job.tenant, []).append(job)

    started: list[QueuedJob] = []
    remaining = free
    while True:
        best: tuple[tuple[float, int, int], str, int] | None = None
        for tenant, jobs in per_tenant.items():
            # The tenant's first job (in priority order) that fits: later jobs of the same tenant
            # backfill past an earlier one that does not fit.
            index = next((i for i, j in enumerate(jobs) if j.demand.fits_in(remaining)), None)
            if index is None:
                continue
            job = jobs[index]
            weight = weights.get(tenant, 1.0)
            share = usage.get(tenant, Resources()).dominant_share(capacity) / weight if weight > 0 else math.inf
            key = (share, -job.priority, job.seq)
            if best is None or key < best[0]:
                best = (key, tenant, index)
        if best is None:
            return started
        _, tenant, index = best
        job = per_tenant[tenant].pop(index)
        if not per_tenant[tenant]:
            del per_tenant[tenant]
        started.append(job)
        remaining = remaining - job.demand
        usage[tenant] = usage.get(tenant, Resources()) + job.demand


def waiting_while_fitting(queued: Sequence[QueuedJob], free: Resources) -> list[QueuedJob]:
    """Queued jobs that would fit in ``free`` (empty after applying :func:`plan`'s choice)."""
    return [j for j in queued if j.demand.fits_in(free)]
