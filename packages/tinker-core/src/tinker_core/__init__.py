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

from tinker_core.lazy import lazy_package

__version__ = "0.1.0"

if TYPE_CHECKING:  # pragma: no cover - the public names, listed once (lazy_package reads them too)
    from tinker_core.algos import AdvantageEstimator as AdvantageEstimator
    from tinker_core.algos import AdvantageInputs as AdvantageInputs
    from tinker_core.algos import AdvantageOutputs as AdvantageOutputs
    from tinker_core.algos import Loss as Loss
    from tinker_core.algos import LossInputs as LossInputs
    from tinker_core.algos import LossOutputs as LossOutputs
    from tinker_core.algos import OptimizerFactory as OptimizerFactory
    from tinker_core.env import Action as Action
    from tinker_core.env import EnvSpec as EnvSpec
    from tinker_core.env import Message as Message
    from tinker_core.env import MultiAgentTextEnv as MultiAgentTextEnv
    from tinker_core.env import Observation as Observation
    from tinker_core.env import TextEnv as TextEnv
    from tinker_core.env import TurnEnd as TurnEnd
    from tinker_core.env import turn_end_of as turn_end_of
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

__getattr__, __dir__, __all__ = lazy_package(__name__, "__version__")
