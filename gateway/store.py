"""The gateway's state store, behind one small interface.

Contract (:class:`Store`)
-------------------------
* Artifacts: :meth:`~Store.create_artifact`, :meth:`~Store.get_artifact` (by id, any
  owner -- the download route needs it and checks the owner itself),
  :meth:`~Store.list_artifacts` and :meth:`~Store.revoke_artifact` (both scoped by
  owner; revoking another owner's or an unknown id returns False, which callers turn
  into 404). Listing returns revoked and expired records too, newest first; callers
  decide what to show. ``path`` is a resolved host path and never leaves the gateway.
* Small JSON documents for later features (sessions, stored responses, runs):
  ``put_json / get_json / list_json / delete_json`` keyed by ``(kind, owner, key)``;
  every read is scoped by owner. A document may carry an absolute ``expires`` (unix
  seconds): once ``expires <= now`` it reads as absent and :meth:`~Store.purge_expired`
  deletes it. Artifacts are never purged (an expired or revoked link must still answer
  410, not 404).
* :meth:`~Store.check_writable` performs a real write and answers False instead of
  raising; :meth:`~Store.close` is idempotent.
* Methods are blocking and thread-safe: the trio layer calls them through
  ``trio.to_thread.run_sync``. Any other backend failure raises :class:`StoreError`
  (status 503) whose message names no path.

SQLite (:class:`SQLiteStore`, the embedded default)
---------------------------------------------------
One file, ``state_dir/gateway.sqlite3`` (created 0600 in a 0700 directory), WAL mode,
``busy_timeout``, one connection shared by threads under a lock. Schema changes are
:data:`MIGRATIONS`, a list of SQL scripts applied in order and recorded in
``PRAGMA user_version``; each runs in its own ``BEGIN IMMEDIATE`` transaction that
re-reads the version, so concurrent openers apply it once. A later feature adds its
tables by appending a script, never by editing an applied one.

Planned PostgreSQL swap (DESIGN.md, "Scaling out")
--------------------------------------------------
A ``PostgresStore`` implements the same :class:`Store` protocol over a connection pool
(same tables; ``user_version`` becomes a one-row ``schema_version`` table; the JSON
``value`` column becomes ``jsonb``), and ``open_store`` picks it from configuration.
Callers only ever see :class:`Store`, :class:`ArtifactRecord` and :class:`StoreError`.
"""

from __future__ import annotations

import json
import os
import sqlite3
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol, TypeVar

from gateway.errors import ConfigError, GatewayError

__all__ = [
    "DB_FILE_NAME",
    "MIGRATIONS",
    "ArtifactRecord",
    "SQLiteStore",
    "Store",
    "StoreError",
    "open_store",
]

DB_FILE_NAME = "gateway.sqlite3"
LINK_MODES = frozenset({"private", "public"})

_T = TypeVar("_T")


class StoreError(GatewayError):
    """The state store failed (disk, lock, corruption); retry later."""

    code = "store_unavailable"
    status = 503


@dataclass(frozen=True, slots=True)
class ArtifactRecord:
    """One minted link: who owns it and the identity of the file it points at."""

    id: str
    owner: str
    link_mode: str  # "private" | "public"
    path: str  # resolved absolute host path -- never sent to clients
    filename: str
    device: int
    inode: int
    size: int
    mtime_ns: int
    created: float
    expires: float | None
    revoked: bool = False
    content_type: str = "application/octet-stream"


