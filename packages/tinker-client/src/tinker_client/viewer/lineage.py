"""Which served run was forked from which: each run dir's ``lineage.json``, for the viewer.

``opentinker fork`` (``tinker_algos.run.lineage``) writes ``lineage.json`` into a fork's run dir::

    {"parent": {"run_dir": "/abs/runs/arith", "step": 400, "checkpoint": ..., "config_hash": ...},
     "overrides": ["stages.2.optimizer.lr=1e-4"], "config_hash": ..., "created_unix": ...}

:func:`run_lineage` links the runs the viewer serves: a fork's parent is a served run only when
the recorded ``parent.run_dir`` names one of them. The pointer is compared as text with the
served run dirs (``os.path.normpath``; a relative one is taken from the fork's dir): it is never
opened, resolved or listed, so a ``lineage.json`` cannot make the viewer read, or even look at, a
dir it was not given. A parent that is not served is still named (its recorded dir and step), so
the page can say what to add. Like every run file, ``lineage.json`` is untrusted: one that is not
JSON, too large or of the wrong shape is skipped with a warning in the run's ``warnings``
(``lineage.json: ...``), never a 500; no ``lineage.json`` is a run that is not a fork. A cycle of
pointers (two dirs naming each other) is broken at the first run of it in the list.
"""

from __future__ import annotations

import math
import os
from typing import TYPE_CHECKING, Any

from tinker_client.viewer.files import read_document

if TYPE_CHECKING:
    from tinker_client.viewer.data import RunDir

__all__ = ["LINEAGE", "MAX_LINEAGE_BYTES", "MAX_OVERRIDES", "parse_lineage", "read_lineage", "run_lineage"]

LINEAGE = "lineage.json"
"""The file a forked run's dir holds (written by ``opentinker fork``)."""
#: The largest ``lineage.json`` read (a real one is a few hundred bytes).
MAX_LINEAGE_BYTES = 256 * 1024
#: The most overrides of a fork shown (the rest are counted).
MAX_OVERRIDES = 50
_MAX_TEXT = 400  # characters of one override, run dir or hash shown


def _text(value: Any) -> str | None:
    return value[:_MAX_TEXT] if isinstance(value, str) else None


def parse_lineage(doc: dict[str, Any]) -> tuple[dict[str, Any] | None, str | None]:
    """``(record, problem)``: the parts of a ``lineage.json`` document the viewer shows --
    ``parent_dir``, ``step``, ``overrides``, ``more_overrides``, ``config_hash``,
    ``parent_config_hash`` -- or ``(None, why)`` when it is not the shape a fork writes."""
    parent = doc.get("parent")
    if not isinstance(parent, dict):
        return None, "no \"parent\" object; ignored"
    where, step = parent.get("run_dir"), parent.get("step")
    if not isinstance(where, str) or not where.strip() or "\0" in where:
        return None, "parent.run_dir is not a path; ignored"
    if isinstance(step, float) and math.isfinite(step) and step.is_integer():
        step = int(step)
    if isinstance(step, bool) or not isinstance(step, int) or step < 0:
        return None, "parent.step is not a step number; ignored"
    overrides = doc.get("overrides") if isinstance(doc.get("overrides"), list) else []
    texts = [str(o)[:_MAX_TEXT] for o in overrides if isinstance(o, str | int | float | bool)]
    return {"parent_dir": where[:4096], "step": step, "overrides": texts[:MAX_OVERRIDES],
            "more_overrides": max(0, len(texts) - MAX_OVERRIDES), "config_hash": _text(doc.get("config_hash")),
            "parent_config_hash": _text(parent.get("config_hash"))}, None


def read_lineage(run: RunDir) -> dict[str, Any] | None:
    """The parsed ``lineage.json`` of ``run`` (:func:`parse_lineage`), or None -- not a fork, or
    unreadable, then ``run.problems`` says why. Read again only when the file changed."""
    try:
        st = os.stat(run.path / LINEAGE, follow_symlinks=False)
        key: Any = (st.st_ino, st.st_size, st.st_mtime_ns)
    except OSError:
        key = None

    def read() -> tuple[dict[str, Any] | None, str | None]:
        doc, problem = read_document(run.root, LINEAGE, limit=MAX_LINEAGE_BYTES)
        return (None, problem) if doc is None else parse_lineage(doc)

    record, problem = run.cached("lineage", key, read) if key is not None else (None, None)  # the run's cache, keyed by the file's stat
    if problem:
        run.problems[LINEAGE] = problem
    else:
        run.problems.pop(LINEAGE, None)
    return record


def _served_dir(run: RunDir, recorded: str) -> str:
    """``recorded`` as the text of a normalised absolute path (a relative one from the fork's
    dir); only strings are handled here, no file is looked at."""
    return os.path.normpath(os.path.join(str(run.root), recorded))


def run_lineage(runs: list[RunDir]) -> list[dict[str, Any]]:
    """Per served run (in order): ``{"parent": None | {"id", "name", "run_dir", "step",
    "served", "config_hash"}, "overrides", "more_overrides", "config_hash", "forks": [{"id",
    "step"}], "depth"}``; ``parent.id`` is the served parent's index (None when the recorded dir
    is not served: ``served`` False), ``depth`` how many served ancestors it has."""
    by_dir: dict[str, int] = {}
    for i, r in enumerate(runs):
        by_dir.setdefault(str(r.root), i)
    records = [read_lineage(r) for r in runs]
    parents: list[int | None] = []
    for i, (r, record) in enumerate(zip(runs, records, strict=True)):
        pid = by_dir.get(_served_dir(r, record["parent_dir"])) if record else None
        parents.append(pid if pid != i else None)
    for i in range(len(runs)):  # a cycle of pointers: cut it at its first run in the list
        seen, at = {i}, parents[i]
        while at is not None and at not in seen:
            seen.add(at)
            at = parents[at]
        if at == i:
            parents[i] = None
    out: list[dict[str, Any]] = []
    for i, record in enumerate(records):
        depth, at = 0, parents[i]
        while at is not None:
            depth, at = depth + 1, parents[at]
        parent = None if record is None else {
            "id": parents[i], "name": runs[parents[i]].name if parents[i] is not None else os.path.basename(
                os.path.normpath(record["parent_dir"])), "run_dir": record["parent_dir"], "step": record["step"],
            "served": parents[i] is not None, "config_hash": record["parent_config_hash"]}
        out.append({"parent": parent, "overrides": record["overrides"] if record else [],
                    "more_overrides": record["more_overrides"] if record else 0,
                    "config_hash": record["config_hash"] if record else None,
                    "forks": [{"id": j, "step": records[j]["step"]} for j, p in enumerate(parents)
                              if p == i and records[j] is not None],
                    "depth": depth})
    return out
