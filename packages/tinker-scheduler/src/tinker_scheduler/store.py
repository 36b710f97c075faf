"""The SQLite job store: tenants and their hashed API keys, jobs, configs, states, checkpoint
pointers, client request ids and every job's events (the tables and their migration:
:mod:`tinker_scheduler.store_schema`).

One file, WAL mode, ``synchronous=NORMAL``: a committed transaction survives the scheduler being
killed (SIGKILL) at any moment. Every change of a job's state and the event that records it are
written in one transaction, so the event stream and the job rows never disagree.

Events have a per-job *cursor*: 1 for the first event (the job entering QUEUED) and then
increasing by exactly 1, with no gaps (``jobs.last_cursor`` holds the last one given). Watchers
resume with "every event whose cursor is larger than the last one I saw".

The store is used from several threads (gRPC handlers, the scheduling loop, watchers): one
connection guarded by a lock; :meth:`JobStore.wait_for_events` lets watchers sleep until
something is appended instead of polling.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import re
import secrets
import sqlite3
import threading
import time
from collections.abc import Iterable, Sequence
from dataclasses import fields
from pathlib import Path
from typing import Any

from tinker_scheduler.job_records import (
    TERMINAL_STATES,
    Event,
    JobRecord,
    JobState,
    NewJob,
    PendingEvent,
    StoreError,
    resume_phrase,
)
from tinker_scheduler.store_file import StoreTables, open_store_file, unusable
from tinker_scheduler.store_schema import create_schema

__all__ = [
    "LOCAL_TENANT", "TERMINAL_STATES", "Event", "JobRecord", "JobState", "JobStore", "NewJob", "PendingEvent",
    "StoreError",
]

#: Tenant names are directory names under the runs directory.
TENANT_RE = re.compile(r"^[a-z0-9][a-z0-9_-]{0,62}$")
#: The tenant of the local single-user mode (no API key).
LOCAL_TENANT = "local"
#: API keys look like ``otk_<key id>_<secret>``; the key id finds the row, the secret is hashed.
KEY_PREFIX = "otk"

#: A job row without its config (``config_text`` and ``config_json`` read as "").
_SUMMARY_COLUMNS = ", ".join(
    f"'' AS {f.name}" if f.name in ("config_text", "config_json") else f.name for f in fields(JobRecord)
)


def _now() -> float:
    return time.time()


def new_job_id() -> str:
    """A fresh job id, e.g. ``job-3f9c2a1b7d04``."""
    return f"job-{secrets.token_hex(6)}"


def hash_secret(salt: bytes, secret: str) -> bytes:
    """The stored hash of an API key's secret part: SHA-256 over a per-key random salt.

    API keys are 256-bit random strings, so a fast salted hash is enough (no password stretching
    needed); keys are never stored in clear.
    """
    return hashlib.sha256(salt + secret.encode("utf-8")).digest()


class JobStore(StoreTables):
    """The job store in one SQLite file (created on first use)."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self._lock = threading.RLock()
        self._changed = threading.Condition(threading.Lock())
        self._version = 0
        self._jobs_version = 0
        self._conn = open_store_file(str(path))
        try:
            with self._lock:
                self._conn.execute("PRAGMA journal_mode=WAL")
                self._conn.execute("PRAGMA synchronous=NORMAL")
                self._conn.execute("PRAGMA busy_timeout=30000")
                self._conn.execute("PRAGMA foreign_keys=ON")
                self._create_schema()
        except sqlite3.DatabaseError as e:
            self._conn.close()
            raise unusable(self.path, e) from None
        except BaseException:
            self._conn.close()
            raise

    def _create_schema(self) -> None:
        with self._write() as db:
            create_schema(db, self.path)

    # ---- plumbing -------------------------------------------------------------------------

    def _notify(self, *, jobs_changed: bool = False) -> None:
        with self._changed:
            self._version += 1
            if jobs_changed:
                self._jobs_version += 1
            self._changed.notify_all()

    @property
    def jobs_version(self) -> int:
        """Grows whenever a job is submitted or changes state; not on log or metric events, nor on
        :meth:`update` (checkpoint columns). The scheduling loop re-plans only when it moved."""
        with self._changed:
            return self._jobs_version

    @property
    def version(self) -> int:
        """Grows by one whenever events are appended (see :meth:`wait_for_events`)."""
        with self._changed:
            return self._version

    def wait_for_events(self, seen_version: int, timeout: float) -> int:
        """Block until :attr:`version` differs from ``seen_version`` or ``timeout`` passes."""
        with self._changed:
            self._changed.wait_for(lambda: self._version != seen_version, timeout=timeout)
            return self._version

    def journal_mode(self) -> str:
        return str(self._query("PRAGMA journal_mode")[0][0])

    # ---- tenants and keys -----------------------------------------------------------------

    def add_tenant(self, name: str) -> str:
        """Create tenant ``name`` (if new) and a new API key for it; return the key.

        The key is shown once: only its salted hash is stored.
        """
        if not TENANT_RE.fullmatch(name):
            raise StoreError(
                "name",
                f"tenant name {name!r} is not allowed; use 1-63 lowercase letters, digits, '-' or '_' "
                "starting with a letter or digit",
            )
        key_id = secrets.token_hex(6)
        secret = secrets.token_urlsafe(32)
        salt = secrets.token_bytes(16)
        with self._write() as db:
            db.execute("INSERT OR IGNORE INTO tenants(name, created_at) VALUES (?, ?)", (name, _now()))
            db.execute(
                "INSERT INTO api_keys(key_id, tenant, salt, hash, created_at) VALUES (?, ?, ?, ?, ?)",
                (key_id, name, salt, hash_secret(salt, secret), _now()),
            )
        return f"{KEY_PREFIX}_{key_id}_{secret}"

    def tenants(self) -> list[str]:
        return [r["name"] for r in self._query("SELECT name FROM tenants ORDER BY name")]

    def tenant_count(self) -> int:
        return int(self._query("SELECT COUNT(*) FROM tenants")[0][0])

    def authenticate(self, key: str) -> str | None:
        """The tenant that owns API key ``key``, or None. Compares hashes in constant time."""
        parts = key.split("_", 2)
        key_id = parts[1] if len(parts) == 3 and parts[0] == KEY_PREFIX else ""
        secret = parts[2] if len(parts) == 3 else key
        rows = self._query("SELECT tenant, salt, hash FROM api_keys WHERE key_id = ?", (key_id,))
        if not rows:
            # Same work as a real check, so a wrong key id and a wrong secret take as long.
            hmac.compare_digest(hash_secret(b"\0" * 16, secret), b"\0" * 32)
            return None
        row = rows[0]
        if hmac.compare_digest(hash_secret(row["salt"], secret), row["hash"]):
            return str(row["tenant"])
        return None

    # ---- jobs ------------------------------------------------------------------------------

    def submit(self, new: NewJob) -> tuple[JobRecord, bool]:
        """Create a QUEUED job (and its first event); return ``(job, created)``.

        With a ``client_request_id`` the tenant already used, the first job is returned and
        ``created`` is False -- unless the config or priority differ, which is a
        :class:`StoreError` on ``client_request_id``.
        """
        with self._write() as db:
            if new.client_request_id:
                row = db.execute(
                    "SELECT * FROM jobs WHERE tenant = ? AND client_request_id = ?",
                    (new.tenant, new.client_request_id),
                ).fetchone()
                if row is not None:
                    existing = JobRecord.from_row(row)
                    if existing.config_text != new.config_text or existing.priority != new.priority:
                        raise StoreError(
                            "client_request_id",
                            f"{new.client_request_id!r} was already used for job {existing.id} with a "
                            "different config or priority; use a new request id for a new job",
                        )
                    return existing, False
            job_id = new.job_id or new_job_id()
            now = _now()
            run_dir = str(Path(new.runs_dir) / new.tenant / job_id)
            db.execute(
                """INSERT INTO jobs(id, tenant, name, state, reason, priority, config_text, config_format,
                       config_json, client_request_id, cpus, gpus, memory_gb, run_dir, created_at, queued_at)
                   VALUES (?, ?, ?, ?, '', ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)""",
                (
                    job_id, new.tenant, new.name, int(JobState.QUEUED), new.priority, new.config_text,
                    new.config_format, new.config_json, new.client_request_id, new.cpus, new.gpus,
                    new.memory_gb, run_dir, now, now,
                ),
            )
            self._append(db, job_id, [PendingEvent("state", _state_payload(JobState.UNSPECIFIED, JobState.QUEUED, "submitted"), now)])
            row = db.execute("SELECT * FROM jobs WHERE id = ?", (job_id,)).fetchone()
        self._notify(jobs_changed=True)
        return JobRecord.from_row(row), True

    def get(self, job_id: str, tenant: str | None = None) -> JobRecord | None:
        """The job, or None (also when it belongs to another tenant than ``tenant``)."""
        rows = self._query("SELECT * FROM jobs WHERE id = ?", (job_id,))
        if not rows:
            return None
        job = JobRecord.from_row(rows[0])
        if tenant is not None and job.tenant != tenant:
            return None
        return job

    def by_request_id(self, tenant: str, client_request_id: str) -> JobRecord | None:
        """The tenant's job submitted with ``client_request_id`` (not ""), or None."""
        rows = self._query("SELECT * FROM jobs WHERE tenant = ? AND client_request_id = ?", (tenant, client_request_id))
        return JobRecord.from_row(rows[0]) if rows and client_request_id else None

    def job_ids(self, tenant: str) -> list[str]:
        return [r["id"] for r in self._query("SELECT id FROM jobs WHERE tenant = ? ORDER BY seq", (tenant,))]

    def list_jobs(
        self,
        tenant: str | None,
        states: Iterable[JobState] = (),
        limit: int = 50,
        before_seq: int | None = None,
        *,
        with_config: bool = False,
    ) -> list[JobRecord]:
        """Jobs newest first (by submission), optionally of one tenant and some states.

        A keyset page: ``before_seq`` is the ``seq`` of the last job of the previous page (the
        ``jobs_by_tenant`` index serves it, however many jobs come before). Without
        ``with_config`` the records are summaries: ``config_text`` and ``config_json`` are "".
        """
        where: list[str] = []
        params: list[Any] = []
        if tenant is not None:
            where.append("tenant = ?")
            params.append(tenant)
        state_values = [int(s) for s in states]
        if state_values:
            where.append(f"state IN ({', '.join('?' * len(state_values))})")
            params += state_values
        if before_seq is not None:
            where.append("seq < ?")
            params.append(before_seq)
        columns = "*" if with_config else _SUMMARY_COLUMNS
        sql = f"SELECT {columns} FROM jobs" + (" WHERE " + " AND ".join(where) if where else "")
        sql += " ORDER BY seq DESC LIMIT ?"
        params.append(limit)
        return [JobRecord.from_row(r) for r in self._query(sql, params)]

    def in_state(self, state: JobState, *, with_config: bool = True) -> list[JobRecord]:
        """Every job in ``state``, oldest first; summaries (no config text) without ``with_config``."""
        columns = "*" if with_config else _SUMMARY_COLUMNS
        rows = self._query(f"SELECT {columns} FROM jobs WHERE state = ? ORDER BY seq", (int(state),))
        return [JobRecord.from_row(r) for r in rows]

    def counts_by_state(self) -> dict[JobState, int]:
        counts: dict[JobState, int] = {s: 0 for s in JobState if s != JobState.UNSPECIFIED}
        for row in self._query("SELECT state, COUNT(*) AS n FROM jobs GROUP BY state"):
            counts[JobState(row["state"])] = int(row["n"])
        return counts

    def transition(
        self,
        job_id: str,
        to: JobState,
        reason: str,
        *,
        expect: Iterable[JobState] | None = None,
        **updates: Any,
    ) -> JobRecord | None:
        """Move a job to state ``to`` and record the change as an event, atomically.

        :param expect: the states the job may be in now; when it is in another one, nothing
            changes and None is returned (e.g. a cancel that raced with the job finishing).
        :param updates: other columns to set in the same transaction (``started_at``, ``restarts``,
            ...). ``finished_at`` is set automatically on terminal states, ``queued_at`` on QUEUED.
        """
        now = _now()
        with self._write() as db:
            row = db.execute("SELECT state FROM jobs WHERE id = ?", (job_id,)).fetchone()
            if row is None:
                return None
            current = JobState(row["state"])
            if expect is not None and current not in set(expect):
                return None
            columns = {"state": int(to), "reason": reason, **updates}
            if to.terminal:
                columns.setdefault("finished_at", now)
            if to == JobState.QUEUED:
                columns.setdefault("queued_at", now)
            assignments = ", ".join(f"{name} = ?" for name in columns)
            db.execute(f"UPDATE jobs SET {assignments} WHERE id = ?", (*columns.values(), job_id))
            self._append(db, job_id, [PendingEvent("state", _state_payload(current, to, reason), now)])
            job = JobRecord.from_row(db.execute("SELECT * FROM jobs WHERE id = ?", (job_id,)).fetchone())
        self._notify(jobs_changed=True)
        return job

    def update(self, job_id: str, **columns: Any) -> None:
        """Set columns of a job without an event."""
        if not columns:
            return
        assignments = ", ".join(f"{name} = ?" for name in columns)
        with self._write() as db:
            db.execute(f"UPDATE jobs SET {assignments} WHERE id = ?", (*columns.values(), job_id))

    def request_cancel(self, job_id: str, reason: str) -> JobRecord | None:
        """Cancel a job: QUEUED or PAUSED becomes CANCELLED now; RUNNING is flagged for the loop to stop.

        Returns the job as it is afterwards; a finished job is returned unchanged.
        """
        return self._transition_or_flag(
            job_id, JobState.CANCELLED, reason, [JobState.QUEUED, JobState.PAUSED],
            flag="cancel_reason = ?, reason = ?", params=(reason, f"cancelling: {reason}"),
        )

    def request_pause(self, job_id: str, reason: str) -> JobRecord | None:
        """Pause a job: QUEUED becomes PAUSED now; RUNNING is flagged for the loop to stop it at
        its next step boundary (it becomes PAUSED once it has). Returns the job as it is
        afterwards; a paused or finished job, or one already asked to pause or cancel, is unchanged."""
        return self._transition_or_flag(
            job_id, JobState.PAUSED, reason, [JobState.QUEUED],
            flag="pause_reason = ?, reason = ?", params=(reason, f"pausing: {reason}"),
            only_if=" AND cancel_reason IS NULL AND pause_reason IS NULL",
        )

    def resume(self, job_id: str) -> JobRecord | None:
        """Resume a job: PAUSED goes back to the queue; a RUNNING job's pending pause is withdrawn.
        Returns the job as it is afterwards; any other job is unchanged."""
        current = self.get(job_id)
        return self._transition_or_flag(
            job_id, JobState.QUEUED, f"resumed; {resume_phrase(current)}", [JobState.PAUSED],
            flag="pause_reason = NULL, reason = 'running (the pause was withdrawn)'", params=(),
            only_if=" AND pause_reason IS NOT NULL",
        )

    def _transition_or_flag(
        self, job_id: str, to: JobState, reason: str, expect: list[JobState], *,
        flag: str, params: Sequence[Any], only_if: str = "",
    ) -> JobRecord | None:
        """Move the job to ``to`` now when it is in ``expect``; else, when it is RUNNING (and
        ``only_if`` holds), set the columns of ``flag`` (with ``params``) for the job loop to act on
        at its next step boundary. The job as it is afterwards."""
        job = self.transition(job_id, to, reason, expect=expect)
        if job is not None:
            return job
        with self._write() as db:
            db.execute(f"UPDATE jobs SET {flag} WHERE id = ? AND state = ?{only_if}",
                       (*params, job_id, int(JobState.RUNNING)))
        return self.get(job_id)

    # ---- events -----------------------------------------------------------------------------

    def _append(self, db: sqlite3.Connection, job_id: str, events: Sequence[PendingEvent]) -> int:
        row = db.execute("SELECT last_cursor FROM jobs WHERE id = ?", (job_id,)).fetchone()
        cursor = int(row["last_cursor"])
        for event in events:
            cursor += 1
            db.execute(
                "INSERT INTO events(job_id, cursor, time, kind, payload) VALUES (?, ?, ?, ?, ?)",
                (job_id, cursor, event.time if event.time is not None else _now(), event.kind,
                 json.dumps(event.payload, allow_nan=True)),
            )
        db.execute("UPDATE jobs SET last_cursor = ? WHERE id = ?", (cursor, job_id))
        return cursor

    def append_events(self, job_id: str, events: Sequence[PendingEvent]) -> int:
        """Append metrics and log events; return how many were stored.

        Metrics of a step the job already reported (a run resumed from a checkpoint repeats the
        steps after it) are dropped, so a job's metrics steps only grow.
        """
        if not events:
            return 0
        with self._write() as db:
            row = db.execute("SELECT metrics_step FROM jobs WHERE id = ?", (job_id,)).fetchone()
            if row is None:
                return 0
            last_step = row["metrics_step"]
            kept: list[PendingEvent] = []
            for event in events:
                if event.kind == "metrics" and not event.payload.get("final"):
                    step = int(event.payload["step"])
                    if last_step is not None and step <= last_step:
                        continue
                    last_step = step
                kept.append(event)
            if kept:
                self._append(db, job_id, kept)
                db.execute("UPDATE jobs SET metrics_step = ? WHERE id = ?", (last_step, job_id))
        if kept:
            self._notify()
        return len(kept)

    def events_after(self, job_id: str, cursor: int, limit: int = 1000) -> list[Event]:
        rows = self._query(
            "SELECT * FROM events WHERE job_id = ? AND cursor > ? ORDER BY cursor LIMIT ?",
            (job_id, cursor, limit),
        )
        return [Event(r["job_id"], r["cursor"], r["time"], r["kind"], json.loads(r["payload"])) for r in rows]


def _state_payload(previous: JobState, state: JobState, reason: str) -> dict[str, Any]:
    return {"previous": int(previous), "state": int(state), "reason": reason}
