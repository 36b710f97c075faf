"""The queue policy, as pure functions: priorities, fair share, backfill, work conservation."""

from __future__ import annotations

import heapq
from dataclasses import dataclass

from hypothesis import given, settings
from hypothesis import strategies as st

from tinker_scheduler.policy import QueuedJob, Resources, plan, waiting_while_fitting

TWO_CPUS = Resources(cpus=2)


def job(job_id: str, *, tenant: str = "t", priority: int = 0, seq: int = 0, cpus: float = 1, gpus: float = 0,
        memory_gb: float = 0) -> QueuedJob:
    return QueuedJob(job_id, tenant, priority, seq, Resources(cpus, gpus, memory_gb))


def ids(jobs: list[QueuedJob]) -> list[str]:
    return [j.job_id for j in jobs]


# ---- single decisions ----------------------------------------------------------------------


def test_an_empty_queue_starts_nothing():
    assert plan([], TWO_CPUS, TWO_CPUS) == []


def test_higher_priority_starts_first_when_only_one_fits():
    queued = [job("low", priority=0, seq=1, cpus=2), job("high", priority=5, seq=2, cpus=2)]
    assert ids(plan(queued, TWO_CPUS, TWO_CPUS)) == ["high"]


def test_equal_priorities_start_in_submission_order():
    queued = [job("c", seq=3, cpus=2), job("a", seq=1, cpus=2), job("b", seq=2, cpus=2)]
    assert ids(plan(queued, TWO_CPUS, TWO_CPUS)) == ["a"]


def test_every_job_that_fits_starts_in_priority_order():
    queued = [job("a", seq=1, priority=1), job("b", seq=2, priority=3), job("c", seq=3, priority=2)]
    assert ids(plan(queued, Resources(cpus=3), Resources(cpus=3))) == ["b", "c", "a"]


def test_backfill_a_small_job_starts_while_a_big_higher_priority_one_waits():
    queued = [job("big", priority=10, seq=1, cpus=2), job("small", priority=0, seq=2, cpus=1)]
    # one CPU of two is taken by a running job: the big one cannot start, the small one can
    assert ids(plan(queued, Resources(cpus=1), TWO_CPUS, {"t": Resources(cpus=1)})) == ["small"]


def test_no_head_of_line_blocking_across_many_waiting_big_jobs():
    queued = [job(f"big{i}", seq=i, cpus=4) for i in range(5)] + [job("small", seq=9, cpus=1)]
    assert ids(plan(queued, TWO_CPUS, Resources(cpus=4), {"t": Resources(cpus=2)})) == ["small"]


def test_gpu_and_memory_must_fit_too():
    capacity = Resources(cpus=8, gpus=1, memory_gb=16)
    queued = [
        job("two-gpus", seq=1, cpus=1, gpus=2),
        job("too-much-memory", seq=2, cpus=1, memory_gb=32),
        job("half-gpu-a", seq=3, cpus=1, gpus=0.5, memory_gb=4),
        job("half-gpu-b", seq=4, cpus=1, gpus=0.5, memory_gb=4),
        job("third-half-gpu", seq=5, cpus=1, gpus=0.5),
    ]
    assert ids(plan(queued, capacity, capacity)) == ["half-gpu-a", "half-gpu-b"]


def test_fractional_demands_that_sum_exactly_to_the_capacity_fit():
    queued = [job(f"j{i}", seq=i, cpus=0.1) for i in range(3)]
    assert len(plan(queued, Resources(cpus=0.3), Resources(cpus=0.3))) == 3


def test_fair_share_a_tenant_with_nothing_running_goes_before_a_busy_one():
    queued = [job("busy-high", tenant="busy", priority=100, seq=1), job("idle-low", tenant="idle", priority=-5, seq=2)]
    running = {"busy": Resources(cpus=2)}
    assert ids(plan(queued, Resources(cpus=1), Resources(cpus=3), running)) == ["idle-low"]


def test_fair_share_alternates_between_tenants_with_equal_demands():
    queued = [job(f"a{i}", tenant="a", seq=i) for i in range(4)] + [job(f"b{i}", tenant="b", seq=10 + i) for i in range(4)]
    started = plan(queued, Resources(cpus=4), Resources(cpus=4))
    assert ids(started) == ["a0", "b0", "a1", "b1"]


