"""Native tool calls with SmolLM2's real tokenizer and ChatML template: a multi-turn calculator
episode whose tool calls the env receives parsed, whose parse errors it answers, whose tool
results the template renders as ``tool`` messages, and whose training tokens are the sampled
tokens, turn by turn.

The policy is scripted (the test chooses every token it "samples", through the real rollout, the
turn FSM and the renderer): the tests are about rendering and bookkeeping, not what a model says.
"""

from __future__ import annotations

import dataclasses
import json
import types
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import tinker_algos.sampling.engine as engine_module
from tinker_algos.model.prompts import PromptRenderer
from tinker_algos.model.tokenizer import load_tokenizer
from tinker_algos.rollout.episodes import rollout
from tinker_algos.sampling.sampler import SampledSequence, SamplingParams
from tinker_core import Action, ToolCall
from tinker_core.tools import format_tool_call, tools_system_prompt
from tinker_env_math.calculator import CALCULATOR_TOOL, CalculatorEnv

IM_START, IM_END = "<|im_start|>", "<|im_end|>"
BAD_CALL = '<tool_call>\n{"name": "calculator", "arguments": {"expression": "1+1"}\n</tool_call>'  # a brace short

# A Qwen2.5-style template (abridged): tools in the system message, tool results as
# <tool_response> blocks in a user turn. SmolLM2's own template has no tool support.
TOOLS_TEMPLATE = (
    "{%- if tools %}{{- '<|im_start|>system\\n' }}"
    "{%- if messages[0].role == 'system' %}{{- messages[0].content }}{%- else %}{{- 'You are a helpful assistant.' }}{%- endif %}"
    "{{- '\\n\\n# Tools\\n<tools>' }}{%- for tool in tools %}{{- '\\n' }}{{- tool | tojson }}{%- endfor %}"
    "{{- '\\n</tools><|im_end|>\\n' }}"
    "{%- elif messages[0].role == 'system' %}{{- '<|im_start|>system\\n' + messages[0].content + '<|im_end|>\\n' }}{%- endif %}"
    "{%- for message in messages %}"
    "{%- if message.role == 'tool' %}"
    "{%- if loop.first or messages[loop.index0 - 1].role != 'tool' %}{{- '<|im_start|>user' }}{%- endif %}"
    "{{- '\\n<tool_response>\\n' + message.content + '\\n</tool_response>' }}"
    "{%- if loop.last or messages[loop.index0 + 1].role != 'tool' %}{{- '<|im_end|>\\n' }}{%- endif %}"
    "{%- elif message.role != 'system' or not loop.first %}"
    "{{- '<|im_start|>' + message.role + '\\n' + message.content + '<|im_end|>\\n' }}"
    "{%- endif %}{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}"
)
# ChatML that refuses any role but system, user and assistant.
NO_TOOL_ROLE_TEMPLATE = (
    "{%- for message in messages %}"
    "{%- if message.role not in ['system', 'user', 'assistant'] %}{{ raise_exception('unknown role ' + message.role) }}{%- endif %}"
    "{{- '<|im_start|>' + message.role + '\\n' + message.content + '<|im_end|>\\n' }}"
    "{%- endfor %}{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}"
)


@pytest.fixture(scope="module")
def tok(smollm2_dir: Path) -> Any:
    """SmolLM2-135M-Instruct's tokenizer, loaded as the project loads tokenizers."""
    return load_tokenizer(smollm2_dir)


def chatml(messages: list[dict[str, str]], generation_prompt: bool) -> str:
    text = "".join(f"{IM_START}{m['role']}\n{m['content']}{IM_END}\n" for m in messages)
    return text + (f"{IM_START}assistant\n" if generation_prompt else "")


def piecewise(tok: Any, text: str) -> list[int]:
    """``text`` as a token sequence the tokenizer would not produce itself: every character its
    own token(s). Decodes to ``text``; re-encoding it would give other ids."""
    return [i for ch in text for i in tok.encode(ch, add_special_tokens=False)]


