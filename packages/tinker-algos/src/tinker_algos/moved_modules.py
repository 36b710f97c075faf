"""The module paths of tinker_algos before its rooms (wave 4), kept working for one release.

``import tinker_algos.trainer`` (or ``from tinker_algos.trainer import Trainer``) imports
:mod:`tinker_algos.training.trainer`, with a :class:`DeprecationWarning` naming the new path:
the module object is the new one, so a name patched or read through the old path is the same
object. :data:`MOVED` lists every old path (relative to ``tinker_algos``) and its new one;
``tinker_algos.rollout`` and ``tinker_algos.run`` became packages that re-export their former
names themselves.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import sys
import warnings
from types import ModuleType

MOVED: dict[str, str] = {
    "models": "model.models",
    "model_files": "model.model_files",
    "tokenizer": "model.tokenizer",
    "device": "model.device",
    "openmp": "model.openmp",
    "prompts": "model.prompts",
    "sampler": "sampling.sampler",
    "decode_rows": "sampling.decode_rows",
    "token_draw": "sampling.token_draw",
    "sampling.logits_adjust": "sampling.token_draw",
    "kv_reserve": "sampling.turn_cache",
    "sampling.kv_reserve": "sampling.turn_cache",
    "turn_cache": "sampling.turn_cache",
    "samples": "sampling.samples",
    "trainer": "training.trainer",
    "trainer_config": "training.trainer_config",
    "gradient_pass": "training.gradient_pass",
    "shared_prefix": "training.shared_prefix",
    "aggregation": "training.gradient_pass",
    "training.aggregation": "training.gradient_pass",
    "kl": "builtins.kl",
    "checkpoint": "training.checkpoint",
    "zero_advantage": "algorithms.update",
    "training.zero_advantage": "algorithms.update",
    "losses": "builtins.losses",
    "estimators": "builtins.estimators",
    "optimizers": "builtins.optimizers",
    "agent_program": "rollout.agent_program",
    "agent_calls": "rollout.agent_calls",
    "agent_isolation": "rollout.agent_isolation",
    "agent_threads": "rollout.agent_threads",
    "process_tree": "rollout.process_tree",
    "env_probe": "rollout.env_probe",
    "recording": "records.recording",
    "metrics": "records.metrics",
    "trackers": "records.trackers",
    "run_dir": "records.run_dir",
    "run_plan": "run.plan",
    "progress": "run.progress",
    "run_callbacks": "run.callbacks",
    "continuation": "run.continuation",
    "forking": "run.forking",
    "lineage": "run.lineage",
    "live": "run.live",
    "cli": "commands.cli",
    "cli_compare": "commands.cli_compare",
    "cli_eval": "commands.cli_eval",
    "cli_model": "commands.cli_model",
    "cli_steer": "commands.cli_steer",
    "evaluation": "commands.evaluation",
    "evaluation_settings": "commands.evaluation_settings",
    "export": "commands.export",
    "pass_at_k": "commands.pass_at_k",
    "doctor_checks": "commands.doctor_checks",
    "rollout_ahead": "algorithms.rollout_ahead",
    "algorithms.hints": "records.health",
    "multiagent.league": "algorithms.league",
    "multiagent.learners": "algorithms.learners",}
PREFIX = "tinker_algos."


class MovedModules(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Finds ``tinker_algos.<old path>`` and hands over the module at its new path."""

    def find_spec(self, fullname: str, path: object = None, target: object = None) -> importlib.machinery.ModuleSpec | None:
        if fullname.startswith(PREFIX) and fullname[len(PREFIX):] in MOVED:
            return importlib.machinery.ModuleSpec(fullname, self)
        return None

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType:
        new = PREFIX + MOVED[spec.name[len(PREFIX):]]
        warnings.warn(f"{spec.name} moved to {new}; import it from there (the old path goes in the next release)", DeprecationWarning, stacklevel=3)
        return importlib.import_module(new)

    def exec_module(self, module: ModuleType) -> None:
        """Nothing to run: the module is the new path's, already imported."""


def install() -> None:
    """Put the finder on ``sys.meta_path`` once (after the normal finders: a real module wins)."""
    if not any(isinstance(f, MovedModules) for f in sys.meta_path):
        sys.meta_path.append(MovedModules())
