"""tinker-core: OpenTinker's protocols, plugin hooks, job config, wire protocol and conformance kit.

Importing this package is cheap: submodules load on first use of a name. It never imports torch.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

_EXPORTS: dict[str, str] = {
    # plugins
    "hookimpl": "tinker_core.hookspecs",
    "hookspec": "tinker_core.hookspecs",
    "ENTRY_POINT_GROUP": "tinker_core.hookspecs",
    "make_env": "tinker_core.registry",
    "env_spec": "tinker_core.registry",
    "get_registry": "tinker_core.registry",
    "register_plugin": "tinker_core.registry",
    "list_plugins": "tinker_core.registry",
    "reset_plugins": "tinker_core.registry",
    "get_advantage_estimator": "tinker_core.registry",
    "get_loss": "tinker_core.registry",
    "get_optimizer": "tinker_core.registry",
    # environments
    "EnvSpec": "tinker_core.env",
    "TextEnv": "tinker_core.env",
    "MultiAgentTextEnv": "tinker_core.env",
    "Message": "tinker_core.env",
    "Observation": "tinker_core.env",
    # environments served over gRPC (imports grpc on first use)
    "serve_env": "tinker_core.remote",
    "RemoteEnv": "tinker_core.remote",
    "RemoteMultiAgentEnv": "tinker_core.remote",
    # rollouts
    "TurnState": "tinker_core.fsm",
    "TurnFSM": "tinker_core.fsm",
    "Trajectory": "tinker_core.types",
    "Batch": "tinker_core.types",
    # algorithm plugin contracts
    "AdvantageInputs": "tinker_core.algos",
    "AdvantageOutputs": "tinker_core.algos",
    "LossInputs": "tinker_core.algos",
    "LossOutputs": "tinker_core.algos",
    "AGGREGATION_MODES": "tinker_core.algos",
    # config
    "JobConfig": "tinker_core.config",
    "load_config": "tinker_core.config",
    # errors
    "OpenTinkerError": "tinker_core.errors",
    "PluginError": "tinker_core.errors",
    "DuplicateNameError": "tinker_core.errors",
    "UnknownNameError": "tinker_core.errors",
    "FSMError": "tinker_core.errors",
    "ConfigError": "tinker_core.errors",
}

__all__ = sorted(_EXPORTS) + ["__version__"]


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'tinker_core' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return __all__


if TYPE_CHECKING:  # pragma: no cover
    from tinker_core.algos import (
        AGGREGATION_MODES,
        AdvantageInputs,
        AdvantageOutputs,
        LossInputs,
        LossOutputs,
    )
    from tinker_core.config import JobConfig, load_config
    from tinker_core.env import EnvSpec, Message, MultiAgentTextEnv, Observation, TextEnv
    from tinker_core.errors import (
        ConfigError,
        DuplicateNameError,
        FSMError,
        OpenTinkerError,
        PluginError,
        UnknownNameError,
    )
    from tinker_core.fsm import TurnFSM, TurnState
    from tinker_core.remote import RemoteEnv, RemoteMultiAgentEnv, serve_env
    from tinker_core.hookspecs import ENTRY_POINT_GROUP, hookimpl, hookspec
    from tinker_core.registry import (
        env_spec,
        get_advantage_estimator,
        get_loss,
        get_optimizer,
        get_registry,
        list_plugins,
        make_env,
        register_plugin,
        reset_plugins,
    )
    from tinker_core.types import Batch, Trajectory
