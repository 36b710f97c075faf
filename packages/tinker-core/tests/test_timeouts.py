"""Calls with a time limit: answers, errors, overruns, and the abandoned thread."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

from tinker_core.timeouts import CallRunner, CallTimeout, call_with_timeout, start_daemon


@pytest.fixture
def release() -> Iterator[threading.Event]:
    """Set at teardown, so a stuck call finishes instead of lingering."""
    event = threading.Event()
    yield event
    event.set()


def test_answer_and_error_come_back() -> None:
    assert call_with_timeout(lambda: 42, 5.0, name="answer") == 42
    with pytest.raises(ValueError, match="boom"):
        call_with_timeout(lambda: (_ for _ in ()).throw(ValueError("boom")), 5.0, name="raiser")


def test_none_calls_inline_in_this_thread() -> None:
    assert call_with_timeout(lambda: threading.current_thread(), None, name="x") is threading.current_thread()


def test_the_call_runs_in_a_named_daemon_thread() -> None:
    thread = call_with_timeout(threading.current_thread, 5.0, name="opentinker-test")
    assert thread is not threading.current_thread()
    assert thread.daemon and thread.name == "opentinker-test"


def test_an_overrun_raises_without_waiting_for_the_call(release: threading.Event) -> None:
    t0 = time.perf_counter()
    with pytest.raises(CallTimeout, match=r"^env.step took longer than 0.1 s$") as e:
        call_with_timeout(release.wait, 0.1, name="env.step")
    assert time.perf_counter() - t0 < 5.0
    assert isinstance(e.value, TimeoutError)  # what `except concurrent.futures.TimeoutError` catches
    with pytest.raises(CallTimeout, match="^custom message$"):
        call_with_timeout(release.wait, 0.1, name="x", message="custom message")


def test_start_daemon_hands_value_or_error_to_the_callback() -> None:
    got: list[tuple[Any, BaseException | None]] = []
    done = threading.Event()

    def on_done(value: Any, error: BaseException | None) -> None:
        got.append((value, error))
        done.set()

    start_daemon(lambda: "ok", on_done, name="t")
    assert done.wait(5.0) and got == [("ok", None)]
    done.clear()

    def interrupted() -> None:
        raise KeyboardInterrupt  # a BaseException is handed over too

    start_daemon(interrupted, on_done, name="t")
    assert done.wait(5.0) and got[1][0] is None and isinstance(got[1][1], KeyboardInterrupt)


# ---------------------------------------------------------------------------------------------
# CallRunner: many calls, one pooled worker
# ---------------------------------------------------------------------------------------------
def boom() -> None:
    raise ValueError("boom")


def test_runner_returns_values_and_errors_in_order_from_one_worker_thread() -> None:
    with CallRunner(5.0, name="opentinker-pool") as runner:
        first = runner.map([threading.current_thread, lambda: 2, boom, threading.current_thread])
        second = runner.map([threading.current_thread])
    worker = first[0][0]
    assert worker is not threading.current_thread() and worker.daemon and worker.name == "opentinker-pool"
    assert first[1] == (2, None)
    assert first[2][0] is None and isinstance(first[2][1], ValueError)
    assert first[3] == (worker, None) and second == [(worker, None)]  # one thread for every call


def test_runner_without_a_limit_calls_inline() -> None:
    runner = CallRunner(None, name="x")
    assert runner.call(threading.current_thread) is threading.current_thread()
    assert runner.map([lambda: 1, boom])[0] == (1, None)


def test_runner_reports_an_overrun_and_runs_the_rest_in_a_new_worker(release: threading.Event) -> None:
    with CallRunner(0.2, name="env", message="env call took longer than 0.2 s") as runner:
        out = runner.map([threading.current_thread, release.wait, threading.current_thread, lambda: "after"])
        assert isinstance(out[1][1], CallTimeout) and str(out[1][1]) == "env call took longer than 0.2 s"
        assert out[3] == ("after", None)
        stuck, fresh = out[0][0], out[2][0]
        assert fresh is not stuck and stuck.is_alive()  # the stuck worker is abandoned, not joined
        assert runner.call(threading.current_thread) is fresh  # later calls use the new worker
        with pytest.raises(CallTimeout):
            runner.call(release.wait)
    release.set()
    stuck.join(5.0)
    assert not stuck.is_alive()  # once its call returns, an abandoned worker exits


def test_runner_close_lets_the_worker_exit() -> None:
    runner = CallRunner(5.0, name="x")
    worker = runner.call(threading.current_thread)
    runner.close()
    worker.join(5.0)
    assert not worker.is_alive()


def test_runner_rejects_a_non_positive_limit() -> None:
    with pytest.raises(ValueError, match="timeout_s"):
        CallRunner(0, name="x")