class Store(Protocol):
    """The state store interface; see the module docstring for the contract."""

    def create_artifact(self, rec: ArtifactRecord) -> None:
        """Insert a new record (its id must be new)."""
        ...

    def get_artifact(self, artifact_id: str) -> ArtifactRecord | None:
        """The record with this id, whoever owns it, or None."""
        ...

    def list_artifacts(self, owner: str, *, limit: int = 100) -> list[ArtifactRecord]:
        """The owner's records, newest first."""
        ...

    def revoke_artifact(self, artifact_id: str, owner: str) -> bool:
        """Revoke the owner's record; False if unknown or someone else's."""
        ...

    def put_json(
        self,
        kind: str,
        owner: str,
        key: str,
        value: dict[str, Any],
        *,
        expires: float | None = None,
    ) -> None:
        """Insert or replace the document at (kind, owner, key)."""
        ...

    def get_json(self, kind: str, owner: str, key: str) -> dict[str, Any] | None:
        """The document, or None if absent or expired."""
        ...

    def list_json(
        self, kind: str, owner: str, *, limit: int = 100
    ) -> list[tuple[str, dict[str, Any]]]:
        """The owner's unexpired ``(key, document)`` pairs of this kind, newest write first."""
        ...

    def delete_json(self, kind: str, owner: str, key: str) -> bool:
        """Delete the document; False if there was none."""
        ...

    def purge_expired(self, now: float | None = None) -> int:
        """Delete expired documents; return how many."""
        ...

    def check_writable(self) -> bool:
        """Perform a real write; False (never an exception) if it fails."""
        ...

    def close(self) -> None:
        """Release the backend; idempotent."""
        ...


#: Schema scripts, applied in order; ``PRAGMA user_version`` counts the applied ones.
#: Append only.
MIGRATIONS: Sequence[str] = (
    # 1: artifacts, generic JSON documents, health heartbeat.
    """
    CREATE TABLE artifacts (
        id           TEXT PRIMARY KEY,
        owner        TEXT NOT NULL,
        link_mode    TEXT NOT NULL CHECK (link_mode IN ('private', 'public')),
        path         TEXT NOT NULL,
        filename     TEXT NOT NULL,
        device       TEXT NOT NULL,  -- decimal: st_dev/st_ino may exceed int64
        inode        TEXT NOT NULL,
        size         INTEGER NOT NULL,
        mtime_ns     INTEGER NOT NULL,
        created      REAL NOT NULL,
        expires      REAL,
        revoked      INTEGER NOT NULL DEFAULT 0,
        content_type TEXT NOT NULL
    );
    CREATE INDEX artifacts_owner_created ON artifacts (owner, created);

    CREATE TABLE documents (
        kind    TEXT NOT NULL,
        owner   TEXT NOT NULL,
        key     TEXT NOT NULL,
        value   TEXT NOT NULL,
        created REAL NOT NULL,
        updated REAL NOT NULL,
        expires REAL,
        UNIQUE (kind, owner, key)
    );
    CREATE INDEX documents_owner_updated ON documents (kind, owner, updated);
    CREATE INDEX documents_expires ON documents (expires) WHERE expires IS NOT NULL;

    CREATE TABLE heartbeat (
        id INTEGER PRIMARY KEY CHECK (id = 1),
        at REAL NOT NULL
    );
    """,
)

