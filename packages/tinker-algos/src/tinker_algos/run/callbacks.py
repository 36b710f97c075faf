"""The optional callbacks object of ``tinker_algos.train`` (see :mod:`tinker_algos.run.job`), made total."""

from __future__ import annotations

from typing import Any


class RunCallbacks:
    """The optional callbacks object: a method it lacks does nothing (``should_stop``: False;
    ``on_status``: a log line, so a job on a scheduler shows its status in ``watch``)."""

    def __init__(self, obj: Any) -> None:
        self.obj = obj

    def __getattr__(self, name: str) -> Any:
        fn = getattr(self.obj, name, None)
        if fn is None and name == "on_status" and getattr(self.obj, "on_log", None) is not None:
            return lambda text, short=None: self.obj.on_log(text)
        if fn is None:
            return _never if name == "should_stop" else _nothing
        return fn


def _never(*args: object, **kwargs: object) -> bool:
    return False


def _nothing(*args: object, **kwargs: object) -> None:
    return None
