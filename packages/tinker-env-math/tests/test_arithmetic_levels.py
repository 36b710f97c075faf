"""math/arithmetic-v0 and math/calculator-v0 declare their difficulty levels (issue 44): digits 1 to 4,
operands 2 to 5; each level a working env."""

from __future__ import annotations

import re

from tinker_env_math.arithmetic import ARITHMETIC_SPEC, ArithmeticEnv


def test_each_declared_level_builds_an_env_with_that_many_digits():
    assert [level["digits"] for level in ARITHMETIC_SPEC.difficulty_levels] == [1, 2, 3, 4]
    for level in ARITHMETIC_SPEC.difficulty_levels:
        env = ArithmeticEnv(**{"ops": ["+"], **level})
        prompt, _ = env.reset(seed=3)
        a, b = re.fullmatch(r"(\d+)\+(\d+)=", prompt).groups()
        assert len(a) == len(b) == level["digits"]


def test_the_calculator_declares_its_levels_by_operands_and_the_native_spec_keeps_them():
    from tinker_env_math.calculator import CALCULATOR_SPEC, CalculatorEnv

    assert [level["num_terms"] for level in CALCULATOR_SPEC.difficulty_levels] == [2, 3, 4, 5]
    for level in CALCULATOR_SPEC.difficulty_levels:
        env = CalculatorEnv(**{"digits": 2, "ops": "+-", "max_turns": 3, "tool_format": "native", **level})
        assert env.env_spec.difficulty_levels == CALCULATOR_SPEC.difficulty_levels
        env.reset(seed=3)
        assert len(re.findall(r"\d+", env.expression)) == level["num_terms"]
