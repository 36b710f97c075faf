"""Opening the job store's SQLite file: created private (mode 600, a new directory 700) and
checked with ``PRAGMA quick_check``; a file SQLite cannot use is one :class:`StoreError` line
naming it and what to do, never a traceback. :class:`StoreTables` gives the classes that keep
tables in it (the job store, the Tinker gateway's records) their write transactions and reads."""

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


class StoreTables:
    """The tables of one open store file: a class sets ``_conn`` (from :func:`open_store_file`) and
    the ``_lock`` every use of it takes, and gets write transactions, reads and ``close``."""

    _conn: sqlite3.Connection
    _lock: threading.Lock | threading.RLock

    @contextmanager
    def _write(self) -> Iterator[sqlite3.Connection]:
        """A write transaction under the lock (BEGIN IMMEDIATE ... COMMIT), rolled back on error."""
        with self._lock:
            self._conn.execute("BEGIN IMMEDIATE")
            try:
                yield self._conn
            except BaseException:
                self._conn.execute("ROLLBACK")
                raise
            self._conn.execute("COMMIT")

    def _query(self, sql: str, params: Sequence[Any] = ()) -> list[sqlite3.Row]:
        """All rows of one read under the lock."""
        with self._lock:
            return self._conn.execute(sql, params).fetchall()

    def close(self) -> None:
        with self._lock:
            self._conn.close()
