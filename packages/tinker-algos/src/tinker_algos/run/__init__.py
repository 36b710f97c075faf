"""Runs: a whole job in this process (:mod:`.job`: ``train``), its plan and progress, callbacks,
continuation and forks, lineage and live settings.

``from tinker_algos.run import train, TrainResult, ...`` keeps working: the names of the former
module ``tinker_algos.run`` (now :mod:`tinker_algos.run.job`) load from it on first use."""

from __future__ import annotations

from typing import TYPE_CHECKING

from tinker_core.lazy import lazy_package

if TYPE_CHECKING:  # pragma: no cover - the names, listed once (lazy_package reads them too)
    from tinker_algos.run.job import ADAPTER as ADAPTER
    from tinker_algos.run.job import RUN_CHECKPOINT_KIND as RUN_CHECKPOINT_KIND
    from tinker_algos.run.job import Run as Run
    from tinker_algos.run.job import SharedModel as SharedModel
    from tinker_algos.run.job import TrainResult as TrainResult
    from tinker_algos.run.job import env_factories as env_factories
    from tinker_algos.run.job import make_env as make_env
    from tinker_algos.run.job import train as train
    from tinker_algos.run.job import trainer_config as trainer_config

__getattr__, __dir__, __all__ = lazy_package(__name__)
