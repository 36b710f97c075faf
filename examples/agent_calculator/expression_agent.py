"""A calculator agent on three-term problems ("What is 37+45-12?"), written with the openai client
only: it asks the model, runs the `calculator` tool (which takes the whole expression) when the
model calls it, and scores the final answer (1 when it is the exact result, else 0).

`demo(task, messages)` is the reply a good policy gives at each call: first a calculator call on
the whole expression, then the tool's result as the answer. `opentinker train` uses it for an SFT
warm start on the agent's own calls (env.kwargs.demo; see agent-calculator-smollm2-warm.yaml and
docs/guides/train-an-existing-agent.md), then GRPO trains the agent on its own episodes.
"""

import json
import random
import re

SYSTEM = "You are a helpful assistant. Use the calculator tool for arithmetic."
# Without the first sentence, "Answer with the number." alone, 7 SFT steps on the demos still left
# SmolLM2 answering without the tool (0/64 held-out, pilot seed 100).
INSTRUCTIONS = "Use the calculator tool to calculate, then answer with the number."
TOOLS = [{"type": "function", "function": {
    "name": "calculator", "description": "Evaluate an arithmetic expression of integers with + and -.",
    "parameters": {"type": "object", "properties": {"expression": {"type": "string"}}, "required": ["expression"]}}}]


def _problems(seed, n):
    rng = random.Random(seed)
    out = []
    while len(out) < n:
        a, b, c = (rng.randint(10, 99) for _ in range(3))
        expression = f"{a}{rng.choice('+-')}{b}{rng.choice('+-')}{c}"
        if expression not in out:
            out.append(expression)
    return [{"expression": e, "answer": calculate(e)} for e in out]


def calculate(expression):
    """The value of a sum of integers with + and - (no eval: anything else is an error)."""
    text = expression.replace(" ", "")
    if not re.fullmatch(r"-?\d{1,9}([+-]\d{1,9}){0,8}", text):
        raise ValueError(f"not an expression of integers with + and -: {expression!r}")
    return sum(int(term) for term in re.findall(r"[+-]?\d+", text))


def _held_out():
    train = {t["expression"] for t in _problems(0, 400)}
    return [t for t in _problems(1, 200) if t["expression"] not in train][:64]


TASKS = _problems(0, 400)       # training problems
EVAL_TASKS = _held_out()        # held-out problems, none of them in TASKS


def run(task, client):
    messages = [{"role": "system", "content": SYSTEM},
                {"role": "user", "content": f"What is {task['expression']}? {INSTRUCTIONS}"}]
    for _ in range(3):  # at most two tool rounds, then the answer
        msg = client.chat.completions.create(model="policy", messages=messages, tools=TOOLS, max_tokens=48).choices[0].message
        messages.append(msg.model_dump(exclude_none=True))
        if not msg.tool_calls:
            break
        for call in msg.tool_calls:
            try:
                result = str(calculate(str(json.loads(call.function.arguments).get("expression", ""))))
            except (ValueError, AttributeError) as e:
                result = f"error: {e}"
            messages.append({"role": "tool", "tool_call_id": call.id, "name": call.function.name, "content": result})
    return 1.0 if (msg.content or "").strip() == str(task["answer"]) else 0.0


def demo(task, messages):
    """The demonstrated reply: a calculator call on the expression, then the tool's result."""
    if messages[-1]["role"] == "tool":
        return messages[-1]["content"]
    return {"tool_calls": [{"type": "function", "function": {
        "name": "calculator", "arguments": json.dumps({"expression": task["expression"]})}}]}
