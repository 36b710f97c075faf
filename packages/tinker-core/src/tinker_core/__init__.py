"""tinker-core: OpenTinker's protocols, plugin hooks, job config, wire protocol and conformance kit.

The names here are what a plugin author, a template or an env package needs, and they import
them from here only (``from tinker_core import TextEnv``), never from a submodule:

* the RL contracts (:mod:`tinker_core.contracts`): observations, actions, step results,
  trajectories and their groups, batches, the advantage estimator / loss / optimizer contracts;
* the env contracts (:class:`TextEnv`, :class:`MultiAgentTextEnv`, :class:`EnvSpec`,
  :class:`AgentProgram` for envs played by a program through the rollout proxy) and the
  multi-agent coordinator and scripted opponents;
* tool calls (:mod:`tinker_core.tools`): the parsed :class:`ToolCall` / :class:`ToolCallError`,
  :func:`tool_calls_of` (what an env reads from an action), :func:`tool_message` (its answer),
  :func:`format_tool_call` (a call in the default format, e.g. for warm-start data);
* the hook marker, the ``register`` callback types, the registry look-ups, :func:`make_env`;
* the import policy (:mod:`tinker_core.import_policy`): :func:`check_import` and
  :func:`import_folders`, which an env that imports code its kwargs name (declared in
  :attr:`EnvSpec.import_kwargs`) calls first, so that a scheduler's jobs import only what its
  operator allowed (:class:`ImportRefused` otherwise); :func:`enforced` and
  :class:`ImportPolicy` to test an env under a scheduler's policy;
* the conformance kit's checks and the errors.

Everything else is imported from its submodule: remote envs (:mod:`tinker_core.remote`), the turn
FSM (:mod:`tinker_core.fsm`), job configs (:mod:`tinker_core.config`).

Importing this package is cheap: a name loads its submodule on first use. It never imports torch.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from tinker_core.lazy import lazy_package

__version__ = "0.1.0"

if TYPE_CHECKING:  # pragma: no cover - the public names, listed once (lazy_package reads them too)
    from tinker_core.agent_program import AgentProgram as AgentProgram
    from tinker_core.contracts import AGGREGATION_MODES as AGGREGATION_MODES
    from tinker_core.contracts import LOSS_KINDS as LOSS_KINDS
    from tinker_core.contracts import Action as Action
    from tinker_core.contracts import AdvantageEstimator as AdvantageEstimator
    from tinker_core.contracts import AdvantageInputs as AdvantageInputs
    from tinker_core.contracts import AdvantageOutputs as AdvantageOutputs
    from tinker_core.contracts import Batch as Batch
    from tinker_core.contracts import Episode as Episode
    from tinker_core.contracts import Loss as Loss
    from tinker_core.contracts import LossInputs as LossInputs
    from tinker_core.contracts import LossKind as LossKind
    from tinker_core.contracts import LossOutputs as LossOutputs
    from tinker_core.contracts import Message as Message
    from tinker_core.contracts import Observation as Observation
    from tinker_core.contracts import OptimizerFactory as OptimizerFactory
    from tinker_core.contracts import StepResult as StepResult
    from tinker_core.contracts import Trajectory as Trajectory
    from tinker_core.contracts import TrajectoryGroup as TrajectoryGroup
    from tinker_core.contracts import TurnEnd as TurnEnd
    from tinker_core.contracts import turn_end_of as turn_end_of
    from tinker_core.coordinator import DEFAULT_MAX_STEPS as DEFAULT_MAX_STEPS
    from tinker_core.coordinator import DEFAULT_TURN_TIMEOUT_S as DEFAULT_TURN_TIMEOUT_S
    from tinker_core.coordinator import Agent as Agent
    from tinker_core.coordinator import AgentTimeout as AgentTimeout
    from tinker_core.coordinator import Coordinator as Coordinator
    from tinker_core.coordinator import EpisodeResult as EpisodeResult
    from tinker_core.coordinator import Turn as Turn
    from tinker_core.coordinator import call_agent as call_agent
    from tinker_core.coordinator import call_agent_async as call_agent_async
    from tinker_core.coordinator import play_episode as play_episode
    from tinker_core.coordinator import play_episode_async as play_episode_async
    from tinker_core.coordinator import play_episodes as play_episodes
    from tinker_core.doctor import Finding as Finding
    from tinker_core.engines import EngineContext as EngineContext
    from tinker_core.engines import EngineHealth as EngineHealth
    from tinker_core.engines import Generation as Generation
    from tinker_core.engines import GenerationParams as GenerationParams
    from tinker_core.engines import RolloutEngine as RolloutEngine
    from tinker_core.engines import WeightUpdate as WeightUpdate
    from tinker_core.env import UNAVAILABLE as UNAVAILABLE
    from tinker_core.env import EnvSpec as EnvSpec
    from tinker_core.env import MultiAgentTextEnv as MultiAgentTextEnv
    from tinker_core.env import TextEnv as TextEnv
    from tinker_core.errors import ConfigError as ConfigError
    from tinker_core.errors import DuplicateNameError as DuplicateNameError
    from tinker_core.errors import FSMError as FSMError
    from tinker_core.errors import OpenTinkerError as OpenTinkerError
    from tinker_core.errors import PluginError as PluginError
    from tinker_core.errors import UnknownNameError as UnknownNameError
    from tinker_core.gymnasium_envs import register_package as register_package
    from tinker_core.hookspecs import DoctorCheckRegister as DoctorCheckRegister
    from tinker_core.hookspecs import EnvRegister as EnvRegister
    from tinker_core.hookspecs import EstimatorRegister as EstimatorRegister
    from tinker_core.hookspecs import LossRegister as LossRegister
    from tinker_core.hookspecs import OptimizerRegister as OptimizerRegister
    from tinker_core.hookspecs import RolloutEngineRegister as RolloutEngineRegister
    from tinker_core.hookspecs import RolloutProxyRegister as RolloutProxyRegister
    from tinker_core.hookspecs import hookimpl as hookimpl
    from tinker_core.import_policy import ImportPolicy as ImportPolicy
    from tinker_core.import_policy import ImportRefused as ImportRefused
    from tinker_core.import_policy import check_import as check_import
    from tinker_core.import_policy import enforced as enforced
    from tinker_core.import_policy import import_folders as import_folders
    from tinker_core.lazy import lazy_package as lazy_package
    from tinker_core.opponents import OpponentFactory as OpponentFactory
    from tinker_core.opponents import make_opponent as make_opponent
    from tinker_core.opponents import scripted_opponents as scripted_opponents
    from tinker_core.registry import env_factory as env_factory
    from tinker_core.registry import env_spec as env_spec
    from tinker_core.registry import get_advantage_estimator as get_advantage_estimator
    from tinker_core.registry import get_loss as get_loss
    from tinker_core.registry import get_optimizer as get_optimizer
    from tinker_core.registry import get_registry as get_registry
    from tinker_core.registry import make_env as make_env
    from tinker_core.testing import check_advantage_estimator as check_advantage_estimator
    from tinker_core.testing import check_env as check_env
    from tinker_core.testing import check_loss as check_loss
    from tinker_core.testing import check_multi_agent_env as check_multi_agent_env
    from tinker_core.testing import check_optimizer as check_optimizer
    from tinker_core.tools import ToolCall as ToolCall
    from tinker_core.tools import ToolCallError as ToolCallError
    from tinker_core.tools import format_tool_call as format_tool_call
    from tinker_core.tools import parse_tool_calls as parse_tool_calls
    from tinker_core.tools import tool_calls_of as tool_calls_of
    from tinker_core.tools import tool_message as tool_message

__getattr__, __dir__, __all__ = lazy_package(__name__, "__version__")
