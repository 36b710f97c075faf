"""The calculator tool's engine: arithmetic expressions, parsed by hand, evaluated exactly. Never ``eval``.

Grammar (usual precedence, ``**``/``^`` right-associative and above unary minus)::

    expr   := term (("+" | "-") term)*
    term   := unary (("*" | "/" | "//" | "%") unary)*
    unary  := ("+" | "-") unary | power
    power  := atom (("**" | "^") unary)?
    atom   := NUMBER | "(" expr ")"

Numbers are decimal literals (``12``, ``3.5``); ``×`` and ``÷`` are accepted for ``*`` and
``/``, spaces are ignored and one trailing ``=`` is dropped. Anything else (names, calls,
attributes, strings, commas) is a :class:`CalcError`, as are division by zero, an expression
longer than ``max_chars``, nesting deeper than ``max_depth``, any intermediate value whose
magnitude exceeds ``max_magnitude``, and a power whose result would (checked before computing
it). Results are exact :class:`fractions.Fraction` values; :func:`format_number` prints them.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from fractions import Fraction

__all__ = ["CalcError", "CalcLimits", "evaluate_expression", "format_number", "calculate"]


class CalcError(ValueError):
    """The expression is malformed or breaks a limit; the message says which and where."""


@dataclass(frozen=True)
class CalcLimits:
    """Bounds that keep every evaluation small and fast."""

    max_chars: int = 200
    max_depth: int = 32
    max_magnitude: int = 10**15
    max_literal_digits: int = 18
    max_denominator: int = 10**15


_TOKEN_RE = re.compile(r"\s*(?:(\d+(?:\.\d+)?)|(\*\*|//|[-+*/%^()]))")


def _tokenize(expr: str, limits: CalcLimits) -> list[str]:
    expr = expr.replace("\u00d7", "*").replace("\u00f7", "/").replace("\u2212", "-")
    expr = expr.strip()
    if expr.endswith("="):
        expr = expr[:-1]
    tokens: list[str] = []
    pos = 0
    while pos < len(expr):
        if expr[pos:].strip() == "":
            break
        m = _TOKEN_RE.match(expr, pos)
        if m is None:
            bad = expr[pos:].lstrip()[:1]
            where = len(expr) - len(expr[pos:].lstrip())
            raise CalcError(
                f"unexpected character {bad!r} at position {where}; only numbers, "
                "+ - * / // % ** ^ and parentheses are allowed"
            )
        number, op = m.groups()
        if number is not None and len(number.replace(".", "")) > limits.max_literal_digits:
            raise CalcError(
                f"number {number[:24]}... has more than {limits.max_literal_digits} digits"
            )
        tokens.append(number if number is not None else op)
        pos = m.end()
    if not tokens:
        raise CalcError("empty expression")
    return tokens


class _Parser:
    def __init__(self, tokens: list[str], limits: CalcLimits) -> None:
        self.tokens = tokens
        self.i = 0
        self.limits = limits
        self.depth = 0

    def peek(self) -> str | None:
        return self.tokens[self.i] if self.i < len(self.tokens) else None

    def take(self) -> str:
        tok = self.peek()
        if tok is None:
            raise CalcError("unexpected end of expression")
        self.i += 1
        return tok

    def check(self, value: Fraction) -> Fraction:
        if abs(value) > self.limits.max_magnitude:
            raise CalcError(f"magnitude limit exceeded (|value| > {self.limits.max_magnitude:.0e})")
        if value.denominator > self.limits.max_denominator:
            raise CalcError("result needs too much precision")
        return value

    def enter(self) -> None:
        self.depth += 1
        if self.depth > self.limits.max_depth:
            raise CalcError(f"expression nested deeper than {self.limits.max_depth} levels")

    def expr(self) -> Fraction:
        self.enter()
        value = self.term()
        while self.peek() in ("+", "-"):
            op = self.take()
            rhs = self.term()
            value = self.check(value + rhs if op == "+" else value - rhs)
        self.depth -= 1
        return value

    def term(self) -> Fraction:
        value = self.unary()
        while self.peek() in ("*", "/", "//", "%"):
            op = self.take()
            rhs = self.unary()
            if op == "*":
                value = value * rhs
            elif rhs == 0:
                raise CalcError("division by zero")
            elif op == "/":
                value = value / rhs
            elif op == "//":
                value = Fraction(value // rhs)
            else:
                value = value % rhs
            value = self.check(value)
        return value

    def unary(self) -> Fraction:
        if self.peek() in ("+", "-"):
            op = self.take()
            self.enter()
            value = self.unary()
            self.depth -= 1
            return -value if op == "-" else value
        return self.power()

    def power(self) -> Fraction:
        base = self.atom()
        if self.peek() in ("**", "^"):
            self.take()
            self.enter()
            exponent = self.unary()
            self.depth -= 1
            return self.check(self._pow(base, exponent))
        return base

    def _pow(self, base: Fraction, exponent: Fraction) -> Fraction:
        if exponent.denominator != 1:
            raise CalcError("only whole-number exponents are supported")
        e = int(exponent)
        if base == 0:
            if e < 0:
                raise CalcError("division by zero (0 to a negative power)")
            return Fraction(0 if e else 1)
        # estimate the size of the result before computing it
        budget = math.log10(self.limits.max_magnitude) + 1
        for part in (base.numerator, base.denominator):
            if abs(part) > 1 and abs(e) * math.log10(abs(part)) > budget:
                raise CalcError(
                    f"magnitude limit exceeded (|value| > {self.limits.max_magnitude:.0e})"
                )
        return base**e

    def atom(self) -> Fraction:
        tok = self.take()
        if tok == "(":
            value = self.expr()
            if self.take() != ")":
                raise CalcError("expected ')'")
            return value
        if tok[0].isdigit():
            return self.check(Fraction(tok))
        raise CalcError(f"unexpected {tok!r}; expected a number or '('")


def evaluate_expression(expr: str, limits: CalcLimits | None = None) -> Fraction:
    """The exact value of ``expr``; raises :class:`CalcError` (never anything else) on bad input."""
    limits = limits or CalcLimits()
    if not isinstance(expr, str):
        raise CalcError(f"expression must be text, got {type(expr).__name__}")
    if len(expr) > limits.max_chars:
        raise CalcError(f"expression longer than {limits.max_chars} characters")
    parser = _Parser(_tokenize(expr, limits), limits)
    try:
        value = parser.expr()
    except RecursionError:  # pragma: no cover - max_depth stops this first
        raise CalcError("expression nested too deeply") from None
    if parser.peek() is not None:
        raise CalcError(f"unexpected {parser.peek()!r} after a complete expression")
    return value


def format_number(value: Fraction, places: int = 6) -> str:
    """An integer as ``"408"``; other values rounded to ``places`` decimals, no trailing zeros."""
    if value.denominator == 1:
        return str(value.numerator)
    scaled = round(value * 10**places)  # exact: Fraction -> int, half to even
    whole, frac = divmod(abs(scaled), 10**places)
    text = f"{'-' if scaled < 0 else ''}{whole}.{frac:0{places}d}".rstrip("0").rstrip(".")
    return "0" if text == "-0" else text


def calculate(expr: str, limits: CalcLimits | None = None) -> str:
    """:func:`evaluate_expression` then :func:`format_number`."""
    return format_number(evaluate_expression(expr, limits))
