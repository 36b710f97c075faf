"""An env whose calls cannot hang or crash a multi-agent rollout.

:class:`GuardedEnv` forwards everything to the env; ``reset``, ``step`` and ``observe`` run in
a daemon thread under ``timeout_s`` (:func:`tinker_core.timeouts.call_with_timeout`: a stuck
env is abandoned, never joined) and any failure becomes an :class:`EpisodeError` that ends the
episode with a reason (``env_error``, ``env_timeout``) instead of the rollout.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

from tinker_core.timeouts import CallTimeout, call_with_timeout

if TYPE_CHECKING:
    from tinker_core.contracts import Observation
    from tinker_core.env import MultiAgentTextEnv

__all__ = ["EpisodeError", "GuardedEnv"]

_T = TypeVar("_T")


class EpisodeError(Exception):
    """Ends an episode with an error reason (env_error, env_timeout, context_overflow)."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason


class GuardedEnv:
    """Forwards everything to ``env``; ``reset``, ``step`` and ``observe`` are guarded (see the
    module docstring). ``timeout_s=None`` calls them inline, still turning errors into
    :class:`EpisodeError`."""

    def __init__(self, env: MultiAgentTextEnv, timeout_s: float | None) -> None:
        object.__setattr__(self, "_env", env)
        object.__setattr__(self, "_timeout_s", timeout_s)

    def _call(self, what: str, fn: Callable[[], _T]) -> _T:
        try:
            return call_with_timeout(
                fn,
                self._timeout_s,
                name=f"opentinker-env-{what}",
                message=f"env.{what} took longer than {self._timeout_s} s",
            )
        except CallTimeout as e:
            raise EpisodeError("env_timeout", str(e)) from None
        except Exception as e:
            raise EpisodeError("env_error", f"env.{what} raised {type(e).__name__}: {e}") from e

    def reset(self, seed: int | None = None, options: dict[str, Any] | None = None) -> None:
        return self._call("reset", lambda: self._env.reset(seed=seed, options=options))

    def step(self, action: str) -> None:
        return self._call("step", lambda: self._env.step(action))

    def observe(self, agent: str) -> Observation:
        return self._call("observe", lambda: self._env.observe(agent))

    def __getattr__(self, name: str) -> Any:
        return getattr(self._env, name)

    def __setattr__(self, name: str, value: object) -> None:
        setattr(self._env, name, value)
