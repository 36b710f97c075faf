"""The scheduler's capacity follows the Ray cluster: nodes join and leave (issue 17).

The multi-node story (real Ray nodes added and removed) is
``integration-tests/reliability/test_multinode.py``; here the accounting alone: the cluster's
resources are stubbed, the scheduler runs on the test session's local Ray.
"""

from __future__ import annotations

import time

import pytest

from tinker_scheduler import placement
from tinker_scheduler import scheduler as scheduler_module
from tinker_scheduler.policy import Resources


def test_cluster_capacity_caps_cpus_and_gpus_but_not_memory(monkeypatch):
    ray = pytest.importorskip("ray")
    monkeypatch.setattr(ray, "cluster_resources", lambda: {"CPU": 6.0, "GPU": 2.0, "memory": 8 * 1024**3, "worker_b": 1.0})
    assert placement.cluster_capacity(None, None) == Resources(6.0, 2.0, 8.0)
    assert placement.cluster_capacity(2.5, 1.0) == Resources(2.5, 1.0, 8.0)
    monkeypatch.setattr(ray, "cluster_resources", dict)  # every node gone
    assert placement.cluster_capacity(2.5, None) == Resources(0.0, 0.0, 0.0)


def test_the_scheduling_loop_re_reads_the_clusters_resources(make_scheduler, monkeypatch):
    scheduler = make_scheduler(tick_s=0.02)
    started = scheduler.capacity
    assert scheduler.jobs.capacity == started
    grown = Resources(started.cpus + 8, 1.0, started.memory_gb + 16)
    monkeypatch.setattr(scheduler_module, "cluster_capacity", lambda cpus, gpus: grown)  # a node joined
    monkeypatch.setattr(scheduler_module, "CAPACITY_REFRESH_S", 0.0)
    scheduler.wake()
    for _ in range(500):
        if scheduler.jobs.capacity == grown:
            break
        time.sleep(0.01)
    assert scheduler.capacity == grown and scheduler.jobs.capacity == grown  # planning and Submit see it
    assert scheduler.jobs.free() == grown  # nothing runs: all of it is free
