"""The shared store: PostgreSQL, for several gateway instances behind a load balancer.

psycopg 3's async API is asyncio-only, so this backend is synchronous: a
``psycopg_pool.ConnectionPool`` (``pool_size`` connections at most, each checkout
waiting at most ``connect_timeout`` seconds) used from worker threads, like the SQLite
store. Connections run in autocommit; every read-modify-write is one explicit
transaction whose first statement locks the row it changes (``SELECT ... FOR
UPDATE``), so concurrent instances serialize on it:

* :meth:`PostgresStore.update_json` -- the row, or on a first write an
  ``INSERT ... ON CONFLICT DO NOTHING`` race that the loser retries with the row lock;
* the run journal -- the ``runs`` row: appends, finish and interruption check the
  holder and ``finished_at`` under the lock, so a run gets exactly one terminal event
  (the hot path, ``append_run_events``, does lock, insert, ``last_seq`` and NOTIFY in
  one statement: one round trip per upstream read);
  :meth:`~PostgresStore.interrupt_expired_runs` uses ``FOR UPDATE SKIP LOCKED`` (two
  instances sweeping at once split the expired runs between them);
* rotation -- ``LOCK TABLE signing_keys`` (one active key, always).

Appends and interruptions send ``NOTIFY gateway_runs, '<run_id>:<seq>'`` in the same
transaction (delivered at commit, never for a rolled-back append).
:meth:`~PostgresStore.open_notifications` opens a dedicated connection outside the pool
for ``LISTEN`` (see :mod:`gateway.runs.bus`).

Errors: every psycopg/pool failure becomes :class:`StoreError` with a message made
from the SQLSTATE class, never psycopg's text (it can name a socket path or host).
psycopg is imported lazily: the SQLite-only install does not need it.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING, Any, TypeVar
from urllib.parse import urlsplit

from gateway.core.errors import ConfigError
from gateway.store import base
from gateway.store.base import (
    RUNS_CHANNEL,
    LeaseLost,
    Notification,
    NotificationSource,
    StoreError,
)
from gateway.store.migrations import (
    EXPECTED_VERSION,
    MIGRATIONS,
    SCHEMA_VERSION_POSTGRES,
    newer_message,
    older_message,
)
from gateway.store.sql import Dialect, Doc, DocKey, DocUpdate, SQLStore

if TYPE_CHECKING:
    import psycopg
    from psycopg_pool import ConnectionPool

__all__ = ["PostgresStore", "redact_url"]

_T = TypeVar("_T")

_MIGRATION_LOCK = base.advisory_key("migrations")
_POSTGRES = Dialect(
    param="%s",
    true="TRUE",
    false="FALSE",
    active="active",
    tiebreak="n",  # the identity column that orders ties like SQLite's rowid
    for_update=" FOR UPDATE",
    skip_locked=" FOR UPDATE SKIP LOCKED",  # two sweeps split the expired runs
)


def redact_url(url: str) -> str:
    """``host:port/dbname`` of a ``postgresql://`` URL: no user, no password."""
    try:
        parts = urlsplit(url)
        host = parts.hostname or "localhost"
        port = parts.port or 5432
    except ValueError:
        return "postgresql (unparsable URL)"
    return f"{host}:{port}{parts.path or '/'}"


_CONNECT_FAILURES: tuple[tuple[tuple[str, ...], str], ...] = (
    (
        ("password authentication failed", "no pg_hba.conf entry", "authentication failed"),
        "the database refused the credentials",
    ),
    (('role "',), "the database role does not exist"),
    (("does not exist",), "the database does not exist"),
    (
        ("too many clients", "remaining connection slots"),
        "the database has no connection slot left (max_connections)",
    ),
    (
        ("starting up", "shutting down", "in recovery mode"),
        "the database is not accepting connections yet",
    ),
)


#: SQLSTATE class (2 characters) or code (all 5), first match wins
_SQLSTATES: tuple[tuple[str, str], ...] = (
    ("08", "cannot reach the database"),
    ("28", "the database refused the credentials"),
    ("3D000", "the database does not exist"),
    ("57", "the database is shutting down or cancelled the statement"),
    ("53", "the database is out of resources (connections, disk or memory)"),
    ("42501", "the database role lacks a privilege"),
    ("42", "the database schema does not match (run `gateway db check`)"),
)


