"""math/arithmetic-v0 declares its difficulty levels (issue 44): digits 1 to 4, each a working env."""

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
