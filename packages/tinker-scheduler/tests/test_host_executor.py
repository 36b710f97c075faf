"""TurnExecutor: one thread, FIFO per queue, round-robin between queues, clean failures,
deadlines and cancellation."""

from __future__ import annotations

import threading
import time
from collections import Counter

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


def wait_until(condition, what: str, limit_s: float = 60.0) -> None:
    """Poll ``condition`` (a safety limit only: nothing is timed)."""
    end = time.monotonic() + limit_s
    while not condition():
        assert time.monotonic() < end, f"never happened: {what}"
        time.sleep(0.005)


def test_expired_and_cancelled_items_are_dropped_unrun_while_a_long_item_runs():
    ex = TurnExecutor()
    for qid in ("long", "late", "gone", "past", "other"):
        ex.open(qid)
    ran: Counter[str] = Counter()
    running, release = threading.Event(), threading.Event()
    long = ex.submit("long", lambda: (running.set(), release.wait(60))[1], token="long")
    assert running.wait(10)  # one session's long request holds the executor
    assert not ex.cancel("long")  # a started item is not dropped

    # a caller whose deadline passes while it waits returns then, with DEADLINE_EXCEEDED
    with pytest.raises(StatusError) as late:
        ex.call("late", lambda: ran.update(["late"]), deadline=time.time() + 0.2)
    assert late.value.code == "DEADLINE_EXCEEDED" and "deadline" in str(late.value)

    # a cancelled caller (its client went away) likewise
    outcome: list[StatusError] = []

    def gone() -> None:
        try:
            ex.call("gone", lambda: ran.update(["gone"]), token="t-gone")
        except StatusError as e:
            outcome.append(e)

    caller = threading.Thread(target=gone)
    caller.start()
    wait_until(lambda: ex.pending("gone") == 1, "the request queued")
    assert ex.cancel("t-gone")
    caller.join(10)
    assert [e.code for e in outcome] == ["CANCELLED"]
    assert ex.pending("gone") == 0

    # an item whose deadline has passed when its turn comes is dropped by the executor itself
    past = ex.submit("past", lambda: ran.update(["past"]), deadline=time.time() - 1)
    other = ex.submit("other", lambda: "answered", deadline=time.time() + 600)
    release.set()
    assert long.result(timeout=10) is True
    assert other.result(timeout=10) == "answered"  # another session is served
    with pytest.raises(StatusError) as dropped:
        past.result(timeout=10)
    assert dropped.value.code == "DEADLINE_EXCEEDED"
    assert ran == Counter()  # none of the dropped requests ever ran
    assert ex.served == ["long", "other"]
    assert sorted(ex.dropped) == ["gone", "late", "past"]
    assert not ex.cancel("t-gone")  # forgotten once done
    ex.close()


def test_a_deadline_does_not_abandon_an_item_that_has_started():
    ex = TurnExecutor()
    ex.open("s")
    running, release = threading.Event(), threading.Event()
    out: list[str] = []
    deadline = time.time() + 0.2
    caller = threading.Thread(target=lambda: out.append(ex.call(
        "s", lambda: (running.set(), release.wait(60), "done")[2], deadline=deadline)))
    caller.start()
    assert running.wait(10)
    wait_until(lambda: time.time() > deadline + 0.1, "the deadline passed while the item runs")
    assert out == []  # the caller still waits for the answer of the running item
    release.set()
    caller.join(10)
    assert out == ["done"]
    ex.close()


def test_tenants_take_turns_however_many_sessions_each_opens():
    """A tenant with three busy sessions and one with one: the second tenant's items wait for one
    item of the first each, not three (turns go round the tenants, then round each one's sessions)."""
    ex = TurnExecutor()
    ran: list[str] = []
    for qid in ("a1", "a2", "a3"):
        assert ex.open(qid, group="alice")
    assert ex.open("b1", group="bob")
    assert ex.open("gate")  # a group of its own
    running, release = threading.Event(), threading.Event()
    gate = ex.submit("gate", lambda: (running.set(), release.wait(10)))
    assert running.wait(10)  # the executor is busy while the queues fill up
    futures = [ex.submit(qid, lambda qid=qid, i=i: ran.append(f"{qid}.{i}")) for qid in ("a1", "a2", "a3")
               for i in range(2)]
    futures += [ex.submit("b1", lambda i=i: ran.append(f"b1.{i}")) for i in range(3)]
    release.set()
    gate.result(timeout=10)
    for f in futures:
        f.result(timeout=10)
    assert ran == ["a1.0", "b1.0", "a2.0", "b1.1", "a3.0", "b1.2", "a1.1", "a2.1", "a3.1"]
    assert ex.served[1:7] == ["a1", "b1", "a2", "b1", "a3", "b1"]  # bob every other turn while he has work
    ex.discard("a1", StatusError("NOT_FOUND", "closed"))  # a discarded queue leaves its group's turn order
    assert ex.call("a2", lambda: "still served") == "still served"
    ex.close()


def test_a_discarded_queue_with_waiting_items_leaves_no_gap_in_the_turns():
    ex = TurnExecutor()
    for qid, group in (("a1", "alice"), ("a2", "alice"), ("b1", "bob"), ("gate", None)):
        ex.open(qid, group=group)
    running, release = threading.Event(), threading.Event()
    ex.submit("gate", lambda: (running.set(), release.wait(10)))
    assert running.wait(10)
    doomed = ex.submit("a1", lambda: "never")
    kept = [ex.submit("a2", lambda: "a2"), ex.submit("b1", lambda: "b1")]
    ex.discard("a1", StatusError("NOT_FOUND", "session 'a1' was closed"))
    release.set()
    assert [f.result(timeout=10) for f in kept] == ["a2", "b1"]
    with pytest.raises(StatusError, match="was closed"):
        doomed.result(timeout=10)
    assert ex.served == ["gate", "a2", "b1"]
    ex.close()
