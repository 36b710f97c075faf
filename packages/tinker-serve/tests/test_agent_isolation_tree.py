"""Isolation you can rely on (issue 43): an isolated episode's whole process tree is gone when it
ends, a ``setsid`` grandchild included; ``isolation`` defaults to ``process`` in a scheduler's job;
in thread mode an agent's ``os._exit`` fails its episode (``agent_crash``, named) instead of
ending the job silently, and its ``os.chdir`` cannot move a relative run dir
(tinker_algos.rollout.agent_isolation, process_tree, agent_threads)."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

import pytest

from tinker_algos.rollout.agent_program import AgentProgramEnv, agent_rollout
from tinker_algos.sampling.sampler import SamplingParams
from tinker_core.import_policy import ImportPolicy, enforced

AGENT = '''
import os
import subprocess
import sys
import time


def ask(task, client):
    out = client.chat.completions.create(model="m", messages=[{"role": "user", "content": task["q"]}], max_tokens=2)
    return out.choices[0].message.content or ""


def _escape(marker):
    """A grandchild in a session of its own (setsid), out of the child's process group."""
    p = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(300)"], start_new_session=True)
    with open(os.environ["AGENT_PID_FILE"], "a") as f:
        f.write(f"{p.pid}\\n")


def escapes(task, client):
    ask(task, client)
    _escape("returns")
    return 1.0


def escapes_and_hangs(task, client):
    _escape("hangs")
    time.sleep(300)


def escapes_and_dies(task, client):
    ask(task, client)
    _escape("dies")
    os._exit(5)


def exits(task, client):
    ask(task, client)
    os._exit(7)


def wanders(task, client):
    os.chdir(os.environ["AGENT_ELSEWHERE"])
    return 1.0 if ask(task, client) is not None else 0.0
'''

TASKS = [{"q": "1+1=", "a": "2"}]
PARAMS = SamplingParams(max_new_tokens=2, temperature=1.0, seed=0)


def program(tmp_path: Path, entry: str, **kwargs: Any) -> AgentProgramEnv:
    (tmp_path / "tree_agent.py").write_text(AGENT)
    return AgentProgramEnv(entry=f"tree_agent:{entry}", tasks=TASKS, path=str(tmp_path), **kwargs)


def alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie waiting for its reaper does not)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state not in ("Z", "X")


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="the process tree is read from /proc (Linux)")
@pytest.mark.parametrize(("entry", "timeout_s", "reason"), [
    ("escapes", 60.0, None), ("escapes_and_dies", 60.0, "agent_crash"), ("escapes_and_hangs", 8.0, "agent_timeout"),
])
def test_a_setsid_grandchild_does_not_outlive_its_episode(
    policy: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, entry: str, timeout_s: float, reason: str | None,
) -> None:
    """The finding: a grandchild in a session of its own survived ``isolation: process`` (only the
    child's group was killed). Returned, crashed or timed out, the episode leaves nothing running."""
    pids = tmp_path / "pids"
    monkeypatch.setenv("AGENT_PID_FILE", str(pids))
    result = agent_rollout(policy, program(tmp_path, entry, isolation="process", timeout_s=timeout_s), [0], PARAMS, group_size=2)
    assert [e.error for e in result.episodes] == [reason, reason]
    started = [int(p) for p in pids.read_text().split()]
    assert len(started) == 2
    deadline = time.monotonic() + 5
    while any(alive(p) for p in started) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not any(alive(p) for p in started), f"still running: {[p for p in started if alive(p)]}"


def test_isolation_defaults_to_process_in_a_schedulers_job_only(tmp_path: Path) -> None:
    assert program(tmp_path, "escapes").isolation == "thread"  # opentinker train, the Python API
    with enforced(ImportPolicy(("*",))):  # what a scheduler's worker does around every job
        assert program(tmp_path, "escapes").isolation == "process"
        assert program(tmp_path, "escapes", isolation="thread").isolation == "thread"  # a choice stays a choice


def test_os_exit_in_thread_mode_fails_the_episode_not_the_job(policy: Any, tmp_path: Path) -> None:
    """The finding: ``os._exit`` in a thread-mode agent ended the job with no message and no
    result.json. Now it is that episode's ``agent_crash``, naming the call and the fix."""
    result = agent_rollout(policy, program(tmp_path, "exits", isolation="thread"), [0], PARAMS, group_size=2)
    assert [e.error for e in result.episodes] == ["agent_crash", "agent_crash"]
    assert "os._exit(7)" in result.failures[0] and "isolation: process" in result.failures[0]
    assert os._exit.__module__ == "posix" or os._exit.__name__ == "_exit"  # the guard is gone after the agents


def test_an_agents_chdir_cannot_move_a_relative_run_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The finding: an agent's ``os.chdir()`` crashed the job when its run dir was relative."""
    from tinker_algos import train

    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (tmp_path / "tree_agent.py").write_text(AGENT)
    monkeypatch.setenv("AGENT_ELSEWHERE", str(elsewhere))
    monkeypatch.chdir(tmp_path)
    config = {
        "name": "wander", "seed": 0, "model": {"name": "tiny"},
        "env": {"id": "agent/program-v0", "kwargs": {"entry": "tree_agent:wanders", "tasks": TASKS, "path": str(tmp_path),
                                                     "isolation": "thread"}},
        "algorithm": {"name": "grpo", "steps": 2, "eval_every": 0}, "optimizer": {"name": "adamw", "lr": 1e-3},
        "rollout": {"prompts_per_step": 1, "group_size": 2, "max_new_tokens": 2},
        "checkpoint": {"every": 1}, "logging": {"tensorboard": False, "plot": False},
    }
    result = train(config, run_dir="run")
    assert result.status == "completed" and result.run_dir == "run"
    assert Path.cwd() == tmp_path  # put back after the agents
    assert json.loads((tmp_path / "run" / "result.json").read_text())["status"] == "completed"
    assert not (elsewhere / "run").exists()
