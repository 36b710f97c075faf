"""The answer parser: the forms it accepts, their priority, and normalisation."""

from __future__ import annotations

import pytest

from tinker_env_math.parsing import (
    answers_match,
    extract_gsm8k_answer,
    find_numbers,
    normalize_number,
    parse_answer,
)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("42", "42"),
        ("42\n", "42"),
        ("  42  ", "42"),
        ("42.", "42"),
        ("42 .", "42"),
        ("-42", "-42"),
        ("\u221242", "-42"),
        ("+42", "42"),
        ("042", "42"),
        ("-0", "0"),
        ("1,234", "1234"),
        ("$15", "15"),
        ("3.50", "3.5"),
        ("2.0", "2"),
        ("The answer is 42", "42"),
        ("The answer is 42.", "42"),
        ("the ANSWER is: -7", "-7"),
        ("Answer: 12", "12"),
        ("so the answer is $1,200.", "1200"),
        (r"\boxed{42}", "42"),
        (r"Thus $\boxed{-3}$.", "-3"),
        (r"\boxed{ 42 }", "42"),
        (r"\boxed{1} then \boxed{2}", "2"),
        ("work...\n#### 42", "42"),
        ("#### -5", "-5"),
        ("#### 1,000", "1000"),
        ("<answer>17</answer>", "17"),
        ("<answer> 17. </answer>", "17"),
        # markers beat the last number in the text
        ("#### 42\nextra 7", "42"),
        (r"\boxed{3} and #### 4", "3"),
        ("The answer is 5, not 6", "5"),
        # fallback: the last number
        ("I think 3 then 4", "4"),
        ("12+35=47", "47"),
        ("12-5", "5"),  # a minus glued to a digit is an operator, not a sign
        ("x = -5", "-5"),
        ("47\n12+3=15", "15"),
    ],
)
def test_parse_answer(text: str, expected: str) -> None:
    assert parse_answer(text) == expected


@pytest.mark.parametrize("text", ["", "   ", "hello", "\\boxed{}", "####", "no digits here."])
def test_parse_answer_none(text: str) -> None:
    assert parse_answer(text) is None


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("42", "42"),
        (" -3.\n", "-3"),
        ("The answer is 9", "9"),
        ("#### 8", "8"),
        (r"\boxed{7}", "7"),
        ("I think 3 then 4", None),
        ("47 apples", None),
    ],
)
def test_explicit_forms_only(text: str, expected: str | None) -> None:
    assert parse_answer(text, fallback_last_number=False) == expected


def test_parse_answer_rejects_non_text() -> None:
    with pytest.raises(TypeError, match="text must be a str"):
        parse_answer(42)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("7", "7"),
        ("-0.0", "0"),
        ("1,234,567", "1234567"),
        ("12,34", None),
        ("1e3", None),
        ("4 2", None),
        ("- 3", "-3"),
        ("abc", None),
        ("", None),
    ],
)
def test_normalize_number(text: str, expected: str | None) -> None:
    assert normalize_number(text) == expected


def test_find_numbers_and_match() -> None:
    assert find_numbers("a 1, b -2 and 3.5; 4-1") == ["1", "-2", "3.5", "4", "1"]
    assert answers_match("42", "42.0")
    assert answers_match("-0", "0")
    assert not answers_match(None, "1")
    assert not answers_match("41", "42")


def test_extract_gsm8k_answer() -> None:
    assert extract_gsm8k_answer("He has 3 + 4 = <<3+4=7>>7 apples.\n#### 7") == "7"
    assert extract_gsm8k_answer("#### 1,080") == "1080"
    assert extract_gsm8k_answer("12") == "12"
    assert extract_gsm8k_answer("no final line 12 here") is None
