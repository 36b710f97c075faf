"""HostPool's error handling of a Ray model host: which Ray errors mean the host is gone."""

from __future__ import annotations

import pytest

from tinker_scheduler.host_pool import HostHandle, HostKey, HostPool

ray = pytest.importorskip("ray")


def bare_handle() -> HostHandle:
    """A handle with no actor behind it: only its error handling runs."""
    handle = HostHandle.__new__(HostHandle)
    handle.dead = False
    return handle


def test_a_host_that_rays_memory_monitor_killed_is_dead_so_the_next_session_gets_a_new_one():
    handle = bare_handle()
    error = handle._died(ray.exceptions.OutOfMemoryError("1 worker(s) were killed due to the node running low on memory."))
    assert handle.dead
    assert error.code == "UNAVAILABLE" and "OutOfMemoryError" in str(error) and "retry" in str(error)
    pool = HostPool(backend="local")
    pool._hosts[HostKey.of("tiny")] = handle
    assert pool.get(HostKey.of("tiny")) is None  # not handed out again


def test_a_call_that_timed_out_leaves_the_host_alive():
    handle = bare_handle()
    assert handle._died(ray.exceptions.GetTimeoutError("timed out")).code == "UNAVAILABLE"
    assert not handle.dead
