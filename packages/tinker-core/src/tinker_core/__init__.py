"""tinker-core: OpenTinker's protocols, plugin hooks, job config, wire protocol and conformance kit.

The names here are what a plugin author needs: the hook marker, the env contracts, the
advantage estimator / loss / optimizer contracts, the ``register`` callback types,
:func:`make_env` and the errors. Everything else is imported from its submodule: the registry
(:mod:`tinker_core.registry`), remote envs (:mod:`tinker_core.remote`), the turn FSM
(:mod:`tinker_core.fsm`), trajectories (:mod:`tinker_core.types`), job configs
(:mod:`tinker_core.config`), the conformance kit (:mod:`tinker_core.testing`).

Importing this package is cheap: a name loads its submodule on first use. It never imports torch.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from tinker_core.lazy import lazy_exports

__version__ = "0.1.0"

_EXPORTS: dict[str, str] = {
    # writing a plugin
    "hookimpl": "tinker_core.hookspecs",
    "EnvRegister": "tinker_core.hookspecs",
    "EstimatorRegister": "tinker_core.hookspecs",
    "LossRegister": "tinker_core.hookspecs",
    "OptimizerRegister": "tinker_core.hookspecs",
    "make_env": "tinker_core.registry",
    # environments
    "EnvSpec": "tinker_core.env",
    "TextEnv": "tinker_core.env",
    "MultiAgentTextEnv": "tinker_core.env",
    "Message": "tinker_core.env",
    "Observation": "tinker_core.env",
    # advantage estimators, losses, optimizers
    "AdvantageInputs": "tinker_core.algos",
    "AdvantageOutputs": "tinker_core.algos",
    "AdvantageEstimator": "tinker_core.algos",
    "LossInputs": "tinker_core.algos",
    "LossOutputs": "tinker_core.algos",
    "Loss": "tinker_core.algos",
    "OptimizerFactory": "tinker_core.algos",
    # errors
    "OpenTinkerError": "tinker_core.errors",
    "PluginError": "tinker_core.errors",
    "DuplicateNameError": "tinker_core.errors",
    "UnknownNameError": "tinker_core.errors",
    "FSMError": "tinker_core.errors",
    "ConfigError": "tinker_core.errors",
}
"""The plugin-author surface: name -> the submodule it lives in (loaded on first use)."""

__all__ = sorted(_EXPORTS) + ["__version__"]

__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS, __all__)


if TYPE_CHECKING:  # pragma: no cover - the same names, for type checkers
    from tinker_core.algos import AdvantageEstimator as AdvantageEstimator
    from tinker_core.algos import AdvantageInputs as AdvantageInputs
    from tinker_core.algos import AdvantageOutputs as AdvantageOutputs
    from tinker_core.algos import Loss as Loss
    from tinker_core.algos import LossInputs as LossInputs
    from tinker_core.algos import LossOutputs as LossOutputs
    from tinker_core.algos import OptimizerFactory as OptimizerFactory
    from tinker_core.env import EnvSpec as EnvSpec
    from tinker_core.env import Message as Message
    from tinker_core.env import MultiAgentTextEnv as MultiAgentTextEnv
    from tinker_core.env import Observation as Observation
    from tinker_core.env import TextEnv as TextEnv
    from tinker_core.errors import ConfigError as ConfigError
    from tinker_core.errors import DuplicateNameError as DuplicateNameError
    from tinker_core.errors import FSMError as FSMError
    from tinker_core.errors import OpenTinkerError as OpenTinkerError
    from tinker_core.errors import PluginError as PluginError
    from tinker_core.errors import UnknownNameError as UnknownNameError
    from tinker_core.hookspecs import EnvRegister as EnvRegister
    from tinker_core.hookspecs import EstimatorRegister as EstimatorRegister
    from tinker_core.hookspecs import LossRegister as LossRegister
    from tinker_core.hookspecs import OptimizerRegister as OptimizerRegister
    from tinker_core.hookspecs import hookimpl as hookimpl
    from tinker_core.registry import make_env as make_env
