"""Agent-program episodes in child processes (``isolation: process``): an agent that ends its
process fails its episode, not the job; a hanging agent's process is killed at the timeout and is
gone; a result JSON cannot hold is a bad result; and the trajectories are the thread mode's, token
for token (tinker_algos.rollout.agent_isolation, tinker_algos.rollout.agent_program)."""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

import pytest

from tinker_algos.rollout.agent_program import AgentProgramEnv, agent_rollout
from tinker_algos.sampling.sampler import SamplingParams
from tinker_core.errors import ConfigError

AGENT = '''
import os
import time


def ask(task, client, n=4):
    out = client.chat.completions.create(model="m", messages=[{"role": "user", "content": task["q"]}], max_tokens=n)
    return out.choices[0].message.content or ""


def run(task, client):
    return 1.0 if task["a"] in ask(task, client) else 0.25


def dies(task, client):
    ask(task, client, 2)
    if task["a"] == "2":  # the first task's agent ends its process, as a segfault would
        os._exit(3)
    return 1.0


def hangs(task, client):
    with open(os.environ["AGENT_PID_FILE"], "a") as f:
        f.write(f"{os.getpid()}\\n")
    time.sleep(60)
    return 1.0


def odd(task, client):
    ask(task, client, 2)
    return {"reward": 1.0, "log": object()}


def raises(task, client):
    ask(task, client, 2)
    raise ValueError("the agent broke")
'''

TASKS = [{"q": "1+1=", "a": "2"}, {"q": "2+2=", "a": "4"}]


def program(tmp_path: Path, entry: str, **kwargs: Any) -> AgentProgramEnv:
    (tmp_path / "iso_agent.py").write_text(AGENT)
    return AgentProgramEnv(entry=f"iso_agent:{entry}", tasks=TASKS, path=str(tmp_path), **kwargs)


def test_an_agent_that_kills_its_process_fails_its_episode_not_the_job(policy: Any, tmp_path: Path) -> None:
    params = SamplingParams(max_new_tokens=2, temperature=1.0, seed=0)
    result = agent_rollout(policy, program(tmp_path, "dies", isolation="process"), [0, 1], params, group_size=2)
    assert [e.error for e in result.episodes] == ["agent_crash", "agent_crash", None, None]
    assert result.errors["agent_crash"] == 2 and "exited with code 3" in result.failures[0]
    m = result.metrics()
    assert m["rollout/errors/agent_crash"] == 2.0 and m["rollout/episodes"] == 4.0
    assert len(result.trajectories) == 2 and all(t.reward == 1.0 for t in result.trajectories)
    raised = agent_rollout(policy, program(tmp_path, "raises", isolation="process"), [0], params)
    assert raised.errors["agent_error"] == 1 and "ValueError: the agent broke" in raised.failures[0]
    odd = agent_rollout(policy, program(tmp_path, "odd", isolation="process"), [0], params)
    assert [e.error for e in odd.episodes] == ["agent_bad_result"] and "JSON-serialisable" in odd.failures[0]


def test_a_hanging_agent_is_killed_at_the_timeout_and_its_process_is_gone(
    policy: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    pids = tmp_path / "pids"
    monkeypatch.setenv("AGENT_PID_FILE", str(pids))
    params = SamplingParams(max_new_tokens=2, temperature=1.0, seed=0)
    t0 = time.monotonic()
    # 8 s: a child process must start (about 0.8 s idle, several seconds on a loaded machine) and
    # write its pid before the timeout kills it
    result = agent_rollout(policy, program(tmp_path, "hangs", isolation="process", timeout_s=8.0), [0], params, group_size=2)
    assert time.monotonic() - t0 < 40
    assert [e.error for e in result.episodes] == ["agent_timeout", "agent_timeout"]
    started = [int(p) for p in pids.read_text().split()]
    assert len(started) == 2
    for pid in started:
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)


def test_process_isolation_samples_the_thread_modes_trajectories(policy: Any, tmp_path: Path) -> None:
    params = SamplingParams(max_new_tokens=4, temperature=1.0, seed=0)
    threads = agent_rollout(policy, program(tmp_path, "run"), [0, 1], params, group_size=2)
    processes = agent_rollout(policy, program(tmp_path, "run", isolation="process"), [0, 1], params, group_size=2)
    assert all(e.error is None for e in processes.episodes) and len(processes.trajectories) == 4
    assert [t.tokens_T.tolist() for t in processes.trajectories] == [t.tokens_T.tolist() for t in threads.trajectories]
    assert [t.reward for t in processes.trajectories] == [t.reward for t in threads.trajectories]


def test_isolation_names_the_field_and_the_fix(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="env.kwargs.isolation.*thread, process"):
        program(tmp_path, "run", isolation="container")
