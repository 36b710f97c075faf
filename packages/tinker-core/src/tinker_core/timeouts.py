"""Calls with a time limit that cannot hang the caller.

The call runs in a **daemon** thread; when it overruns, the caller stops waiting and the thread
is abandoned, never joined (a ``ThreadPoolExecutor`` worker would be joined at interpreter exit,
so one stuck call would hang the process). A late answer is dropped. What is called must
therefore not hold locks that the caller needs afterwards.

- :func:`call_with_timeout` waits for the answer in this thread (the env calls of a rollout,
  the coordinator's synchronous agent calls);
- :func:`start_daemon` is the building block for an event loop: it hands the answer to a
  callback (the coordinator's asynchronous agent calls).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any, TypeVar

__all__ = ["CallTimeout", "call_with_timeout", "start_daemon"]

T = TypeVar("T")


class CallTimeout(TimeoutError):
    """A call did not finish within its time limit (its thread was abandoned)."""


def start_daemon(
    fn: Callable[[], Any], on_done: Callable[[Any, BaseException | None], None], *, name: str
) -> None:
    """Run ``fn()`` in a daemon thread named ``name``, then ``on_done(value, None)``, or
    ``on_done(None, error)`` with whatever it raised (``BaseException`` too: nothing is lost)."""

    def target() -> None:
        try:
            value = fn()
        except BaseException as e:  # noqa: BLE001 - handed to on_done, never lost
            on_done(None, e)
        else:
            on_done(value, None)

    threading.Thread(target=target, name=name, daemon=True).start()


def call_with_timeout(
    fn: Callable[[], T], timeout_s: float | None, *, name: str, message: str | None = None
) -> T:
    """``fn()``, within ``timeout_s`` seconds.

    ``timeout_s=None`` calls ``fn`` here, unguarded. Otherwise it runs in a daemon thread named
    ``name`` (:func:`start_daemon`); whatever it raises is re-raised here, and when it overruns
    :class:`CallTimeout` is raised with ``message`` (default: ``"<name> took longer than
    <timeout_s> s"``).
    """
    if timeout_s is None:
        return fn()
    done = threading.Event()
    box: dict[str, Any] = {}

    def on_done(value: Any, error: BaseException | None) -> None:
        box["value"], box["error"] = value, error
        done.set()

    start_daemon(fn, on_done, name=name)
    if not done.wait(timeout_s):
        raise CallTimeout(message or f"{name} took longer than {timeout_s} s")
    if box["error"] is not None:
        raise box["error"]
    value: T = box["value"]
    return value