def describe_error(exc: BaseException) -> str:
    """One safe sentence about a psycopg/pool failure (no path, host or password)."""
    name = type(exc).__name__
    if name == "PoolTimeout":
        return "no database connection became available in time"
    if name == "PoolClosed":
        return "the store is closed"
    sqlstate = getattr(exc, "sqlstate", None) or ""
    if not sqlstate and name == "OperationalError":
        # libpq's connection errors carry no SQLSTATE: classify the text, never echo it
        text = str(exc).lower()
        for needles, says in _CONNECT_FAILURES:
            if any(n in text for n in needles):
                return says
        return "cannot reach the database"
    for code, says in _SQLSTATES:
        if sqlstate.startswith(code):
            return says
    return f"the database failed ({name}{' ' + sqlstate if sqlstate else ''})"


def _psycopg() -> Any:
    try:
        import psycopg
        import psycopg_pool
    except ImportError as exc:
        raise ConfigError(
            "database_url",
            "a postgresql:// database needs psycopg: pip install 'artifact-gateway[postgres]'",
        ) from exc
    return psycopg, psycopg_pool


class PostgresStore(SQLStore["psycopg.Connection[Any]"]):
    """:class:`~gateway.store.base.Store` on PostgreSQL; safe to call from many threads."""

    backend = "postgresql"
    dialect = _POSTGRES
    notifies = True
    unwritable_detail = "the database accepts connections but refuses the test write"

    def __init__(
        self,
        url: str,
        *,
        pool_size: int = 8,
        connect_timeout: float = 5.0,
        migrate: bool | None = None,
    ) -> None:
        """Connect (the pool opens ``1..pool_size`` connections). ``migrate``: None checks
        the schema (older or newer: ConfigError naming ``gateway db upgrade``); True applies
        missing migrations; False opens as is."""
        pg, pg_pool = _psycopg()
        if pool_size < 1:
            raise ValueError("pool_size is at least 1")
        self._psycopg = pg
        self._url = url
        self.location = redact_url(url)
        self._timeout = float(connect_timeout)
        self._closed = False
        self._close_lock = threading.Lock()
        self._pool: ConnectionPool[psycopg.Connection[Any]] = pg_pool.ConnectionPool(
            url,
            min_size=1,
            max_size=pool_size,
            timeout=self._timeout,
            kwargs={
                "autocommit": True,
                "connect_timeout": max(1, round(self._timeout)),
                "application_name": "artifact-gateway",
            },
            open=False,
            name="gateway-store",
            reconnect_timeout=0,
        )
        try:
            self._pool.open(wait=True, timeout=self._timeout)
        except Exception as exc:
            self._pool.close(timeout=0)
            why = self._why_no_connection(exc)
            raise ConfigError("database_url", f"{why} ({self.location})") from None
        try:
            if migrate is True:
                self.migrate()
            elif migrate is None:
                version = self.schema_version()
                if version > EXPECTED_VERSION:
                    raise ConfigError("database_url", newer_message(version, "the database"))
                if version < EXPECTED_VERSION:
                    raise ConfigError("database_url", older_message(version))
        except StoreError as exc:
            self.close()
            raise ConfigError("database_url", f"{exc.message} ({self.location})") from None
        except BaseException:
            self.close()
            raise

    def _why_no_connection(self, exc: Exception) -> str:
        """The pool only says it timed out: one direct attempt tells why."""
        try:
            conn = self._psycopg.connect(self._url, connect_timeout=max(1, round(self._timeout)))
        except self._psycopg.Error as direct:
            return describe_error(direct)
        conn.close()
        return describe_error(exc)

    # -- plumbing --------------------------------------------------------------------------

    def _call(self, fn: Callable[[psycopg.Connection[Any]], _T], tx: bool) -> _T:
        """``fn(conn)`` on a pooled connection (in one transaction if ``tx``)."""
        pg = self._psycopg
        try:
            with self._pool.connection(timeout=self._timeout) as conn:
                if not tx:
                    return fn(conn)
                with conn.transaction():
                    return fn(conn)
        except pg.errors.UniqueViolation as exc:
            raise _Duplicate() from exc
        except pg.Error as exc:  # the pool's errors (PoolTimeout, PoolClosed) too
            raise StoreError(describe_error(exc)) from exc

    def _run(self, fn: Callable[[psycopg.Connection[Any]], _T]) -> _T:
        return self._call(fn, tx=False)

    def _tx(self, fn: Callable[[psycopg.Connection[Any]], _T]) -> _T:
        return self._call(fn, tx=True)

    def _is_duplicate(self, exc: Exception) -> bool:
        return isinstance(exc, _Duplicate)

    def _executemany(
        self, c: psycopg.Connection[Any], sql: str, rows: list[tuple[Any, ...]]
    ) -> None:
        if len(rows) == 1:
            c.execute(sql, rows[0])
            return
        with c.cursor() as cur:
            cur.executemany(sql, rows)

    def _location(self) -> str:
        return self.location

    def _lock_signing_keys(self, c: psycopg.Connection[Any]) -> None:
        c.execute("LOCK TABLE signing_keys IN SHARE ROW EXCLUSIVE MODE")

    def _notify(self, c: psycopg.Connection[Any], run_id: str, what: int | str) -> None:
        c.execute("SELECT pg_notify(%s, %s)", (RUNS_CHANNEL, f"{run_id}:{what}"))

    def _lock_owner(self, c: psycopg.Connection[Any], owner: str) -> None:
        c.execute("SELECT pg_advisory_xact_lock(%s)", (base.advisory_key("owner:" + owner),))

    # -- migrations ------------------------------------------------------------------------

    def schema_version(self) -> int:
        def read(c: psycopg.Connection[Any]) -> int:
            exists = c.execute("SELECT to_regclass('schema_version') IS NOT NULL").fetchone()
            if not exists or not exists[0]:
                return 0
            row = c.execute("SELECT MAX(version) FROM schema_version").fetchone()
            return int(row[0] or 0) if row else 0

        return self._run(read)

    def migrate(self) -> tuple[int, int]:
        """Apply missing migrations, each in its own transaction under the advisory lock."""
        before: int | None = None
        for m in MIGRATIONS:

            def step(c: psycopg.Connection[Any], m: Any = m) -> int:
                c.execute("SELECT pg_advisory_xact_lock(%s)", (_MIGRATION_LOCK,))
                c.execute(SCHEMA_VERSION_POSTGRES)
                row = c.execute("SELECT MAX(version) FROM schema_version").fetchone()
                current = int(row[0] or 0) if row else 0
                if current > EXPECTED_VERSION:
                    raise ConfigError("database_url", newer_message(current, "the database"))
                if current < m.version:
                    c.execute(m.postgres)
                    c.execute(
                        "INSERT INTO schema_version (version, description, applied_at)"
                        " VALUES (%s, %s, %s)",
                        (m.version, m.description, time.time()),
                    )
                return current

            current = self._tx(step)
            if before is None:
                before = current
        return (before or 0), self.schema_version()

    # -- documents -------------------------------------------------------------------------

    def _update_doc(self, at: DocKey, fn: DocUpdate, expires: float | None) -> Doc | None:
        kind, owner, key = at

        def tx(c: psycopg.Connection[Any]) -> tuple[bool, dict[str, Any] | None]:
            now = time.time()
            row = c.execute(
                "SELECT value, expires FROM documents"
                " WHERE kind = %s AND owner = %s AND key = %s FOR UPDATE",
                (kind, owner, key),
            ).fetchone()
            live = row is not None and (row[1] is None or row[1] > now)
            current = base.load_doc(row[0]) if row is not None and live else None
            new = fn(current)
            if new is None:
                return True, current
            text = base.dump_doc(new)
            if row is not None:
                c.execute(
                    "UPDATE documents SET value = %s, updated = %s, expires = %s,"
                    " value_bytes = %s WHERE kind = %s AND owner = %s AND key = %s",
                    (text, now, expires, len(text), kind, owner, key),
                )
                return True, new
            inserted = c.execute(
                "INSERT INTO documents"
                " (kind, owner, key, value, created, updated, expires, value_bytes)"
                " VALUES (%s, %s, %s, %s, %s, %s, %s, %s) ON CONFLICT DO NOTHING",
                (kind, owner, key, text, now, now, expires, len(text)),
            ).rowcount
            return inserted == 1, new  # 0: a concurrent first write won; retry under its lock

        while True:
            done, doc = self._tx(tx)
            if done:
                return doc

    # -- run journal -----------------------------------------------------------------------

    #: the hot path (one call per upstream read): lock the run row if this holder holds
    #: it unfinished, insert the events if they follow ``last_seq``, move ``last_seq``
    #: and NOTIFY -- one statement, one round trip, one transaction (autocommit)
    _APPEND = """
        WITH run AS (
            SELECT last_seq FROM runs
            WHERE id = %(id)s AND holder = %(holder)s AND finished_at IS NULL
            FOR UPDATE
        ), ok AS (
            SELECT last_seq FROM run WHERE last_seq + 1 = %(first)s
        ), ins AS (
            INSERT INTO run_events (run_id, seq, event, created)
            SELECT %(id)s, e.seq, e.event, %(now)s
            FROM ok, unnest(%(seqs)s::bigint[], %(events)s::text[]) AS e (seq, event)
        ), upd AS (
            UPDATE runs SET last_seq = %(last)s, event_bytes = event_bytes + %(bytes)s
            WHERE id = %(id)s AND EXISTS (SELECT 1 FROM ok)
            RETURNING pg_notify(%(channel)s, %(payload)s)
        )
        SELECT run.last_seq, (SELECT count(*) FROM upd) FROM run
    """

    def append_run_events(self, run_id: str, events: Sequence[dict[str, Any]], holder: str) -> None:
        first = events[0].get("seq") if events and isinstance(events[0], dict) else None
        if not events or isinstance(first, bool) or not isinstance(first, int) or first < 1:
            if events:
                base.encode_events(events, 0)  # raises the precise ValueError/TypeError
            held = self._run(
                lambda c: c.execute(
                    "SELECT 1 FROM runs WHERE id = %s AND holder = %s AND finished_at IS NULL",
                    (run_id, holder),
                ).fetchone()
            )
            if held is None:
                raise LeaseLost("This instance no longer holds the run's lease.")
            return
        encoded = base.encode_events(events, first - 1)
        last = encoded[-1][0]
        params = {
            "id": run_id,
            "holder": holder,
            "first": first,
            "now": time.time(),
            "seqs": [seq for seq, _ in encoded],
            "events": [text for _, text in encoded],
            "last": last,
            "bytes": sum(len(text) for _, text in encoded),
            "channel": RUNS_CHANNEL,
            "payload": f"{run_id}:{last}",
        }
        row = self._run(lambda c: c.execute(self._APPEND, params).fetchone())
        if row is None:
            raise LeaseLost("This instance no longer holds the run's lease.")
        if not row[1]:
            raise ValueError(f"run event seq {first} does not follow {row[0]}")

    # -- coordination ----------------------------------------------------------------------

    @contextlib.contextmanager
    def _advisory(self, name: str) -> Iterator[bool]:
        key = base.advisory_key(name)
        pg = self._psycopg
        try:
            with self._pool.connection(timeout=self._timeout) as conn:
                row = conn.execute("SELECT pg_try_advisory_lock(%s)", (key,)).fetchone()
                mine = bool(row and row[0])
                try:
                    yield mine
                finally:
                    if mine:
                        with contextlib.suppress(pg.Error):
                            conn.execute("SELECT pg_advisory_unlock(%s)", (key,))
        except pg.Error as exc:
            raise StoreError(describe_error(exc)) from exc

    def try_advisory_lock(self, name: str) -> contextlib.AbstractContextManager[bool]:
        return self._advisory(name)

    def open_notifications(self, channels: Sequence[str]) -> NotificationSource | None:
        return _Listener(self._psycopg, self._url, channels, self._timeout)

    def close(self) -> None:
        with self._close_lock:
            if self._closed:
                return
            self._closed = True
        self._pool.close(timeout=self._timeout)


class _Duplicate(Exception):
    """A unique violation (translated by the callers that expect one)."""


class _Listener:
    """One dedicated autocommit connection that LISTENs; used by one thread only."""

    def __init__(self, pg: Any, url: str, channels: Sequence[str], timeout: float) -> None:
        self._psycopg = pg
        self._url = url
        self._channels = tuple(channels)
        self._timeout = timeout
        self._conn: Any = None

    def _connect(self) -> Any:
        conn = self._psycopg.connect(
            self._url,
            autocommit=True,
            connect_timeout=max(1, round(self._timeout)),
            application_name="artifact-gateway-listen",
        )
        for channel in self._channels:
            conn.execute(f'LISTEN "{channel}"')
        return conn

    def wait(self, timeout: float) -> list[Notification]:
        pg = self._psycopg
        try:
            if self._conn is None:
                self._conn = self._connect()
            got = [
                Notification(n.channel, n.payload)
                for n in self._conn.notifies(timeout=timeout, stop_after=1)
            ]
            if not got and self._conn.closed:
                raise pg.OperationalError("the listening connection closed")
            return got
        except pg.Error as exc:
            self.close()
            raise StoreError(describe_error(exc)) from exc

    def close(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            with contextlib.suppress(Exception):
                conn.close()
