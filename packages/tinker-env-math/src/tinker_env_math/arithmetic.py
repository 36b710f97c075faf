"""``math/arithmetic-v0``: one generated arithmetic problem per episode.

The format is short and fixed so that a character-level tiny model can learn it::

    observation (prompt):  "12+35="
    action (completion):   "47\\n"

The prompt is ``<a><op><b>=`` with no spaces, ``a`` and ``b`` non-negative integers and ``op``
one of ``+``, ``-``, ``*``. The expected action is the decimal result followed by a newline
(the sampler stops on it); :func:`~tinker_env_math.parsing.parse_answer` also accepts spaces,
a trailing period, ``The answer is 47``, ``\\boxed{47}``, ``#### 47``. SFT text is
``prompt + answer + "\\n"`` (:attr:`ArithmeticProblem.text`).

Held-out evaluation: every problem belongs to a fixed split, ``"test"`` for about one prompt in
ten (by a CRC32 of the prompt, stable across processes and versions) and ``"train"``
otherwise. The env samples from ``split="train"`` by default and :func:`arithmetic_problems`
from ``split="test"``, so an eval set never overlaps the training problems.
"""

from __future__ import annotations

import zlib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Literal, NamedTuple

import numpy as np
from gymnasium.utils import seeding

from tinker_core import EnvSpec, TextEnv
from tinker_env_math.parsing import normalize_number, parse_answer

__all__ = [
    "ARITHMETIC_SPEC",
    "DIFFICULTIES",
    "ArithmeticConfig",
    "ArithmeticEnv",
    "ArithmeticProblem",
    "arithmetic_problems",
    "gold_answer",
    "problem_split",
    "sample_problem",
    "score_answer",
]

OPERATORS = ("+", "-", "*")
TEST_FRACTION_PER_MILLE = 100  # one problem in ten is held out
Split = Literal["train", "test", "all"]

DIFFICULTIES: dict[str, dict[str, Any]] = {
    "easy": {"digits": 1, "ops": "+-"},
    "medium": {"digits": 2, "ops": "+-"},
    "hard": {"digits": 3, "ops": "+-*"},
}
"""Presets for ``difficulty=``; an explicit ``digits`` or ``ops`` overrides the preset's."""

ARITHMETIC_SPEC = EnvSpec(
    id="math/arithmetic-v0",
    description=(
        "Generated arithmetic (+, -, *) with configurable digits; prompt '12+35=', answer "
        "'47\\n'. Reward 1 for the right number, else 0 (or format_reward for a "
        "well-formed wrong answer)."
    ),
    max_turns=1,
    reward_range=(0.0, 1.0),
    action_format=(
        "the result as a decimal integer followed by a newline, e.g. '47\\n' for the prompt "
        "'12+35=' (a leading '-' for negative results)"
    ),
    # for chat models only (prompts through a chat template); the tiny preset's plain-text
    # prompts never show it. SmolLM2-135M-Instruct: 41% greedy on 1-digit sums with it, 11% without.
    system_prompt="You are a calculator. Reply with only the result, a single number.",
    # rollout.curriculum moves between these (over the stage's env.kwargs): digits per operand
    difficulty_levels=({"digits": 1}, {"digits": 2}, {"digits": 3}, {"digits": 4}),
    metadata={
        "prompt_format": "<a><op><b>=",
        "kwargs": {
            "digits": "int or [min, max] digits per operand (default 2)",
            "ops": "string or list of '+', '-', '*' (default '+')",
            "difficulty": "'easy' | 'medium' | 'hard' preset (optional)",
            "allow_negative": "allow negative results of '-' (default false)",
            "split": "'train' (default) | 'test' | 'all'",
            "format_reward": "reward for a well-formed wrong answer, in [0, 1) (default 0)",
        },
    },
)


class ArithmeticProblem(NamedTuple):
    """One problem: ``prompt`` (``"12+35="``) and gold ``answer`` (``"47"``); unpacks as a pair."""

    prompt: str
    answer: str

    @property
    def target(self) -> str:
        """The completion to train on: the answer and the terminating newline."""
        return self.answer + "\n"

    @property
    def text(self) -> str:
        """The full SFT example: prompt, answer, newline."""
        return self.prompt + self.answer + "\n"


