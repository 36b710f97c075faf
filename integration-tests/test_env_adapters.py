"""tinker-env-adapters as a user meets it: ``opentinker plugins`` lists the ecosystems' envs, and
``opentinker train`` runs a few GRPO steps of the tiny model on an env of each ecosystem: a
reasoning-gym task, a SkyRL-gym env over chat messages, a gymnasium env, an OpenEnv ``Environment``
class in a user's module, a verifiers environment module (an agent program: its own rollouts, through
tinker-serve's rollout proxy) and a TextArena game in self-play (the workspace installs the adapters
with every extra)."""

from __future__ import annotations

import json
import math
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
VERIFIERS_ENV = ROOT / "packages" / "tinker-env-adapters" / "tests" / "verifiers_envs" / "vf_sums.py"

pytest.importorskip("reasoning_gym", reason="needs tinker-env-adapters[reasoning-gym]")
pytest.importorskip("textarena", reason="needs tinker-env-adapters[textarena]")

SINGLE_AGENT_JOB = """
name: {name}
seed: 0
model: {{name: tiny}}
env: {env}
algorithm: {{name: grpo, steps: 2, eval_size: 4}}
rollout: {{prompts_per_step: 2, group_size: 4, max_new_tokens: 4, stop: ["\\n"]}}
logging: {{tensorboard: false, plot: false}}
"""

SINGLE_AGENT_ENVS = {
    "reasoning-gym": """
  id: reasoning_gym/basic_arithmetic-v0
  kwargs: {size: 200, config: {min_terms: 2, max_terms: 2, min_digits: 1, max_digits: 1}}
  eval_kwargs: {size: 50, split: test, config: {min_terms: 2, max_terms: 2, min_digits: 1, max_digits: 1}}""",
    "skyrl-gym": "{id: skyrl/gsm8k_multi_turn-v0, kwargs: {data_path: rows.jsonl, max_turns: 2}}",
    "gymnasium": "{id: gym/FrozenLake-v1, kwargs: {is_slippery: false, max_turns: 6}}",
    "openenv": "{id: openenv/env-v0, kwargs: {environment: 'guess_env:GuessEnvironment', max_turns: 3}}",
    # a verifiers environment module as its docs write one (a SingleTurnEnv, a Rubric), in the working directory
    "verifiers": """
  id: verifiers/env-v0
  kwargs: {environment: vf-sums}
  eval_kwargs: {environment: vf-sums, split: eval}""",
}

# An OpenEnv environment as its author writes one, in the user's working directory
OPENENV_MODULE = '''
from openenv.core import Action, Environment, Observation, State


class GuessAction(Action):
    guess: str


class GuessObservation(Observation):
    text: str = ""


class GuessEnvironment(Environment[GuessAction, GuessObservation, State]):
    def reset(self, seed=None, episode_id=None, **kwargs):
        self.secret = str((seed or 0) % 10)
        self._state = State(episode_id=episode_id, step_count=0)
        return GuessObservation(text="Guess my digit (0-9):")

    def step(self, action, timeout_s=None, **kwargs):
        self._state.step_count += 1
        right = action.guess.strip()[:1] == self.secret
        return GuessObservation(text="yes" if right else "no", done=right, reward=1.0 if right else 0.0)

    @property
    def state(self):
        return self._state
'''

SKYRL_ROWS = [
    {"prompt": [{"role": "user", "content": f"{a}+{b}=? Reply #### n"}],
     "reward_spec": {"ground_truth": str(a + b)}, "extra_info": {"max_turns": 2}}
    for a in range(5) for b in range(5)
]

TEXTARENA_JOB = """
name: ta-tictactoe
seed: 0
model: {name: tiny}
env:
  id: textarena/TicTacToe-v0
  kwargs: {observation: recent, max_turns: 12}
algorithm: {name: grpo, steps: 2, eval_size: 2, params: {multi_agent: {mode: self_play}}}
rollout: {prompts_per_step: 1, group_size: 4, max_new_tokens: 4, stop: ["\\n"], max_error_rate: 0.5}
logging: {tensorboard: false, plot: false}
"""


def opentinker(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "OPENTINKER_CACHE": str(cwd / "cache")}
    return subprocess.run([sys.executable, "-m", "tinker_client.cli", *args], capture_output=True, text=True, env=env, cwd=cwd, timeout=600)


def metrics(run_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


def test_plugins_lists_every_ecosystem_s_envs(tmp_path: Path) -> None:
    result = opentinker("plugins", "--json", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    mine = [p for p in json.loads(result.stdout) if p["distribution"] == "tinker-env-adapters"]
    envs = mine[0]["registers"]["envs"]
    for env_id in ("reasoning_gym/basic_arithmetic-v0", "textarena/TicTacToe-v0", "gym/FrozenLake-v1", "skyrl/gsm8k-v0", "openenv/env-v0", "openenv/remote-v0",
                   "verifiers/env-v0"):
        assert env_id in envs and env_id not in mine[0]["unavailable"]  # every ecosystem is installed here: all build


@pytest.mark.parametrize("ecosystem", list(SINGLE_AGENT_ENVS))
def test_train_grpo_on_a_single_agent_env(tmp_path: Path, ecosystem: str) -> None:
    (tmp_path / "rows.jsonl").write_text("\n".join(json.dumps(row) for row in SKYRL_ROWS))
    (tmp_path / "guess_env.py").write_text(OPENENV_MODULE)
    shutil.copy(VERIFIERS_ENV, tmp_path)
    (tmp_path / "job.yaml").write_text(SINGLE_AGENT_JOB.format(name=ecosystem, env=SINGLE_AGENT_ENVS[ecosystem]))
    result = opentinker("train", "job.yaml", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert f"completed: 2 steps; run dir: runs/{ecosystem}" in result.stdout
    rows = metrics(tmp_path / "runs" / ecosystem)
    assert [r["step"] for r in rows] == [1, 2]
    assert all(math.isfinite(r["losses/policy"]) and 0.0 <= r["env/reward_mean"] <= 1.0 for r in rows)
    assert "eval/accuracy" in rows[-1]
    if ecosystem == "verifiers":  # played as an agent program: every episode is verifiers' rollout through the proxy
        assert all(r["agent/calls_mean"] == 1.0 and r["rollout/episodes"] == 8 and r["rollout/error_rate"] == 0 for r in rows)
        assert all(abs(r["kl/sample_train"]) < 1e-4 for r in rows)  # trained on the tokens the proxy recorded


def test_train_grpo_self_play_on_a_textarena_game(tmp_path: Path) -> None:
    (tmp_path / "job.yaml").write_text(TEXTARENA_JOB)
    result = opentinker("train", "job.yaml", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert "completed: 2 steps; run dir: runs/ta-tictactoe" in result.stdout
    rows = metrics(tmp_path / "runs" / "ta-tictactoe")
    assert [r["step"] for r in rows] == [1, 2]
    for r in rows:
        for key in ("env/player_0/reward_mean", "env/player_1/reward_mean", "losses/policy"):
            assert math.isfinite(r[key]), key
        assert r["rollout/episodes"] == 4.0
    last = rows[-1]
    assert last["eval/win_rate"] + last["eval/draw_rate"] + last["eval/loss_rate"] == pytest.approx(1.0)
