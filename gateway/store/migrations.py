"""Versioned schema migrations, one list for both backends.

Every :class:`Migration` has a version (1, 2, ...), a description and one script per
backend. A database records what it has applied in one table,
``schema_version (version, description, applied_at)``; its schema version is the
highest row (0: an empty database).

Policy
------
* **Append only.** A change is a new migration at the end; an applied script is never
  edited. :data:`EXPECTED_VERSION` is what this code needs.
* **Additive (expand/contract).** A migration only adds: tables, nullable columns or
  columns with a default, indexes. It never drops, renames or retypes something the
  previous release reads or writes, and never adds a NOT NULL column without a default.
  The one data change allowed is a backfill of a column the same migration adds (6:
  the bytes of existing documents and run journals); rows an older release writes
  during a rolling restart keep their old count (0 when new) until written again.
  So during a rolling restart old instances (already running) and new ones work on the
  same, newer schema. Removing something takes two releases: the first stops using it
  (expand), a later one drops it (contract) once no instance of the first release runs.
* **SQLite** (embedded, one instance) migrates on open, each migration in its own
  ``BEGIN IMMEDIATE`` transaction that re-reads the version, so concurrent openers
  apply it once. Databases made before ``schema_version`` existed recorded their
  version in ``PRAGMA user_version``; they are adopted into the table on first open.
  ``PRAGMA user_version`` keeps mirroring the version, so an older gateway refuses a
  newer file instead of misreading it.
* **PostgreSQL** (shared): ``gateway run`` never changes the schema. It refuses to
  start on an older schema, naming ``gateway db upgrade``, which applies the missing
  migrations under a transaction-level advisory lock (concurrent upgrades wait for each
  other and apply each migration once; PostgreSQL's DDL is transactional, so a failed
  migration leaves the previous version intact). Why not migrate at start: the
  runtime role need not own the schema (least privilege), and a schema change is an
  operator's decision taken once, not a race between N starting instances.
* **Newer than the code: always refused** (both backends), at start and by
  ``gateway db check``: an old binary must not write into a schema it does not know.
  During a rolling upgrade that means: upgrade the database, then restart instances
  onto the new release only (an old-release instance that restarts after the upgrade
  refuses to start: roll forward, not back).
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["EXPECTED_VERSION", "MIGRATIONS", "Migration"]


@dataclass(frozen=True, slots=True)
class Migration:
    version: int
    description: str
    sqlite: str
    postgres: str


MIGRATIONS: tuple[Migration, ...] = (
    Migration(
        1,
        "artifacts, documents, heartbeat",
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
        # JSON is kept as text on both backends: the gateway never queries inside a
        # document, the bytes stay exactly as written (key order included) and jsonb's
        # refusal of "\u0000" cannot bite. ``n`` orders ties like SQLite's rowid.
        """
        CREATE TABLE artifacts (
            id           TEXT PRIMARY KEY,
            owner        TEXT NOT NULL,
            link_mode    TEXT NOT NULL CHECK (link_mode IN ('private', 'public')),
            path         TEXT NOT NULL,
            filename     TEXT NOT NULL,
            device       TEXT NOT NULL,
            inode        TEXT NOT NULL,
            size         BIGINT NOT NULL,
            mtime_ns     BIGINT NOT NULL,
            created      DOUBLE PRECISION NOT NULL,
            expires      DOUBLE PRECISION,
            revoked      BOOLEAN NOT NULL DEFAULT FALSE,
            content_type TEXT NOT NULL,
            n            BIGINT GENERATED ALWAYS AS IDENTITY
        );
        CREATE INDEX artifacts_owner_created ON artifacts (owner, created);

        CREATE TABLE documents (
            kind    TEXT NOT NULL,
            owner   TEXT NOT NULL,
            key     TEXT NOT NULL,
            value   TEXT NOT NULL,
            created DOUBLE PRECISION NOT NULL,
            updated DOUBLE PRECISION NOT NULL,
            expires DOUBLE PRECISION,
            n       BIGINT GENERATED ALWAYS AS IDENTITY,
            UNIQUE (kind, owner, key)
        );
        CREATE INDEX documents_owner_updated ON documents (kind, owner, updated);
        CREATE INDEX documents_expires ON documents (expires) WHERE expires IS NOT NULL;

        CREATE TABLE heartbeat (
            id INTEGER PRIMARY KEY CHECK (id = 1),
            at DOUBLE PRECISION NOT NULL
        );
        """,
    ),
    Migration(
        2,
        "artifacts.ctime_ns (file identity includes the inode change time)",
        "ALTER TABLE artifacts ADD COLUMN ctime_ns INTEGER;",
        "ALTER TABLE artifacts ADD COLUMN ctime_ns BIGINT;",
    ),
    Migration(
        3,
        "signing keys and settings (principal salt) shared by all instances",
        """
        CREATE TABLE signing_keys (
            kid     TEXT PRIMARY KEY,
            secret  TEXT NOT NULL,  -- base64url
            created INTEGER NOT NULL,
            active  INTEGER NOT NULL DEFAULT 0
        );
        CREATE UNIQUE INDEX signing_keys_one_active ON signing_keys (active) WHERE active = 1;
        CREATE TABLE settings (
            name  TEXT PRIMARY KEY,
            value TEXT NOT NULL
        );
        """,
        """
        CREATE TABLE signing_keys (
            kid     TEXT PRIMARY KEY,
            secret  TEXT NOT NULL,
            created BIGINT NOT NULL,
            active  BOOLEAN NOT NULL DEFAULT FALSE,
            n       BIGINT GENERATED ALWAYS AS IDENTITY
        );
        CREATE UNIQUE INDEX signing_keys_one_active ON signing_keys (active) WHERE active;
        CREATE TABLE settings (
            name  TEXT PRIMARY KEY,
            value TEXT NOT NULL
        );
        """,
    ),
    Migration(
        4,
        "run journal: runs (lease) and their events",
        """
        CREATE TABLE runs (
            id            TEXT PRIMARY KEY,
            owner         TEXT NOT NULL,
            kind          TEXT NOT NULL,
            model         TEXT NOT NULL,
            link_mode     TEXT NOT NULL,
            status        TEXT NOT NULL,
            created       REAL NOT NULL,
            finished_at   REAL,
            summary       TEXT NOT NULL DEFAULT '{}',
            holder        TEXT,
            lease_expires REAL,
            last_seq      INTEGER NOT NULL DEFAULT 0
        );
        CREATE INDEX runs_owner_created ON runs (owner, created);
        CREATE INDEX runs_lease ON runs (lease_expires) WHERE finished_at IS NULL;
        CREATE INDEX runs_finished ON runs (finished_at) WHERE finished_at IS NOT NULL;
        CREATE TABLE run_events (
            run_id  TEXT NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
            seq     INTEGER NOT NULL,
            event   TEXT NOT NULL,
            created REAL NOT NULL,
            PRIMARY KEY (run_id, seq)
        ) WITHOUT ROWID;
        """,
        """
        CREATE TABLE runs (
            id            TEXT PRIMARY KEY,
            owner         TEXT NOT NULL,
            kind          TEXT NOT NULL,
            model         TEXT NOT NULL,
            link_mode     TEXT NOT NULL,
            status        TEXT NOT NULL,
            created       DOUBLE PRECISION NOT NULL,
            finished_at   DOUBLE PRECISION,
            summary       TEXT NOT NULL DEFAULT '{}',
            holder        TEXT,
            lease_expires DOUBLE PRECISION,
            last_seq      BIGINT NOT NULL DEFAULT 0
        );
        CREATE INDEX runs_owner_created ON runs (owner, created);
        CREATE INDEX runs_lease ON runs (lease_expires) WHERE finished_at IS NULL;
        CREATE INDEX runs_finished ON runs (finished_at) WHERE finished_at IS NOT NULL;
        CREATE TABLE run_events (
            run_id  TEXT NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
            seq     BIGINT NOT NULL,
            event   TEXT NOT NULL,
            created DOUBLE PRECISION NOT NULL,
            PRIMARY KEY (run_id, seq)
        );
        """,
    ),
    Migration(
        5,
        "runs.stop_requested (a stop asked on any instance reaches the holder)",
        "ALTER TABLE runs ADD COLUMN stop_requested REAL;",
        "ALTER TABLE runs ADD COLUMN stop_requested DOUBLE PRECISION;",
    ),
    Migration(
        6,
        "quotas: per-principal counters, stored bytes of documents and run journals",
        """
        CREATE TABLE quota_counters (
            owner        TEXT NOT NULL,
            kind         TEXT NOT NULL,
            window_start INTEGER NOT NULL,
            used         INTEGER NOT NULL DEFAULT 0,
            PRIMARY KEY (owner, kind, window_start)
        ) WITHOUT ROWID;
        CREATE INDEX quota_counters_window ON quota_counters (window_start);
        ALTER TABLE documents ADD COLUMN value_bytes INTEGER NOT NULL DEFAULT 0;
        UPDATE documents SET value_bytes = length(CAST(value AS BLOB));
        CREATE INDEX documents_owner_bytes ON documents (owner, expires, value_bytes);
        ALTER TABLE runs ADD COLUMN event_bytes INTEGER NOT NULL DEFAULT 0;
        UPDATE runs SET event_bytes = COALESCE(
            (SELECT SUM(length(CAST(event AS BLOB))) FROM run_events WHERE run_id = runs.id), 0);
        CREATE INDEX runs_owner_unfinished ON runs (owner, status) WHERE finished_at IS NULL;
        """,
        """
        CREATE TABLE quota_counters (
            owner        TEXT NOT NULL,
            kind         TEXT NOT NULL,
            window_start BIGINT NOT NULL,
            used         BIGINT NOT NULL DEFAULT 0,
            PRIMARY KEY (owner, kind, window_start)
        );
        CREATE INDEX quota_counters_window ON quota_counters (window_start);
        ALTER TABLE documents ADD COLUMN value_bytes BIGINT NOT NULL DEFAULT 0;
        UPDATE documents SET value_bytes = octet_length(value);
        CREATE INDEX documents_owner_bytes ON documents (owner, expires, value_bytes);
        ALTER TABLE runs ADD COLUMN event_bytes BIGINT NOT NULL DEFAULT 0;
        UPDATE runs SET event_bytes = COALESCE(
            (SELECT SUM(octet_length(event)) FROM run_events WHERE run_id = runs.id), 0);
        CREATE INDEX runs_owner_unfinished ON runs (owner, status) WHERE finished_at IS NULL;
        """,
    ),
)

#: the schema version this code needs
EXPECTED_VERSION = len(MIGRATIONS)

if [m.version for m in MIGRATIONS] != list(range(1, EXPECTED_VERSION + 1)):
    raise AssertionError("migration versions are 1, 2, ... without gaps")

SCHEMA_VERSION_SQLITE = """
CREATE TABLE IF NOT EXISTS schema_version (
    version     INTEGER PRIMARY KEY,
    description TEXT NOT NULL,
    applied_at  REAL NOT NULL
)
"""

SCHEMA_VERSION_POSTGRES = """
CREATE TABLE IF NOT EXISTS schema_version (
    version     INTEGER PRIMARY KEY,
    description TEXT NOT NULL,
    applied_at  DOUBLE PRECISION NOT NULL
)
"""


def newer_message(found: int, where: str) -> str:
    return (
        f"{where} has schema version {found}, newer than this gateway's {EXPECTED_VERSION}; "
        "run the release that upgraded it (roll forward, not back)"
    )


def older_message(found: int) -> str:
    return (
        f"the database has schema version {found}, this gateway needs {EXPECTED_VERSION}; "
        "run `gateway db upgrade --config FILE` first (see docs/deployment.md)"
    )
