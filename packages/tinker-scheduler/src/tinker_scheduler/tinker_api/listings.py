"""The REST listings of the SDK's ``RestClient``, shaped as its types read them.

``list_training_runs`` / ``get_training_run`` (``TrainingRun``: one per Tinker model, live or
not), ``list_checkpoints(run)`` and ``list_user_checkpoints`` (``Checkpoint``: one per saved
state or sampler weights, newest first), and ``delete_checkpoint``. Only the caller's own:
another tenant's run or checkpoint is "not found", as for none.
"""

from __future__ import annotations

import shutil
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from tinker_scheduler.errors import StatusError
from tinker_scheduler.tinker_api.records import CheckpointRecord, ModelRecord, Records
from tinker_scheduler.tinker_api.translate import parse_path

#: ``tinker://`` kinds -> the SDK's ``checkpoint_type``.
CHECKPOINT_TYPES = {"weights": "training", "sampler_weights": "sampler"}
#: The most items one listing page returns.
MAX_PAGE = 1000


def _time(t: float) -> str:
    return datetime.fromtimestamp(t, UTC).isoformat()


def checkpoint(c: CheckpointRecord) -> dict[str, Any]:
    return {"checkpoint_id": f"{c.kind}/{c.name}", "checkpoint_type": CHECKPOINT_TYPES[c.kind],
            "time": _time(c.created_at), "tinker_path": c.tinker_path, "size_bytes": c.size_bytes, "public": False}


def training_run(records: Records, m: ModelRecord) -> dict[str, Any]:
    saved, _ = records.checkpoints(m.tenant, m.model_id)
    last = {kind: next((checkpoint(c) for c in saved if c.kind == kind), None) for kind in CHECKPOINT_TYPES}
    return {"training_run_id": m.model_id, "base_model": m.base_model, "model_owner": m.tenant,
            "is_lora": m.lora_rank > 0, "lora_rank": m.lora_rank or None, "corrupted": False,
            "last_request_time": _time(m.last_request_at), "last_checkpoint": last["weights"],
            "last_sampler_checkpoint": last["sampler_weights"], "user_metadata": m.user_metadata or None}


def _page(limit: int, offset: int) -> tuple[int, int]:
    if limit < 1 or offset < 0:
        raise StatusError("INVALID_ARGUMENT", f"limit must be >= 1 and offset >= 0 (got limit={limit}, offset={offset})")
    return min(limit, MAX_PAGE), offset


def training_runs(records: Records, tenant: str, limit: int, offset: int) -> dict[str, Any]:
    limit, offset = _page(limit, offset)
    models, total = records.models(tenant, limit, offset)
    return {"training_runs": [training_run(records, m) for m in models],
            "cursor": {"offset": offset, "limit": limit, "total_count": total}}


def checkpoints(records: Records, tenant: str, model_id: str | None, limit: int = MAX_PAGE, offset: int = 0
                ) -> dict[str, Any]:
    limit, offset = _page(limit, offset)
    if model_id is not None and records.model(tenant, model_id) is None:
        raise StatusError("NOT_FOUND", f"training_run_id: no training run {model_id!r}")
    saved, total = records.checkpoints(tenant, model_id, limit, offset)
    return {"checkpoints": [checkpoint(c) for c in saved],
            "cursor": {"offset": offset, "limit": limit, "total_count": total}}


def delete_checkpoint(records: Records, tenant: str, model_id: str, checkpoint_id: str) -> None:
    """Delete the record and the files of the tenant's checkpoint ``<kind>/<name>`` of ``model_id``."""
    _, kind, name = parse_path(f"tinker://{model_id}/{checkpoint_id}")
    saved = records.checkpoint(tenant, model_id, kind, name)
    if saved is None:
        raise StatusError("NOT_FOUND", f"checkpoint_id: no checkpoint {checkpoint_id!r} of training run {model_id!r}")
    path = Path(saved.file)
    if path.is_dir():
        shutil.rmtree(path, ignore_errors=True)
    else:
        path.unlink(missing_ok=True)
    records.delete_checkpoint(tenant, model_id, kind, name)