def test_fair_share_ties_go_to_the_higher_priority_then_the_older_job():
    queued = [job("a", tenant="a", seq=1, cpus=2), job("b", tenant="b", seq=2, priority=1, cpus=2)]
    assert ids(plan(queued, TWO_CPUS, TWO_CPUS)) == ["b"]
    queued = [job("a", tenant="a", seq=1, cpus=2), job("b", tenant="b", seq=2, cpus=2)]
    assert ids(plan(queued, TWO_CPUS, TWO_CPUS)) == ["a"]


def test_fair_share_uses_the_dominant_resource():
    # "gpu" holds 1 of 2 GPUs (share 0.5); "cpu" holds 3 of 8 CPUs (share 0.375): cpu goes first
    capacity = Resources(cpus=8, gpus=2)
    running = {"gpu": Resources(cpus=1, gpus=1), "cpu": Resources(cpus=3)}
    queued = [job("g", tenant="gpu", seq=1, cpus=1), job("c", tenant="cpu", seq=2, cpus=1)]
    assert ids(plan(queued, Resources(cpus=1, gpus=1), capacity, running)) == ["c"]


def test_weights_scale_fair_shares():
    capacity = Resources(cpus=4)
    running = {"heavy": Resources(cpus=2), "light": Resources(cpus=1)}
    queued = [job("h", tenant="heavy", seq=1), job("l", tenant="light", seq=2)]
    assert ids(plan(queued, Resources(cpus=1), capacity, running)) == ["l"]
    assert ids(plan(queued, Resources(cpus=1), capacity, running, weights={"heavy": 4.0})) == ["h"]


def test_a_tenant_backfills_its_own_small_job_past_its_blocked_big_one():
    queued = [job("big", tenant="a", priority=9, seq=1, cpus=2), job("small", tenant="a", seq=2)]
    assert ids(plan(queued, Resources(cpus=1), TWO_CPUS, {"b": Resources(cpus=1)})) == ["small"]


def test_plan_does_not_depend_on_the_order_of_the_queue():
    queued = [job(f"j{i}", tenant="ab"[i % 2], priority=i % 3, seq=i, cpus=1 + i % 2) for i in range(8)]
    forward = ids(plan(queued, Resources(cpus=5), Resources(cpus=6)))
    backward = ids(plan(list(reversed(queued)), Resources(cpus=5), Resources(cpus=6)))
    assert forward == backward


# ---- the documented example (README "Queue policy") -----------------------------------------


@dataclass
class SimJob:
    job_id: str
    arrival: float
    duration: float
    priority: int
    cpus: float
    tenant: str = "t"


def simulate(jobs: list[SimJob], capacity: Resources) -> list[tuple[float, str]]:
    """Event-driven simulation of the scheduler loop: returns (start time, job id) in start order.

    Checks at every decision that no queued job waits while it fits in the free resources.
    """
    pending = sorted(jobs, key=lambda j: j.arrival)
    queued: dict[str, QueuedJob] = {}
    running: list[tuple[float, str]] = []  # (end time, job id) heap
    holding: dict[str, QueuedJob] = {}
    started: list[tuple[float, str]] = []
    by_id = {j.job_id: j for j in jobs}
    now = 0.0
    seq = 0
    while pending or queued or running:
        next_arrival = pending[0].arrival if pending else float("inf")
        next_end = running[0][0] if running else float("inf")
        now = min(next_arrival, next_end)
        while running and running[0][0] <= now:
            _, done = heapq.heappop(running)
            holding.pop(done)
        while pending and pending[0].arrival <= now:
            j = pending.pop(0)
            seq += 1
            queued[j.job_id] = QueuedJob(j.job_id, j.tenant, j.priority, seq, Resources(cpus=j.cpus))
        free = capacity
        usage: dict[str, Resources] = {}
        for h in holding.values():
            free = free - h.demand
            usage[h.tenant] = usage.get(h.tenant, Resources()) + h.demand
        for choice in plan(list(queued.values()), free, capacity, usage):
            del queued[choice.job_id]
            holding[choice.job_id] = choice
            free = free - choice.demand
            heapq.heappush(running, (now + by_id[choice.job_id].duration, choice.job_id))
            started.append((now, choice.job_id))
        assert waiting_while_fitting(list(queued.values()), free) == []
        if not pending and not running and queued:
            raise AssertionError(f"jobs that can never run: {sorted(queued)}")
    return started


