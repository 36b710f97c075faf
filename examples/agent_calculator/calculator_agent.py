"""A calculator agent written with the openai client only: it asks the model, runs the `add` tool
when the model calls it, and scores the final answer. `opentinker train` trains it unchanged
(see agent-calculator.yaml and docs/guides/train-an-existing-agent.md)."""

import json

TOOLS = [{"type": "function", "function": {
    "name": "add", "description": "Add two integers.",
    "parameters": {"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}}, "required": ["a", "b"]}}}]
TASKS = [{"a": a, "b": b} for a in range(10, 90, 9) for b in range(11, 60, 7)]


def run(task, client):
    messages = [{"role": "user", "content": f"What is {task['a']}+{task['b']}? Answer with the number."}]
    for _ in range(3):  # at most two tool rounds, then the answer
        msg = client.chat.completions.create(model="policy", messages=messages, tools=TOOLS, max_tokens=64).choices[0].message
        messages.append(msg.model_dump(exclude_none=True))
        if not msg.tool_calls:
            break
        for call in msg.tool_calls:
            args = json.loads(call.function.arguments)
            result = int(args.get("a", 0)) + int(args.get("b", 0))
            messages.append({"role": "tool", "tool_call_id": call.id, "name": "add", "content": str(result)})
    answer = (msg.content or "").strip()
    if answer == str(task["a"] + task["b"]):
        return 1.0
    # partial credit: the share of the answer that is digits (what a model learns first)
    return 0.5 * sum(ch.isdigit() for ch in answer) / max(len(answer), 1)