class ScriptedPolicy:
    """A fake ``sample``: turn ``k`` "samples" ``turns[k]`` (token ids, stop reason, text)."""

    def __init__(self, turns: list[tuple[list[int], str, str]]) -> None:
        self.turns, self.contexts, self.sampled = list(turns), [], []

    def __call__(self, policy, contexts, params, **kw):
        assert len(contexts) == 1
        ids, reason, text = self.turns.pop(0)
        self.contexts.append(list(contexts[0]))
        self.sampled.append(ids)
        lps = [-0.25] * len(ids)
        return [[SampledSequence(list(contexts[0]), ids, lps, lps, reason, text)]]


class Recording:
    """Wraps an env and keeps the actions it is given."""

    def __init__(self, env: Any) -> None:
        self.env, self.actions, self.env_spec = env, [], env.env_spec

    def reset(self, **kw):
        return self.env.reset(**kw)

    def step(self, action):
        self.actions.append(action)
        return self.env.step(action)

    def close(self):
        self.env.close()


def fake_policy(tok: Any) -> Any:
    return types.SimpleNamespace(tokenizer=tok, base_model=types.SimpleNamespace(config=types.SimpleNamespace(max_position_embeddings=4096)))


def run_episode(tok: Any, monkeypatch: pytest.MonkeyPatch, renderer: PromptRenderer, turns: list[tuple[list[int], str, str]]):
    script = ScriptedPolicy(turns)
    monkeypatch.setattr(engine_module, "sample", script)
    envs: list[Recording] = []

    def factory() -> Recording:
        envs.append(Recording(CalculatorEnv(tool_format="native", num_terms=2, digits=2)))
        return envs[-1]

    res = rollout(fake_policy(tok), factory, [7], SamplingParams(max_new_tokens=64, stop=()), renderer=renderer)  # type: ignore[arg-type]
    return res.episodes[0], script, envs[0]


def check_tokens_in_equal_tokens_out(ep: Any, script: ScriptedPolicy) -> None:
    traj = ep.trajectory
    assert traj is not None
    tokens, mask = traj.tokens_T.tolist(), traj.loss_mask_T
    trained = [t for t, m in zip(tokens, mask, strict=True) if m > 0]
    assert trained == [t for s in script.sampled for t in s]  # the sampled ids, never re-encoded
    np.testing.assert_array_equal(traj.sampler_logprobs_T[mask > 0], -0.25)
    for k in range(1, len(script.sampled)):  # each turn's context = the last + its sample + the env's delta
        prev = script.contexts[k - 1] + script.sampled[k - 1]
        assert script.contexts[k][: len(prev)] == prev
    assert tokens[: len(script.contexts[-1]) + len(script.sampled[-1])] == script.contexts[-1] + script.sampled[-1]


def test_smollm2_has_no_tool_template_so_tools_go_to_the_system_prompt(tok) -> None:
    renderer = PromptRenderer.from_config(tok, "auto")
    assert renderer.chat and not renderer.native_tools and renderer.tool_role
    ids, conv = renderer.start([{"role": "user", "content": "What is 2+3?"}], "Be brief.", (CALCULATOR_TOOL,))
    system = "Be brief.\n\n" + tools_system_prompt([CALCULATOR_TOOL])
    assert tok.decode(ids) == chatml([{"role": "system", "content": system}, {"role": "user", "content": "What is 2+3?"}], True)
    assert conv.tools == ()  # the template is never given tools it cannot render
    ids, _ = renderer.start("What is 2+3?", "", (CALCULATOR_TOOL,))  # no system prompt: the tools are the system prompt
    assert tok.decode(ids).startswith(f"{IM_START}system\n# Tools\n\nYou may call one or more functions")


