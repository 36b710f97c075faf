"""A run's lineage: ``lineage.json`` in a forked run's directory, and the tree of runs it makes.

A fork (:mod:`tinker_algos.run.forking`) writes into its new run directory::

    lineage.json   {"parent": {"run_dir", "step", "checkpoint", "config_hash"},
                    "overrides": [...], "config_hash": ..., "created_unix": ...}

``parent.run_dir`` is absolute; ``config_hash`` (:func:`tinker_algos.run.continuation.config_hash`)
identifies the settings each side ran with. :func:`run_tree` reads the run directories under a
folder and :func:`render_tree` draws them as ``opentinker runs`` shows them: each fork under its
parent, with the step it forked at and its overrides. Torch-free: it only reads files.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tinker_algos.records.run_dir import RUN_MARKER

LINEAGE = "lineage.json"
"""The file a forked run's directory holds."""


def read_lineage(run_dir: Path) -> dict[str, Any] | None:
    """The ``lineage.json`` of ``run_dir``; None for a run that is not a fork (or an unreadable record)."""
    try:
        data = json.loads((run_dir / LINEAGE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) and isinstance(data.get("parent"), dict) else None


def is_fork_origin(run_dir: Path, ckpt: Path) -> bool:
    """Whether checkpoint ``ckpt`` of ``run_dir`` is the one its fork copied from the parent (a
    fork's first start: the config is allowed to differ from the checkpoint's)."""
    lineage = read_lineage(run_dir)
    return lineage is not None and ckpt.name == f"step-{int(lineage['parent'].get('step', -1)):06d}"


@dataclass
class RunNode:
    """One run directory in the tree: its status and step, and the forks made from it."""

    path: Path
    status: str
    step: int | None
    lineage: dict[str, Any] | None
    forks: list[RunNode] = field(default_factory=list)


def run_status(run_dir: Path) -> tuple[str, int | None]:
    """``(status, step)``: from result.json, else the newest checkpoint's step ("unfinished")."""
    try:
        result = json.loads((run_dir / "result.json").read_text(encoding="utf-8"))
        return str(result.get("status", "?")), result.get("step")
    except (OSError, ValueError, AttributeError):
        pass
    steps = [int(p.name[5:]) for p in (run_dir / "checkpoints").glob("step-*") if p.name[5:].isdigit()]
    return "unfinished", max(steps) if steps else None


def is_run_dir(path: Path) -> bool:
    return path.is_dir() and ((path / RUN_MARKER).is_file() or (path / "config.json").is_file())


def run_tree(root: Path) -> list[RunNode]:
    """The run directories under ``root`` (and ``root`` itself when it is one), each fork under
    its parent; a fork whose parent is elsewhere is a root of its own."""
    dirs = [root] if is_run_dir(root) else []
    if root.is_dir():
        dirs += sorted(p for p in root.iterdir() if is_run_dir(p))
    nodes = {p.resolve(): RunNode(p, *run_status(p), read_lineage(p)) for p in dirs}
    roots = []
    for node in nodes.values():
        parent = Path(node.lineage["parent"].get("run_dir", "")).resolve() if node.lineage else None
        if parent is not None and parent in nodes and parent != node.path.resolve():
            nodes[parent].forks.append(node)
        else:
            roots.append(node)
    return roots


def describe(node: RunNode) -> str:
    """One line: the run, its status and step, and -- a fork -- where it came from."""
    text = f"{node.path}  {node.status}" + (f" at step {node.step}" if node.step is not None else "")
    if node.lineage:
        parent = node.lineage["parent"]
        overrides = " ".join(node.lineage.get("overrides") or []) or "no overrides"
        text += f"  (fork of {parent.get('run_dir')}@{parent.get('step')}: {overrides})"
    return text


def render_tree(roots: list[RunNode]) -> list[str]:
    """The lines ``opentinker runs`` prints: each run, its forks indented under it."""
    lines: list[str] = []

    def walk(node: RunNode, prefix: str, last: bool, top: bool) -> None:
        lines.append(describe(node) if top else f"{prefix}{'└─ ' if last else '├─ '}{describe(node)}")
        child_prefix = "" if top else prefix + ("   " if last else "│  ")
        for i, child in enumerate(node.forks):
            walk(child, child_prefix, i == len(node.forks) - 1, False)

    for node in roots:
        walk(node, "", True, True)
    return lines
