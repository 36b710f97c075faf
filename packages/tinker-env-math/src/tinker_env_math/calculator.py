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

Demonstrations: ``info["target"]`` is the ideal next action -- on reset one calculator call on
the whole expression (``<calc>...</calc>``, or the ``<tool_call>`` below), after any turn that
did not end the episode ``<answer>value</answer>`` -- so an ``sft`` stage on this env replays
two-turn worked tool calls (:mod:`tinker_algos.algorithms.sft`).

Native tool calls (``tool_format="native"``): the env declares the tool :data:`CALCULATOR_TOOL`
in its spec (``EnvSpec.tools``), so the renderer shows it to the policy through the chat
template (or the system prompt, in the default ``<tool_call>`` format), and observations are
chat messages (``observation_type="chat"``)::

    observation: [user] "What is 347*29+118?\nUse the calculator tool to calculate. Reply
                  <answer>number</answer> to finish.\n"
    action:      '<tool_call>{"name": "calculator", "arguments": {"expression": "347*29"}}</tool_call>'
                                                 -> observation [tool] "10063"
    action:      "<answer>10181</answer>"        -> episode ends, reward 1

Rule 2 becomes: the action has tool calls (:func:`tinker_core.tool_calls_of`: those the rollout
parsed, or parsed here from a plain string). Every call is answered, in order, by one ``tool``
message (``name`` and ``tool_call_id`` set): the value, or ``error: reason`` for a bad
expression; every malformed call (invalid JSON, an unknown tool, no ``expression``) is answered
by a ``tool`` message ``error: reason`` too. A ``<calc>`` tag is then no tool call (rule 4).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import replace
from typing import Any

from tinker_core import EnvSpec, Observation, TextEnv, format_tool_call, tool_calls_of, tool_message
from tinker_env_math.arithmetic import ArithmeticConfig, _operand
from tinker_env_math.expressions import CalcError, CalcLimits, calculate
from tinker_env_math.parsing import normalize_number, parse_answer, tag_contents

__all__ = ["CALCULATOR_SPEC", "CALCULATOR_TOOL", "TOOL_FORMATS", "CalculatorEnv", "calculator_problems"]

TOOL_FORMATS = ("tags", "native")

CALCULATOR_TOOL: dict[str, Any] = {
    "type": "function",
    "function": {
        "name": "calculator",
        "description": "Evaluate an arithmetic expression of integers with + - * / ( ) and return its value.",
        "parameters": {
            "type": "object",
            "properties": {"expression": {"type": "string", "description": "the expression, e.g. 347*29"}},
            "required": ["expression"],
        },
    },
}
"""The calculator, declared as an OpenAI function tool (``tool_format="native"``)."""

CALCULATOR_SPEC = EnvSpec(
    id="math/calculator-v0",
    description=(
        "Multi-turn arithmetic with a calculator tool: call <calc>expr</calc>, read "
        "<result>...</result>, finish with <answer>number</answer>. Reward 1 for the right "
        "final answer, 0 otherwise; truncated after max_turns."
    ),
    max_turns=4,
    reward_range=(0.0, 1.0),
    # rollout.curriculum moves between these (over the stage's env.kwargs): operands per problem
    difficulty_levels=({"num_terms": 2}, {"num_terms": 3}, {"num_terms": 4}, {"num_terms": 5}),
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
            "tool_format": "'tags' (<calc>expr</calc>, default) or 'native' (the calculator "
            "declared in EnvSpec.tools, called with <tool_call>, answered by tool messages)",
        }
    },
)

_GOLD_LIMITS = CalcLimits(max_chars=10_000, max_magnitude=10**60, max_literal_digits=20)