def test_a_multi_turn_tool_episode_trains_on_the_sampled_tokens_and_answers_parse_errors(tok, monkeypatch) -> None:
    renderer = PromptRenderer.from_config(tok, "auto")
    probe = CalculatorEnv(tool_format="native", num_terms=2, digits=2)
    obs0, info = probe.reset(seed=7)
    expr, answer = info["expression"], info["answer"]
    eot = tok.convert_tokens_to_ids(IM_END)
    good = "I will use the tool.\n" + format_tool_call("calculator", {"expression": expr})
    final = f"<answer>{answer}</answer>"
    turns = [
        (tok.encode(BAD_CALL, add_special_tokens=False) + [eot], "eos", BAD_CALL),  # malformed JSON
        (piecewise(tok, good), "length", good),  # a valid call, in ids the tokenizer would not choose, cut off
        (tok.encode(final, add_special_tokens=False) + [eot], "eos", final),
    ]
    assert piecewise(tok, good) != tok.encode(good, add_special_tokens=False)
    ep, script, env = run_episode(tok, monkeypatch, renderer, turns)
    assert ep.error is None and ep.turns == 3 and ep.reward == 1.0

    # the env received the calls parsed: an error for the malformed one, the call for the good one
    bad, call, last = env.actions
    assert all(isinstance(a, Action) for a in env.actions)
    assert bad.tool_calls == () and len(bad.tool_call_errors) == 1 and "not valid JSON" in bad.tool_call_errors[0].message
    assert call.tool_calls == (ToolCall("calculator", {"expression": expr}, "call_0"),) and call.tool_call_errors == ()
    assert call.stop_reason == "length" and last.tool_calls == ()

    # ... and answered both with tool messages, which the template renders as `tool` turns
    error_reply, value_reply = (obs for obs, _ in ep.transcript[1:])  # (transcripts: role: content lines)
    assert error_reply.startswith("tool: error: the call is not valid JSON")
    assert value_reply == f"tool: {answer}"
    check_tokens_in_equal_tokens_out(ep, script)

    # the whole episode is the templated conversation: system prompt with the tools, tool turns
    system = {"role": "system", "content": tools_system_prompt([CALCULATOR_TOOL])}
    first_error = error_reply.removeprefix("tool: ")
    messages = [system, *obs0, {"role": "assistant", "content": BAD_CALL}, {"role": "tool", "content": first_error},
                {"role": "assistant", "content": good}, {"role": "tool", "content": answer},
                {"role": "assistant", "content": final}]
    assert tok.decode(ep.trajectory.tokens_T.tolist()) + "\n" == chatml(messages, False)
    # the turn cut off at the token limit got the template's <|im_end|> as a masked env token
    delta = script.contexts[2][len(script.contexts[1]) + len(script.sampled[1]):]
    assert tok.decode(delta) == f"{IM_END}\n{IM_START}tool\n{answer}{IM_END}\n{IM_START}assistant\n"


def test_a_template_with_tool_support_gets_the_tools_and_renders_tool_results(tok, monkeypatch, tmp_path) -> None:
    path = tmp_path / "tools.jinja"
    path.write_text(TOOLS_TEMPLATE)
    renderer = PromptRenderer.from_config(tok, str(path))
    assert renderer.native_tools and renderer.tool_role and renderer.end_of_turn_id == tok.convert_tokens_to_ids(IM_END)
    probe = CalculatorEnv(tool_format="native", num_terms=2, digits=2)
    _, info = probe.reset(seed=7)
    eot = tok.convert_tokens_to_ids(IM_END)
    calls = format_tool_call("calculator", {"expression": info["expression"]}) + format_tool_call("calculator", {"expression": "2**200"})
    final = f"<answer>{info['answer']}</answer>"
    turns = [(tok.encode(calls, add_special_tokens=False) + [eot], "eos", calls),
             (tok.encode(final, add_special_tokens=False) + [eot], "eos", final)]
    ep, script, env = run_episode(tok, monkeypatch, renderer, turns)
    assert ep.error is None and ep.reward == 1.0
    assert [c.id for c in env.actions[0].tool_calls] == ["call_0", "call_1"]
    prompt = tok.decode(script.contexts[0])
    assert prompt.startswith(f"{IM_START}system\nYou are a helpful assistant.\n\n# Tools\n<tools>\n")
    assert json.loads(prompt.split("<tools>\n")[1].split("\n</tools>")[0]) == CALCULATOR_TOOL  # the template wrote the tool
    assert "<tool_call>" not in prompt.split("</tools>")[0].split("<tools>")[0]  # not the default format's instructions
    delta = tok.decode(script.contexts[1][len(script.contexts[0]) + len(script.sampled[0]):])
    assert delta.startswith(f"\n{IM_START}user\n<tool_response>\n{info['answer']}\n</tool_response>\n<tool_response>\nerror: ")
    assert delta.endswith(f"</tool_response>{IM_END}\n{IM_START}assistant\n")  # both results in one user turn
    check_tokens_in_equal_tokens_out(ep, script)


