"""JobService ``Fork``: the run dir of a new job made from a checkpoint of one of the tenant's jobs.

:func:`prepare_fork_dir` is ``opentinker fork`` (:func:`tinker_algos.run.forking.prepare_fork`) with
the parent's run dir and the new job's own run dir (``runs_dir/<tenant>/<new job id>``): the
checks a fork makes come first (the checkpoint exists and is intact; the overrides keep the
model, the adapter shape and the algorithm of every stage begun), then the run dir gets the
checkpoint (hard-linked where the file system allows), the parent's metrics and live setting
changes up to its step, and ``lineage.json``. The job that trains it is an ordinary job: it
resumes from that checkpoint like a job that was stopped. tinker-algos (and torch) load on the
first Fork. A parent whose run dir holds a symbolic link where a fork copies from is refused:
a fork copies the run's own files only.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import TYPE_CHECKING

from tinker_core.config.overrides import OverrideError
from tinker_core.errors import ConfigError
from tinker_scheduler.errors import StatusError

if TYPE_CHECKING:
    from tinker_core.config import JobConfig
    from tinker_scheduler.job_records import JobRecord


def prepare_fork_dir(parent: JobRecord, step: int | None, overrides: list[str], target: Path) -> tuple[JobConfig, int]:
    """Make ``target`` the run dir of a fork of ``parent`` at checkpoint ``step`` (None: its
    newest intact one) with ``overrides``; ``(the fork's config, the step it starts from)``.

    Raises :class:`StatusError`: INVALID_ARGUMENT for a bad override or one a fork cannot make,
    FAILED_PRECONDITION for a parent without that checkpoint (or any). Nothing is left in
    ``target`` when it fails.
    """
    from tinker_algos.run.forking import ForkError, prepare_fork
    from tinker_algos.run.lineage import read_lineage

    link = _symbolic_link(Path(parent.run_dir))
    if link is not None:  # what a fork copies must be the run's own files, not what a link points at
        raise StatusError("FAILED_PRECONDITION", f"job {parent.id}: its run dir holds a symbolic link ({link}); "
                                                 "a fork copies only plain files")
    try:
        config, _ = prepare_fork(parent.run_dir, overrides, step=step, run_dir=target)
    except OverrideError as e:
        raise StatusError("INVALID_ARGUMENT", f"overrides: {e}") from None
    except ConfigError as e:
        raise StatusError("INVALID_ARGUMENT", f"overrides: {len(e.problems)} problem(s): {'; '.join(e.problems)}") from None
    except ForkError as e:
        remove_fork_dir(target)
        raise StatusError("FAILED_PRECONDITION", f"job {parent.id}: {e}") from None
    except BaseException:
        remove_fork_dir(target)
        raise
    lineage = read_lineage(target) or {}
    return config, int(lineage.get("parent", {}).get("step", 0))


def _symbolic_link(run_dir: Path) -> Path | None:
    """A symbolic link among what a fork copies from ``run_dir`` (its checkpoints and records), or None."""
    for name in ("config.json", "metrics.jsonl", "live.jsonl", "rollouts.jsonl", "checkpoints"):
        if (run_dir / name).is_symlink():
            return run_dir / name
    for root, dirs, files in os.walk(run_dir / "checkpoints"):
        for name in (*dirs, *files):
            if (Path(root) / name).is_symlink():
                return Path(root) / name
    return None


def remove_fork_dir(target: Path) -> None:
    """Remove a fork's run dir that no job will use (a refused or duplicate Fork)."""
    shutil.rmtree(target, ignore_errors=True)
