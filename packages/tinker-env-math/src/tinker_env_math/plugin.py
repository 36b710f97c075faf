"""The ``opentinker`` entry point of tinker-env-math.

``pyproject.toml`` names this module under ``[project.entry-points.opentinker]``; OpenTinker
imports it on first registry access and calls the hook below. The env modules are imported
inside the hook, so discovering the plugin stays cheap.
"""

from __future__ import annotations

from tinker_core import EnvRegister, hookimpl


@hookimpl
def opentinker_register_envs(register: EnvRegister) -> None:
    """Register ``math/arithmetic-v0``, ``math/calculator-v0`` and ``math/dataset-v0``."""
    from tinker_env_math.arithmetic import ARITHMETIC_SPEC, ArithmeticEnv
    from tinker_env_math.calculator import CALCULATOR_SPEC, CalculatorEnv
    from tinker_env_math.dataset import DATASET_SPEC, DatasetEnv

    register(ARITHMETIC_SPEC, ArithmeticEnv)
    register(CALCULATOR_SPEC, CalculatorEnv)
    register(DATASET_SPEC, DatasetEnv)
