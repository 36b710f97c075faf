"""tinker-env-math: OpenTinker environment plugin for arithmetic, tool-use math and datasets.

Registers ``math/arithmetic-v0``, ``math/calculator-v0`` and ``math/dataset-v0`` (see
:mod:`tinker_env_math.plugin`). Names below load on first use, so plugin discovery, which imports the
package, stays cheap; importing it yourself registers its envs with gymnasium
(:mod:`tinker_core.gymnasium_envs`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from tinker_core import lazy_package, register_package

__version__ = "0.1.0"

if TYPE_CHECKING:  # pragma: no cover - the public names, listed once (lazy_package reads them too)
    from tinker_env_math.arithmetic import ArithmeticEnv as ArithmeticEnv
    from tinker_env_math.arithmetic import ArithmeticProblem as ArithmeticProblem
    from tinker_env_math.arithmetic import arithmetic_problems as arithmetic_problems
    from tinker_env_math.arithmetic import gold_answer as gold_answer
    from tinker_env_math.arithmetic import problem_split as problem_split
    from tinker_env_math.arithmetic import score_answer as score_answer
    from tinker_env_math.calculator import CalculatorEnv as CalculatorEnv
    from tinker_env_math.calculator import calculator_problems as calculator_problems
    from tinker_env_math.dataset import SAMPLE_DATASET_PATH as SAMPLE_DATASET_PATH
    from tinker_env_math.dataset import DatasetEnv as DatasetEnv
    from tinker_env_math.dataset import MathRecord as MathRecord
    from tinker_env_math.dataset import load_math_dataset as load_math_dataset
    from tinker_env_math.expressions import CalcError as CalcError
    from tinker_env_math.expressions import CalcLimits as CalcLimits
    from tinker_env_math.expressions import calculate as calculate
    from tinker_env_math.expressions import evaluate_expression as evaluate_expression
    from tinker_env_math.parsing import answers_match as answers_match
    from tinker_env_math.parsing import extract_gsm8k_answer as extract_gsm8k_answer
    from tinker_env_math.parsing import normalize_number as normalize_number
    from tinker_env_math.parsing import parse_answer as parse_answer

__getattr__, __dir__, __all__ = lazy_package(__name__, "__version__")

register_package(__name__)  # gymnasium.make("<env id>") works after `import tinker_env_math`
