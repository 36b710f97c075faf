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

Bounded work on any input: every pattern runs in time linear in the text (no nested or adjacent
unbounded repeats; tags are paired by scanning forward), normalisation is string work (never
``int()``/``Decimal``), a number longer than :data:`MAX_NUMBER_CHARS` is not a number, and a
text longer than :data:`MAX_TEXT_CHARS` has no answer. Nothing here raises on a ``str``.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Iterator

__all__ = [
    "MAX_NUMBER_CHARS",
    "MAX_TEXT_CHARS",
    "NUMBER_PATTERN",
    "answers_match",
    "extract_gsm8k_answer",
    "find_numbers",
    "normalize_number",
    "parse_answer",
    "tag_contents",
]

MAX_NUMBER_CHARS = 1_000
"""A number written with more characters than this (digits, commas, sign, point) is not read as
a number: no task here has such answers, and bounding it bounds the work per number."""

MAX_TEXT_CHARS = 1_000_000
"""A text longer than this has no answer (:func:`parse_answer` returns None: scored as wrong)."""

NUMBER_PATTERN = r"(?:(?<![\w).])[-+\u2212])?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?(?![\d])"
"""A number: optional sign (only when not glued to a preceding word or digit, so ``12-5`` reads
as ``12`` and ``5``), digits with optional thousands commas, optional decimal part."""

_UNGLUED_NUMBER = NUMBER_PATTERN.replace(r"(?<![\w).])", "")
_NUMBER_RE = re.compile(NUMBER_PATTERN)
_WHOLE_NUMBER_RE = re.compile(r"([-+]?)\s?((?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?)")
_BOXED_RE = re.compile(r"\\boxed\s*+\{([^{}]*+(?:\{[^{}]*+\}[^{}]*+)*+)\}")
# possessive repeats (``*+``): the spaces before a number are never re-split between two ``\s*``
_HASHES_RE = re.compile(r"####\s*+(?:\$\s*+)?(" + _UNGLUED_NUMBER + ")")
_ANSWER_IS_RE = re.compile(
    r"answer\s*+(?:is|:|=)\s*+(?::\s*+)?(?:\$\s*+)?(" + _UNGLUED_NUMBER + ")",
    re.IGNORECASE,
)


_ANSWER_WORD_RE = re.compile("answer", re.IGNORECASE)  # in every "answer is" and <answer> form


def tag_contents(text: str, tag: str) -> Iterator[str]:
    """The contents of each ``<tag>...</tag>`` in ``text`` (case-insensitive), in order.

    The same pairs as ``re.finditer(r"<tag>(.*?)</tag>", text, re.DOTALL | re.IGNORECASE)``,
    in linear time: an opening tag without a closing one ends the scan instead of being retried
    from every later opening.
    """
    opening = re.compile(f"<{re.escape(tag)}>", re.IGNORECASE)
    closing = re.compile(f"</{re.escape(tag)}>", re.IGNORECASE)
    pos = 0
    while (start := opening.search(text, pos)) is not None:
        end = closing.search(text, start.end())
        if end is None:
            return
        yield text[start.end() : end.start()]
        pos = end.end()


def normalize_number(text: str) -> str | None:
    """The canonical string of a number, or None when ``text`` is not one number.

    Tolerates surrounding spaces, a trailing period, a leading ``$``, thousands commas, a
    leading ``+`` and the Unicode minus sign. Integers come back without a decimal point;
    other numbers without trailing zeros. More than :data:`MAX_NUMBER_CHARS` characters
    (after trimming) is not a number.
    """
    s = text.strip()
    if len(s) > MAX_NUMBER_CHARS + 4:  # room for "$", a sign, a space and a period
        return None
    s = s.replace("\u2212", "-").removeprefix("$").strip()
    if s.endswith("."):
        s = s[:-1].rstrip()
    m = _WHOLE_NUMBER_RE.fullmatch(s)
    if m is None or len(m.group(2)) > MAX_NUMBER_CHARS:
        return None
    number = m.group(2).replace(",", "")
    if not number.isascii():  # other scripts' digits (``\\d`` matches them): as 0-9
        number = "".join(c if c == "." else str(unicodedata.decimal(c)) for c in number)
    whole, _, fraction = number.partition(".")
    digits = (whole.lstrip("0") or "0") + ("." + fraction.rstrip("0") if fraction.rstrip("0") else "")
    return digits if digits == "0" or m.group(1) != "-" else "-" + digits


def _numbers(text: str) -> Iterator[str]:
    for m in _NUMBER_RE.finditer(text):
        n = normalize_number(m.group(0))
        if n is not None:
            yield n


def find_numbers(text: str) -> list[str]:
    """Every number in ``text``, normalised, in order of appearance."""
    return list(_numbers(text))


def _last_number(text: str) -> str | None:
    """The last number in ``text`` (normalising only from the end, not every one)."""
    for found in reversed([m.group(0) for m in _NUMBER_RE.finditer(text)]):
        n = normalize_number(found)
        if n is not None:
            return n
    return None


def _number_in(fragment: str) -> str | None:
    """A fragment that is one number, or else the last number inside it."""
    whole = normalize_number(fragment)
    return whole if whole is not None else _last_number(fragment)


def _last(matches: Iterator[str]) -> str | None:
    last = None
    for last in matches:  # noqa: B007 - the loop keeps the last one
        pass
    return last


def parse_answer(text: str, *, fallback_last_number: bool = True) -> str | None:
    """The final numeric answer in ``text``, normalised, or None when there is none.

    See the module docstring for the forms recognised and their priority. With
    ``fallback_last_number=False`` only explicit forms (1-5) count: that is the test for a
    well-formatted answer. A text longer than :data:`MAX_TEXT_CHARS` has none.
    """
    if not isinstance(text, str):
        raise TypeError(f"parse_answer: text must be a str, got {type(text).__name__}")
    if len(text) > MAX_TEXT_CHARS:
        return None
    # each explicit form needs its literal marker: without one its scan is skipped (a bare "47")
    said_answer = _ANSWER_WORD_RE.search(text) is not None
    for present, fragments in (
        ("\\boxed" in text, (m.group(1) for m in _BOXED_RE.finditer(text))),
        ("####" in text, (m.group(1) for m in _HASHES_RE.finditer(text))),
        (said_answer, tag_contents(text, "answer")),
    ):
        fragment = _last(fragments) if present else None
        if fragment is not None:
            found = _number_in(fragment)
            if found is not None:
                return found
    stated = _last(m.group(1) for m in _ANSWER_IS_RE.finditer(text)) if said_answer else None
    if stated is not None:
        found = normalize_number(stated)
        if found is not None:
            return found
    whole = normalize_number(text)
    if whole is not None:
        return whole
    return _last_number(text) if fallback_last_number else None


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
    stated = _last(m.group(1) for m in _HASHES_RE.finditer(solution))
    return normalize_number(stated if stated is not None else solution)
