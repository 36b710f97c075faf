"""Calls with a time limit: answers, errors, overruns, and the abandoned thread."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

from tinker_core.timeouts import CallTimeout, call_with_timeout, start_daemon


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
