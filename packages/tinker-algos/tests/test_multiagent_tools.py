"""Tools in a multi-agent env (issue 26): a learner seat is shown the env's ``EnvSpec.tools`` in
its first prompt (the renderer's documented default format on a template without native tools)
and its ``<tool_call>`` replies reach the env parsed, as :attr:`Action.tool_calls`, exactly as in
a single-agent episode.

The policy's samples are scripted (the batcher's ``sample`` is replaced): the test is about what
the seats render and what the env receives, not what a model says.
"""

from __future__ import annotations

from typing import Any

import pytest

pytest.importorskip("torch")

import tinker_algos.sampling.engine as engine_module  # noqa: E402
from tinker_algos.model.prompts import PromptRenderer  # noqa: E402
from tinker_algos.multiagent import Learner, multi_agent_rollout  # noqa: E402
from tinker_algos.sampling.sampler import SampledSequence, SamplingParams  # noqa: E402
from tinker_core import Action, ToolCall  # noqa: E402
from tinker_core.env import EnvSpec, MultiAgentTextEnv  # noqa: E402
from tinker_core.tools import format_tool_call, tools_system_prompt  # noqa: E402

LOOKUP = {
    "type": "function",
    "function": {
        "name": "lookup",
        "description": "Look a word up in the shared dictionary.",
        "parameters": {"type": "object", "properties": {"word": {"type": "string"}}, "required": ["word"]},
    },
}
SYSTEM = "Play your turn."


class ToolDuelEnv(MultiAgentTextEnv):
    """Roles a and b alternate for two steps; the env declares one tool and keeps every action
    it is given (the role, the action object)."""

    env_spec = EnvSpec(id="test/tool-duel-v0", max_turns=2, reward_range=(0.0, 1.0), roles=("a", "b"),
                       system_prompt=SYSTEM, tools=(LOOKUP,))

    def __init__(self) -> None:
        self.possible_agents = ["a", "b"]
        self.received: list[tuple[str, Any]] = []

    def reset(self, seed: int | None = None, options: dict[str, Any] | None = None) -> None:
        super().reset(seed=seed, options=options)
        self.agent_selection = "a"
        self.count = 0

    def observe(self, agent: str) -> str:
        return f"{agent}: step {self.count}. Call lookup if you need a word.\n"

    def step(self, action: str) -> None:
        self.received.append((self.agent_selection, action))
        self.rewards = {"a": 0.0, "b": 0.0}
        self.count += 1
        self.agent_selection = "b" if self.agent_selection == "a" else "a"
        if self.count >= 2:
            self.terminations = {"a": True, "b": True}
        self._accumulate_rewards()


def test_a_learner_seat_sees_the_env_tools_and_its_tool_calls_reach_the_env_parsed(
    policy: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    tok = policy.tokenizer
    call = ToolCall("lookup", {"word": "cat"}, id="call_0")  # the first block of its turn
    reply = format_tool_call("lookup", {"word": "cat"})
    contexts: list[list[int]] = []

    def scripted(pol: Any, ctxs: list[list[int]], params: Any, **kw: Any) -> list[list[SampledSequence]]:
        contexts.extend(list(c) for c in ctxs)
        ids = tok.encode(reply, add_special_tokens=False)
        return [[SampledSequence(list(c), ids, [-0.5] * len(ids), [-0.5] * len(ids), "eos", reply)] for c in ctxs]

    monkeypatch.setattr(engine_module, "sample", scripted)
    envs: list[ToolDuelEnv] = []

    def factory() -> ToolDuelEnv:
        envs.append(ToolDuelEnv())
        return envs[-1]

    renderer = PromptRenderer.from_config(tok, "auto")
    params = SamplingParams(max_new_tokens=48, stop=(), seed=0)
    result = multi_agent_rollout(policy, factory, [0], params, agents=Learner(None), renderer=renderer)
    ep = result.episodes[0]
    assert ep.error is None and set(ep.trajectories) == {"a", "b"}
    # the first prompt of each learner seat: the env's system prompt and tools, then its observation
    env = envs[-1]
    for k, role in enumerate(("a", "b")):
        expected, _ = renderer.start(f"{role}: step {k}. Call lookup if you need a word.\n", SYSTEM, (LOOKUP,))
        assert contexts[k] == expected
    if not renderer.native_tools:  # the documented default format, in the system prompt
        shown = tok.decode(contexts[0])
        assert tools_system_prompt([LOOKUP]).split("<tools>")[0].strip() in shown and '"lookup"' in shown
    without, _ = renderer.start("a: step 0. Call lookup if you need a word.\n", SYSTEM, ())
    assert contexts[0] != without
    # what the env receives: an Action whose tool calls are parsed, as for a single-agent env
    assert [r for r, _ in env.received] == ["a", "b"]
    for _, action in env.received:
        assert isinstance(action, Action) and action == reply
        assert action.tool_calls == (call,) and action.tool_call_errors == ()
