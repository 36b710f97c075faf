"""Run dirs for the viewer's tests, written record by record in the files' formats (so each
test knows exactly what is in them): ``write_run(path)`` and ``append_step(path, step)``.

In each train step, group ``g`` episode ``e`` has reward 1 when ``g + e`` is even (else 0),
advantage ``reward - 0.5``, stop reason ``length`` for episode 3 (else ``stop``), and a policy
turn ``"{answer}\\n"`` (``"{answer}00"`` when cut at ``length``) with one logprob per token.
Every ``eval_every`` steps ``groups`` eval episodes (kind ``eval``) follow.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

GROUPS, GROUP_SIZE, EVAL_EVERY = 3, 4, 2


def episode(step: int, group: int, ep: int, kind: str = "train") -> dict[str, Any]:
    a, b = 10 + group, step + ep
    reward = 1.0 if (group + ep) % 2 == 0 else 0.0
    cut = kind == "train" and ep == 3
    answer = str(a + b) if reward else str(a + b + 1)
    tokens = [*answer, "0", "0"] if cut else [*answer, "\n"]
    return {"v": 1, "kind": kind, "stage": "grpo", "step": step, "group": group, "episode": ep,
            "prompt": f"What is {a} + {b}?", "messages": [{"role": "user", "content": f"What is {a} + {b}?"}],
            "turns": [{"role": "policy", "text": "".join(tokens), "tokens": len(tokens), "token_texts": tokens,
                       "logprobs": [-0.25 * (i + 1) for i in range(len(tokens))], "tool_calls": None},
                      {"role": "env", "text": "correct" if reward else "wrong", "tokens": 0, "token_texts": None,
                       "logprobs": None, "tool_calls": None}],
            "reward": reward, "advantage": reward - 0.5 if kind == "train" else None,
            "stop_reason": "length" if cut else "stop", "new_tokens": len(tokens), "extra_field": "ignored"}


def append_step(path: Path, step: int) -> None:
    """Append ``step``'s metrics row, episodes and trace events to the run dir ``path``."""
    records = [episode(step, g, e) for g in range(GROUPS) for e in range(GROUP_SIZE)]
    if step % EVAL_EVERY == 0:
        records += [episode(step, g, 0, kind="eval") for g in range(GROUPS)]
    row = {"stage": "grpo", "step": step, "env/reward_mean": 0.5, "losses/total": 1.0 / step, "time/step_s": 0.1}
    if step % EVAL_EVERY == 0:
        row["eval/accuracy"] = step / 100
    with (path / "rollouts.jsonl").open("a") as f:
        f.writelines(json.dumps(r) + "\n" for r in records)
    with (path / "metrics.jsonl").open("a") as f:
        f.write(json.dumps(row) + "\n")
    args = {"stage": "grpo", "step": step}
    events = [{"name": "step", "ph": "X", "ts": step * 1000, "dur": 1000, "pid": 1, "tid": 0, "args": args},
              {"name": "rollout", "ph": "X", "ts": step * 1000, "dur": 600, "pid": 1, "tid": 1, "args": args},
              {"name": "forward_backward", "ph": "X", "ts": step * 1000 + 600, "dur": 300, "pid": 1, "tid": 1, "args": args}]
    with (path / "trace.json").open("a") as f:
        f.write("".join(json.dumps(e) + ",\n" for e in events))


def write_run(path: Path, steps: int = 5, checkpoints: tuple[int, ...] = (5,)) -> Path:
    """A run dir at ``path`` with ``steps`` steps, a config, and ``checkpoints``; no result.json."""
    path.mkdir(parents=True, exist_ok=True)
    (path / "config.json").write_text(json.dumps({"name": path.name, "seed": 0, "rollout": {"group_size": GROUP_SIZE}}))
    (path / "trace.json").write_text("[\n")
    for step in range(1, steps + 1):
        append_step(path, step)
    for step in checkpoints:
        d = path / "checkpoints" / f"step-{step:06d}"
        d.mkdir(parents=True)
        (d / "manifest.json").write_text("{}")
    return path


def write_lineage(fork: Path, parent: Path | str, step: int, overrides: tuple[str, ...] = ()) -> Path:
    """Make the run dir ``fork`` a fork of ``parent`` at ``step``: its ``lineage.json`` as
    ``opentinker fork`` writes it (``tinker_algos.run.lineage``)."""
    record = {"parent": {"run_dir": str(parent), "step": step, "checkpoint": f"checkpoints/step-{step:06d}",
                         "config_hash": "a" * 64},
              "overrides": list(overrides), "config_hash": "b" * 64, "created_unix": 1.0}
    (fork / "lineage.json").write_text(json.dumps(record))
    return fork
