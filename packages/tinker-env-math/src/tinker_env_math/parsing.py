"""Reading a final numeric answer out of model text.

:func:`parse_answer` is what every env in this package scores with. It looks for, in order:

1. ``\\boxed{42}`` (LaTeX, the last one wins);
2. ``#### 42`` (the GSM8K convention, the last one wins);
3. ``<answer>42</answer>``;
4. ``The answer is 42`` / ``Answer: 42`` (case-insensitive, the last one wins);
5. the whole text being one number (``" 42 "``, ``"42."``, ``"-7\\n"``, ``"1,234"``);
6. unless ``fallback_last_number=False``: the last number anywhere in the text.

Numbers may carry a sign (``-``, ``+`` or the Unicode minus), thousands separators and a
decimal part; they come back normalised by :func:`normalize_number` (``"042"`` -> ``"42"``,
``"-0"`` -> ``"0"``, ``"2.50"`` -> ``"2.5"``, ``"1,234"`` -> ``"1234"``), so two answers are
equal exactly when their normalised strings are equal.
"""

from __future__ import annotations

import re
from decimal import Decimal, InvalidOperation

__all__ = [
    "NUMBER_PATTERN",
    "answers_match",
    "extract_gsm8k_answer",
    "find_numbers",
    "normalize_number",
    "parse_answer",
]

NUMBER_PATTERN = r"(?:(?<![\w).])[-+\u2212])?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?(?![\d])"
"""A number: optional sign (only when not glued to a preceding word or digit, so ``12-5`` reads
as ``12`` and ``5``), digits with optional thousands commas, optional decimal part."""

_NUMBER_RE = re.compile(NUMBER_PATTERN)
_BOXED_RE = re.compile(r"\\boxed\s*\{([^{}]*(?:\{[^{}]*\}[^{}]*)*)\}")
_HASHES_RE = re.compile(r"####\s*\$?\s*(" + NUMBER_PATTERN.replace(r"(?<![\w).])", "") + ")")
_ANSWER_TAG_RE = re.compile(r"<answer>(.*?)</answer>", re.DOTALL | re.IGNORECASE)
_ANSWER_IS_RE = re.compile(
    r"answer\s*(?:is|:|=)\s*:?\s*\$?\s*(" + NUMBER_PATTERN.replace(r"(?<![\w).])", "") + ")",
    re.IGNORECASE,
)


def normalize_number(text: str) -> str | None:
    """The canonical string of a number, or None when ``text`` is not one number.

    Tolerates surrounding spaces, a trailing period, a leading ``$``, thousands commas, a
    leading ``+`` and the Unicode minus sign. Integers come back without a decimal point;
    other numbers without trailing zeros.
    """
    s = text.strip().replace("\u2212", "-")
    s = s.removeprefix("$").strip()
    if s.endswith("."):
        s = s[:-1].rstrip()
    if not re.fullmatch(r"[-+]?\s?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?", s):
        return None
    s = s.replace(",", "").replace(" ", "")
    try:
        value = Decimal(s)
    except InvalidOperation:  # pragma: no cover - the regex above admits only valid numbers
        return None
    if value == value.to_integral_value():
        return str(int(value))
    return format(value.normalize(), "f")


def find_numbers(text: str) -> list[str]:
    """Every number in ``text``, normalised, in order of appearance."""
    out = []
    for m in _NUMBER_RE.finditer(text):
        n = normalize_number(m.group(0))
        if n is not None:
            out.append(n)
    return out


def _number_in(fragment: str) -> str | None:
    """A fragment that is one number, or else the last number inside it."""
    whole = normalize_number(fragment)
    if whole is not None:
        return whole
    numbers = find_numbers(fragment)
    return numbers[-1] if numbers else None


def parse_answer(text: str, *, fallback_last_number: bool = True) -> str | None:
    """The final numeric answer in ``text``, normalised, or None when there is none.

    See the module docstring for the forms recognised and their priority. With
    ``fallback_last_number=False`` only explicit forms (1-5) count: that is the test for a
    well-formatted answer.
    """
    if not isinstance(text, str):
        raise TypeError(f"parse_answer: text must be a str, got {type(text).__name__}")
    for pattern in (_BOXED_RE, _HASHES_RE, _ANSWER_TAG_RE):
        matches = pattern.findall(text)
        if matches:
            found = _number_in(matches[-1])
            if found is not None:
                return found
    matches = _ANSWER_IS_RE.findall(text)
    if matches:
        found = normalize_number(matches[-1])
        if found is not None:
            return found
    whole = normalize_number(text)
    if whole is not None:
        return whole
    if fallback_last_number:
        numbers = find_numbers(text)
        if numbers:
            return numbers[-1]
    return None


def answers_match(predicted: str | None, gold: str) -> bool:
    """True when ``predicted`` (already parsed) equals ``gold`` as a number."""
    if predicted is None:
        return False
    p, g = normalize_number(predicted), normalize_number(gold)
    return p is not None and p == g


def extract_gsm8k_answer(solution: str) -> str | None:
    """The gold number of a GSM8K-style solution (the text after the last ``####``).

    A solution that is just a number is accepted too. Returns None when neither is present.
    """
    matches = _HASHES_RE.findall(solution)
    if matches:
        return normalize_number(matches[-1])
    return normalize_number(solution)
