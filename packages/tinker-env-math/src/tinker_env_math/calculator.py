"""``math/calculator-v0``: multi-turn arithmetic with a calculator tool.

Episode::

    observation: "What is 347*29+118?\\nUse <calc>expression</calc> to calculate. Reply
                  <answer>number</answer> to finish.\\n"
    action:      "<calc>347*29</calc>"           -> observation "<result>10063</result>\\n"
    action:      "<calc>10063+118</calc>"        -> observation "<result>10181</result>\\n"
    action:      "<answer>10181</answer>"        -> episode ends, reward 1

Rules for an action, checked in this order:

1. it contains ``<answer>...</answer>``: the final answer (the number inside; ``\\boxed{}``
   etc. accepted). The episode terminates, even if the action also has a ``<calc>`` call.
2. it contains ``<calc>``: the first ``<calc>expression</calc>`` is evaluated by the safe
   calculator (:mod:`tinker_env_math.expressions`) and the next observation is
   ``<result>value</result>\\n`` or ``<error>reason</error>\\n`` (a malformed or unsafe
   expression, an unclosed tag, a limit exceeded). Errors never raise.
3. it is a final answer in another recognised form: a bare number (``"10181"``,
   ``"10181.\\n"``), ``The answer is 10181``, ``#### 10181``, ``\\boxed{10181}``.
4. anything else: ``<error>...</error>\\n`` explaining the expected format.

Each action is one turn; after ``max_turns`` turns without a final answer the episode is
truncated with reward 0. A final answer scores 1 when right, ``format_reward`` when wrong.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import replace
from typing import Any

from tinker_core import EnvSpec, TextEnv
from tinker_env_math.arithmetic import ArithmeticConfig, _operand
from tinker_env_math.expressions import CalcError, CalcLimits, calculate
from tinker_env_math.parsing import normalize_number, parse_answer, tag_contents

__all__ = ["CALCULATOR_SPEC", "CalculatorEnv", "calculator_problems"]

CALCULATOR_SPEC = EnvSpec(
    id="math/calculator-v0",
    description=(
        "Multi-turn arithmetic with a calculator tool: call <calc>expr</calc>, read "
        "<result>...</result>, finish with <answer>number</answer>. Reward 1 for the right "
        "final answer, 0 otherwise; truncated after max_turns."
    ),
    max_turns=4,
    reward_range=(0.0, 1.0),
    action_format=(
        "either a tool call '<calc>347*29</calc>' (answered with '<result>10063</result>') or "
        "a final answer '<answer>10181</answer>' (a bare number also counts as final)"
    ),
    metadata={
        "kwargs": {
            "digits": "int or [min, max] digits per operand (default 3)",
            "ops": "operators to draw from (default '+-*')",
            "num_terms": "operands per problem, 2..5 (default 3)",
            "max_turns": "turn limit (default 4)",
            "max_expression_chars": "longest accepted <calc> expression (default 100)",
            "max_magnitude": "largest |value| the calculator computes (default 1e12)",
            "format_reward": "reward for a wrong final answer, in [0, 1) (default 0)",
        }
    },
)

_GOLD_LIMITS = CalcLimits(max_chars=10_000, max_magnitude=10**60, max_literal_digits=20)

INSTRUCTIONS = (
    "Use <calc>expression</calc> to calculate. Reply <answer>number</answer> to finish.\n"
)


def _expression(rng: Any, cfg: ArithmeticConfig, num_terms: int) -> str:
    parts = [str(_operand(rng, cfg))]
    for _ in range(num_terms - 1):
        parts.append(cfg.ops[int(rng.integers(len(cfg.ops)))])
        parts.append(str(_operand(rng, cfg)))
    return "".join(parts)


def calculator_problems(
    n: int,
    seed: int,
    *,
    digits: int | Sequence[int] = 3,
    ops: str | Iterable[str] = "+-*",
    num_terms: int = 3,
) -> list[tuple[str, str]]:
    """``n`` (expression, answer) pairs, deterministic in ``seed`` (same draws as the env)."""
    from gymnasium.utils import seeding

    cfg = ArithmeticConfig.from_kwargs(digits, ops)
    rng, _ = seeding.np_random(seed)
    out = []
    for _ in range(n):
        expr = _expression(rng, cfg, num_terms)
        out.append((expr, calculate(expr, _GOLD_LIMITS)))
    return out


class CalculatorEnv(TextEnv):
    """Multi-turn arithmetic with a ``<calc>`` tool; see the module docstring for the rules.

    Args:
        digits, ops: operand digits and operators, as in ``math/arithmetic-v0``.
        num_terms: operands per problem (2 to 5).
        max_turns: turns before truncation (each action is one turn).
        max_expression_chars: longest expression the calculator accepts.
        max_magnitude: largest absolute value the calculator computes.
        format_reward: reward for a final answer that is wrong, in ``[0, 1)``.
    """

    env_spec = CALCULATOR_SPEC

    def __init__(
        self,
        digits: int | Sequence[int] = 3,
        ops: str | Iterable[str] = "+-*",
        num_terms: int = 3,
        max_turns: int = 4,
        max_expression_chars: int = 100,
        max_magnitude: int | float = 10**12,
        format_reward: float = 0.0,
    ) -> None:
        if not 2 <= num_terms <= 5:
            raise ValueError(f"num_terms must be between 2 and 5, got {num_terms}")
        if max_turns < 1:
            raise ValueError(f"max_turns must be >= 1, got {max_turns}")
        if max_expression_chars < 1:
            raise ValueError(f"max_expression_chars must be >= 1, got {max_expression_chars}")
        if max_magnitude < 1:
            raise ValueError(f"max_magnitude must be >= 1, got {max_magnitude}")
        if not 0.0 <= format_reward < 1.0:
            raise ValueError(f"format_reward must be in [0, 1), got {format_reward}")
        self.config = ArithmeticConfig.from_kwargs(digits, ops, allow_negative=True)
        self.num_terms = num_terms
        self.max_turns = max_turns
        self.limits = CalcLimits(max_chars=max_expression_chars, max_magnitude=int(max_magnitude))
        self.format_reward = float(format_reward)
        if max_turns != CALCULATOR_SPEC.max_turns:
            self.env_spec = replace(CALCULATOR_SPEC, max_turns=max_turns)
        self.expression = ""
        self.answer = ""
        self.turn = 0
        self.tool_calls = 0
        self._done = True

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[str, dict[str, Any]]:
        """Draw a problem. ``options={"expression": "12*34"}`` poses that one instead."""
        super().reset(seed=seed)
        if options and "expression" in options:
            self.expression = str(options["expression"])
        else:
            self.expression = _expression(self.np_random, self.config, self.num_terms)
        self.answer = calculate(self.expression, _GOLD_LIMITS)
        self.turn = 0
        self.tool_calls = 0
        self._done = False
        obs = f"What is {self.expression}?\n{INSTRUCTIONS}"
        return obs, {"expression": self.expression, "answer": self.answer}

    def _final(self, text: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        self._done = True
        parsed = parse_answer(text)
        correct = parsed is not None and parsed == normalize_number(self.answer)
        reward = 1.0 if correct else (self.format_reward if parsed is not None else 0.0)
        return "", reward, True, False, self._info("final", parsed=parsed, correct=correct)

    def _info(self, event: str, **extra: Any) -> dict[str, Any]:
        return {
            "event": event,
            "turn": self.turn,
            "tool_calls": self.tool_calls,
            "answer": self.answer,
            **extra,
        }

    def step(self, action: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        if self._done:
            raise RuntimeError(
                "CalculatorEnv.step: the episode is over or not started; call reset()"
            )
        if not isinstance(action, str):
            raise TypeError(
                f"CalculatorEnv.step: action must be a str, got {type(action).__name__}"
            )
        self.turn += 1
        answer = next(tag_contents(action, "answer"), None)  # the first one
        if answer is not None:
            return self._final(answer)
        if "<calc>" in action.lower():
            call = next(tag_contents(action, "calc"), None)
            self.tool_calls += 1
            if call is None:
                obs, event = (
                    "<error>unclosed <calc> tag; write <calc>expression</calc></error>\n",
                    "error",
                )
            else:
                try:
                    obs, event = (
                        f"<result>{calculate(call, self.limits)}</result>\n",
                        "calc",
                    )
                except CalcError as e:
                    obs, event = f"<error>{e}</error>\n", "error"
        elif parse_answer(action, fallback_last_number=False) is not None:
            return self._final(action)
        else:
            obs, event = (
                "<error>no <calc>expression</calc> call or <answer>number</answer> found</error>\n",
                "error",
            )
        truncated = self.turn >= self.max_turns
        self._done = truncated
        return obs, 0.0, False, truncated, self._info(event)

    def render(self) -> str | None:
        return f"What is {self.expression}?" if self.expression else None
