"""TurnExecutor: one thread, FIFO per queue, round-robin between queues, clean failures."""

from __future__ import annotations

import threading

import pytest

from tinker_scheduler.errors import StatusError
from tinker_scheduler.host_executor import TurnExecutor


def test_queues_take_turns_and_each_keeps_its_order():
    ex = TurnExecutor()
    ran: list[str] = []
    threads: set[int] = set()

    def item(name: str):
        def work() -> str:
            ran.append(name)
            threads.add(threading.get_ident())
            return name

        return work

    for qid in ("a", "b", "gate"):
        assert ex.open(qid)
    assert not ex.open("a")  # already there
    running, release = threading.Event(), threading.Event()
    gate = ex.submit("gate", lambda: (running.set(), release.wait(10)))
    assert running.wait(10)  # the executor is busy while both queues fill up
    futures = [ex.submit("a", item(f"a{i}")) for i in range(3)] + [ex.submit("b", item(f"b{i}")) for i in range(2)]
    release.set()
    gate.result(timeout=10)
    assert [f.result(timeout=10) for f in futures] == ["a0", "a1", "a2", "b0", "b1"]
    assert ran == ["a0", "b0", "a1", "b1", "a2"]  # round-robin, FIFO within a queue
    assert ex.served == ["gate", "a", "b", "a", "b", "a"]
    assert len(threads) == 1 and threading.get_ident() not in threads  # all on the executor thread
    ex.close()


def test_errors_reach_the_caller_and_a_removed_or_closed_queue_fails_cleanly():
    ex = TurnExecutor()
    ex.open("s")
    with pytest.raises(ZeroDivisionError):
        ex.call("s", lambda: 1 / 0)
    with pytest.raises(StatusError) as missing:
        ex.call("nobody", lambda: None)
    assert missing.value.code == "NOT_FOUND"
    ex.open("gate")
    running, release = threading.Event(), threading.Event()
    ex.submit("gate", lambda: (running.set(), release.wait(10)))
    assert running.wait(10)  # the executor is busy: "late" waits in its queue
    waiting = ex.submit("s", lambda: "late")
    ex.discard("s", StatusError("NOT_FOUND", "session 's' was closed"))
    release.set()
    with pytest.raises(StatusError, match="was closed"):
        waiting.result(timeout=10)
    ex.open("t")
    ex.close()
    with pytest.raises(StatusError) as closed:
        ex.call("t", lambda: None)
    assert closed.value.code == "UNAVAILABLE"
