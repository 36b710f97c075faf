"""``opentinker train`` of an agent program through the rollout proxy, as a user runs it: the
example calculator agent (examples/agent_calculator, the openai client only), a few GRPO steps on
the tiny model; the trained rows are the tokens the proxy recorded, and a crashing agent is a
counted failed episode, not a failed job (with isolation: process, even one that ends its process)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = ROOT / "examples" / "agent_calculator"

FLAKY_AGENT = '''
from calculator_agent import run as calculator


def run(task, client):
    if task["a"] % 2:  # odd tasks: the agent crashes after its first call
        client.chat.completions.create(model="policy", messages=[{"role": "user", "content": "hi"}], max_tokens=2)
        raise RuntimeError("tool backend down")
    return calculator(task, client)
'''


DYING_AGENT = '''
import os

from calculator_agent import run as calculator


def _slot():
    """This episode's place among the episodes started so far (0, 1, ...): a file claimed atomically."""
    folder = os.path.join(os.path.dirname(os.path.abspath(__file__)), "slots")
    os.makedirs(folder, exist_ok=True)
    i = 0
    while True:
        try:
            os.close(os.open(os.path.join(folder, str(i)), os.O_CREAT | os.O_EXCL))
            return i
        except FileExistsError:
            i += 1


def run(task, client):
    if _slot() % 2:  # every second episode to start (the client's key is a random secret, not its place):
        # the agent ends its process after its first call, as a segfault would
        client.chat.completions.create(model="policy", messages=[{"role": "user", "content": "hi"}], max_tokens=2)
        os._exit(3)
    return calculator(task, client)
'''


def opentinker(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "OPENTINKER_CACHE": str(cwd / "cache")}
    return subprocess.run([sys.executable, "-m", "tinker_client.cli", *args], capture_output=True, text=True, env=env, cwd=cwd, timeout=600)


def job(steps: int, **env_kwargs: object) -> dict:
    config = yaml.safe_load((EXAMPLE / "agent-calculator.yaml").read_text())
    config["env"]["kwargs"].update({"path": ".", **env_kwargs})
    config["algorithm"].update({"steps": steps, "eval_every": steps, "eval_size": 4})
    config["rollout"].update({"prompts_per_step": 2, "group_size": 4})
    config["logging"] = {"tensorboard": False, "plot": False, "rollouts": {"every": 1, "per_step": 4}}
    return config


def test_an_agent_program_trains_with_opentinker_train(tmp_path: Path) -> None:
    shutil.copy(EXAMPLE / "calculator_agent.py", tmp_path)
    (tmp_path / "job.yaml").write_text(yaml.safe_dump(job(2)))
    result = opentinker("train", "job.yaml", "--run-dir", "run", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert "completed: 2 steps" in result.stdout
    rows = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    steps = [r for r in rows if "agent/calls_mean" in r]
    assert len(steps) == 2 and all(r["rollout/episodes"] == 8 and r["rollout/error_rate"] == 0 for r in steps)
    # the sampler's logprobs (recorded by the proxy) are the trainer's on the recorded tokens
    assert all(abs(r["kl/sample_train"]) < 1e-4 for r in steps)
    assert "eval/accuracy" in rows[-1]
    records = [json.loads(line) for line in (tmp_path / "run" / "rollouts.jsonl").read_text().splitlines()]
    train = [r for r in records if r["kind"] == "train"]
    assert train and all(r["turns"][0]["role"] == "policy" and r["turns"][0]["logprobs"] for r in train)


def test_a_crashing_agent_fails_its_episodes_not_the_job(tmp_path: Path) -> None:
    from tinker_algos import train

    shutil.copy(EXAMPLE / "calculator_agent.py", tmp_path)
    (tmp_path / "flaky_agent.py").write_text(FLAKY_AGENT)
    config = job(2, entry="flaky_agent:run", path=str(tmp_path))
    config["rollout"]["max_error_rate"] = 1.0
    result = train(config, run_dir=tmp_path / "run")
    assert result.status == "completed", result
    rows = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    steps = [r for r in rows if "agent/calls_mean" in r]
    assert len(steps) == 2
    assert sum(r.get("rollout/errors/agent_error", 0) for r in steps) > 0


def test_an_agent_that_kills_its_process_trains_through_process_isolation(tmp_path: Path) -> None:
    from tinker_algos import train

    shutil.copy(EXAMPLE / "calculator_agent.py", tmp_path)
    (tmp_path / "dying_agent.py").write_text(DYING_AGENT)
    config = job(1, entry="dying_agent:run", path=str(tmp_path), isolation="process")
    config["algorithm"]["eval_every"] = 0
    config["rollout"]["max_error_rate"] = 1.0
    result = train(config, run_dir=tmp_path / "run")
    assert result.status == "completed", result
    rows = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    [step] = [r for r in rows if "agent/calls_mean" in r]
    assert step["rollout/episodes"] == 8
    assert step["rollout/errors/agent_crash"] == 4  # the odd episodes crashed, the even ones trained