INSTRUCTIONS = (
    "Use <calc>expression</calc> to calculate. Reply <answer>number</answer> to finish.\n"
)
NATIVE_INSTRUCTIONS = (
    "Use the calculator tool to calculate. Reply <answer>number</answer> to finish.\n"
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
        tool_format: ``"tags"`` (``<calc>`` calls, text observations) or ``"native"`` (the
            tool declared in the spec, chat observations; see the module docstring).
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
        tool_format: str = "tags",
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
        if tool_format not in TOOL_FORMATS:
            raise ValueError(f"tool_format must be 'tags' or 'native', got {tool_format!r}")
        self.native = tool_format == "native"
        self.config = ArithmeticConfig.from_kwargs(digits, ops, allow_negative=True)
        self.num_terms = num_terms
        self.max_turns = max_turns
        self.limits = CalcLimits(max_chars=max_expression_chars, max_magnitude=int(max_magnitude))
        self.format_reward = float(format_reward)
        if max_turns != CALCULATOR_SPEC.max_turns or self.native:
            self.env_spec = replace(CALCULATOR_SPEC, max_turns=max_turns)
        if self.native:
            self.env_spec = replace(
                self.env_spec,
                tools=(CALCULATOR_TOOL,),
                observation_type="chat",
                action_format=(
                    'either a calculator call <tool_call>{"name": "calculator", "arguments": '
                    '{"expression": "347*29"}}</tool_call> (answered by a tool message) or a '
                    "final answer '<answer>10181</answer>'"
                ),
            )
        self.expression = ""
        self.answer = ""
        self.turn = 0
        self.tool_calls = 0
        self._done = True

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[Observation, dict[str, Any]]:
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
        info = {"expression": self.expression, "answer": self.answer, "target": self._call_target()}
        if self.native:
            return [{"role": "user", "content": f"What is {self.expression}?\n{NATIVE_INSTRUCTIONS}"}], info
        return f"What is {self.expression}?\n{INSTRUCTIONS}", info

    def _final(self, text: str) -> tuple[Observation, float, bool, bool, dict[str, Any]]:
        self._done = True
        parsed = parse_answer(text)
        correct = parsed is not None and parsed == normalize_number(self.answer)
        reward = 1.0 if correct else (self.format_reward if parsed is not None else 0.0)
        return ([] if self.native else ""), reward, True, False, self._info("final", parsed=parsed, correct=correct)

    def _call_target(self) -> str:
        """The ideal first action: one calculator call on the whole expression."""
        if self.native:
            return format_tool_call(CALCULATOR_TOOL["function"]["name"], {"expression": self.expression})
        return f"<calc>{self.expression}</calc>"

    def _info(self, event: str, **extra: Any) -> dict[str, Any]:
        info = {
            "event": event,
            "turn": self.turn,
            "tool_calls": self.tool_calls,
            "answer": self.answer,
            **extra,
        }
        if event != "final":  # the ideal next action: answer (the calculator has been asked)
            info["target"] = f"<answer>{self.answer}</answer>"
        return info

    def _calc(self, expression: str) -> tuple[str, str]:
        """``(value, "calc")`` or ``(reason, "error")``."""
        try:
            return calculate(expression, self.limits), "calc"
        except CalcError as e:
            return str(e), "error"

    def _tag_call(self, action: str) -> tuple[Observation, str]:
        call = next(tag_contents(action, "calc"), None)
        self.tool_calls += 1
        if call is None:
            return "<error>unclosed <calc> tag; write <calc>expression</calc></error>\n", "error"
        value, event = self._calc(call)
        return (f"<result>{value}</result>\n" if event == "calc" else f"<error>{value}</error>\n"), event

    def _native_calls(self, action: str) -> tuple[Observation, str] | None:
        """Tool messages answering the action's calls (None when it has none)."""
        calls, errors = tool_calls_of(action, self.env_spec.tools)
        if not calls and not errors:
            return None
        self.tool_calls += len(calls) + len(errors)
        messages, ok = [], False
        for call in calls:
            expression = call.arguments.get("expression")
            if not isinstance(expression, str | int | float) or isinstance(expression, bool):
                messages.append(tool_message("error: 'expression' must be a string like \"347*29\"", call))
                continue
            value, event = self._calc(str(expression))
            ok = ok or event == "calc"
            messages.append(tool_message(value if event == "calc" else f"error: {value}", call))
        messages += [tool_message(f"error: {e.message}", e) for e in errors]
        return messages, ("calc" if ok else "error")

    def step(self, action: str) -> tuple[Observation, float, bool, bool, dict[str, Any]]:
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
        called = self._native_calls(action) if self.native else (
            self._tag_call(action) if "<calc>" in action.lower() else None
        )
        obs: Observation
        if called is not None:
            obs, event = called
        elif parse_answer(action, fallback_last_number=False) is not None:
            return self._final(action)
        else:
            how = "calculator tool call" if self.native else "<calc>expression</calc> call"
            text = f"<error>no {how} or <answer>number</answer> found</error>\n"
            obs, event = ([{"role": "user", "content": text}] if self.native else text), "error"
        truncated = self.turn >= self.max_turns
        self._done = truncated
        return obs, 0.0, False, truncated, self._info(event)

    def render(self) -> str | None:
        return f"What is {self.expression}?" if self.expression else None
