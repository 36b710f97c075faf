"""The job configuration: pydantic models, loaded from YAML, with a JSON schema.

A job is one or more *stages* (e.g. SFT then GRPO) that share a model, an environment and a
seed. Names that plugins provide (env ids, estimators, losses, optimizers) are checked against
the plugin registry by :func:`check_plugin_names`, which :func:`load_config` runs unless told not
to. The package holds five modules, each with one job:

- :mod:`tinker_core.config.models`: the sections of a job config (``algorithm`` is a union chosen
  by ``algorithm.name``, each algorithm with typed ``params``) and the JSON schema;
- :mod:`tinker_core.config.data_source`: ``algorithm.data`` (a JSONL path, or a local parquet /
  save_to_disk folder / Hub dataset with ``split``, ``fields`` and ``max_rows``);
- :mod:`tinker_core.config.multi_agent`: ``algorithm.params.multi_agent`` of grpo (self-play, a
  scripted opponent, or one learner per role);
- :mod:`tinker_core.config.loading`: YAML or a mapping -> a validated :class:`JobConfig`, or a
  :class:`~tinker_core.errors.ConfigError` listing every problem by field path;
- :mod:`tinker_core.config.overrides`: ``key.path=value`` command-line overrides, set in the raw
  mapping before validation, with a did-you-mean on an unknown key;
- :mod:`tinker_core.config.reference`: the generated reference page (``docs/reference/config.md``).

Every public name of the five is importable from ``tinker_core.config``.
"""

from __future__ import annotations

from tinker_core.config.data_source import MAX_DATA_ROWS, DataSource, data_path
from tinker_core.config.execution import ExecutionConfig, WorkerResources
from tinker_core.config.group_sampling import CurriculumConfig, DynamicSamplingConfig
from tinker_core.config.loading import (
    CONFIG_TOO_DEEP,
    MAX_CONFIG_BYTES,
    MAX_CONFIG_DEPTH,
    check_config_shape,
    check_config_size,
    check_plugin_names,
    check_trackers,
    format_validation_error,
    load_config,
    missing_tracker,
    parse_config,
    read_config_data,
)
from tinker_core.config.models import (
    ALGORITHM_MODELS,
    ALGORITHMS,
    PRECISION_OF_DTYPE,
    AlgorithmConfig,
    AnyAlgorithm,
    CheckpointConfig,
    DPOAlgorithm,
    DPOParams,
    EnvConfig,
    GRPOAlgorithm,
    GRPOParams,
    JobConfig,
    KLConfig,
    LoraConfig,
    ModelConfig,
    OptimizerConfig,
    PPOAlgorithm,
    PPOParams,
    ResourcesConfig,
    RolloutConfig,
    SFTAlgorithm,
    SFTParams,
    StageConfig,
    json_schema,
    models_in,
)
from tinker_core.config.multi_agent import (
    MULTI_AGENT_MODES,
    LeagueConfig,
    MultiAgentConfig,
    RoleLearnerConfig,
)
from tinker_core.config.overrides import (
    Override,
    OverrideError,
    apply_overrides,
    get_path,
    parse_override,
    parse_overrides,
)
from tinker_core.config.recording import TRACKERS, LoggingConfig, RolloutsLogConfig, Tracker
from tinker_core.config.reference import (
    EXAMPLE,
    SECTIONS,
    render_reference,
)

__all__ = [
    "MAX_DATA_ROWS",
    "DataSource",
    "data_path",
    "ALGORITHMS",
    "ALGORITHM_MODELS",
    "CONFIG_TOO_DEEP",
    "MAX_CONFIG_BYTES",
    "MAX_CONFIG_DEPTH",
    "AlgorithmConfig",
    "AnyAlgorithm",
    "CheckpointConfig",
    "DPOAlgorithm",
    "DPOParams",
    "EXAMPLE",
    "EnvConfig",
    "ExecutionConfig",
    "GRPOAlgorithm",
    "GRPOParams",
    "JobConfig",
    "KLConfig",
    "LoggingConfig",
    "RolloutsLogConfig",
    "RoleLearnerConfig",
    "LeagueConfig",
    "MULTI_AGENT_MODES",
    "LoraConfig",
    "ModelConfig",
    "MultiAgentConfig",
    "OptimizerConfig",
    "Override",
    "OverrideError",
    "PPOAlgorithm",
    "PPOParams",
    "PRECISION_OF_DTYPE",
    "ResourcesConfig",
    "RolloutConfig",
    "DynamicSamplingConfig",
    "CurriculumConfig",
    "SECTIONS",
    "SFTAlgorithm",
    "SFTParams",
    "StageConfig",
    "TRACKERS",
    "Tracker",
    "WorkerResources",
    "apply_overrides",
    "check_config_shape",
    "check_config_size",
    "check_plugin_names",
    "check_trackers",
    "format_validation_error",
    "get_path",
    "json_schema",
    "load_config",
    "missing_tracker",
    "models_in",
    "parse_config",
    "parse_override",
    "parse_overrides",
    "read_config_data",
    "render_reference",
]
