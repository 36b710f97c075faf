"""A run's checkpoints (``checkpoints/step-N`` of a run directory): which exist, which are intact,
and the newest one a run resumes from -- read by the run, forks and evaluation alike."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from tinker_algos.run.plan import Progress
from tinker_algos.training.checkpoint import MANIFEST, CheckpointError, verify


def run_checkpoints(run_dir: Path) -> list[Path]:
    """``checkpoints/step-N`` directories, oldest first (damaged ones included)."""
    root = run_dir / "checkpoints"
    if not root.is_dir():
        return []
    found = [p for p in root.iterdir() if p.is_dir() and p.name.startswith("step-") and p.name[5:].isdigit()]
    return sorted(found, key=lambda p: int(p.name[5:]))


def verified_progress(ckpt: Path) -> tuple[Progress, bool]:
    """Checkpoint ``ckpt``'s progress after checking its files; ``(progress, verified)``.

    ``verified`` is False for a checkpoint written before checksums (no ``manifest.json`` in the
    step directory, none in the trainer's): loadable but unchecked. Raises :class:`CheckpointError`
    naming what is damaged.
    """
    if (ckpt / MANIFEST).exists():
        verified = verify(ckpt)
    elif verify(ckpt / "trainer"):
        raise CheckpointError(f"{MANIFEST} is missing")
    else:
        verified = False
    try:
        return Progress.read(ckpt), verified
    except (OSError, ValueError, TypeError) as e:
        raise CheckpointError(f"progress.json is unreadable: {e}") from e


def newest_intact(run_dir: Path, on_log: Callable[[str], object]) -> tuple[Path, Progress] | None:
    """The newest checkpoint of ``run_dir`` whose files match its manifest, and its progress; None without any.

    Each newer one that is damaged is skipped with a log line naming it and why; when none is
    intact, a :class:`CheckpointError` says so (nothing is deleted either way).
    """
    found = run_checkpoints(run_dir)
    for ckpt in reversed(found):
        try:
            progress, verified = verified_progress(ckpt)
        except CheckpointError as e:
            on_log(f"skipping damaged checkpoint {ckpt}: {e}")
            continue
        if not verified:
            on_log(f"checkpoint {ckpt} has no checksums (written by an older version); loading it unverified")
        return ckpt, progress
    if found:
        raise CheckpointError(
            f"no intact checkpoint to resume from in {run_dir / 'checkpoints'}: all {len(found)} are damaged "
            "(see the log lines above); start over with --fresh or checkpoint.resume: false"
        )
    return None