@dataclass(frozen=True)
class ArithmeticConfig:
    """What problems to generate; build it with :meth:`from_kwargs`, which validates."""

    min_digits: int = 2
    max_digits: int = 2
    ops: tuple[str, ...] = ("+",)
    allow_negative: bool = False

    @classmethod
    def from_kwargs(
        cls,
        digits: int | Sequence[int] | None = None,
        ops: str | Iterable[str] | None = None,
        difficulty: str | None = None,
        allow_negative: bool = False,
    ) -> ArithmeticConfig:
        if difficulty is not None:
            if difficulty not in DIFFICULTIES:
                raise ValueError(
                    f"difficulty must be one of {', '.join(DIFFICULTIES)}, got {difficulty!r}"
                )
            preset = DIFFICULTIES[difficulty]
            digits = preset["digits"] if digits is None else digits
            ops = preset["ops"] if ops is None else ops
        digits = 2 if digits is None else digits
        ops = "+" if ops is None else ops
        if isinstance(digits, bool) or not isinstance(digits, int | Sequence):
            raise ValueError(f"digits must be an int or [min, max], got {digits!r}")
        if isinstance(digits, int):
            lo = hi = digits
        else:
            if len(digits) != 2 or not all(isinstance(d, int) for d in digits):
                raise ValueError(f"digits must be an int or [min, max] of ints, got {digits!r}")
            lo, hi = int(digits[0]), int(digits[1])
        if not 1 <= lo <= hi <= 9:
            raise ValueError(f"digits must be between 1 and 9 with min <= max, got {digits!r}")
        op_tuple = tuple(ops)
        bad = [o for o in op_tuple if o not in OPERATORS]
        if not op_tuple or bad:
            raise ValueError(
                f"ops must be a non-empty string or list of {', '.join(OPERATORS)}, got {ops!r}"
            )
        return cls(lo, hi, tuple(dict.fromkeys(op_tuple)), bool(allow_negative))


def problem_split(prompt: str) -> Literal["train", "test"]:
    """The fixed split a prompt belongs to (CRC32-based, so stable everywhere)."""
    bucket = zlib.crc32(prompt.encode("utf-8")) % 1000
    return "test" if bucket < TEST_FRACTION_PER_MILLE else "train"


def _operand(rng: np.random.Generator, cfg: ArithmeticConfig) -> int:
    d = int(rng.integers(cfg.min_digits, cfg.max_digits + 1))
    lo = 0 if d == 1 else 10 ** (d - 1)
    return int(rng.integers(lo, 10**d))


def sample_problem(rng: np.random.Generator, cfg: ArithmeticConfig) -> ArithmeticProblem:
    """Draw one problem (of any split) from ``rng``."""
    op = cfg.ops[int(rng.integers(len(cfg.ops)))]
    a, b = _operand(rng, cfg), _operand(rng, cfg)
    if op == "-" and not cfg.allow_negative and a < b:
        a, b = b, a
    prompt = f"{a}{op}{b}="
    return ArithmeticProblem(prompt, gold_answer(prompt))


def _sample_in_split(
    rng: np.random.Generator, cfg: ArithmeticConfig, split: Split, max_tries: int = 10_000
) -> ArithmeticProblem:
    for _ in range(max_tries):
        p = sample_problem(rng, cfg)
        if split == "all" or problem_split(p.prompt) == split:
            return p
    raise ValueError(
        f"no {split!r} problem found in {max_tries} draws for {cfg}: the problem space is too "
        "small; use more digits or operators, or split='all'"
    )


def gold_answer(prompt: str) -> str:
    """The correct answer string of a prompt ``"<a><op><b>="`` (e.g. ``"12*3="`` -> ``"36"``)."""
    body = prompt.strip().removesuffix("=")
    for op in OPERATORS:
        a, sep, b = body.partition(op)
        if sep and a.isdigit() and b.isdigit():
            x, y = int(a), int(b)
            return str(x + y if op == "+" else x - y if op == "-" else x * y)
    raise ValueError(f"gold_answer: {prompt!r} is not an arithmetic prompt like '12+35='")


def score_answer(action: str, answer: str, format_reward: float = 0.0) -> float:
    """1.0 when ``action`` states ``answer``; ``format_reward`` when it states another number
    in a recognised form; else 0.0."""
    return _score(action, parse_answer(action), answer, format_reward)


def _score(action: str, parsed: str | None, answer: str, format_reward: float) -> float:
    """:func:`score_answer` with ``parse_answer(action)`` already known."""
    if parsed is not None and parsed == normalize_number(answer):
        return 1.0
    if format_reward and parse_answer(action, fallback_last_number=False) is not None:
        return float(format_reward)
    return 0.0


