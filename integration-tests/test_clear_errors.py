"""Clear errors of issue 43, each as a user meets it: an env adapter's bad argument through
``train`` names the key (as ``eval`` does), for gymnasium, reasoning-gym, TextArena and verifiers;
``max_turns: 0`` is refused; ``config validate`` checks learners against the env as ``train``
does; ``compare -j 2`` whose worker dies fails that job and finishes the other; ``compare`` never
overwrites a report.md it did not write."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tinker_core.errors import ConfigError


def job(env: dict, **extra: object) -> dict:
    return {"name": "bad", "model": {"name": "tiny", "threads": 1}, "env": env,
            "algorithm": {"name": "grpo", "steps": 1, "eval_every": 0},
            "rollout": {"prompts_per_step": 2, "group_size": 2, "max_new_tokens": 2},
            "checkpoint": {"every": 0}, "logging": {"tensorboard": False, "plot": False}, **extra}


ADAPTERS = [("gym/FrozenLake-v1", "gymnasium"), ("reasoning_gym/basic_arithmetic-v0", "reasoning_gym"),
            ("textarena/TicTacToe-v0", "textarena"), ("verifiers/env-v0", "verifiers")]


@pytest.mark.parametrize(("env_id", "module"), ADAPTERS)
def test_an_adapters_bad_argument_through_train_names_the_key(tmp_path: Path, env_id: str, module: str) -> None:
    """The finding: train said only "4 of 4 episodes failed ({'env_error': 4})" (gymnasium,
    reasoning-gym, OpenEnv) or printed a traceback (TextArena, verifiers)."""
    if importlib.util.find_spec(module) is None:
        pytest.skip(f"{module} is not installed (tinker-env-adapters' extra)")
    from tinker_algos import train

    with pytest.raises(ConfigError) as e:
        train(job({"id": env_id, "kwargs": {"bogus_kwarg": 3}}), run_dir=tmp_path / "run")
    [problem] = e.value.problems
    assert problem.startswith(f"env.kwargs.bogus_kwarg: env {env_id!r} takes no argument 'bogus_kwarg'"), problem


def test_a_gym_env_refuses_max_turns_0(tmp_path: Path) -> None:
    if importlib.util.find_spec("gymnasium") is None:
        pytest.skip("gymnasium is not installed")
    from tinker_algos import train

    with pytest.raises(ConfigError, match=r"env.kwargs: .*max_turns must be an int >= 1.*got 0"):
        train(job({"id": "gym/FrozenLake-v1", "kwargs": {"max_turns": 0}}), run_dir=tmp_path / "run")


def opentinker(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "OPENTINKER_CACHE": str(cwd / "cache")}
    return subprocess.run([sys.executable, "-m", "tinker_client.cli", *args], capture_output=True, text=True, env=env,
                          cwd=cwd, timeout=900)


def test_config_validate_checks_learners_against_the_env(tmp_path: Path) -> None:
    """The finding: config validate said valid for learners configs train refuses."""
    config = job({"id": "games/tictactoe-v0"})
    config["algorithm"]["params"] = {"multi_agent": {"mode": "learners", "roles": {"x": {}, "y": {}}}}
    (tmp_path / "l.yaml").write_text(yaml.safe_dump(config))
    out = opentinker("config", "validate", "l.yaml", cwd=tmp_path)
    assert out.returncode == 2, out.stdout
    assert "algorithm.params.multi_agent.mode: learners trains one LoRA adapter per role" in out.stderr
    assert "algorithm.params.multi_agent.roles.y: not a role of games/tictactoe-v0" in out.stderr
    config["lora"], config["algorithm"]["params"]["multi_agent"]["roles"] = {"rank": 4}, {"x": {}, "o": {}}
    (tmp_path / "l.yaml").write_text(yaml.safe_dump(config))
    assert opentinker("config", "validate", "l.yaml", cwd=tmp_path).returncode == 0


KILLER = "import os, signal\nos.kill(os.getpid(), signal.SIGKILL)  # the worker dies as the OOM killer would kill it\n"


def test_compare_with_a_dead_worker_fails_that_job_and_finishes_the_other(tmp_path: Path) -> None:
    """The finding: ``compare -j 2`` with one worker killed crashed with a BrokenProcessPool
    traceback and killed the healthy job too."""
    (tmp_path / "killer.py").write_text(KILLER)
    (tmp_path / "base.yaml").write_text(yaml.safe_dump(job({"id": "echo/echo-v0", "kwargs": {"words": ["ab", "cd"]}})))
    (tmp_path / "cmp.yaml").write_text(yaml.safe_dump({"base": "base.yaml", "seeds": 1, "variants": [
        {"name": "ok", "set": {}},
        {"name": "dies", "set": {"env.id": "agent/program-v0",
                                 "env.kwargs": {"entry": "killer:run", "tasks": [1], "path": str(tmp_path)}}},
    ]}))
    out = opentinker("compare", "cmp.yaml", "-j", "2", cwd=tmp_path)
    assert out.returncode == 1, out.stderr
    assert "Traceback" not in out.stderr and "BrokenProcessPool" not in out.stderr
    assert "failed: dies/seed-0: its worker process died" in out.stderr
    assert "ok/seed-0: completed" in out.stdout
    assert (tmp_path / "runs" / "compare-cmp" / "jobs" / "ok" / "seed-0" / "result.json").is_file()


def test_compare_refuses_to_overwrite_a_report_it_did_not_write(tmp_path: Path) -> None:
    """The finding: ``compare`` with ``output: .`` overwrote the user's own report.md."""
    (tmp_path / "report.md").write_text("# my notes\n")
    (tmp_path / "base.yaml").write_text(yaml.safe_dump(job({"id": "echo/echo-v0"})))
    (tmp_path / "cmp.yaml").write_text(yaml.safe_dump({"base": "base.yaml", "seeds": 1, "output": ".",
                                                        "variants": [{"name": "a", "set": {}}]}))
    out = opentinker("compare", "cmp.yaml", cwd=tmp_path)
    assert out.returncode == 2 and "report.md, which opentinker compare did not write" in out.stderr, out.stderr
    assert (tmp_path / "report.md").read_text() == "# my notes\n" and not (tmp_path / "jobs").exists()
