"""Opening the job store's SQLite file: created private (mode 600, a new directory 700) and
checked with ``PRAGMA quick_check``; a file SQLite cannot use is one :class:`StoreError` line
naming it and what to do, never a traceback."""

from __future__ import annotations

import os
import sqlite3
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from tinker_scheduler.job_records import StoreError


def open_store_file(path: str) -> sqlite3.Connection:
    """Open (or create) the store file: a new directory at mode 700, a new file at mode 600 (its
    WAL and shared-memory files get the same mode from SQLite), then ``PRAGMA quick_check``."""
    if path != ":memory:":
        file = Path(path)
        try:
            file.parent.mkdir(parents=True, exist_ok=True, mode=0o700)  # an existing one keeps its mode
            os.close(os.open(file, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600))
        except FileExistsError:
            pass
        except OSError as e:
            raise StoreError("db", f"cannot create the job store {file}: {e.strerror}; pass another --db") from None
    conn = sqlite3.connect(path, check_same_thread=False, isolation_level=None, timeout=30.0)
    conn.row_factory = sqlite3.Row
    try:
        problems = [row[0] for row in conn.execute("PRAGMA quick_check").fetchall()]
    except sqlite3.DatabaseError as e:
        conn.close()
        raise unusable(Path(path), e) from None
    if problems != ["ok"]:
        conn.close()
        raise unusable(Path(path), f"SQLite quick_check: {problems[0]}")
    return conn


def unusable(path: Path, error: BaseException | str) -> StoreError:
    """The one-line error for a store file SQLite cannot use (damaged, not SQLite, unreadable)."""
    error = " ".join(str(error).split())  # quick_check's report spans lines
    if isinstance(error, sqlite3.OperationalError):  # locked, unreadable, a directory, ...
        return StoreError("db", f"cannot open the job store {path}: {error}; check the file and its permissions")
    return StoreError(
        "db",
        f"the job store {path} is damaged or not a SQLite file ({error}); restore it from a backup, "
        "or move it away to start with an empty store",
    )



@contextmanager
def write_transaction(conn: sqlite3.Connection, lock: threading.Lock | threading.RLock) -> Iterator[sqlite3.Connection]:
    """A write transaction on ``conn`` under ``lock`` (BEGIN IMMEDIATE ... COMMIT), rolled back on error."""
    with lock:
        conn.execute("BEGIN IMMEDIATE")
        try:
            yield conn
        except BaseException:
            conn.execute("ROLLBACK")
            raise
        conn.execute("COMMIT")


def query(conn: sqlite3.Connection, lock: threading.Lock | threading.RLock, sql: str, params: Sequence[Any] = ()) -> list[sqlite3.Row]:
    """All rows of one read on ``conn`` under ``lock``."""
    with lock:
        return conn.execute(sql, params).fetchall()
