"""The embedded store: one SQLite file, one gateway instance.

``state_dir/gateway.sqlite3`` (created 0600 in a 0700 directory), WAL mode,
``busy_timeout``, one connection shared by threads under a lock. Writes that read
first (:meth:`SQLiteStore.update_json`, the run journal, signing keys) run in
``BEGIN IMMEDIATE`` transactions, which take SQLite's write lock up front: they are
atomic against other threads *and* other processes on the same file (``gateway keys
rotate`` while ``gateway run`` serves). Migrations: :mod:`gateway.store.migrations`.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any, TypeVar

from gateway.errors import ConfigError
from gateway.store import base
from gateway.store.base import (
    ArtifactRecord,
    InterruptedRun,
    LeaseLost,
    NotificationSource,
    RunRecord,
    SigningKey,
    Store,
    StoreCheck,
    StoreError,
)
from gateway.store.migrations import (
    EXPECTED_VERSION,
    MIGRATIONS,
    SCHEMA_VERSION_SQLITE,
    newer_message,
)

__all__ = ["DB_FILE_NAME", "SQLiteStore"]

DB_FILE_NAME = "gateway.sqlite3"

_T = TypeVar("_T")

_ARTIFACT_COLUMNS = (
    "id, owner, link_mode, path, filename, device, inode, size, mtime_ns,"
    " created, expires, revoked, content_type, ctime_ns"
)
_RUN_COLUMNS = (
    "id, owner, kind, model, link_mode, status, created, finished_at, summary,"
    " holder, lease_expires, last_seq, stop_requested"
)


def _split_sql(script: str) -> list[str]:
    """Split a script into complete statements (triggers' inner ``;`` included)."""
    statements: list[str] = []
    pending = ""
    for piece in script.split(";"):
        pending += piece + ";"
        if sqlite3.complete_statement(pending):
            statements.append(pending.strip())
            pending = ""
    if pending.strip(" \t\r\n;"):
        raise ValueError("migration script ends with an incomplete statement")
    return statements


def _enter_wal(conn: sqlite3.Connection, timeout: float) -> None:
    """``PRAGMA journal_mode = WAL``, retried for up to ``timeout`` s while the file is busy.

    Switching a new file into WAL needs an exclusive lock, and SQLite answers "database
    is locked" at once, without its busy handler, while another connection holds any
    lock -- e.g. several processes or threads opening a fresh state directory together
    (seen: 4 in 300 rounds of six concurrent openers).
    """
    deadline = time.monotonic() + timeout
    while True:
        try:
            conn.execute("PRAGMA journal_mode = WAL")
            return
        except sqlite3.OperationalError as exc:
            if exc.sqlite_errorcode != sqlite3.SQLITE_BUSY or time.monotonic() >= deadline:
                raise
        time.sleep(0.005)


def artifact_from_row(row: Sequence[Any]) -> ArtifactRecord:
    return ArtifactRecord(
        id=row[0],
        owner=row[1],
        link_mode=row[2],
        path=row[3],
        filename=row[4],
        device=int(row[5]),
        inode=int(row[6]),
        size=int(row[7]),
        mtime_ns=int(row[8]),
        created=float(row[9]),
        expires=None if row[10] is None else float(row[10]),
        revoked=bool(row[11]),
        content_type=row[12],
        ctime_ns=None if row[13] is None else int(row[13]),
    )


def artifact_params(rec: ArtifactRecord) -> tuple[Any, ...]:
    return (
        rec.id,
        rec.owner,
        rec.link_mode,
        rec.path,
        rec.filename,
        str(rec.device),
        str(rec.inode),
        rec.size,
        rec.mtime_ns,
        rec.created,
        rec.expires,
        rec.revoked,
        rec.content_type,
        rec.ctime_ns,
    )


def run_from_row(row: Sequence[Any]) -> RunRecord:
    return RunRecord(
        id=row[0],
        owner=row[1],
        kind=row[2],
        model=row[3],
        link_mode=row[4],
        status=row[5],
        created=float(row[6]),
        finished_at=None if row[7] is None else float(row[7]),
        summary=base.load_doc(row[8]),
        holder=row[9],
        lease_expires=None if row[10] is None else float(row[10]),
        last_seq=int(row[11]),
        stop_requested=None if row[12] is None else float(row[12]),
    )


class SQLiteStore(Store):
    """:class:`~gateway.store.base.Store` on one SQLite file; safe to call from several threads."""

    backend = "sqlite"

    def __init__(
        self, path: Path, *, busy_timeout_ms: int = 5000, migrate: bool | None = None
    ) -> None:
        """Open (creating) the file; ``migrate`` None/True applies missing migrations and
        refuses a newer schema, False opens as is (``gateway db check``)."""
        path = Path(path)
        self.path = path
        self._lock = threading.Lock()
        self._closed = False
        try:
            path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
            # Create the file 0600 ourselves; SQLite gives -wal/-shm the same mode.
            fd = os.open(path, os.O_RDONLY | os.O_CREAT | getattr(os, "O_CLOEXEC", 0), 0o600)
            os.close(fd)
        except OSError as exc:
            raise ConfigError(
                "state_dir", f"cannot create the state database ({exc.strerror})"
            ) from exc
        try:
            self._conn = sqlite3.connect(
                path, check_same_thread=False, isolation_level=None, timeout=busy_timeout_ms / 1000
            )
        except sqlite3.Error as exc:
            raise ConfigError(
                "state_dir", f"cannot open the state database ({type(exc).__name__})"
            ) from exc
        try:
            self._conn.execute(f"PRAGMA busy_timeout = {int(busy_timeout_ms)}")
            _enter_wal(self._conn, busy_timeout_ms / 1000)
            self._conn.execute("PRAGMA synchronous = NORMAL")
            self._conn.execute("PRAGMA foreign_keys = ON")
            if migrate is not False:
                self._migrate()
        except sqlite3.Error as exc:
            self._conn.close()
            raise ConfigError(
                "state_dir",
                f"the state database is unusable ({type(exc).__name__}: {exc}); "
                "check its permissions, or restore it from a backup",
            ) from exc
        except BaseException:
            self._conn.close()
            raise

    # -- migrations ------------------------------------------------------------------------

    def _version_locked(self, conn: sqlite3.Connection) -> int:
        """The schema version, adopting a pre-``schema_version`` file's user_version."""
        has_table = conn.execute(
            "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'schema_version'"
        ).fetchone()
        if has_table is None:
            legacy = int(conn.execute("PRAGMA user_version").fetchone()[0])
            conn.execute(SCHEMA_VERSION_SQLITE)
            now = time.time()
            for m in MIGRATIONS[: min(legacy, len(MIGRATIONS))]:
                conn.execute(
                    "INSERT INTO schema_version (version, description, applied_at)"
                    " VALUES (?, ?, ?)",
                    (m.version, m.description + " (adopted from PRAGMA user_version)", now),
                )
            if legacy > len(MIGRATIONS):
                return legacy
        row = conn.execute("SELECT MAX(version) FROM schema_version").fetchone()
        return int(row[0] or 0)

    def _migrate(self) -> tuple[int, int]:
        conn = self._conn
        before: int | None = None
        for m in MIGRATIONS:
            conn.execute("BEGIN IMMEDIATE")
            try:
                current = self._version_locked(conn)
                if before is None:
                    before = current
                if current > EXPECTED_VERSION:
                    raise ConfigError("state_dir", newer_message(current, "the state database"))
                if current < m.version:
                    for statement in _split_sql(m.sqlite):
                        conn.execute(statement)
                    conn.execute(
                        "INSERT INTO schema_version (version, description, applied_at)"
                        " VALUES (?, ?, ?)",
                        (m.version, m.description, time.time()),
                    )
                    conn.execute(f"PRAGMA user_version = {m.version}")
            except BaseException:
                conn.execute("ROLLBACK")
                raise
            conn.execute("COMMIT")
        after = conn.execute("SELECT MAX(version) FROM schema_version").fetchone()[0]
        return (before or 0), int(after or 0)

    def migrate(self) -> tuple[int, int]:
        try:
            with self._lock:
                return self._migrate()
        except sqlite3.Error as exc:
            raise StoreError(f"the state store failed ({type(exc).__name__})") from exc

    def schema_version(self) -> int:
        def read(c: sqlite3.Connection) -> int:
            has_table = c.execute(
                "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'schema_version'"
            ).fetchone()
            if has_table is None:
                return int(c.execute("PRAGMA user_version").fetchone()[0])
            return int(c.execute("SELECT MAX(version) FROM schema_version").fetchone()[0] or 0)

        return self._run(read)

    # -- plumbing --------------------------------------------------------------------------

    def _run(self, fn: Callable[[sqlite3.Connection], _T]) -> _T:
        """Run ``fn`` under the lock, translating SQLite failures into StoreError."""
        try:
            with self._lock:
                return fn(self._conn)
        except sqlite3.Error as exc:
            raise StoreError(f"the state store failed ({type(exc).__name__})") from exc

    def _tx(self, fn: Callable[[sqlite3.Connection], _T]) -> _T:
        """``fn`` in one ``BEGIN IMMEDIATE`` transaction (rolled back on any exception)."""

        def wrapped(c: sqlite3.Connection) -> _T:
            c.execute("BEGIN IMMEDIATE")
            try:
                result = fn(c)
            except BaseException:
                c.execute("ROLLBACK")
                raise
            c.execute("COMMIT")
            return result

        return self._run(wrapped)

    # -- artifacts -------------------------------------------------------------------------

    def create_artifact(self, rec: ArtifactRecord) -> None:
        base.check_artifact(rec)
        params = artifact_params(rec)
        try:
            self._run(
                lambda c: c.execute(
                    f"INSERT INTO artifacts ({_ARTIFACT_COLUMNS})"
                    " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                    params,
                )
            )
        except StoreError as exc:
            if isinstance(exc.__cause__, sqlite3.IntegrityError):
                raise ValueError("an artifact with this id already exists") from None
            raise

    def get_artifact(self, artifact_id: str) -> ArtifactRecord | None:
        row = self._run(
            lambda c: c.execute(
                f"SELECT {_ARTIFACT_COLUMNS} FROM artifacts WHERE id = ?", (artifact_id,)
            ).fetchone()
        )
        return None if row is None else artifact_from_row(row)

    def list_artifacts(self, owner: str, *, limit: int = 100) -> list[ArtifactRecord]:
        base.check_limit(limit)
        rows = self._run(
            lambda c: c.execute(
                f"SELECT {_ARTIFACT_COLUMNS} FROM artifacts WHERE owner = ?"
                " ORDER BY created DESC, rowid DESC LIMIT ?",
                (owner, limit),
            ).fetchall()
        )
        return [artifact_from_row(row) for row in rows]

    def revoke_artifact(self, artifact_id: str, owner: str) -> bool:
        count = self._run(
            lambda c: (
                c.execute(
                    "UPDATE artifacts SET revoked = 1 WHERE id = ? AND owner = ?",
                    (artifact_id, owner),
                ).rowcount
            )
        )
        return count == 1

    # -- documents -------------------------------------------------------------------------

    def put_json(
        self,
        kind: str,
        owner: str,
        key: str,
        value: dict[str, Any],
        *,
        expires: float | None = None,
    ) -> None:
        text = base.dump_doc(value)
        now = time.time()
        self._run(
            lambda c: c.execute(
                "INSERT INTO documents (kind, owner, key, value, created, updated, expires)"
                " VALUES (?, ?, ?, ?, ?, ?, ?)"
                " ON CONFLICT (kind, owner, key) DO UPDATE SET"
                " value = excluded.value, updated = excluded.updated,"
                " expires = excluded.expires",
                (kind, owner, key, text, now, now, expires),
            )
        )

    def get_json(self, kind: str, owner: str, key: str) -> dict[str, Any] | None:
        now = time.time()
        row = self._run(
            lambda c: c.execute(
                "SELECT value FROM documents WHERE kind = ? AND owner = ? AND key = ?"
                " AND (expires IS NULL OR expires > ?)",
                (kind, owner, key, now),
            ).fetchone()
        )
        return None if row is None else base.load_doc(row[0])

    def update_json(
        self,
        kind: str,
        owner: str,
        key: str,
        fn: Callable[[dict[str, Any] | None], dict[str, Any] | None],
        *,
        expires: float | None = None,
    ) -> dict[str, Any] | None:
        def tx(c: sqlite3.Connection) -> dict[str, Any] | None:
            now = time.time()
            row = c.execute(
                "SELECT value FROM documents WHERE kind = ? AND owner = ? AND key = ?"
                " AND (expires IS NULL OR expires > ?)",
                (kind, owner, key, now),
            ).fetchone()
            current = None if row is None else base.load_doc(row[0])
            new = fn(current)
            if new is None:
                return current
            c.execute(
                "INSERT INTO documents (kind, owner, key, value, created, updated, expires)"
                " VALUES (?, ?, ?, ?, ?, ?, ?)"
                " ON CONFLICT (kind, owner, key) DO UPDATE SET"
                " value = excluded.value, updated = excluded.updated,"
                " expires = excluded.expires",
                (kind, owner, key, base.dump_doc(new), now, now, expires),
            )
            return new

        return self._tx(tx)

    def list_json(
        self, kind: str, owner: str, *, limit: int = 100
    ) -> list[tuple[str, dict[str, Any]]]:
        base.check_limit(limit)
        now = time.time()
        rows = self._run(
            lambda c: c.execute(
                "SELECT key, value FROM documents WHERE kind = ? AND owner = ?"
                " AND (expires IS NULL OR expires > ?)"
                " ORDER BY updated DESC, rowid DESC LIMIT ?",
                (kind, owner, now, limit),
            ).fetchall()
        )
        return [(key, base.load_doc(text)) for key, text in rows]

    def delete_json(self, kind: str, owner: str, key: str) -> bool:
        count = self._run(
            lambda c: (
                c.execute(
                    "DELETE FROM documents WHERE kind = ? AND owner = ? AND key = ?",
                    (kind, owner, key),
                ).rowcount
            )
        )
        return count == 1

    def purge_expired(self, now: float | None = None) -> int:
        at = time.time() if now is None else now
        return self._run(
            lambda c: (
                c.execute(
                    "DELETE FROM documents WHERE expires IS NOT NULL AND expires <= ?", (at,)
                ).rowcount
            )
        )

    # -- signing keys ----------------------------------------------------------------------

    def init_signing(self, keys: Sequence[SigningKey], principal_salt: bytes) -> bool:
        base.check_signing_seed(keys, principal_salt)

        def tx(c: sqlite3.Connection) -> bool:
            had = (
                c.execute("SELECT 1 FROM signing_keys LIMIT 1").fetchone()
                or c.execute("SELECT 1 FROM settings WHERE name = 'principal_salt'").fetchone()
            )
            if had:
                return False
            c.execute(
                "INSERT INTO settings (name, value) VALUES ('principal_salt', ?)",
                (base.b64e(principal_salt),),
            )
            c.executemany(
                "INSERT INTO signing_keys (kid, secret, created, active) VALUES (?, ?, ?, ?)",
                [(k.kid, base.b64e(k.secret), k.created, int(k.active)) for k in keys],
            )
            return True

        return self._tx(tx)

    def principal_salt(self) -> bytes | None:
        row = self._run(
            lambda c: c.execute(
                "SELECT value FROM settings WHERE name = 'principal_salt'"
            ).fetchone()
        )
        return None if row is None else base.b64d(row[0])

    def list_signing_keys(self) -> list[SigningKey]:
        rows = self._run(
            lambda c: c.execute(
                "SELECT kid, secret, created, active FROM signing_keys ORDER BY rowid"
            ).fetchall()
        )
        return [SigningKey(r[0], base.b64d(r[1]), int(r[2]), bool(r[3])) for r in rows]

    def get_signing_key(self, kid: str) -> bytes | None:
        row = self._run(
            lambda c: c.execute("SELECT secret FROM signing_keys WHERE kid = ?", (kid,)).fetchone()
        )
        return None if row is None else base.b64d(row[0])

    def active_signing_key(self) -> SigningKey | None:
        row = self._run(
            lambda c: c.execute(
                "SELECT kid, secret, created, active FROM signing_keys WHERE active = 1"
            ).fetchone()
        )
        return None if row is None else SigningKey(row[0], base.b64d(row[1]), int(row[2]), True)

    def add_signing_key(self, key: SigningKey) -> None:
        def tx(c: sqlite3.Connection) -> None:
            if c.execute("SELECT 1 FROM signing_keys WHERE kid = ?", (key.kid,)).fetchone():
                raise ValueError("a key with this kid exists")
            c.execute("UPDATE signing_keys SET active = 0 WHERE active = 1")
            c.execute(
                "INSERT INTO signing_keys (kid, secret, created, active) VALUES (?, ?, ?, 1)",
                (key.kid, base.b64e(key.secret), key.created),
            )

        self._tx(tx)

    def retire_signing_key(self, kid: str) -> None:
        def tx(c: sqlite3.Connection) -> None:
            row = c.execute("SELECT active FROM signing_keys WHERE kid = ?", (kid,)).fetchone()
            if row is None:
                raise ValueError("unknown kid")
            if row[0]:
                raise ValueError("cannot retire the active key; rotate first")
            c.execute("DELETE FROM signing_keys WHERE kid = ?", (kid,))

        self._tx(tx)

    # -- run journal -----------------------------------------------------------------------

    def create_run(self, rec: RunRecord) -> None:
        base.check_run(rec)
        params = (
            rec.id,
            rec.owner,
            rec.kind,
            rec.model,
            rec.link_mode,
            rec.status,
            rec.created,
            rec.finished_at,
            base.dump_doc(rec.summary),
            rec.holder,
            rec.lease_expires,
            0,
            rec.stop_requested,
        )
        try:
            self._run(
                lambda c: c.execute(
                    f"INSERT INTO runs ({_RUN_COLUMNS}) VALUES"
                    " (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                    params,
                )
            )
        except StoreError as exc:
            if isinstance(exc.__cause__, sqlite3.IntegrityError):
                raise ValueError("a run with this id already exists") from None
            raise

    def get_run(self, run_id: str, owner: str) -> RunRecord | None:
        row = self._run(
            lambda c: c.execute(
                f"SELECT {_RUN_COLUMNS} FROM runs WHERE id = ? AND owner = ?", (run_id, owner)
            ).fetchone()
        )
        return None if row is None else run_from_row(row)

    @staticmethod
    def _held(c: sqlite3.Connection, run_id: str, holder: str) -> int:
        """``last_seq`` of the run if ``holder`` holds it unfinished, else LeaseLost."""
        row = c.execute(
            "SELECT last_seq FROM runs WHERE id = ? AND holder = ? AND finished_at IS NULL",
            (run_id, holder),
        ).fetchone()
        if row is None:
            raise LeaseLost("This instance no longer holds the run's lease.")
        return int(row[0])

    @staticmethod
    def _insert_events(
        c: sqlite3.Connection, run_id: str, encoded: list[tuple[int, str]], now: float
    ) -> None:
        c.executemany(
            "INSERT INTO run_events (run_id, seq, event, created) VALUES (?, ?, ?, ?)",
            [(run_id, seq, text, now) for seq, text in encoded],
        )

    def update_run(
        self,
        run_id: str,
        holder: str,
        *,
        status: str | None = None,
        summary: dict[str, Any] | None = None,
    ) -> None:
        base.check_update_status(status)
        text = None if summary is None else base.dump_doc(summary)

        def tx(c: sqlite3.Connection) -> None:
            self._held(c, run_id, holder)
            c.execute(
                "UPDATE runs SET status = COALESCE(?, status), summary = COALESCE(?, summary)"
                " WHERE id = ?",
                (status, text, run_id),
            )

        self._tx(tx)

    def append_run_events(self, run_id: str, events: Sequence[dict[str, Any]], holder: str) -> None:
        def tx(c: sqlite3.Connection) -> None:
            last = self._held(c, run_id, holder)
            encoded = base.encode_events(events, last)
            if not encoded:
                return
            self._insert_events(c, run_id, encoded, time.time())
            c.execute("UPDATE runs SET last_seq = ? WHERE id = ?", (encoded[-1][0], run_id))

        self._tx(tx)

    def read_run_events(
        self, run_id: str, after_seq: int, limit: int = 1000
    ) -> list[dict[str, Any]]:
        base.check_limit(limit)
        rows = self._run(
            lambda c: c.execute(
                "SELECT event FROM run_events WHERE run_id = ? AND seq > ? ORDER BY seq LIMIT ?",
                (run_id, after_seq, limit),
            ).fetchall()
        )
        return [base.load_doc(r[0]) for r in rows]

    def finish_run(
        self,
        run_id: str,
        status: str,
        summary: dict[str, Any],
        holder: str,
        events: Sequence[dict[str, Any]] = (),
    ) -> None:
        base.check_finish_status(status)
        text = base.dump_doc(summary)

        def tx(c: sqlite3.Connection) -> None:
            last = self._held(c, run_id, holder)
            encoded = base.encode_events(events, last)
            now = time.time()
            self._insert_events(c, run_id, encoded, now)
            c.execute(
                "UPDATE runs SET status = ?, summary = ?, finished_at = ?, holder = NULL,"
                " lease_expires = NULL, last_seq = ? WHERE id = ?",
                (status, text, now, encoded[-1][0] if encoded else last, run_id),
            )

        self._tx(tx)

    def renew_run_lease(self, run_id: str, holder: str, until: float) -> bool:
        count = self._run(
            lambda c: (
                c.execute(
                    "UPDATE runs SET lease_expires = ?"
                    " WHERE id = ? AND holder = ? AND finished_at IS NULL",
                    (until, run_id, holder),
                ).rowcount
            )
        )
        return count == 1

    def request_run_stop(self, run_id: str, owner: str) -> bool:
        count = self._run(
            lambda c: (
                c.execute(
                    "UPDATE runs SET stop_requested = COALESCE(stop_requested, ?)"
                    " WHERE id = ? AND owner = ? AND finished_at IS NULL",
                    (time.time(), run_id, owner),
                ).rowcount
            )
        )
        return count == 1

    def run_stop_requested(self, run_id: str) -> bool:
        row = self._run(
            lambda c: c.execute(
                "SELECT stop_requested IS NOT NULL FROM runs WHERE id = ?", (run_id,)
            ).fetchone()
        )
        return bool(row and row[0])

    def interrupt_expired_runs(self, now: float) -> list[InterruptedRun]:
        def tx(c: sqlite3.Connection) -> list[InterruptedRun]:
            rows = c.execute(
                "SELECT id, owner, last_seq FROM runs"
                " WHERE finished_at IS NULL AND lease_expires IS NOT NULL AND lease_expires < ?"
                " ORDER BY lease_expires LIMIT 500",
                (now,),
            ).fetchall()
            done: list[InterruptedRun] = []
            for run_id, owner, last in rows:
                seq = int(last) + 1
                event = base.interrupted_event(run_id, seq)
                self._insert_events(c, run_id, [(seq, base.dump_doc(event))], now)
                c.execute(
                    "UPDATE runs SET status = 'interrupted', finished_at = ?, holder = NULL,"
                    " lease_expires = NULL, last_seq = ? WHERE id = ?",
                    (now, seq, run_id),
                )
                done.append(InterruptedRun(run_id, owner, seq))
            return done

        return self._tx(tx)

    def purge_runs(self, finished_before: float) -> int:
        return self._run(
            lambda c: (
                c.execute(
                    "DELETE FROM runs WHERE finished_at IS NOT NULL AND finished_at < ?",
                    (finished_before,),
                ).rowcount
            )
        )

    # -- coordination, health, lifetime ----------------------------------------------------

    @contextlib.contextmanager
    def _always_mine(self) -> Iterator[bool]:
        yield True

    def try_advisory_lock(self, name: str) -> contextlib.AbstractContextManager[bool]:
        return self._always_mine()  # one instance per file (the state-directory lock)

    def open_notifications(self, channels: Sequence[str]) -> NotificationSource | None:
        return None

    def check_writable(self) -> bool:
        try:
            self._run(
                lambda c: c.execute(
                    "INSERT INTO heartbeat (id, at) VALUES (1, ?)"
                    " ON CONFLICT (id) DO UPDATE SET at = excluded.at",
                    (time.time(),),
                )
            )
        except StoreError:
            return False
        return True

    def check(self) -> StoreCheck:
        t0 = time.perf_counter()
        try:
            version: int | None = self.schema_version()
            reachable, detail = True, ""
        except StoreError as exc:
            version, reachable, detail = None, False, exc.message
        latency = (time.perf_counter() - t0) * 1000 if reachable else None
        writable = reachable and self.check_writable()
        if reachable and not writable:
            detail = "the database file is not writable (locked, read-only or full)"
        return StoreCheck(
            "sqlite",
            str(self.path),
            version,
            EXPECTED_VERSION,
            reachable,
            writable,
            latency,
            detail,
        )

    def close(self) -> None:
        with self._lock:
            if not self._closed:
                self._closed = True
                self._conn.close()
