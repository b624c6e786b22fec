"""What the SQLite and PostgreSQL stores share: the SQL, written once, and the row codecs.

:class:`SQLStore` implements every :class:`~gateway.store.base.Store` method whose SQL
is the same on both backends. Its statements use ``?`` placeholders and a few
``{word}`` slots that a :class:`Dialect` fills in (PostgreSQL's ``%s``, boolean
literals, the insertion-order tie-breaker, row locks); a backend subclass supplies
only what really differs:

* :meth:`SQLStore._run` / :meth:`SQLStore._tx` -- how a statement, or a transaction,
  meets a connection, and how the driver's failures become
  :class:`~gateway.store.base.StoreError`;
* :meth:`SQLStore._is_duplicate`, :meth:`SQLStore._executemany`, and the hooks
  :meth:`SQLStore._lock_signing_keys` and :meth:`SQLStore._notify` (no-ops here);
* the methods whose SQL differs (``update_json``; PostgreSQL's ``append_run_events``),
  migrations, coordination, notifications, ``close``.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Sequence
from typing import Any, Generic, Protocol, TypeVar

from gateway.store import base
from gateway.store.base import (
    ArtifactRecord,
    InterruptedRun,
    LeaseLost,
    RunRecord,
    SigningKey,
    Store,
    StoreCheck,
    StoreError,
)
from gateway.store.migrations import EXPECTED_VERSION

__all__ = [
    "ARTIFACT_COLUMNS",
    "RUN_COLUMNS",
    "Dialect",
    "Doc",
    "DocKey",
    "DocUpdate",
    "SQLStore",
    "artifact_from_row",
    "artifact_params",
    "run_from_row",
]

ARTIFACT_COLUMNS = (
    "id, owner, link_mode, path, filename, device, inode, size, mtime_ns,"
    " created, expires, revoked, content_type, ctime_ns"
)
RUN_COLUMNS = (
    "id, owner, kind, model, link_mode, status, created, finished_at, summary,"
    " holder, lease_expires, last_seq, stop_requested"
)
#: insert or replace a document (both backends' upsert)
#: (kind, owner, key, value, created, updated, expires, value_bytes)
UPSERT_DOCUMENT = (
    "INSERT INTO documents (kind, owner, key, value, created, updated, expires, value_bytes)"
    " VALUES (?, ?, ?, ?, ?, ?, ?, ?)"
    " ON CONFLICT (kind, owner, key) DO UPDATE SET value = excluded.value,"
    " updated = excluded.updated, expires = excluded.expires, value_bytes = excluded.value_bytes"
)
_LEASE_LOST = "This instance no longer holds the run's lease."


class Cursor(Protocol):
    """What the shared code reads from a DB-API cursor (sqlite3's and psycopg's)."""

    @property
    def rowcount(self) -> int: ...

    def fetchone(self) -> Any: ...

    def fetchall(self) -> list[Any]: ...


class Connection(Protocol):
    """``execute(sql, params)`` -- ``sqlite3.Connection`` and ``psycopg.Connection`` alike."""

    def execute(self, sql: str, params: Any = ..., /) -> Cursor: ...


C = TypeVar("C", bound=Connection)
T = TypeVar("T")
#: a document, its ``(kind, owner, key)`` and :meth:`Store.update_json`'s function
Doc = dict[str, Any]
DocKey = tuple[str, str, str]
DocUpdate = Callable[[Doc | None], Doc | None]


class Dialect:
    """How one backend spells the shared statements.

    :meth:`sql` fills the ``{word}`` slots and turns ``?`` into the driver's placeholder
    (the statements hold no ``?``, ``%``, ``{`` or ``}`` of their own), once per text.
    """

    __slots__ = ("_cache", "_param", "_words")

    def __init__(
        self,
        *,
        param: str,
        true: str,
        false: str,
        active: str,
        tiebreak: str,
        for_update: str,
        skip_locked: str,
    ) -> None:
        self._param = param
        self._words = {
            "true": true,  # boolean literals
            "false": false,
            "active": active,  # the predicate "this signing key is the active one"
            "tiebreak": tiebreak,  # insertion order among equal timestamps
            "for_update": for_update,  # lock the row read (appended to a SELECT)
            "skip_locked": skip_locked,  # the same, skipping rows another sweep holds
        }
        self._cache: dict[str, str] = {}

    def sql(self, text: str) -> str:
        try:
            return self._cache[text]
        except KeyError:
            done = self._cache[text] = text.format_map(self._words).replace("?", self._param)
            return done


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


def _identity_params(rec: ArtifactRecord) -> tuple[Any, ...]:
    """The parameters of :meth:`SQLStore.save_artifacts`' identity update."""
    return (
        rec.path,
        rec.filename,
        str(rec.device),
        str(rec.inode),
        rec.size,
        rec.mtime_ns,
        rec.content_type,
        rec.ctime_ns,
        rec.id,
        rec.owner,
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


def run_params(rec: RunRecord) -> tuple[Any, ...]:
    return (
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


def _execute(c: Connection, sql: str, params: Sequence[Any] | None) -> Cursor:
    """``c.execute``, with no parameters at all when there are none (as the drivers like)."""
    return c.execute(sql) if params is None else c.execute(sql, params)


def _event_bytes(encoded: list[tuple[int, str]]) -> int:
    """What journaled events weigh (their JSON is ASCII: characters are bytes)."""
    return sum(len(text) for _, text in encoded)


def _placeholders(n: int) -> str:
    return "(" + ", ".join("?" * n) + ")"


class SQLStore(Store, Generic[C]):
    """The shared half of a SQL store; subclasses set :attr:`dialect` and the plumbing."""

    dialect: Dialect
    #: whether :meth:`_notify` sends something (then a stop request is a transaction)
    notifies = False
    #: :meth:`check`'s detail when the test write fails
    unwritable_detail = "the database refuses the test write"

    # -- plumbing (the backends') ----------------------------------------------------------

    def _run(self, fn: Callable[[C], T]) -> T:
        """``fn(conn)``, its driver failures raised as StoreError."""
        raise NotImplementedError

    def _tx(self, fn: Callable[[C], T]) -> T:
        """``fn(conn)`` in one transaction (rolled back on any exception), as :meth:`_run`."""
        raise NotImplementedError

    def _is_duplicate(self, exc: Exception) -> bool:
        """Whether ``exc`` (raised by :meth:`_run`) is a unique violation."""
        raise NotImplementedError

    def _executemany(self, c: C, sql: str, rows: list[tuple[Any, ...]]) -> None:
        raise NotImplementedError

    def _location(self) -> str:
        raise NotImplementedError

    def _lock_signing_keys(self, c: C) -> None:
        """First statement of a signing-key transaction (SQLite's BEGIN IMMEDIATE suffices)."""

    def _notify(self, c: C, run_id: str, what: int | str) -> None:
        """Tell listening instances about run ``run_id`` (a seq, or "stop"); no-op here."""

    def _lock_owner(self, c: C, owner: str) -> None:
        """Serialize the owner's run admissions until the transaction ends (SQLite's
        BEGIN IMMEDIATE already serializes every write transaction)."""

    def _execute(self, sql: str, params: Sequence[Any]) -> None:
        q = self.dialect.sql(sql)
        self._run(lambda c: c.execute(q, params))

    def _count(self, sql: str, params: Sequence[Any]) -> int:
        q = self.dialect.sql(sql)
        return self._run(lambda c: c.execute(q, params).rowcount)

    def _one(self, sql: str, params: Sequence[Any] | None = None) -> Any:
        q = self.dialect.sql(sql)
        return self._run(lambda c: _execute(c, q, params).fetchone())

    def _all(self, sql: str, params: Sequence[Any] | None = None) -> list[Any]:
        q = self.dialect.sql(sql)
        return self._run(lambda c: _execute(c, q, params).fetchall())

    def _insert_new(self, table: str, columns: str, params: tuple[Any, ...], what: str) -> None:
        sql = f"INSERT INTO {table} ({columns}) VALUES {_placeholders(len(params))}"
        try:
            self._execute(sql, params)
        except Exception as exc:
            if self._is_duplicate(exc):
                raise ValueError(f"{what} with this id already exists") from None
            raise

    # -- artifacts -------------------------------------------------------------------------

    def create_artifact(self, rec: ArtifactRecord) -> None:
        base.check_artifact(rec)
        self._insert_new("artifacts", ARTIFACT_COLUMNS, artifact_params(rec), "an artifact")

    def create_artifacts(self, recs: Sequence[ArtifactRecord]) -> None:
        self.save_artifacts(recs, ())

    def save_artifacts(
        self, new: Sequence[ArtifactRecord], rebound: Sequence[ArtifactRecord]
    ) -> None:
        for rec in (*new, *rebound):
            base.check_artifact(rec)
        if not new and not rebound:
            return
        insert = self.dialect.sql(
            f"INSERT INTO artifacts ({ARTIFACT_COLUMNS})"
            f" VALUES {_placeholders(len(ARTIFACT_COLUMNS.split(',')))}"
        )
        update = self.dialect.sql(
            "UPDATE artifacts SET path = ?, filename = ?, device = ?, inode = ?, size = ?,"
            " mtime_ns = ?, content_type = ?, ctime_ns = ? WHERE id = ? AND owner = ?"
        )
        rows = [artifact_params(rec) for rec in new]
        changes = [_identity_params(rec) for rec in rebound]

        def write(c: Any) -> None:
            if rows:
                self._executemany(c, insert, rows)
            if changes:
                self._executemany(c, update, changes)

        try:
            self._tx(write)
        except Exception as exc:
            if self._is_duplicate(exc):
                raise ValueError("an artifact with one of these ids already exists") from None
            raise

    def get_artifact(self, artifact_id: str) -> ArtifactRecord | None:
        row = self._one(f"SELECT {ARTIFACT_COLUMNS} FROM artifacts WHERE id = ?", (artifact_id,))
        return None if row is None else artifact_from_row(row)

    def list_artifacts(self, owner: str, *, limit: int = 100) -> list[ArtifactRecord]:
        base.check_limit(limit)
        rows = self._all(
            f"SELECT {ARTIFACT_COLUMNS} FROM artifacts WHERE owner = ?"
            " ORDER BY created DESC, {tiebreak} DESC LIMIT ?",
            (owner, limit),
        )
        return [artifact_from_row(row) for row in rows]

    def revoke_artifact(self, artifact_id: str, owner: str) -> bool:
        count = self._count(
            "UPDATE artifacts SET revoked = {true} WHERE id = ? AND owner = ?",
            (artifact_id, owner),
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
        self._execute(UPSERT_DOCUMENT, (kind, owner, key, text, now, now, expires, len(text)))

    def update_json(
        self,
        kind: str,
        owner: str,
        key: str,
        fn: Callable[[dict[str, Any] | None], dict[str, Any] | None],
        *,
        expires: float | None = None,
    ) -> dict[str, Any] | None:
        return self._update_doc((kind, owner, key), fn, expires)

    def _update_doc(self, at: DocKey, fn: DocUpdate, expires: float | None) -> Doc | None:
        """:meth:`update_json`: the backends hold the row differently."""
        raise NotImplementedError

    def get_json(self, kind: str, owner: str, key: str) -> dict[str, Any] | None:
        row = self._one(
            "SELECT value FROM documents WHERE kind = ? AND owner = ? AND key = ?"
            " AND (expires IS NULL OR expires > ?)",
            (kind, owner, key, time.time()),
        )
        return None if row is None else base.load_doc(row[0])

    def list_json(
        self, kind: str, owner: str, *, limit: int = 100
    ) -> list[tuple[str, dict[str, Any]]]:
        base.check_limit(limit)
        rows = self._all(
            "SELECT key, value FROM documents WHERE kind = ? AND owner = ?"
            " AND (expires IS NULL OR expires > ?)"
            " ORDER BY updated DESC, {tiebreak} DESC LIMIT ?",
            (kind, owner, time.time(), limit),
        )
        return [(key, base.load_doc(text)) for key, text in rows]

    def delete_json(self, kind: str, owner: str, key: str) -> bool:
        count = self._count(
            "DELETE FROM documents WHERE kind = ? AND owner = ? AND key = ?", (kind, owner, key)
        )
        return count == 1

    def purge_expired(self, now: float | None = None) -> int:
        at = time.time() if now is None else now
        return self._count(
            "DELETE FROM documents WHERE expires IS NOT NULL AND expires <= ?", (at,)
        )

    # -- signing keys ----------------------------------------------------------------------

    def init_signing(self, keys: Sequence[SigningKey], principal_salt: bytes) -> bool:
        base.check_signing_seed(keys, principal_salt)
        q = self.dialect.sql

        def tx(c: C) -> bool:
            self._lock_signing_keys(c)
            had = (
                c.execute("SELECT 1 FROM signing_keys LIMIT 1").fetchone()
                or c.execute("SELECT 1 FROM settings WHERE name = 'principal_salt'").fetchone()
            )
            if had:
                return False
            c.execute(
                q("INSERT INTO settings (name, value) VALUES ('principal_salt', ?)"),
                (base.b64e(principal_salt),),
            )
            self._executemany(
                c,
                q("INSERT INTO signing_keys (kid, secret, created, active) VALUES (?, ?, ?, ?)"),
                [(k.kid, base.b64e(k.secret), k.created, k.active) for k in keys],
            )
            return True

        return self._tx(tx)

    def principal_salt(self) -> bytes | None:
        row = self._one("SELECT value FROM settings WHERE name = 'principal_salt'")
        return None if row is None else base.b64d(row[0])

    def list_signing_keys(self) -> list[SigningKey]:
        rows = self._all(
            "SELECT kid, secret, created, active FROM signing_keys ORDER BY {tiebreak}"
        )
        return [SigningKey(r[0], base.b64d(r[1]), int(r[2]), bool(r[3])) for r in rows]

    def get_signing_key(self, kid: str) -> bytes | None:
        row = self._one("SELECT secret FROM signing_keys WHERE kid = ?", (kid,))
        return None if row is None else base.b64d(row[0])

    def active_signing_key(self) -> SigningKey | None:
        row = self._one("SELECT kid, secret, created FROM signing_keys WHERE {active}")
        return None if row is None else SigningKey(row[0], base.b64d(row[1]), int(row[2]), True)

    def add_signing_key(self, key: SigningKey) -> None:
        q = self.dialect.sql

        def tx(c: C) -> None:
            self._lock_signing_keys(c)
            if c.execute(q("SELECT 1 FROM signing_keys WHERE kid = ?"), (key.kid,)).fetchone():
                raise ValueError("a key with this kid exists")
            c.execute(q("UPDATE signing_keys SET active = {false} WHERE {active}"))
            c.execute(
                q(
                    "INSERT INTO signing_keys (kid, secret, created, active)"
                    " VALUES (?, ?, ?, {true})"
                ),
                (key.kid, base.b64e(key.secret), key.created),
            )

        self._tx(tx)

    def retire_signing_key(self, kid: str) -> None:
        q = self.dialect.sql

        def tx(c: C) -> None:
            self._lock_signing_keys(c)
            row = c.execute(q("SELECT active FROM signing_keys WHERE kid = ?"), (kid,)).fetchone()
            if row is None:
                raise ValueError("unknown kid")
            if row[0]:
                raise ValueError("cannot retire the active key; rotate first")
            c.execute(q("DELETE FROM signing_keys WHERE kid = ?"), (kid,))

        self._tx(tx)

    # -- run journal -----------------------------------------------------------------------

    def create_run(self, rec: RunRecord, *, max_active: int | None = None) -> bool:
        base.check_run(rec)
        if max_active is None:
            self._insert_new("runs", RUN_COLUMNS, run_params(rec), "a run")
            return True
        q = self.dialect.sql
        insert = q(
            f"INSERT INTO runs ({RUN_COLUMNS}) VALUES {_placeholders(len(RUN_COLUMNS.split(',')))}"
        )

        def tx(c: C) -> bool:
            self._lock_owner(c, rec.owner)
            active = c.execute(
                q("SELECT COUNT(*) FROM runs WHERE owner = ? AND finished_at IS NULL"),
                (rec.owner,),
            ).fetchone()[0]
            if int(active) >= max_active:
                return False
            c.execute(insert, run_params(rec))
            return True

        try:
            return self._tx(tx)
        except Exception as exc:
            if self._is_duplicate(exc):
                raise ValueError("a run with this id already exists") from None
            raise

    def claim_run_slot(self, run_id: str, holder: str, max_running: int) -> bool:
        q = self.dialect.sql

        def tx(c: C) -> bool:
            row = c.execute(
                q(
                    "SELECT owner, status, created FROM runs"
                    " WHERE id = ? AND holder = ? AND finished_at IS NULL{for_update}"
                ),
                (run_id, holder),
            ).fetchone()
            if row is None:
                raise LeaseLost(_LEASE_LOST)
            owner, status, created = row
            if status == "running":
                return True
            ahead = c.execute(
                q(
                    "SELECT COUNT(*) FROM runs WHERE owner = ? AND finished_at IS NULL"
                    " AND id <> ? AND (status = 'running' OR (status = 'queued'"
                    " AND (created < ? OR (created = ? AND id < ?))))"
                ),
                (owner, run_id, created, created, run_id),
            ).fetchone()[0]
            if int(ahead) >= max_running:
                return False
            c.execute(q("UPDATE runs SET status = 'running' WHERE id = ?"), (run_id,))
            return True

        return self._tx(tx)

    def get_run(self, run_id: str, owner: str) -> RunRecord | None:
        row = self._one(
            f"SELECT {RUN_COLUMNS} FROM runs WHERE id = ? AND owner = ?", (run_id, owner)
        )
        return None if row is None else run_from_row(row)

    def _held(self, c: C, run_id: str, holder: str) -> int:
        """Lock the run row; its ``last_seq`` if ``holder`` holds it unfinished, else LeaseLost."""
        row = c.execute(
            self.dialect.sql(
                "SELECT last_seq FROM runs WHERE id = ? AND holder = ? AND finished_at IS NULL"
                "{for_update}"
            ),
            (run_id, holder),
        ).fetchone()
        if row is None:
            raise LeaseLost(_LEASE_LOST)
        return int(row[0])

    def _insert_events(self, c: C, run_id: str, encoded: list[tuple[int, str]], now: float) -> None:
        self._executemany(
            c,
            self.dialect.sql(
                "INSERT INTO run_events (run_id, seq, event, created) VALUES (?, ?, ?, ?)"
            ),
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
        sql = self.dialect.sql(
            "UPDATE runs SET status = COALESCE(?, status), summary = COALESCE(?, summary)"
            " WHERE id = ?"
        )

        def tx(c: C) -> None:
            self._held(c, run_id, holder)
            c.execute(sql, (status, text, run_id))

        self._tx(tx)

    def append_run_events(self, run_id: str, events: Sequence[dict[str, Any]], holder: str) -> None:
        sql = self.dialect.sql(
            "UPDATE runs SET last_seq = ?, event_bytes = event_bytes + ? WHERE id = ?"
        )

        def tx(c: C) -> None:
            last = self._held(c, run_id, holder)
            encoded = base.encode_events(events, last)
            if not encoded:
                return
            self._insert_events(c, run_id, encoded, time.time())
            c.execute(sql, (encoded[-1][0], _event_bytes(encoded), run_id))
            self._notify(c, run_id, encoded[-1][0])

        self._tx(tx)

    def read_run_events(
        self, run_id: str, after_seq: int, limit: int = 1000
    ) -> list[dict[str, Any]]:
        base.check_limit(limit)
        rows = self._all(
            "SELECT event FROM run_events WHERE run_id = ? AND seq > ? ORDER BY seq LIMIT ?",
            (run_id, after_seq, limit),
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
        sql = self.dialect.sql(
            "UPDATE runs SET status = ?, summary = ?, finished_at = ?, holder = NULL,"
            " lease_expires = NULL, last_seq = ?, event_bytes = event_bytes + ? WHERE id = ?"
        )

        def tx(c: C) -> None:
            last = self._held(c, run_id, holder)
            encoded = base.encode_events(events, last)
            now = time.time()
            if encoded:
                self._insert_events(c, run_id, encoded, now)
            seq = encoded[-1][0] if encoded else last
            c.execute(sql, (status, text, now, seq, _event_bytes(encoded), run_id))
            self._notify(c, run_id, seq)

        self._tx(tx)

    def renew_run_lease(self, run_id: str, holder: str, until: float) -> bool:
        count = self._count(
            "UPDATE runs SET lease_expires = ? WHERE id = ? AND holder = ? AND finished_at IS NULL",
            (until, run_id, holder),
        )
        return count == 1

    def request_run_stop(self, run_id: str, owner: str) -> bool:
        sql = self.dialect.sql(
            "UPDATE runs SET stop_requested = COALESCE(stop_requested, ?)"
            " WHERE id = ? AND owner = ? AND finished_at IS NULL"
        )

        def stop(c: C) -> bool:
            count = c.execute(sql, (time.time(), run_id, owner)).rowcount
            if count == 1:
                self._notify(c, run_id, "stop")
            return count == 1

        return self._tx(stop) if self.notifies else self._run(stop)

    def run_stop_requested(self, run_id: str) -> bool:
        row = self._one("SELECT stop_requested IS NOT NULL FROM runs WHERE id = ?", (run_id,))
        return bool(row and row[0])

    def adopt_expired_runs(self, now: float, holder: str, until: float) -> list[RunRecord]:
        q = self.dialect.sql

        def tx(c: C) -> list[RunRecord]:
            rows = c.execute(
                q(
                    f"SELECT {RUN_COLUMNS} FROM runs"
                    " WHERE finished_at IS NULL AND lease_expires IS NOT NULL"
                    " AND lease_expires < ? AND summary LIKE ?"
                    " ORDER BY lease_expires LIMIT 100{skip_locked}"
                ),
                (now, '%"upstream_run_id"%'),
            ).fetchall()
            taken: list[RunRecord] = []
            for row in rows:
                rec = run_from_row(row)
                if not isinstance(rec.summary.get("upstream_run_id"), str):
                    continue
                c.execute(
                    q("UPDATE runs SET holder = ?, lease_expires = ? WHERE id = ?"),
                    (holder, until, rec.id),
                )
                taken.append(dataclasses.replace(rec, holder=holder, lease_expires=until))
            return taken

        return self._tx(tx)

    def interrupt_expired_runs(self, now: float) -> list[InterruptedRun]:
        q = self.dialect.sql

        def tx(c: C) -> list[InterruptedRun]:
            rows = c.execute(
                q(
                    "SELECT id, owner, last_seq FROM runs"
                    " WHERE finished_at IS NULL AND lease_expires IS NOT NULL"
                    " AND lease_expires < ? ORDER BY lease_expires LIMIT 500{skip_locked}"
                ),
                (now,),
            ).fetchall()
            done: list[InterruptedRun] = []
            for run_id, owner, last in rows:
                seq = int(last) + 1
                text = base.dump_doc(base.interrupted_event(run_id, seq))
                self._insert_events(c, run_id, [(seq, text)], now)
                c.execute(
                    q(
                        "UPDATE runs SET status = 'interrupted', finished_at = ?, holder = NULL,"
                        " lease_expires = NULL, last_seq = ?, event_bytes = event_bytes + ?"
                        " WHERE id = ?"
                    ),
                    (now, seq, len(text), run_id),
                )
                self._notify(c, run_id, seq)
                done.append(InterruptedRun(run_id, owner, seq))
            return done

        return self._tx(tx)

    def purge_runs(self, finished_before: float) -> int:
        return self._count(
            "DELETE FROM runs WHERE finished_at IS NOT NULL AND finished_at < ?", (finished_before,)
        )

    # -- quotas ----------------------------------------------------------------------------

    def take_quota(
        self,
        owner: str,
        kind: str,
        limit: int,
        window: int,
        n: int = 1,
        now: float | None = None,
        whole: bool = False,
    ) -> base.QuotaTake:
        if isinstance(window, bool) or not isinstance(window, int) or window < 1:
            raise ValueError("window is a positive int (seconds)")
        at = time.time() if now is None else now
        start = int(at // window) * window
        key = (owner, kind, start)
        q = self.dialect.sql
        where = " WHERE owner = ? AND kind = ? AND window_start = ?"

        def tx(c: C) -> tuple[int, int]:
            c.execute(
                q(
                    "INSERT INTO quota_counters (owner, kind, window_start, used)"
                    " VALUES (?, ?, ?, 0) ON CONFLICT DO NOTHING"
                ),
                key,
            )
            used = int(
                c.execute(
                    q("SELECT used FROM quota_counters" + where + "{for_update}"), key
                ).fetchone()[0]
            )
            granted = max(0, min(n, limit - used))
            if whole and granted < n:
                granted = 0
            if granted:
                c.execute(q("UPDATE quota_counters SET used = used + ?" + where), (granted, *key))
            return granted, used + granted

        granted, used = self._tx(tx)
        return base.QuotaTake(granted, used, float(start + window))

    def stored_usage(self, owner: str, now: float | None = None) -> base.StoredUsage:
        at = time.time() if now is None else now
        live = "owner = ? AND (expires IS NULL OR expires > ?)"
        row = self._one(
            f"SELECT (SELECT COALESCE(SUM(value_bytes), 0) FROM documents WHERE {live}),"
            " (SELECT COALESCE(SUM(event_bytes), 0) FROM runs WHERE owner = ?),"
            " (SELECT MIN(expires) FROM documents WHERE owner = ? AND expires > ?),"
            " (SELECT MIN(finished_at) FROM runs WHERE owner = ? AND finished_at IS NOT NULL),"
            " (SELECT COUNT(*) FROM artifacts WHERE owner = ?)",
            (owner, at, owner, owner, at, owner, owner),
        )
        return base.StoredUsage(
            int(row[0]) + int(row[1]) + int(row[4]) * base.LINK_RECORD_BYTES,
            None if row[2] is None else float(row[2]),
            None if row[3] is None else float(row[3]),
        )

    def purge_quota_counters(self, before: float) -> int:
        return self._count("DELETE FROM quota_counters WHERE window_start < ?", (int(before),))

    # -- health ----------------------------------------------------------------------------

    def check_writable(self) -> bool:
        try:
            self._execute(
                "INSERT INTO heartbeat (id, at) VALUES (1, ?)"
                " ON CONFLICT (id) DO UPDATE SET at = excluded.at",
                (time.time(),),
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
            detail = self.unwritable_detail
        return StoreCheck(
            self.backend,
            self._location(),
            version,
            EXPECTED_VERSION,
            reachable,
            writable,
            latency,
            detail,
        )
