"""tinker-env-math: OpenTinker environment plugin for arithmetic, tool-use math and datasets.

Registers ``math/arithmetic-v0``, ``math/calculator-v0`` and ``math/dataset-v0`` (see
:mod:`tinker_env_math.plugin`). Names below load on first use, so importing the package (which
plugin discovery does) costs almost nothing.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from tinker_core.lazy import lazy_exports

__version__ = "0.1.0"

_EXPORTS: dict[str, str] = {
    "ArithmeticEnv": "tinker_env_math.arithmetic",
    "ArithmeticProblem": "tinker_env_math.arithmetic",
    "arithmetic_problems": "tinker_env_math.arithmetic",
    "gold_answer": "tinker_env_math.arithmetic",
    "problem_split": "tinker_env_math.arithmetic",
    "score_answer": "tinker_env_math.arithmetic",
    "CalculatorEnv": "tinker_env_math.calculator",
    "calculator_problems": "tinker_env_math.calculator",
    "CalcError": "tinker_env_math.calc",
    "CalcLimits": "tinker_env_math.calc",
    "calculate": "tinker_env_math.calc",
    "evaluate_expression": "tinker_env_math.calc",
    "DatasetEnv": "tinker_env_math.dataset",
    "MathRecord": "tinker_env_math.dataset",
    "SAMPLE_DATASET_PATH": "tinker_env_math.dataset",
    "load_math_dataset": "tinker_env_math.dataset",
    "answers_match": "tinker_env_math.parsing",
    "extract_gsm8k_answer": "tinker_env_math.parsing",
    "normalize_number": "tinker_env_math.parsing",
    "parse_answer": "tinker_env_math.parsing",
}

__all__ = [
    "ArithmeticEnv",
    "ArithmeticProblem",
    "CalcError",
    "CalcLimits",
    "CalculatorEnv",
    "DatasetEnv",
    "MathRecord",
    "SAMPLE_DATASET_PATH",
    "__version__",
    "answers_match",
    "arithmetic_problems",
    "calculate",
    "calculator_problems",
    "evaluate_expression",
    "extract_gsm8k_answer",
    "gold_answer",
    "load_math_dataset",
    "normalize_number",
    "parse_answer",
    "problem_split",
    "score_answer",
]


__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS, __all__)


if TYPE_CHECKING:  # pragma: no cover
    from tinker_env_math.arithmetic import (
        ArithmeticEnv,
        ArithmeticProblem,
        arithmetic_problems,
        gold_answer,
        problem_split,
        score_answer,
    )
    from tinker_env_math.calc import CalcError, CalcLimits, calculate, evaluate_expression
    from tinker_env_math.calculator import CalculatorEnv, calculator_problems
    from tinker_env_math.dataset import (
        SAMPLE_DATASET_PATH,
        DatasetEnv,
        MathRecord,
        load_math_dataset,
    )
    from tinker_env_math.parsing import (
        answers_match,
        extract_gsm8k_answer,
        normalize_number,
        parse_answer,
    )
