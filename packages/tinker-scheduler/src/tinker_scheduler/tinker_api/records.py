"""The gateway's durable records, in the scheduler's SQLite store (its own connection, its own tables).

What survives a scheduler restart: Tinker sessions (``create_session``, with the time of their
last heartbeat), models (the Tinker training runs: owner, base model, LoRA rank, the directory of
their saved files), checkpoints (``tinker://`` paths and their files) and the answers of long
requests (futures). Live model sessions do not survive: when the gateway opens the store, the
models still marked ``live`` become ``restarted`` and the futures still ``pending`` become
``restarted`` (polling one answers "the scheduler restarted while this request ran; retry it").
A Tinker session's heartbeat clock restarts then too: the scheduler's downtime does not count.

Tables (created if missing, so an older store simply gains them): ``tinker_sessions``,
``tinker_models``, ``tinker_checkpoints``, ``tinker_futures``; columns added since (a session's
``user_metadata`` and ``display_name``, a checkpoint's ``expires_at``) are added to an older
store's tables when it is opened (:data:`ADDED_COLUMNS`). Times are seconds since the epoch.
"""

from __future__ import annotations

import json
import sqlite3
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from tinker_scheduler.store_file import StoreTables, open_store_file

#: Finished futures kept; older ones are forgotten (polling one is then "not found").
MAX_FUTURES = 4096

SCHEMA = """
CREATE TABLE IF NOT EXISTS tinker_sessions (
    id TEXT PRIMARY KEY,
    tenant TEXT NOT NULL,
    created_at REAL NOT NULL,
    last_seen REAL NOT NULL,
    state TEXT NOT NULL DEFAULT 'active'
);
CREATE TABLE IF NOT EXISTS tinker_models (
    model_id TEXT PRIMARY KEY,
    tenant TEXT NOT NULL,
    client_session TEXT NOT NULL,
    training_session TEXT NOT NULL,
    base_model TEXT NOT NULL,
    lora_rank INTEGER NOT NULL,
    dir TEXT NOT NULL,
    user_metadata TEXT NOT NULL DEFAULT '{}',
    created_at REAL NOT NULL,
    last_request_at REAL NOT NULL,
    state TEXT NOT NULL DEFAULT 'live'
);
CREATE INDEX IF NOT EXISTS tinker_models_by_tenant ON tinker_models(tenant, created_at);
CREATE TABLE IF NOT EXISTS tinker_checkpoints (
    model_id TEXT NOT NULL,
    kind TEXT NOT NULL,
    name TEXT NOT NULL,
    tenant TEXT NOT NULL,
    file TEXT NOT NULL,
    size_bytes INTEGER,
    created_at REAL NOT NULL,
    PRIMARY KEY (model_id, kind, name)
);
CREATE INDEX IF NOT EXISTS tinker_checkpoints_by_tenant ON tinker_checkpoints(tenant, created_at);
CREATE TABLE IF NOT EXISTS tinker_futures (
    request_id TEXT PRIMARY KEY,
    tenant TEXT NOT NULL,
    created_at REAL NOT NULL,
    state TEXT NOT NULL,
    media_type TEXT NOT NULL DEFAULT '',
    body BLOB
);
"""
#: Columns added after the first release of these tables: added to an older store when it is opened.
ADDED_COLUMNS = {"tinker_sessions": {"user_metadata": "TEXT NOT NULL DEFAULT '{}'", "display_name": "TEXT"},
                 "tinker_checkpoints": {"expires_at": "REAL"}}


@dataclass(frozen=True)
class SessionRecord:
    """A Tinker session (the SDK's ``ServiceClient``)."""

    session_id: str
    created_at: float
    state: str  # active | expired
    user_metadata: dict[str, str]
    display_name: str | None


@dataclass(frozen=True)
class ModelRecord:
    model_id: str
    tenant: str
    client_session: str
    training_session: str
    base_model: str
    lora_rank: int
    dir: Path
    user_metadata: dict[str, str]
    created_at: float
    last_request_at: float
    state: str  # live | unloaded | expired | restarted


