"""A request sent again under the same idempotency key runs once: the SDK keeps one
``X-Idempotency-Key`` across its own retries of a call (after a timeout or a dropped connection),
and a retried ``optim_step`` that ran twice would take a second step on no gradients."""

from __future__ import annotations

import asyncio
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from tinker_scheduler.errors import StatusError
from tinker_scheduler.tinker_api.futures import MAX_KEY_CHARS, Futures
from tinker_scheduler.tinker_api.records import Records


def test_a_key_used_again_by_its_tenant_names_the_first_request_and_runs_nothing(tmp_path: Path) -> None:
    futures = Futures(Records(tmp_path / "records.db"))
    runs: list[str] = []
    lock = threading.Lock()

    def step(name: str):
        def run() -> dict:
            with lock:
                runs.append(name)
            return {"step": name}
        return run

    try:
        first = futures.submit("alice", "model-a", step("first"), key="k1")
        assert futures.submit("alice", "model-a", step("retry"), key="k1") == first
        other_tenant = futures.submit("bob", "model-b", step("bob"), key="k1")  # keys are per tenant
        no_key = [futures.submit("alice", "model-a", step(f"plain{i}")) for i in range(2)]  # no key: each runs
        ids = [first, other_tenant, *no_key]
        assert len(set(ids)) == 4
        answers = [asyncio.run(futures.wait(t, i, timeout=30)) for t, i in
                   zip(["alice", "bob", "alice", "alice"], ids, strict=True)]
        assert [a.body for a in answers] == [b'{"step": "first"}', b'{"step": "bob"}', b'{"step": "plain0"}',
                                             b'{"step": "plain1"}']
        assert sorted(runs) == ["bob", "first", "plain0", "plain1"]  # the retry never ran
    finally:
        futures.close()
        futures.records.close()


def test_two_attempts_racing_with_one_key_run_once() -> None:
    futures = Futures()
    runs: list[int] = []
    try:
        with ThreadPoolExecutor(8) as pool:
            ids = list(pool.map(lambda i: futures.submit("alice", "m", lambda: runs.append(i) or {}, key="race"),
                                range(8)))
        assert len(set(ids)) == 1
        assert asyncio.run(futures.wait("alice", ids[0], timeout=30)) is not None
        assert len(runs) == 1
    finally:
        futures.close()


def test_an_oversized_key_is_refused_naming_the_header() -> None:
    futures = Futures()
    try:
        with pytest.raises(StatusError) as e:
            futures.submit("alice", "m", dict, key="k" * (MAX_KEY_CHARS + 1))
        assert e.value.code == "INVALID_ARGUMENT" and "X-Idempotency-Key" in str(e.value)
    finally:
        futures.close()
