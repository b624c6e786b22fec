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

from gateway.core.errors import ConfigError
from gateway.store import base
from gateway.store.base import NotificationSource, StoreError
from gateway.store.migrations import (
    EXPECTED_VERSION,
    MIGRATIONS,
    SCHEMA_VERSION_SQLITE,
    newer_message,
)
from gateway.store.sql import UPSERT_DOCUMENT, Dialect, Doc, DocKey, DocUpdate, SQLStore

__all__ = ["DB_FILE_NAME", "SQLiteStore"]

DB_FILE_NAME = "gateway.sqlite3"

_T = TypeVar("_T")

_SQLITE = Dialect(
    param="?",
    true="1",
    false="0",
    active="active = 1",
    tiebreak="rowid",
    for_update="",  # BEGIN IMMEDIATE already holds the write lock
    skip_locked="",
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


class SQLiteStore(SQLStore[sqlite3.Connection]):
    """:class:`~gateway.store.base.Store` on one SQLite file; safe to call from several threads."""

    backend = "sqlite"
    dialect = _SQLITE
    unwritable_detail = "the database file is not writable (locked, read-only or full)"

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

    def _is_duplicate(self, exc: Exception) -> bool:
        return isinstance(exc, StoreError) and isinstance(exc.__cause__, sqlite3.IntegrityError)

    def _executemany(self, c: sqlite3.Connection, sql: str, rows: list[tuple[Any, ...]]) -> None:
        c.executemany(sql, rows)

    def _location(self) -> str:
        return str(self.path)

    # -- documents -------------------------------------------------------------------------

    def _update_doc(self, at: DocKey, fn: DocUpdate, expires: float | None) -> Doc | None:
        kind, owner, key = at

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
            text = base.dump_doc(new)
            c.execute(UPSERT_DOCUMENT, (kind, owner, key, text, now, now, expires, len(text)))
            return new

        return self._tx(tx)

    # -- coordination, health, lifetime ----------------------------------------------------

    @contextlib.contextmanager
    def _always_mine(self) -> Iterator[bool]:
        yield True

    def try_advisory_lock(self, name: str) -> contextlib.AbstractContextManager[bool]:
        return self._always_mine()  # one instance per file (the state-directory lock)

    def open_notifications(self, channels: Sequence[str]) -> NotificationSource | None:
        return None

    def close(self) -> None:
        with self._lock:
            if not self._closed:
                self._closed = True
                self._conn.close()