_ARTIFACT_COLUMNS = (
    "id, owner, link_mode, path, filename, device, inode, size, mtime_ns,"
    " created, expires, revoked, content_type"
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


def _record(row: Sequence[Any]) -> ArtifactRecord:
    return ArtifactRecord(
        id=row[0],
        owner=row[1],
        link_mode=row[2],
        path=row[3],
        filename=row[4],
        device=int(row[5]),
        inode=int(row[6]),
        size=row[7],
        mtime_ns=row[8],
        created=row[9],
        expires=row[10],
        revoked=bool(row[11]),
        content_type=row[12],
    )


def _check_limit(limit: int) -> None:
    if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
        raise ValueError("limit is a positive int")


def _load_doc(text: str) -> dict[str, Any]:
    value = json.loads(text)
    if not isinstance(value, dict):
        raise StoreError("the state store holds a malformed document")
    return value


class SQLiteStore(Store):
    """:class:`Store` on one SQLite file; safe to call from several threads."""

    def __init__(self, path: Path, *, busy_timeout_ms: int = 5000) -> None:
        path = Path(path)
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
            self._conn.execute("PRAGMA journal_mode = WAL")
            self._conn.execute("PRAGMA synchronous = NORMAL")
            self._conn.execute("PRAGMA foreign_keys = ON")
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

    def _migrate(self) -> None:
        conn = self._conn
        for version, script in enumerate(MIGRATIONS, start=1):
            conn.execute("BEGIN IMMEDIATE")
            try:
                current = conn.execute("PRAGMA user_version").fetchone()[0]
                if current > len(MIGRATIONS):
                    raise ConfigError(
                        "state_dir",
                        f"the state database has schema version {current}, newer than "
                        f"this gateway's {len(MIGRATIONS)}; upgrade the gateway",
                    )
                if current < version:
                    for statement in _split_sql(script):
                        conn.execute(statement)
                    conn.execute(f"PRAGMA user_version = {version}")
            except BaseException:
                conn.execute("ROLLBACK")
                raise
            conn.execute("COMMIT")

    @property
    def schema_version(self) -> int:
        """The applied ``PRAGMA user_version``."""
        return self._run(lambda c: int(c.execute("PRAGMA user_version").fetchone()[0]))

    def _run(self, fn: Callable[[sqlite3.Connection], _T]) -> _T:
        """Run ``fn`` under the lock, translating SQLite failures into StoreError."""
        try:
            with self._lock:
                return fn(self._conn)
        except sqlite3.Error as exc:
            raise StoreError(f"the state store failed ({type(exc).__name__})") from exc

    # -- artifacts ---------------------------------------------------------------------

    def create_artifact(self, rec: ArtifactRecord) -> None:
        if rec.link_mode not in LINK_MODES:
            raise ValueError("link_mode is 'private' or 'public'")
        params = (
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
            int(rec.revoked),
            rec.content_type,
        )
        try:
            self._run(
                lambda c: c.execute(
                    f"INSERT INTO artifacts ({_ARTIFACT_COLUMNS})"
                    " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
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
        return None if row is None else _record(row)

    def list_artifacts(self, owner: str, *, limit: int = 100) -> list[ArtifactRecord]:
        _check_limit(limit)
        rows = self._run(
            lambda c: c.execute(
                f"SELECT {_ARTIFACT_COLUMNS} FROM artifacts WHERE owner = ?"
                " ORDER BY created DESC, rowid DESC LIMIT ?",
                (owner, limit),
            ).fetchall()
        )
        return [_record(row) for row in rows]

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

    # -- JSON documents ----------------------------------------------------------------

    def put_json(
        self,
        kind: str,
        owner: str,
        key: str,
        value: dict[str, Any],
        *,
        expires: float | None = None,
    ) -> None:
        if not isinstance(value, dict):
            raise TypeError("value is a dict")
        text = json.dumps(value, separators=(",", ":"), allow_nan=False)
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
        return None if row is None else _load_doc(row[0])

    def list_json(
        self, kind: str, owner: str, *, limit: int = 100
    ) -> list[tuple[str, dict[str, Any]]]:
        _check_limit(limit)
        now = time.time()
        rows = self._run(
            lambda c: c.execute(
                "SELECT key, value FROM documents WHERE kind = ? AND owner = ?"
                " AND (expires IS NULL OR expires > ?)"
                " ORDER BY updated DESC, rowid DESC LIMIT ?",
                (kind, owner, now, limit),
            ).fetchall()
        )
        return [(key, _load_doc(text)) for key, text in rows]

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

    # -- health and lifetime -----------------------------------------------------------

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

    def close(self) -> None:
        with self._lock:
            if not self._closed:
                self._closed = True
                self._conn.close()


def open_store(state_dir: Path) -> SQLiteStore:
    """The embedded store: ``state_dir/gateway.sqlite3``."""
    return SQLiteStore(Path(state_dir) / DB_FILE_NAME)
