"""``opentinker train`` on the dialogue games, embedded, on the tiny model, a few steps each: the
negotiation game (games/negotiation-v0) in the shape of examples/negotiation.yaml (an SFT warm
start on scripted dialogues then GRPO self-play; GRPO against the scripted conceder), and the
cooperative reference game (games/reference-v0) with the listener trained against the literal
speaker."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("tinker_env_games", reason="the negotiation game lives in tinker-env-games")
pytest.importorskip("tinker_algos", reason="training needs tinker-algos")

ROOT = Path(__file__).resolve().parent.parent

SMALL = {
    "steps: 300": "steps: 1",
    "steps: 100": "steps: 2",
    "batch_size: 64": "batch_size: 4",
    "eval_size: 64": "eval_size: 2",
    "prompts_per_step: 8, group_size: 8": "prompts_per_step: 1, group_size: 2",
    "max_new_tokens: 32": "max_new_tokens: 24",
}


def job(mode: str) -> str:
    text = (ROOT / "examples" / "negotiation.yaml").read_text()
    for old, new in SMALL.items():
        assert old in text, f"examples/negotiation.yaml no longer has {old!r}; update SMALL"
        text = text.replace(old, new)
    if mode == "opponent":
        start, end = text.index("  - name: sft-warmup"), text.index("  - name: grpo")
        text = text[:start] + text[end:]  # no warm start: GRPO only
        text = text.replace(
            "multi_agent: {mode: self_play, eval_opponent: conceder}",
            "multi_agent: {mode: opponent, opponent: conceder, learner_role: alice}",
        )
    return text.replace("name: negotiation\n", f"name: negotiation-{mode}\n", 1)


def opentinker(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "OPENTINKER_CACHE": str(cwd / "cache")}
    return subprocess.run(
        [sys.executable, "-m", "tinker_client.cli", *args],
        capture_output=True, text=True, env=env, cwd=cwd, timeout=1200,
    )


def rows(run_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


@pytest.mark.parametrize("mode", ["self_play", "opponent"])
def test_train_negotiation(tmp_path: Path, mode: str) -> None:
    if mode == "self_play":
        made = subprocess.run(
            [sys.executable, "-m", "tinker_env_games.negotiation_sft", "runs/negotiation-sft.jsonl",
             "--episodes", "20", "--max-messages", "6", "--brief"],
            capture_output=True, text=True, cwd=tmp_path, timeout=300,
        )
        assert made.returncode == 0, made.stderr
    (tmp_path / "job.yaml").write_text(job(mode))
    result = opentinker("train", "job.yaml", cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-4000:]
    steps = 3 if mode == "self_play" else 2
    assert f"completed: {steps} steps; run dir: runs/negotiation-{mode}" in result.stdout
    grpo = [r for r in rows(tmp_path / "runs" / f"negotiation-{mode}") if r["stage"] == "grpo"]
    assert len(grpo) == 2
    for r in grpo:
        for key in ("env/reward_mean", "env/alice/reward_mean", "env/bob/reward_mean", "losses/policy"):
            assert key in r, key
        assert r["rollout/episodes"] == 2.0
        assert r["env/turns_mean"] <= 6.0  # max_messages: every game ends by then
        if mode == "opponent":  # alice, the learner, always speaks first: one trajectory a game
            assert r["rollout/trajectories"] == 2.0
    last = grpo[-1]
    for key in ("eval/win_rate", "eval/draw_rate", "eval/loss_rate", "eval/reward_mean"):
        assert key in last, key
    assert last["eval/error_rate"] == 0.0


REFERENCE_JOB = """
name: reference-listener
seed: 0
model: {name: tiny}
env: {id: games/reference-v0, eval_kwargs: {split: test}}
algorithm:
  name: grpo
  steps: 2
  eval_size: 2
  params: {multi_agent: {mode: opponent, opponent: literal, learner_role: listener}}
rollout: {prompts_per_step: 1, group_size: 2, max_new_tokens: 3, stop: ["\\n"]}
logging: {tensorboard: false}
"""


def test_train_the_listener_of_the_cooperative_game(tmp_path: Path) -> None:
    (tmp_path / "job.yaml").write_text(REFERENCE_JOB)
    result = opentinker("train", "job.yaml", cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-4000:]
    assert "completed: 2 steps; run dir: runs/reference-listener" in result.stdout
    for r in rows(tmp_path / "runs" / "reference-listener"):
        # cooperative: the scripted speaker's reward is the learner's, game by game
        assert r["env/speaker/reward_mean"] == r["env/listener/reward_mean"] == r["env/reward_mean"]
        assert r["rollout/trajectories"] == 2.0 and r["env/turns_mean"] == 2.0