@dataclass(frozen=True)
class CheckpointRecord:
    model_id: str
    kind: str  # weights | sampler_weights
    name: str
    file: str
    size_bytes: int | None
    created_at: float
    expires_at: float | None = None  # None: kept until deleted

    @property
    def tinker_path(self) -> str:
        return f"tinker://{self.model_id}/{self.kind}/{self.name}"


class Records(StoreTables):
    """The gateway's tables in the store file ``path``; thread-safe."""

    def __init__(self, path: str | Path) -> None:
        self._lock = threading.Lock()
        self._conn = open_store_file(str(path))
        self._conn.execute("PRAGMA busy_timeout=30000")
        self._conn.execute("PRAGMA synchronous=NORMAL")  # as the job store: WAL, no fsync per commit
        self._writes = 0
        self._conn.executescript(SCHEMA)
        _add_columns(self._conn)
        with self._write() as db:
            now = time.time()
            db.execute("UPDATE tinker_models SET state = 'restarted' WHERE state = 'live'")
            db.execute("UPDATE tinker_futures SET state = 'restarted' WHERE state = 'pending'")
            db.execute("UPDATE tinker_sessions SET last_seen = ? WHERE state = 'active'", (now,))

    # ---- Tinker sessions (the SDK's ServiceClient: create_session, session_heartbeat) ----------
    def add_tinker_session(self, session_id: str, tenant: str, user_metadata: dict[str, str] | None = None,
                           display_name: str | None = None) -> None:
        now = time.time()
        with self._write() as db:
            db.execute("INSERT INTO tinker_sessions(id, tenant, created_at, last_seen, user_metadata, display_name) "
                       "VALUES (?, ?, ?, ?, ?, ?)", (session_id, tenant, now, now, json.dumps(user_metadata or {}),
                                                     display_name))

    def tinker_sessions(self, tenant: str, limit: int, offset: int) -> list[str]:
        """The ids of the tenant's Tinker sessions (active or expired), newest first."""
        rows = self._query("SELECT id FROM tinker_sessions WHERE tenant = ? ORDER BY created_at DESC, id "
                           "LIMIT ? OFFSET ?", (tenant, limit, offset))
        return [str(r["id"]) for r in rows]

    def tinker_session(self, tenant: str, session_id: str) -> SessionRecord | None:
        """The tenant's Tinker session; None for none or another tenant's."""
        rows = self._query("SELECT * FROM tinker_sessions WHERE id = ? AND tenant = ?", (session_id, tenant))
        if not rows:
            return None
        r = rows[0]
        return SessionRecord(str(r["id"]), float(r["created_at"]), str(r["state"]),
                             json.loads(r["user_metadata"] or "{}"), r["display_name"])

    def models_of_session(self, tenant: str, session_id: str) -> list[str]:
        """The ids of the models the tenant created in Tinker session ``session_id``, oldest first."""
        rows = self._query("SELECT model_id FROM tinker_models WHERE tenant = ? AND client_session = ? "
                           "ORDER BY created_at, model_id", (tenant, session_id))
        return [str(r["model_id"]) for r in rows]

    def tinker_session_state(self, tenant: str, session_id: str) -> str | None:
        """``active`` or ``expired`` for the tenant's session; None for none (or another tenant's)."""
        rows = self._query("SELECT state FROM tinker_sessions WHERE id = ? AND tenant = ?", (session_id, tenant))
        return str(rows[0]["state"]) if rows else None

    def heartbeat(self, tenant: str, session_id: str) -> str | None:
        """Refresh an active session; its state as :meth:`session_state`."""
        with self._write() as db:
            db.execute("UPDATE tinker_sessions SET last_seen = ? WHERE id = ? AND tenant = ? AND state = 'active'",
                       (time.time(), session_id, tenant))
        return self.tinker_session_state(tenant, session_id)

    def expire_tinker_sessions(self, older_than: float) -> list[str]:
        """Mark active sessions last seen before ``older_than`` expired; their ids."""
        with self._write() as db:
            ids = [r["id"] for r in db.execute(
                "SELECT id FROM tinker_sessions WHERE state = 'active' AND last_seen < ?", (older_than,))]
            db.executemany("UPDATE tinker_sessions SET state = 'expired' WHERE id = ?", [(i,) for i in ids])
        return ids

    # ---- models ---------------------------------------------------------------------------------
    def add_model(self, model_id: str, tenant: str, client_session: str, training_session: str, base_model: str,
                  lora_rank: int, directory: Path, user_metadata: dict[str, str] | None = None) -> None:
        now = time.time()
        with self._write() as db:
            db.execute(
                "INSERT INTO tinker_models(model_id, tenant, client_session, training_session, base_model, lora_rank, "
                "dir, user_metadata, created_at, last_request_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (model_id, tenant, client_session, training_session, base_model, lora_rank, str(directory),
                 json.dumps(user_metadata or {}), now, now))

    def model(self, tenant: str, model_id: str) -> ModelRecord | None:
        """The tenant's model record (any state); None for none or another tenant's."""
        rows = self._query("SELECT * FROM tinker_models WHERE model_id = ? AND tenant = ?", (model_id, tenant))
        return _model(rows[0]) if rows else None

    def models(self, tenant: str, limit: int, offset: int) -> tuple[list[ModelRecord], int]:
        """The tenant's models, newest first, and how many it has."""
        rows = self._query("SELECT * FROM tinker_models WHERE tenant = ? ORDER BY created_at DESC, model_id "
                           "LIMIT ? OFFSET ?", (tenant, limit, offset))
        total = self._query("SELECT COUNT(*) FROM tinker_models WHERE tenant = ?", (tenant,))[0][0]
        return [_model(r) for r in rows], int(total)

    def live_models_of_expired(self) -> list[ModelRecord]:
        """Live models whose Tinker session expired (also those created while it expired)."""
        rows = self._query("SELECT * FROM tinker_models WHERE state = 'live' AND client_session IN "
                           "(SELECT id FROM tinker_sessions WHERE state = 'expired')")
        return [_model(r) for r in rows]

    def set_model_state(self, model_id: str, state: str) -> None:
        with self._write() as db:
            db.execute("UPDATE tinker_models SET state = ? WHERE model_id = ?", (state, model_id))

    # ---- checkpoints ----------------------------------------------------------------------------
    def add_checkpoint(self, tenant: str, model_id: str, kind: str, name: str, file: str,
                       expires_at: float | None = None) -> None:
        size = _size(Path(file))
        with self._write() as db:
            db.execute("INSERT OR REPLACE INTO tinker_checkpoints(model_id, kind, name, tenant, file, size_bytes, "
                       "created_at, expires_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                       (model_id, kind, name, tenant, file, size, time.time(), expires_at))

    def set_checkpoint_expiry(self, tenant: str, model_id: str, kind: str, name: str, expires_at: float | None) -> None:
        with self._write() as db:
            db.execute("UPDATE tinker_checkpoints SET expires_at = ? WHERE tenant = ? AND model_id = ? AND kind = ? "
                       "AND name = ?", (expires_at, tenant, model_id, kind, name))

    def expired_checkpoints(self, now: float) -> list[tuple[str, CheckpointRecord]]:
        """``(tenant, checkpoint)`` of every checkpoint whose time ran out before ``now``."""
        rows = self._query("SELECT * FROM tinker_checkpoints WHERE expires_at IS NOT NULL AND expires_at <= ?", (now,))
        return [(str(r["tenant"]), _checkpoint(r)) for r in rows]

    def checkpoint_owner(self, model_id: str, kind: str, name: str) -> str | None:
        """The tenant that owns a checkpoint (for a signed download URL, which carries no key)."""
        rows = self._query("SELECT tenant FROM tinker_checkpoints WHERE model_id = ? AND kind = ? AND name = ?",
                           (model_id, kind, name))
        return str(rows[0]["tenant"]) if rows else None

    def checkpoints(self, tenant: str, model_id: str | None = None, limit: int = -1, offset: int = 0
                    ) -> tuple[list[CheckpointRecord], int]:
        """The tenant's checkpoints (of one model, or all), newest first, and how many there are."""
        where, params = ("tenant = ? AND model_id = ?", (tenant, model_id)) if model_id else ("tenant = ?", (tenant,))
        rows = self._query(f"SELECT * FROM tinker_checkpoints WHERE {where} ORDER BY created_at DESC, name "
                           "LIMIT ? OFFSET ?", (*params, limit, offset))
        total = self._query(f"SELECT COUNT(*) FROM tinker_checkpoints WHERE {where}", params)[0][0]
        return [_checkpoint(r) for r in rows], int(total)

    def checkpoint(self, tenant: str, model_id: str, kind: str, name: str) -> CheckpointRecord | None:
        rows = self._query("SELECT * FROM tinker_checkpoints WHERE tenant = ? AND model_id = ? AND kind = ? AND name = ?",
                           (tenant, model_id, kind, name))
        return _checkpoint(rows[0]) if rows else None

    def delete_checkpoint(self, tenant: str, model_id: str, kind: str, name: str) -> None:
        with self._write() as db:
            db.execute("DELETE FROM tinker_checkpoints WHERE tenant = ? AND model_id = ? AND kind = ? AND name = ?",
                       (tenant, model_id, kind, name))

    # ---- futures --------------------------------------------------------------------------------
    def add_future(self, request_id: str, tenant: str) -> None:
        with self._write() as db:
            db.execute("INSERT INTO tinker_futures(request_id, tenant, created_at, state) VALUES (?, ?, ?, 'pending')",
                       (request_id, tenant, time.time()))
            self._writes += 1
            if self._writes % 256 == 0:  # forget the oldest answers now and then
                db.execute("DELETE FROM tinker_futures WHERE rowid <= (SELECT MAX(rowid) FROM tinker_futures) - ?",
                           (MAX_FUTURES,))

    def finish_future(self, request_id: str, media_type: str, body: bytes, model_id: str = "") -> None:
        """Store a future's answer (and the time of its model's last request)."""
        now = time.time()
        with self._write() as db:
            db.execute("UPDATE tinker_futures SET state = 'done', media_type = ?, body = ? WHERE request_id = ?",
                       (media_type, body, request_id))
            if model_id:
                db.execute("UPDATE tinker_models SET last_request_at = ? WHERE model_id = ?", (now, model_id))

    def future(self, tenant: str, request_id: str) -> tuple[str, str, bytes] | None:
        """``(state, media_type, body)`` of the tenant's future; None for none or another tenant's."""
        rows = self._query("SELECT state, media_type, body FROM tinker_futures WHERE request_id = ? AND tenant = ?",
                           (request_id, tenant))
        return (str(rows[0]["state"]), str(rows[0]["media_type"]), bytes(rows[0]["body"] or b"")) if rows else None


def _model(row: sqlite3.Row) -> ModelRecord:
    return ModelRecord(row["model_id"], row["tenant"], row["client_session"], row["training_session"],
                       row["base_model"], int(row["lora_rank"]), Path(row["dir"]), json.loads(row["user_metadata"]),
                       float(row["created_at"]), float(row["last_request_at"]), row["state"])


def _checkpoint(row: sqlite3.Row) -> CheckpointRecord:
    return CheckpointRecord(row["model_id"], row["kind"], row["name"], row["file"], row["size_bytes"],
                            float(row["created_at"]), row["expires_at"])


def _add_columns(conn: sqlite3.Connection) -> None:
    """Give an older store's tables the columns of :data:`ADDED_COLUMNS` they lack."""
    for table, columns in ADDED_COLUMNS.items():
        have = {r[1] for r in conn.execute(f"PRAGMA table_info({table})")}
        for name, declaration in columns.items():
            if name not in have:
                conn.execute(f"ALTER TABLE {table} ADD COLUMN {name} {declaration}")


def _size(path: Path) -> int | None:
    """Bytes of a saved file or directory (None if it cannot be read)."""
    try:
        if path.is_file():
            return path.stat().st_size
        return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())
    except OSError:
        return None
