"""Algorithms composed from the trainer primitives and the plugins; selected by name in a job.

=========  =======================================================================
``sft``    supervised fine-tuning on a JSONL file or on the env's ``info["target"]``
``grpo``   group-relative policy optimisation (any group advantage estimator)
``ppo``    PPO with a value head, GAE and an optional KL penalty
``dpo``    DPO (and IPO, cDPO) on offline pairs or pairs built on-policy from rewards
=========  =======================================================================
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from tinker_algos.algorithms.base import Algorithm

_MODULES = {
    "sft": "tinker_algos.algorithms.sft:SFT",
    "grpo": "tinker_algos.algorithms.grpo:GRPO",
    "ppo": "tinker_algos.algorithms.ppo:PPO",
    "dpo": "tinker_algos.algorithms.dpo:DPO",
}


def get_algorithm(name: str) -> type[Algorithm]:
    """The :class:`~tinker_algos.algorithms.base.Algorithm` subclass called ``name``."""
    from tinker_core.errors import UnknownNameError

    if name not in _MODULES:
        raise UnknownNameError("algorithm", name, _MODULES)
    module, cls = _MODULES[name].split(":")
    return getattr(importlib.import_module(module), cls)
