"""tinker-core: OpenTinker's protocols, plugin hooks, job config, wire protocol and conformance kit.

Importing this package is cheap: submodules load on first use of a name. It never imports torch.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from tinker_core.lazy import lazy_exports

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


__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS, __all__)


if TYPE_CHECKING:  # pragma: no cover
    from tinker_core.algos import (
        AGGREGATION_MODES as AGGREGATION_MODES,
    )
    from tinker_core.algos import (
        AdvantageInputs as AdvantageInputs,
    )
    from tinker_core.algos import (
        AdvantageOutputs as AdvantageOutputs,
    )
    from tinker_core.algos import (
        LossInputs as LossInputs,
    )
    from tinker_core.algos import (
        LossOutputs as LossOutputs,
    )
    from tinker_core.config import JobConfig as JobConfig
    from tinker_core.config import load_config as load_config
    from tinker_core.env import EnvSpec as EnvSpec
    from tinker_core.env import Message as Message
    from tinker_core.env import MultiAgentTextEnv as MultiAgentTextEnv
    from tinker_core.env import Observation as Observation
    from tinker_core.env import TextEnv as TextEnv
    from tinker_core.errors import (
        ConfigError as ConfigError,
    )
    from tinker_core.errors import (
        DuplicateNameError as DuplicateNameError,
    )
    from tinker_core.errors import (
        FSMError as FSMError,
    )
    from tinker_core.errors import (
        OpenTinkerError as OpenTinkerError,
    )
    from tinker_core.errors import (
        PluginError as PluginError,
    )
    from tinker_core.errors import (
        UnknownNameError as UnknownNameError,
    )
    from tinker_core.fsm import TurnFSM as TurnFSM
    from tinker_core.fsm import TurnState as TurnState
    from tinker_core.hookspecs import ENTRY_POINT_GROUP as ENTRY_POINT_GROUP
    from tinker_core.hookspecs import hookimpl as hookimpl
    from tinker_core.hookspecs import hookspec as hookspec
    from tinker_core.registry import (
        env_spec as env_spec,
    )
    from tinker_core.registry import (
        get_advantage_estimator as get_advantage_estimator,
    )
    from tinker_core.registry import (
        get_loss as get_loss,
    )
    from tinker_core.registry import (
        get_optimizer as get_optimizer,
    )
    from tinker_core.registry import (
        get_registry as get_registry,
    )
    from tinker_core.registry import (
        list_plugins as list_plugins,
    )
    from tinker_core.registry import (
        make_env as make_env,
    )
    from tinker_core.registry import (
        register_plugin as register_plugin,
    )
    from tinker_core.registry import (
        reset_plugins as reset_plugins,
    )
    from tinker_core.remote import RemoteEnv as RemoteEnv
    from tinker_core.remote import RemoteMultiAgentEnv as RemoteMultiAgentEnv
    from tinker_core.remote import serve_env as serve_env
    from tinker_core.types import Batch as Batch
    from tinker_core.types import Trajectory as Trajectory
