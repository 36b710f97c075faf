"""A synthetic run dir in the files' formats, for the viewer's tests, its benchmark
(``bench/bench_viewer.py``) and the guide's screenshots: 2-digit addition episodes whose
rewards, lengths, stop reasons, sampler logprobs and advantages look like a real GRPO run's.

:class:`SampleRun` writes step by step and appends, as training does (``trace.json`` is left
without its closing ``]``, as a run still writing leaves it), so the same object also plays a
run that is still training.
"""

from __future__ import annotations

import json
import math
import random
from pathlib import Path
from typing import Any

__all__ = ["SampleRun"]

PHASES = (("rollout", 0.45), ("env", 0.05), ("logprobs", 0.15), ("forward_backward", 0.25), ("optimizer", 0.05))


class SampleRun:
    """Writes a synthetic run into ``path``: ``config.json`` now, then per :meth:`write_step` a
    ``metrics.jsonl`` row, ``per_step`` episodes in groups of ``group_size`` (``rollouts.jsonl``),
    ``eval_size`` held-out episodes every ``eval_every`` steps, and the step's phases (``trace.json``)."""

    def __init__(self, path: Path, *, per_step: int = 16, group_size: int = 4, eval_every: int = 10,
                 eval_size: int = 4, seed: int = 0) -> None:
        self.path, self.per_step, self.group_size = Path(path), per_step, group_size
        self.eval_every, self.eval_size = eval_every, eval_size
        self.rng = random.Random(seed)
        self.clock_us = 0
        self.path.mkdir(parents=True, exist_ok=True)
        config = {"name": self.path.name, "seed": seed, "model": {"name": "tiny"},
                  "env": {"id": "math/arithmetic-v0", "kwargs": {"digits": 2, "ops": ["+"]}},
                  "stages": [{"name": "grpo", "algorithm": {"name": "grpo", "eval_every": eval_every}}],
                  "rollout": {"prompts_per_step": per_step // group_size, "group_size": group_size}}
        (self.path / "config.json").write_text(json.dumps(config, indent=1) + "\n", encoding="utf-8")
        if not (self.path / "trace.json").exists():
            (self.path / "trace.json").write_text("[\n", encoding="utf-8")

    def skill(self, step: int) -> float:
        """The chance of a right answer at ``step`` (a rising curve)."""
        return 0.1 + 0.8 * (1 - math.exp(-step / 300))

    def episode(self, kind: str, step: int, group: int, episode: int, a: int, b: int) -> dict[str, Any]:
        """One episode record of ``rollouts.jsonl``."""
        rng = self.rng
        right = rng.random() < self.skill(step)
        answer = str(a + b) if right else str(a + b + rng.choice([-10, -1, 1, 10]))
        truncated = not right and rng.random() < 0.3
        token_texts = [*answer, "0", "0"] if truncated else [*answer, "\n"]
        logprobs = [round(-abs(rng.gauss(0.05 if right else 0.9, 0.4)), 4) for _ in token_texts]
        prompt = f"What is {a} + {b}?\n"
        return {"v": 1, "kind": kind, "stage": "grpo", "step": step, "group": group, "episode": episode,
                "prompt": prompt, "messages": [{"role": "user", "content": prompt.strip()}],
                "turns": [{"role": "policy", "text": "".join(token_texts), "tokens": len(token_texts),
                           "token_texts": token_texts, "logprobs": logprobs, "tool_calls": None},
                          {"role": "env", "text": "correct" if right else f"wrong: {a} + {b} = {a + b}", "tokens": 0,
                           "token_texts": None, "logprobs": None, "tool_calls": None}],
                "reward": 1.0 if right else 0.0, "advantage": None, "stop_reason": "length" if truncated else "stop",
                "new_tokens": len(token_texts), "success": right, "truncated": False, "error": None}

    def write_step(self, step: int) -> None:
        """Append ``step``'s metrics row, episodes and trace events."""
        rng = self.rng
        episodes: list[dict[str, Any]] = []
        for group in range(self.per_step // self.group_size):
            a, b = rng.randrange(10, 100), rng.randrange(10, 100)
            members = [self.episode("train", step, group, i, a, b) for i in range(self.group_size)]
            mean = sum(e["reward"] for e in members) / len(members)
            for e in members:
                e["advantage"] = round(e["reward"] - mean, 4)
            episodes += members
        evaluating = self.eval_every and step % self.eval_every == 0
        evals = [self.episode("eval", step, i, 0, rng.randrange(10, 100), rng.randrange(10, 100))
                 for i in range(self.eval_size)] if evaluating else []
        rewards = [e["reward"] for e in episodes]
        row: dict[str, Any] = {
            "stage": "grpo", "step": step, "env/reward_mean": sum(rewards) / len(rewards),
            "losses/total": -0.05 * (sum(abs(e["advantage"]) for e in episodes) / len(episodes)) + rng.gauss(0, 0.01),
            "optim/lr": 3e-4, "rollout/new_tokens": float(sum(e["new_tokens"] for e in episodes)),
            "time/step_s": 0.2 + abs(rng.gauss(0, 0.02)),
        }
        if evaluating:
            row["eval/accuracy"] = sum(e["reward"] for e in evals) / max(1, len(evals))
        with (self.path / "rollouts.jsonl").open("a", encoding="utf-8") as f:
            f.writelines(json.dumps(e) + "\n" for e in episodes + evals)
        with (self.path / "metrics.jsonl").open("a", encoding="utf-8") as f:
            f.write(json.dumps(row) + "\n")
        self._trace(step, row["time/step_s"] * 1e6, evaluating)

    def _trace(self, step: int, step_us: float, evaluating: bool) -> None:
        args = {"stage": "grpo", "step": step}
        events = [{"name": "step", "cat": "step", "ph": "X", "ts": self.clock_us, "dur": round(step_us), "pid": 1, "tid": 0, "args": args}]
        ts = self.clock_us
        for name, share in PHASES + ((("evaluation", 0.05),) if evaluating else ()):
            dur = round(step_us * share * (0.9 + 0.2 * self.rng.random()))
            events.append({"name": name, "cat": "phase", "ph": "X", "ts": ts, "dur": dur, "pid": 1, "tid": 1, "args": args})
            ts += dur
        self.clock_us += round(step_us)
        with (self.path / "trace.json").open("a", encoding="utf-8") as f:
            f.writelines(json.dumps(e) + ",\n" for e in events)

    def write(self, steps: int, start: int = 1) -> SampleRun:
        """:meth:`write_step` for steps ``start`` to ``start + steps - 1``; returns self."""
        for step in range(start, start + steps):
            self.write_step(step)
        return self

    def finish(self, step: int) -> None:
        """Write ``result.json`` as a completed run leaves it, and close the trace array."""
        (self.path / "result.json").write_text(json.dumps({"status": "completed", "step": step}) + "\n", encoding="utf-8")
        with (self.path / "trace.json").open("a", encoding="utf-8") as f:
            f.write("{}]\n")
