"""The trained calculator agent, served: does it answer through the tool over the OpenAI API?

Starts ``opentinker serve smollm2-135m-instruct --adapter calc=RUN_DIR`` (a run of
``examples/smollm2-calculator.yaml``), asks it ``--n`` sums of two 2-digit numbers with the
calculator declared as an OpenAI function tool (the example's system prompt and the env's
instructions, as in training), runs every call it makes, sends the results back as ``tool``
messages, and counts the replies whose call came in the response's ``tool_calls`` field and the
final answers that are right. Writes ``bench/results/served_calculator.json``.

    uv run --no-sync python bench/check_served_calculator.py runs/smollm2-calculator
"""

from __future__ import annotations

import argparse
import json
import subprocess
import time
import urllib.request
from pathlib import Path

import yaml
from openai import OpenAI

from tinker_env_math.calculator import CALCULATOR_TOOL, NATIVE_INSTRUCTIONS, calculator_problems
from tinker_env_math.expressions import CalcLimits, calculate

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = ROOT / "examples" / "smollm2-calculator.yaml"


def wait_for(port: int, server: subprocess.Popen[str], timeout_s: float = 600.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if server.poll() is not None:
            raise SystemExit(f"opentinker serve exited with {server.returncode}")
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=1)
            return
        except OSError:
            time.sleep(1)
    raise SystemExit(f"opentinker serve did not answer on port {port} within {timeout_s:.0f} s")


def ask(client: OpenAI, system: str, expression: str) -> tuple[bool, str]:
    """One question: (the first reply's call came as ``tool_calls``, the final reply's text)."""
    messages = [{"role": "system", "content": system}, {"role": "user", "content": f"What is {expression}?\n{NATIVE_INSTRUCTIONS}"}]
    reply = client.chat.completions.create(model="calc", messages=messages, tools=[CALCULATOR_TOOL], temperature=0, max_tokens=40)
    choice = reply.choices[0]
    if choice.finish_reason != "tool_calls" or not choice.message.tool_calls:
        return False, choice.message.content or ""
    messages.append(choice.message.model_dump(exclude_none=True))
    for call in choice.message.tool_calls:
        try:
            value = calculate(str(json.loads(call.function.arguments)["expression"]), CalcLimits())
        except Exception as e:  # noqa: BLE001 - the tool answers errors, as the env does
            value = f"error: {e}"
        messages.append({"role": "tool", "tool_call_id": call.id, "name": call.function.name, "content": value})
    final = client.chat.completions.create(model="calc", messages=messages, tools=[CALCULATOR_TOOL], temperature=0, max_tokens=40)
    return True, final.choices[0].message.content or ""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run_dir", help="a run of examples/smollm2-calculator.yaml (or a checkpoint / PEFT adapter)")
    parser.add_argument("--n", type=int, default=20, help="questions to ask (default 20)")
    parser.add_argument("--seed", type=int, default=12345, help="seed of the questions (default 12345)")
    parser.add_argument("--port", type=int, default=8011)
    args = parser.parse_args()
    system = yaml.safe_load(EXAMPLE.read_text())["env"]["system_prompt"]
    server = subprocess.Popen(
        ["opentinker", "serve", "smollm2-135m-instruct", "--adapter", f"calc={args.run_dir}", "--port", str(args.port)],
        stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT, text=True,
    )
    try:
        wait_for(args.port, server)
        client = OpenAI(base_url=f"http://127.0.0.1:{args.port}/v1", api_key="unused")
        called = right = 0
        for expression, answer in calculator_problems(args.n, args.seed, digits=2, ops="+", num_terms=2):
            used_tool, text = ask(client, system, expression)
            called += used_tool
            right += f"<answer>{answer}</answer>" in text
    finally:
        server.terminate()
        server.wait(30)
    out = {"run_dir": args.run_dir, "questions": args.n, "seed": args.seed, "tool_calls_field": called, "right_answers": right}
    path = ROOT / "bench" / "results" / "served_calculator.json"
    path.write_text(json.dumps(out, indent=2) + "\n")
    print(json.dumps(out))


if __name__ == "__main__":
    main()
