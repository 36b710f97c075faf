"""Live settings: the few job settings that may change while a run goes on, and their channel.

:data:`LIVE_SETTINGS` are the config paths that may change between two steps -- the learning rate,
the sampling temperature, the KL coefficient and the evaluation cadence -- each of the job's
sections (``optimizer.lr``) or of one stage's (``stages.2.optimizer.lr``). A change is a
``key.path=value`` override, validated like a config (:func:`check_live`); any other path is
refused with the list of those that may change.

The channel to a running job is a folder of its run directory (:data:`CONTROL_DIR`): a request is
one JSON file ``{"set": ["optimizer.lr=1e-4", ...]}`` written atomically by
:func:`write_request` (``opentinker job set RUN_DIR KEY=VALUE``); the run takes the requests in
name order at its next step boundary (:func:`take_requests`) and applies them, or refuses them
with the reason in ``control/rejected/``. Torch-free: the CLI checks a request before it writes it.
"""

from __future__ import annotations

import json
import os
import time
import uuid
from pathlib import Path
from typing import Any

from tinker_core.config.loading import parse_config
from tinker_core.config.models import JobConfig
from tinker_core.config.overrides import (
    Override,
    OverrideError,
    apply_overrides,
    dotted,
    get_path,
    parse_override,
)

LIVE_SETTINGS = ("optimizer.lr", "rollout.temperature", "algorithm.kl.coef", "algorithm.eval_every")
"""The settings that may change while a job runs (also as ``stages.N.<setting>`` for one stage)."""
CONTROL_DIR = "control"
"""The folder of a run directory that live-setting requests are written to."""
REJECTED_DIR = "rejected"
"""Inside :data:`CONTROL_DIR`: each refused request, with the reason."""


def live_setting(text: str) -> Override:
    """The override ``text`` when its path is a live setting; an :class:`OverrideError` naming
    the settings that may change otherwise."""
    ov = parse_override(text)
    path = ov.path[2:] if len(ov.path) > 2 and ov.path[0] == "stages" and isinstance(ov.path[1], int) else ov.path
    if dotted(path) not in LIVE_SETTINGS:
        raise OverrideError(
            f"{ov.dotted} cannot change while a job runs; the settings that can: {', '.join(LIVE_SETTINGS)} "
            "(each also as stages.N.<setting>, for one stage); fork the run to change anything else"
        )
    return ov


def check_live(job: JobConfig, changes: list[str], *, source: str = "live settings") -> tuple[JobConfig, list[Override]]:
    """``job`` with ``changes`` applied, validated like a config, and the parsed overrides.

    Refuses (:class:`OverrideError`) a path that is not a live setting, and one whose section the
    job does not have (``stages.1.optimizer.lr`` when stage 1 uses the job's ``optimizer``: a new
    section would reset its other settings); a bad value is a :class:`ConfigError` naming it.
    """
    overrides = [live_setting(text) for text in changes]
    data = job.model_dump(mode="json")
    for ov in overrides:
        found, section = get_path(data, ov.path[:-1])
        if not found or section is None:
            raise OverrideError(
                f"{ov.dotted}: this job has no {dotted(ov.path[:-1])} section (that stage uses the job's own); "
                f"set {dotted(ov.path[2:]) if ov.path[0] == 'stages' else ov.dotted} instead"
            )
    return parse_config(apply_overrides(data, overrides), source=source, check_plugins=False), overrides


def write_request(run_dir: Path, changes: list[str]) -> Path:
    """Write a request for the run in ``run_dir`` to take at its next step boundary; its path."""
    folder = run_dir / CONTROL_DIR
    folder.mkdir(parents=True, exist_ok=True)
    name = f"{time.time_ns():020d}-{uuid.uuid4().hex[:8]}.json"
    tmp = folder / f".{name}.tmp"
    tmp.write_text(json.dumps({"set": list(changes)}) + "\n", encoding="utf-8")
    os.replace(tmp, folder / name)  # atomic: the run never reads half a request
    return folder / name


def take_requests(run_dir: Path) -> list[tuple[str, list[str] | None]]:
    """The requests waiting in ``run_dir``, oldest first, each removed as it is taken:
    ``(name, changes)``; ``changes`` is None for a file that is not a request (refuse it)."""
    folder = run_dir / CONTROL_DIR
    if not folder.is_dir():
        return []
    out: list[tuple[str, list[str] | None]] = []
    for f in sorted(p for p in folder.iterdir() if p.is_file() and p.suffix == ".json" and not p.name.startswith(".")):
        try:
            data: Any = json.loads(f.read_text(encoding="utf-8"))
            changes = data.get("set") if isinstance(data, dict) else None
            ok = isinstance(changes, list) and all(isinstance(c, str) for c in changes)
        except (OSError, ValueError):
            changes, ok = None, False
        f.unlink(missing_ok=True)
        out.append((f.name, list(changes) if ok else None))  # type: ignore[arg-type]
    return out


def reject(run_dir: Path, name: str, changes: list[str] | None, reason: str) -> None:
    """Keep a refused request in ``control/rejected/`` with the reason."""
    folder = run_dir / CONTROL_DIR / REJECTED_DIR
    folder.mkdir(parents=True, exist_ok=True)
    (folder / name).write_text(json.dumps({"set": changes, "error": reason}, indent=1) + "\n", encoding="utf-8")

