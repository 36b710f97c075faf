"""The job store's tables, its schema version, and the migration of an older store file.

:func:`create_schema` makes the tables of a new file, brings a file of an older version up to
:data:`SCHEMA_VERSION` (each step adds what it lacks; nothing is rewritten), and refuses a file of
a newer version (a scheduler older than the store would misread its states). Version 2 added
``jobs.pause_reason`` (a pause asked of a running job) and the PAUSED state.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

from tinker_scheduler.job_records import StoreError

SCHEMA_VERSION = 2

_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (
    key TEXT PRIMARY KEY,
    value TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS tenants (
    name TEXT PRIMARY KEY,
    created_at REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS api_keys (
    key_id TEXT PRIMARY KEY,
    tenant TEXT NOT NULL REFERENCES tenants(name),
    salt BLOB NOT NULL,
    hash BLOB NOT NULL,
    created_at REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS jobs (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    id TEXT NOT NULL UNIQUE,
    tenant TEXT NOT NULL,
    name TEXT NOT NULL,
    state INTEGER NOT NULL,
    reason TEXT NOT NULL DEFAULT '',
    priority INTEGER NOT NULL,
    config_text TEXT NOT NULL,
    config_format INTEGER NOT NULL,
    config_json TEXT NOT NULL,
    client_request_id TEXT NOT NULL DEFAULT '',
    cpus REAL NOT NULL,
    gpus REAL NOT NULL,
    memory_gb REAL NOT NULL,
    run_dir TEXT NOT NULL,
    created_at REAL NOT NULL,
    queued_at REAL NOT NULL,
    started_at REAL,
    finished_at REAL,
    checkpoint_path TEXT NOT NULL DEFAULT '',
    checkpoint_step INTEGER,
    restarts INTEGER NOT NULL DEFAULT 0,
    cancel_reason TEXT,
    last_cursor INTEGER NOT NULL DEFAULT 0,
    metrics_step INTEGER,
    pause_reason TEXT
);
CREATE UNIQUE INDEX IF NOT EXISTS jobs_by_request_id ON jobs(tenant, client_request_id)
    WHERE client_request_id != '';
CREATE INDEX IF NOT EXISTS jobs_by_state ON jobs(state, seq);
CREATE INDEX IF NOT EXISTS jobs_by_tenant ON jobs(tenant, seq);
CREATE TABLE IF NOT EXISTS events (
    job_id TEXT NOT NULL,
    cursor INTEGER NOT NULL,
    time REAL NOT NULL,
    kind TEXT NOT NULL,
    payload TEXT NOT NULL,
    PRIMARY KEY (job_id, cursor)
) WITHOUT ROWID;
"""

_MIGRATIONS: dict[int, tuple[str, ...]] = {
    2: ("ALTER TABLE jobs ADD COLUMN pause_reason TEXT",),
}
"""Version -> the statements that bring a store of the version before it up to it."""


def create_schema(db: sqlite3.Connection, path: Path) -> None:
    """Create the tables (inside the caller's write transaction), migrate an older file, and
    refuse a newer one with a :class:`StoreError` naming both versions."""
    row = _version_row(db)
    if row is not None:  # an existing store: migrate its tables before creating what is missing
        version = int(row["value"])
        if version > SCHEMA_VERSION:
            raise StoreError(
                "db",
                f"{path} has schema version {version}, this scheduler needs {SCHEMA_VERSION} or "
                "older; use a new --db file or the matching tinker-scheduler",
            )
        for step in range(version + 1, SCHEMA_VERSION + 1):
            for statement in _MIGRATIONS[step]:
                db.execute(statement)
    for statement in _SCHEMA.split(";"):
        if statement.strip():
            db.execute(statement)
    db.execute("INSERT OR REPLACE INTO meta(key, value) VALUES ('schema_version', ?)", (str(SCHEMA_VERSION),))


def _version_row(db: sqlite3.Connection) -> sqlite3.Row | None:
    """The stored schema version's row, or None for a new file."""
    if db.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'meta'").fetchone() is None:
        return None
    row: sqlite3.Row | None = db.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()
    return row
