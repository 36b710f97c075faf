"""The curriculum (``rollout.curriculum``): training prompts drawn at one of the env's difficulty
levels at a time, the level moving by recent success.

An env declares its levels in its spec (``EnvSpec.difficulty_levels``, registered through the
``opentinker_register_envs`` hook like the env itself): easiest first, each a mapping of env
kwargs laid over the stage's ``env.kwargs`` (``math/arithmetic-v0``: ``{"digits": 1}`` to
``{"digits": 4}``). :class:`Curriculum` holds the level and the success rates of the steps at it:
after each step, with ``window`` rates at the level, a mean at ``promote_at`` or above moves to
the next level and one below ``demote_below`` to the previous one; a move empties the window.
Held-out evaluation keeps the stage's ``eval_kwargs``. The level and the window are state: they
travel in the stage's checkpoint, so a resumed run draws what an uninterrupted one would.

Logged: ``curriculum/level`` (the index the step was drawn at) and ``curriculum/success_rate``
(the window's mean after the step).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from tinker_core.config import CurriculumConfig
from tinker_core.errors import ConfigError


class Curriculum:
    """The level a stage draws its training prompts at (see the module docstring)."""

    def __init__(self, cfg: CurriculumConfig, levels: Sequence[Mapping[str, Any]], *, env_id: str, where: str) -> None:
        if not levels:
            raise ConfigError([f"{where}.curriculum: the env {env_id!r} declares no difficulty levels (EnvSpec.difficulty_levels); "
                               "set rollout.curriculum.enabled: false or use an env that declares them"])
        if cfg.start >= len(levels):
            raise ConfigError([f"{where}.curriculum.start: {cfg.start}, but the env {env_id!r} has {len(levels)} levels (0..{len(levels) - 1})"])
        self.cfg = cfg
        self.levels = [dict(level) for level in levels]
        self.level = cfg.start
        self.rates: list[float] = []

    def kwargs(self, base: Mapping[str, Any]) -> dict[str, Any]:
        """The env kwargs of the current level: the level's over ``base`` (the stage's)."""
        return {**base, **self.levels[self.level]}

    def observe(self, success_rate: float) -> int | None:
        """One step's success rate at the current level; the new level when it moved, else None."""
        self.rates = [*self.rates, float(success_rate)][-self.cfg.window:]
        if len(self.rates) < self.cfg.window:
            return None
        mean = sum(self.rates) / len(self.rates)
        before = self.level
        if mean >= self.cfg.promote_at and self.level + 1 < len(self.levels):
            self.level += 1
        elif self.cfg.demote_below is not None and mean < self.cfg.demote_below and self.level > 0:
            self.level -= 1
        if self.level == before:
            return None
        self.rates = []
        return self.level

    def metrics(self) -> dict[str, float]:
        return {"curriculum/level": float(self.level),
                "curriculum/success_rate": sum(self.rates) / len(self.rates) if self.rates else 0.0}

    def state_dict(self) -> dict[str, Any]:
        return {"curriculum": {"level": self.level, "rates": list(self.rates)}}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        saved = state.get("curriculum")
        if saved is not None:
            self.level = int(saved["level"])
            self.rates = [float(r) for r in saved["rates"]]