def test_documented_example_backfill_on_two_cpus():
    # README: a small low-priority job runs; a big high-priority job arrives and waits for both
    # CPUs; a second small low-priority job arrives and starts at once on the free CPU.
    jobs = [
        SimJob("small-low-1", arrival=0, duration=10, priority=0, cpus=1),
        SimJob("big-high", arrival=1, duration=10, priority=10, cpus=2),
        SimJob("small-low-2", arrival=2, duration=5, priority=0, cpus=1),
    ]
    assert simulate(jobs, TWO_CPUS) == [(0, "small-low-1"), (2, "small-low-2"), (10, "big-high")]


def test_documented_example_all_submitted_together_on_two_cpus():
    # README: submitted together to an idle cluster, the high-priority job goes first; the two
    # low-priority ones follow in submission order.
    jobs = [
        SimJob("big-low", arrival=0, duration=10, priority=0, cpus=2),
        SimJob("big-high", arrival=0, duration=10, priority=10, cpus=2),
        SimJob("small-low", arrival=0, duration=10, priority=0, cpus=1),
    ]
    assert simulate(jobs, TWO_CPUS) == [(0, "big-high"), (10, "big-low"), (20, "small-low")]


# ---- properties -----------------------------------------------------------------------------

demands = st.builds(
    Resources,
    cpus=st.sampled_from([0.5, 1.0, 2.0, 3.0, 4.0]),
    gpus=st.sampled_from([0.0, 0.0, 0.5, 1.0]),
    memory_gb=st.sampled_from([0.0, 1.0, 4.0]),
)
queues = st.lists(
    st.tuples(st.sampled_from(["a", "b", "c"]), st.integers(-2, 2), demands), min_size=0, max_size=12
).map(lambda rows: [QueuedJob(f"j{i}", t, p, i, d) for i, (t, p, d) in enumerate(rows)])
frees = st.builds(
    Resources,
    cpus=st.sampled_from([0.0, 0.5, 1.0, 2.0, 3.0, 4.0]),
    gpus=st.sampled_from([0.0, 0.5, 1.0]),
    memory_gb=st.sampled_from([0.0, 2.0, 8.0]),
)
usages = st.dictionaries(st.sampled_from(["a", "b", "c"]), demands, max_size=3)


@settings(max_examples=300, deadline=None)
@given(queued=queues, free=frees, running=usages)
def test_property_no_job_waits_while_resources_it_fits_in_are_free(queued, free, running):
    capacity = Resources(cpus=8, gpus=2, memory_gb=16)
    started = plan(queued, free, capacity, running)
    left = free
    for s in started:
        left = left - s.demand
    assert left.cpus >= -1e-9 and left.gpus >= -1e-9 and left.memory_gb >= -1e-9  # never oversubscribes
    assert len({s.job_id for s in started}) == len(started)
    remaining = [j for j in queued if j.job_id not in {s.job_id for s in started}]
    assert waiting_while_fitting(remaining, left) == []


@settings(max_examples=200, deadline=None)
@given(queued=queues, free=frees)
def test_property_within_a_tenant_a_skipped_better_job_did_not_fit(queued, free):
    """If a tenant's job starts before a higher-priority (or older) job of the same tenant, the
    latter did not fit at that moment."""
    capacity = Resources(cpus=8, gpus=2, memory_gb=16)
    started = plan(queued, free, capacity)
    order = {s.job_id: i for i, s in enumerate(started)}
    left = free
    for s in started:
        for other in queued:
            better = (-other.priority, other.seq) < (-s.priority, s.seq)
            if other.tenant == s.tenant and better and order.get(other.job_id, len(started)) > order[s.job_id]:
                assert not other.demand.fits_in(left)
        left = left - s.demand


@settings(max_examples=60, deadline=None)
@given(
    rows=st.lists(
        st.tuples(
            st.sampled_from(["a", "b"]), st.integers(0, 2), st.sampled_from([1.0, 2.0, 0.5]),
            st.integers(0, 20), st.integers(1, 10),
        ),
        min_size=1, max_size=15,
    )
)
def test_property_simulation_every_job_runs_and_none_waits_with_free_resources(rows):
    jobs = [SimJob(f"j{i}", arrival=a, duration=d, priority=p, cpus=c, tenant=t) for i, (t, p, c, a, d) in enumerate(rows)]
    started = simulate(jobs, TWO_CPUS)  # asserts work conservation at every decision
    assert sorted(j for _, j in started) == sorted(j.job_id for j in jobs)
