"""What keeps a thread-mode agent (``isolation: thread``) from ending or misleading its job.

In thread mode each episode's ``run(task, client)`` runs in a thread of the training process, so
process-wide calls reach the job. While agent threads run (:func:`guarded`):

* ``os._exit(code)`` called in an agent's own thread raises :class:`AgentExit` there instead of
  ending the process: the episode fails with ``agent_crash``, naming the call, and the job goes
  on. (Before, the job ended with no message and no ``result.json``.) Other threads, and a
  process the agent forked, exit as usual.
* ``os.chdir``: the job's run directory is absolute before any agent runs
  (:func:`tinker_algos.train`), so a changed working directory cannot move where the job writes;
  the working directory is also put back when the agents return, with a warning.

Not caught in thread mode: a signal an agent sends its own process, a crash in native code,
``os._exit`` from a thread the agent started itself. ``isolation: process`` (the default on a
scheduler, :func:`tinker_core.agent_program.default_isolation`) survives those too.
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
from collections.abc import Callable, Iterator
from typing import Any

__all__ = ["AgentExit", "agent_thread", "guarded"]

logger = logging.getLogger(__name__)

_local = threading.local()
_lock = threading.Lock()
_depth = 0
_owner = 0  # the pid whose os._exit is guarded (a forked child exits as usual)
_real_exit: Callable[[int], Any] = os._exit


class AgentExit(BaseException):  # noqa: N818 - it reads as what happened, like SystemExit
    """An agent thread called ``os._exit``; raised in that thread instead of ending the process."""

    def __init__(self, code: int) -> None:
        self.code = code
        super().__init__(f"the agent called os._exit({code}), which would have ended the training job (isolation: "
                         "thread runs it in the job's process); it ended its episode instead. Use isolation: process "
                         "to give each episode a process of its own")


def _guarded_exit(code: int) -> None:
    if getattr(_local, "agent", False) and os.getpid() == _owner:
        raise AgentExit(code)
    _real_exit(code)


@contextlib.contextmanager
def agent_thread() -> Iterator[None]:
    """Mark the current thread as an agent's while the block runs (its ``os._exit`` is guarded)."""
    _local.agent = True
    try:
        yield
    finally:
        _local.agent = False


@contextlib.contextmanager
def guarded() -> Iterator[None]:
    """While the block runs agent threads: guard ``os._exit`` and, after, restore the working
    directory (the module docstring). Nests (concurrent rollouts share the guard)."""
    global _depth, _owner
    cwd = os.getcwd()
    with _lock:
        if _depth == 0:
            _owner = os.getpid()
            os._exit = _guarded_exit
        _depth += 1
    try:
        yield
    finally:
        with _lock:
            _depth -= 1
            if _depth == 0:
                os._exit = _real_exit
        _restore_cwd(cwd)


def _restore_cwd(cwd: str) -> None:
    try:
        now: str | None = os.getcwd()
    except OSError:  # an agent removed it
        now = None
    if now != cwd:
        logger.warning("an agent changed the working directory (isolation: thread shares the job's); restored to %s", cwd)
        with contextlib.suppress(OSError):
            os.chdir(cwd)
