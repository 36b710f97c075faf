"""The REST listings of the SDK's ``RestClient``, shaped as its types read them.

``list_training_runs`` / ``get_training_run`` (``TrainingRun``: one per Tinker model, live or
not), ``list_checkpoints(run)`` and ``list_user_checkpoints`` (``Checkpoint``: one per saved
state, sampler weights or external weights, newest first), ``delete_checkpoint``,
``set_checkpoint_ttl`` and the Tinker sessions (``list_sessions``, ``get_session``). Only the
caller's own: another tenant's run, checkpoint or session is "not found", as for none.
"""

from __future__ import annotations

import shutil
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from tinker_scheduler.errors import StatusError
from tinker_scheduler.tinker_api.downloads import ttl_of
from tinker_scheduler.tinker_api.records import CheckpointRecord, ModelRecord, Records
from tinker_scheduler.tinker_api.translate import parse_path

#: ``tinker://`` kinds -> the SDK's ``checkpoint_type``.
CHECKPOINT_TYPES = {"weights": "training", "sampler_weights": "sampler", "external_weights": "external"}
#: ``access_scope`` values of the session listings: every session here is its owner's alone.
ACCESS_SCOPES = ("owned", "accessible")
#: The most items one listing page returns.
MAX_PAGE = 1000


def _time(t: float) -> str:
    return datetime.fromtimestamp(t, UTC).isoformat()


def checkpoint(c: CheckpointRecord) -> dict[str, Any]:
    return {"checkpoint_id": f"{c.kind}/{c.name}", "checkpoint_type": CHECKPOINT_TYPES[c.kind],
            "time": _time(c.created_at), "tinker_path": c.tinker_path, "size_bytes": c.size_bytes, "public": False,
            "expires_at": _time(c.expires_at) if c.expires_at is not None else None}


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


def _own_checkpoint(records: Records, tenant: str, model_id: str, checkpoint_id: str) -> CheckpointRecord:
    _, kind, name = parse_path(f"tinker://{model_id}/{checkpoint_id}")
    saved = records.checkpoint(tenant, model_id, kind, name)
    if saved is None:
        raise StatusError("NOT_FOUND", f"checkpoint_id: no checkpoint {checkpoint_id!r} of training run {model_id!r}")
    return saved


def set_ttl(records: Records, tenant: str, model_id: str, checkpoint_id: str, body: dict[str, Any]) -> None:
    """``set_checkpoint_ttl``: the tenant's checkpoint expires ``ttl_seconds`` from now (null: never);
    an expired checkpoint is deleted, files and all (:meth:`.app.Expiry.expire`)."""
    saved = _own_checkpoint(records, tenant, model_id, checkpoint_id)
    records.set_checkpoint_expiry(tenant, model_id, saved.kind, saved.name, ttl_of(body.get("ttl_seconds")))


def delete_checkpoint(records: Records, tenant: str, model_id: str, checkpoint_id: str) -> None:
    """Delete the record and the files of the tenant's checkpoint ``<kind>/<name>`` of ``model_id``."""
    saved = _own_checkpoint(records, tenant, model_id, checkpoint_id)
    remove(records, tenant, saved)


def remove(records: Records, tenant: str, saved: CheckpointRecord) -> None:
    """Delete a checkpoint's files and its record."""
    path = Path(saved.file)
    if path.is_dir():
        shutil.rmtree(path, ignore_errors=True)
    else:
        path.unlink(missing_ok=True)
    records.delete_checkpoint(tenant, saved.model_id, saved.kind, saved.name)


def _scope(access_scope: str) -> None:
    if access_scope not in ACCESS_SCOPES:
        raise StatusError("INVALID_ARGUMENT", f"access_scope: must be one of {', '.join(ACCESS_SCOPES)} "
                                              f"(got {access_scope!r})")


def sessions(records: Records, tenant: str, limit: int, offset: int, access_scope: str = "owned") -> dict[str, Any]:
    """``list_sessions``: the ids of the tenant's Tinker sessions, newest first."""
    _scope(access_scope)
    limit, offset = _page(limit, offset)
    return {"sessions": records.tinker_sessions(tenant, limit, offset)}


def session(records: Records, tenant: str, session_id: str, sampler_ids: list[str],
            access_scope: str = "owned") -> dict[str, Any]:
    """``get_session``: the models (training runs) the tenant's session created and its samplers."""
    _scope(access_scope)
    found = records.tinker_session(tenant, session_id)
    if found is None:
        raise StatusError("NOT_FOUND", f"session_id: no session {session_id!r}")
    return {"training_run_ids": records.models_of_session(tenant, session_id), "sampler_ids": sampler_ids,
            "user_metadata": found.user_metadata or None, "display_name": found.display_name}
