"""An SFT warm start from an agent program's own demonstrations (``env.kwargs.demo``): the agent
runs unchanged against the rollout proxy, which answers each call with the demonstrated reply
instead of a sample, so the trained prompts are the agent's calls exactly as the proxy renders
them when it samples, and the trained tokens are the replies written as the policy writes them
(tool calls in the default format, then the template's end of turn). Then the same job's GRPO
stage trains the agent on its own episodes, and held-out evaluation reports greedy and sampled
accuracy (``algorithm.eval_temperature``)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tinker_algos.model.prompts import PromptRenderer
from tinker_algos.rollout.agent_program import AgentProgramEnv, agent_rollout
from tinker_algos.sampling.sampler import SamplingParams
from tinker_core.errors import ConfigError
from tinker_core.tools import format_tool_call

EXAMPLES = Path(__file__).resolve().parents[3] / "examples" / "agent_calculator"
AGENT = {"entry": "expression_agent:run", "tasks": "expression_agent:TASKS", "path": str(EXAMPLES), "isolation": "thread"}


def program(**kwargs: Any) -> AgentProgramEnv:
    return AgentProgramEnv(**{**AGENT, "demo": "expression_agent:demo", **kwargs})


@pytest.fixture
def chat_policy(chat_dir: Path) -> Any:
    from tinker_algos.model.models import PolicyModel

    return PolicyModel.load(chat_dir, device="cpu", precision="fp32")


def test_a_demonstrated_episode_is_the_agents_calls_with_the_demo_replies_as_trained_tokens(chat_policy: Any) -> None:
    renderer = PromptRenderer.from_config(chat_policy.tokenizer, "auto")
    tok, eot = chat_policy.tokenizer, renderer.end_of_turn_id
    agent = program()
    params = SamplingParams(max_new_tokens=8, temperature=1.0, seed=5)
    demos = agent_rollout(chat_policy, agent, [0, 1, 2], params, renderer=renderer, demonstrate=True)
    sampled = agent_rollout(chat_policy, agent, [0, 1, 2], params, renderer=renderer)
    assert not demos.errors and len(demos.episodes) == 3
    for i, (ep, other) in enumerate(zip(demos.episodes, sampled.episodes, strict=True)):
        task = agent.tasks[i]
        assert ep.reward == 1.0 and ep.success and ep.calls == 2, "the demo calls the calculator, then answers its result"
        call_ids = tok.encode(format_tool_call("calculator", {"expression": task["expression"]}), add_special_tokens=False)
        answer_ids = tok.encode(str(task["answer"]), add_special_tokens=False)
        traj = ep.trajectory
        tokens, mask = [int(t) for t in traj.tokens_T], [bool(m) for m in traj.loss_mask_T]
        trained = [t for t, m in zip(tokens, mask, strict=True) if m]
        assert trained == [*call_ids, eot, *answer_ids, eot], "exactly the two replies, each closed by <|im_end|>"
        assert all(lp == 0.0 for lp, m in zip(traj.sampler_logprobs_T, mask, strict=True) if m)
        # The first prompt is the one the proxy renders when it samples: same system prompt, tools and question.
        first_prompt = tokens[: mask.index(True)]
        assert other.trajectory is not None and [int(t) for t in other.trajectory.tokens_T[: len(first_prompt)]] == first_prompt
        # ... and what the renderer makes of the agent's messages and tools.
        from expression_agent import INSTRUCTIONS, SYSTEM, TOOLS  # type: ignore[import-not-found]  # imported by the program above

        messages = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": f"What is {task['expression']}? {INSTRUCTIONS}"}]
        assert renderer.start(messages, "", TOOLS)[0] == first_prompt
        # The tool's result arrives as a masked message between the two replies.
        first_end = mask.index(True) + len(call_ids) + 1
        between = tok.decode(tokens[first_end: first_end + mask[first_end:].index(True)])
        assert between == f"\n<|im_start|>tool\n{task['answer']}<|im_end|>\n<|im_start|>assistant\n"  # ChatML's tool turn


def test_a_failing_or_wrong_demo_fails_its_episodes_with_the_reason(
    chat_policy: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "bad_demo.py").write_text("def crash(task, messages):\n    raise KeyError('oops')\n\ndef number(task, messages):\n    return 7\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    params = SamplingParams(max_new_tokens=8, temperature=0.0)
    for demo, words in (("bad_demo:crash", "KeyError"), ("bad_demo:number", "returned int")):
        result = agent_rollout(chat_policy, program(demo=demo), [0], params, demonstrate=True)
        assert result.errors == {"agent_error": 1}
        assert words in result.failures[0] and "env.kwargs.demo" in result.failures[0]


def job(model_dir: Path, demo: bool = True, **grpo: Any) -> dict[str, Any]:
    kwargs = {**AGENT, **({"demo": "expression_agent:demo"} if demo else {})}
    return {
        "name": "agent-warm", "seed": 0, "model": {"name": str(model_dir), "device": "cpu"},
        "env": {"id": "agent/program-v0", "kwargs": kwargs, "eval_kwargs": {**kwargs, "tasks": "expression_agent:EVAL_TASKS"}},
        "lora": {"rank": 4, "alpha": 8},
        "stages": [
            {"name": "sft-tools", "algorithm": {"name": "sft", "steps": 6, "batch_size": 4, "eval_size": 4, "eval_temperature": 0.7},
             "optimizer": {"name": "adamw", "lr": 0.01}},
            {"name": "grpo", "algorithm": {"name": "grpo", "steps": 1, "eval_size": 4, "eval_temperature": 0.7, **grpo}},
        ],
        "rollout": {"prompts_per_step": 1, "group_size": 2, "max_new_tokens": 40, "temperature": 0.7, "stop": []},
        "checkpoint": {"every": 0}, "logging": {"tensorboard": False, "plot": False},
    }


def metrics(run_dir: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines() if line.strip()]


def test_a_warm_start_on_the_agents_demonstrations_then_grpo_runs_end_to_end(chat_dir: Path, tmp_path: Path) -> None:
    """Two stages on one agent env: SFT on the demos (their reward is 1: they solve their tasks;
    the loss falls as the tiny model learns the call), then GRPO; each evaluation greedy and sampled."""
    from tinker_algos import train

    result = train(job(chat_dir), run_dir=tmp_path / "run")
    assert result.status == "completed"
    rows = metrics(tmp_path / "run")
    sft = [r for r in rows if "sft/demo_reward_mean" in r]
    assert len(sft) == 6 and all(r["sft/demo_reward_mean"] == 1.0 for r in sft)
    assert sft[-1]["losses/sft"] < sft[0]["losses/sft"]
    evals = [r for r in rows if "eval/accuracy" in r]
    assert len(evals) == 2, "one held-out evaluation at the end of each stage"
    for r in evals:
        assert 0.0 <= r["eval/sampled_accuracy"] <= 1.0 and 0.0 <= r["eval/sampled_reward_mean"] <= 1.0
    # `opentinker eval` of the run plays the agent as training's held-out evaluation did: the same
    # greedy numbers; with samples, every task k times (its pass@k).
    from tinker_algos.commands.evaluation import eval_settings, evaluate_source, find_source

    source = find_source(tmp_path / "run")
    report = evaluate_source(source, eval_settings(source.job, env_id=None, split=None, n=None, samples=1, max_new_tokens=None, seed=None))
    assert report.n == 4 and len(report.episodes) == 4
    for key in ("eval/accuracy", "eval/reward_mean"):
        assert report.metrics[key] == evals[-1][key], key
    sampled = evaluate_source(source, eval_settings(source.job, env_id=None, split=None, n=2, samples=3, max_new_tokens=None, seed=None))
    assert len(sampled.episodes) == 6 and "eval/pass@3" in sampled.metrics


def test_sft_on_an_agent_without_demonstrations_names_the_field(chat_dir: Path, tmp_path: Path) -> None:
    from tinker_algos import train

    with pytest.raises(ConfigError, match="env.kwargs.demo"):
        train(job(chat_dir, demo=False), run_dir=tmp_path / "run")


def test_the_smollm2_recipe_and_its_compare_validate_and_its_demos_solve_every_task(monkeypatch: pytest.MonkeyPatch) -> None:
    """The example's compare (both variants' configs validated) and its agent: the demo replies
    solve every training and held-out task when played out (the calculator and the answer)."""
    monkeypatch.syspath_prepend(str(EXAMPLES))
    from expression_agent import EVAL_TASKS, TASKS, calculate, demo  # type: ignore[import-not-found]

    from tinker_algos.compare.spec import load_spec

    spec = load_spec(EXAMPLES / "compare-agent-calculator-warm.yaml")
    assert [len(spec.configs[v].resolved_stages()) for v in ("sft-only", "grpo")] == [1, 2]
    assert spec.configs["grpo"].stages[0].algorithm == spec.configs["sft-only"].stages[0].algorithm, "the same warm start"
    assert not {t["expression"] for t in TASKS} & {t["expression"] for t in EVAL_TASKS}
    for task in [*TASKS, *EVAL_TASKS]:
        call = demo(task, [{"role": "user", "content": "?"}])["tool_calls"][0]["function"]
        result = str(calculate(json.loads(call["arguments"])["expression"]))
        assert demo(task, [{"role": "tool", "content": result}]) == str(task["answer"])