def arithmetic_problems(
    n: int,
    seed: int,
    *,
    digits: int | Sequence[int] | None = None,
    ops: str | Iterable[str] | None = None,
    difficulty: str | None = None,
    allow_negative: bool = False,
    split: Split = "test",
    unique: bool = True,
) -> list[ArithmeticProblem]:
    """``n`` problems drawn deterministically from ``seed``: the same arguments, the same list.

    By default they come from the held-out ``"test"`` split and are distinct, which is what an
    evaluation set needs; pass ``split="train"`` for SFT data that matches the env's default
    distribution. Each item unpacks as ``(prompt, answer)``.
    """
    if n < 0:
        raise ValueError(f"n must be >= 0, got {n}")
    if split not in ("train", "test", "all"):
        raise ValueError(f"split must be 'train', 'test' or 'all', got {split!r}")
    cfg = ArithmeticConfig.from_kwargs(digits, ops, difficulty, allow_negative)
    rng, _ = seeding.np_random(seed)
    out: list[ArithmeticProblem] = []
    seen: set[str] = set()
    misses = 0
    while len(out) < n:
        p = _sample_in_split(rng, cfg, split)
        if unique and p.prompt in seen:
            misses += 1
            if misses > 1000 + 20 * n:
                raise ValueError(
                    f"only {len(out)} distinct {split!r} problems found for {cfg}, {n} asked; "
                    "ask for fewer, widen digits/ops, or pass unique=False"
                )
            continue
        seen.add(p.prompt)
        out.append(p)
    return out


class ArithmeticEnv(TextEnv):
    """Single-turn arithmetic: observation ``"12+35="``, action ``"47\\n"``, reward 1 or 0.

    Args:
        digits: digits per operand, an int or ``[min, max]`` (default 2).
        ops: operators to draw from, e.g. ``"+-*"`` or ``["+", "*"]`` (default ``"+"``).
        difficulty: ``"easy"`` (1 digit, +-), ``"medium"`` (2 digits, +-) or ``"hard"``
            (3 digits, +-*); explicit ``digits``/``ops`` win over the preset.
        allow_negative: let ``-`` produce negative results (default: operands are ordered so
            the result is >= 0).
        split: ``"train"`` (default), ``"test"`` (held out) or ``"all"``.
        format_reward: reward for an answer in a recognised form that is wrong, in ``[0, 1)``.
    """

    env_spec = ARITHMETIC_SPEC

    def __init__(
        self,
        digits: int | Sequence[int] | None = None,
        ops: str | Iterable[str] | None = None,
        difficulty: str | None = None,
        allow_negative: bool = False,
        split: Split = "train",
        format_reward: float = 0.0,
    ) -> None:
        if split not in ("train", "test", "all"):
            raise ValueError(f"split must be 'train', 'test' or 'all', got {split!r}")
        if not 0.0 <= format_reward < 1.0:
            raise ValueError(f"format_reward must be in [0, 1), got {format_reward}")
        self.config = ArithmeticConfig.from_kwargs(digits, ops, difficulty, allow_negative)
        self.split: Split = split
        self.format_reward = float(format_reward)
        self.problem: ArithmeticProblem | None = None
        self._done = True

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[str, dict[str, Any]]:
        """Draw a problem. ``options={"prompt": "12+35="}`` poses that problem instead."""
        super().reset(seed=seed)
        if options and "prompt" in options:
            prompt = str(options["prompt"])
            self.problem = ArithmeticProblem(prompt, gold_answer(prompt))
        else:
            self.problem = _sample_in_split(self.np_random, self.config, self.split)
        self._done = False
        return self.problem.prompt, {"answer": self.problem.answer, "target": self.problem.target}

    def step(self, action: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        if self.problem is None or self._done:
            raise RuntimeError(
                "ArithmeticEnv.step: the episode is over or not started; call reset()"
            )
        if not isinstance(action, str):
            raise TypeError(
                f"ArithmeticEnv.step: action must be a str, got {type(action).__name__}"
            )
        self._done = True
        parsed = parse_answer(action)
        reward = _score(action, parsed, self.problem.answer, self.format_reward)
        info = {"answer": self.problem.answer, "parsed": parsed, "correct": reward == 1.0}
        return "", reward, True, False, info

    def render(self) -> str | None:
        return self.problem.prompt if self.problem else None