def test_a_template_without_a_tool_role_gets_tool_results_as_a_user_turn(tok, monkeypatch, tmp_path) -> None:
    path = tmp_path / "no-tool-role.jinja"
    path.write_text(NO_TOOL_ROLE_TEMPLATE)
    renderer = PromptRenderer.from_config(tok, str(path))
    assert not renderer.native_tools and not renderer.tool_role
    ids, conv = renderer.start("What is 2+3?", "", (CALCULATOR_TOOL,))
    sampled = tok.encode(format_tool_call("calculator", {"expression": "2+3"}), add_special_tokens=False)
    reply = [{"role": "tool", "content": "5", "tool_call_id": "call_0"}, {"role": "tool", "content": "error: x"}]
    delta = renderer.next(conv, sampled, tok.decode(sampled), reply)
    assert tok.decode(delta) == (f"{IM_END}\n{IM_START}user\n<tool_response>\n5\n</tool_response>\n"
                                 f"<tool_response>\nerror: x\n</tool_response>{IM_END}\n{IM_START}assistant\n")
    # a whole episode through the rollout: its tokens render the replies the same way (the
    # transcript keeps the env's message, role: content)
    _, info = CalculatorEnv(tool_format="native", num_terms=2, digits=2).reset(seed=7)
    eot = tok.convert_tokens_to_ids(IM_END)
    call, final = format_tool_call("calculator", {"expression": info["expression"]}), f"<answer>{info['answer']}</answer>"
    turns = [(tok.encode(t, add_special_tokens=False) + [eot], "eos", t) for t in (call, final)]
    ep, script, _ = run_episode(tok, monkeypatch, renderer, turns)
    assert ep.error is None and ep.reward == 1.0
    assert ep.transcript[1][0] == f"tool: {info['answer']}"
    reply = f"{IM_START}user\n<tool_response>\n{info['answer']}\n</tool_response>{IM_END}\n{IM_START}assistant\n"
    assert reply in tok.decode(ep.trajectory.tokens_T.tolist())
    check_tokens_in_equal_tokens_out(ep, script)


def test_the_rollout_record_shows_the_tool_calls_as_the_env_got_them(tok, monkeypatch) -> None:
    # a call of a tool the env does not declare and one without its required argument: the env
    # gets both as errors, and the record (what the viewer shows) says so too rather than
    # showing two valid calls, as it would when it parsed the text without the env's tools
    renderer = PromptRenderer.from_config(tok, "auto")
    _, info = CalculatorEnv(tool_format="native", num_terms=2, digits=2).reset(seed=7)
    eot = tok.convert_tokens_to_ids(IM_END)
    calls = format_tool_call("search", {"query": "2+3"}) + format_tool_call("calculator", {})
    final = f"<answer>{info['answer']}</answer>"
    turns = [(tok.encode(t, add_special_tokens=False) + [eot], "eos", t) for t in (calls, final)]
    ep, _, env = run_episode(tok, monkeypatch, renderer, turns)
    got = env.actions[0]
    assert got.tool_calls == () and [e.name for e in got.tool_call_errors] == ["search", "calculator"]
    record = json.loads(ep.to_record(tok, kind="train", stage="s", step=0, episode=0).to_json_line())
    policy = [t for t in record["turns"] if t["role"] == "policy"]
    assert [c["error"] for c in policy[0]["tool_calls"]] == [e.message for e in got.tool_call_errors]
    assert [c["text"] for c in policy[0]["tool_calls"]] == [e.text for e in got.tool_call_errors]
    assert policy[1]["tool_calls"] is None  # the answer turn has none
    # a record built from plain texts (an episode no rollout made) still finds the blocks itself
    plain = dataclasses.replace(ep, transcript=[(obs, str(action)) for obs, action in ep.transcript])
    plain_record = json.loads(plain.to_record(tok, kind="train", stage="s", step=0, episode=0).to_json_line())
    names = [c["function"]["name"] for t in plain_record["turns"] if t["role"] == "policy" and t["tool_calls"] for c in t["tool_calls"]]
    assert names == ["search", "calculator"]
