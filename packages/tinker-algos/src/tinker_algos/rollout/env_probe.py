"""Build one env of a stage before training, so that a bad env argument is one line naming it.

Without this, a rollout builds every episode's env and counts a failure as ``env_error``: a
misspelt keyword argument of a gymnasium, reasoning-gym or OpenEnv env read as ``4 of 4
episodes failed ({'env_error': 4})``, and TextArena's or verifiers' as a traceback, while
``opentinker eval`` named the cause. :func:`check_stage_env` builds (and closes) one env of the
stage's ``kwargs`` (and of its ``eval_kwargs`` when they differ) and turns what the env raises
into a :class:`~tinker_core.errors.ConfigError` naming the config field, the env and the cause:
``env.kwargs.bogus: env 'gym/FrozenLake-v1' takes no argument 'bogus' (TypeError: ...)``. An env
served from an ``address`` is not probed (the server checks its arguments when episodes start).
"""

from __future__ import annotations

import contextlib
import re
from typing import Any

from tinker_core.config import EnvConfig
from tinker_core.errors import ConfigError

__all__ = ["check_stage_env"]

_UNEXPECTED = re.compile(r"unexpected keyword argument '([^']+)'")


def check_stage_env(env: EnvConfig | None, where: str = "env") -> None:
    """Build and close one env of ``env`` (its ``kwargs``, then its ``eval_kwargs`` when given and
    different); a :class:`ConfigError` naming ``<where>.kwargs`` (or ``eval_kwargs``) when it fails."""
    from tinker_algos.rollout.episodes import make_env

    if env is None or env.address:
        return
    tries = [("kwargs", dict(env.kwargs))]
    if env.eval_kwargs is not None and env.eval_kwargs != env.kwargs:
        tries.append(("eval_kwargs", dict(env.eval_kwargs)))
    for field, kwargs in tries:
        try:
            built = make_env(env, kwargs)
        except ConfigError:
            raise  # already names its field (env.kwargs.<name>: ...)
        except Exception as e:  # noqa: BLE001 - whatever the env raises is the config's problem here
            raise ConfigError([_problem(env.id, where, field, kwargs, e)]) from e
        close = getattr(built, "close", None)
        if callable(close):
            with contextlib.suppress(Exception):
                close()


def _problem(env_id: str, where: str, field: str, kwargs: dict[str, Any], error: BaseException) -> str:
    cause = f"{type(error).__name__}: {str(error).strip() or '(no message)'}".splitlines()[0]
    unexpected = _UNEXPECTED.search(str(error)) if isinstance(error, TypeError) else None
    if unexpected and unexpected.group(1) in kwargs:
        return (f"{where}.{field}.{unexpected.group(1)}: env {env_id!r} takes no argument {unexpected.group(1)!r} "
                f"({cause}); remove it or correct its name")
    return f"{where}.{field}: env {env_id!r} cannot be built with {kwargs} ({cause})"
