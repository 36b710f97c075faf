"""The safe calculator: right values, and every bad input is a CalcError, never an exception."""

from __future__ import annotations

import random
from fractions import Fraction

import pytest

from tinker_env_math.expressions import (
    CalcError,
    CalcLimits,
    calculate,
    evaluate_expression,
    format_number,
)


@pytest.mark.parametrize(
    ("expr", "expected"),
    [
        ("12*34", "408"),
        ("2+3*4", "14"),
        ("(2+3)*4", "20"),
        ("10-2-3", "5"),  # left-associative
        ("2**10", "1024"),
        ("2^3^2", "512"),  # right-associative
        ("-2**2", "-4"),  # unary minus binds looser than power
        ("-(3-5)", "2"),
        ("7/2", "3.5"),
        ("1/3", "0.333333"),
        ("2/3", "0.666667"),
        ("-1/3", "-0.333333"),
        ("7//2", "3"),
        ("-7//2", "-4"),
        ("7%3", "1"),
        ("-7%3", "2"),
        ("0.1+0.2", "0.3"),  # exact, not floating point
        ("2**-2", "0.25"),
        (" 12 * 34 = ", "408"),
        ("6\u00d77", "42"),
        ("8\u00f72", "4"),
        ("999999999999999+1", "1000000000000000"),
    ],
)
def test_values(expr: str, expected: str) -> None:
    assert calculate(expr) == expected


@pytest.mark.parametrize(
    ("expr", "message"),
    [
        ("__import__('os')", "unexpected character '_'"),
        ("__import__('os').system('echo hi')", "unexpected character"),
        ("open('/etc/passwd')", "unexpected character 'o'"),
        ("lambda: 1", "unexpected character 'l'"),
        ("1 if 1 else 2", "unexpected character 'i'"),
        ("[1]*10", r"unexpected character '\['"),
        ("'a'*3", "unexpected character"),
        ("1e308", "unexpected character 'e'"),
        ("2**10**10", "magnitude limit"),
        ("9**99999999", "magnitude limit"),
        ("10**16", "magnitude limit"),
        ("(10**8)*(10**8)", "magnitude limit"),
        ("0.5**80", "magnitude limit|precision"),
        ("2**0.5", "whole-number exponents"),
        ("9" * 300, "longer than 200 characters"),
        ("1+" * 150 + "1", "longer than 200 characters"),
        ("1234567890123456789012", "more than 18 digits"),
        ("(" * 40 + "1" + ")" * 40, "nested deeper"),
        ("-" * 60 + "1", "nested deeper"),
        ("1/0", "division by zero"),
        ("1//0", "division by zero"),
        ("1%0", "division by zero"),
        ("0**-1", "division by zero"),
        ("(1+2", "unexpected end"),
        ("1+", "unexpected end"),
        ("1 2", "after a complete expression"),
        ("()", "expected a number"),
        ("*3", "expected a number"),
        ("", "empty expression"),
        ("   ", "empty expression"),
    ],
)
def test_rejections(expr: str, message: str) -> None:
    with pytest.raises(CalcError, match=message):
        evaluate_expression(expr)


def test_limits_are_configurable() -> None:
    small = CalcLimits(max_chars=5, max_magnitude=100)
    assert evaluate_expression("99+1", small) == 100
    with pytest.raises(CalcError, match="magnitude"):
        evaluate_expression("99+2", small)
    with pytest.raises(CalcError, match="longer than 5"):
        evaluate_expression("1+1+11", small)


def test_non_text_is_a_calc_error() -> None:
    with pytest.raises(CalcError, match="must be text"):
        evaluate_expression(12)  # type: ignore[arg-type]


def test_fuzz_only_calc_errors() -> None:
    """Random strings over a hostile alphabet: a value or a CalcError, nothing else."""
    rng = random.Random(0)
    alphabet = "0123456789+-*/%^().= _xa'\"[]{},;:e\u00d7"
    for _ in range(3000):
        expr = "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 40)))
        try:
            value = evaluate_expression(expr)
        except CalcError:
            continue
        assert isinstance(value, Fraction)
        assert abs(value) <= CalcLimits().max_magnitude


def test_format_number() -> None:
    assert format_number(Fraction(408)) == "408"
    assert format_number(Fraction(-1, 8)) == "-0.125"
    assert format_number(Fraction(-1, 10**9)) == "0"
    assert format_number(Fraction(123456789012345, 2)) == "61728394506172.5"  # exact
