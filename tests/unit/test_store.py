"""SQLite-specific store tests: the file, its migrations, its failure modes, open_store.

The behaviour both backends share is in test_store_contract.py.
"""

from __future__ import annotations

import os
import re
import sqlite3
import stat
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from gateway.core.errors import ConfigError
from gateway.store import (
    DB_FILE_NAME,
    EXPECTED_VERSION,
    MIGRATIONS,
    SQLiteStore,
    StoreError,
    open_configured_store,
    open_store,
    store_settings,
)
from tests.unit.test_store_contract import make_record, new_run, together


@pytest.fixture
def store(tmp_path: Path) -> Iterator[SQLiteStore]:
    s = open_store(tmp_path)
    assert isinstance(s, SQLiteStore)
    try:
        yield s
    finally:
        s.close()


def test_file_is_0600_and_wal(tmp_path: Path) -> None:
    state = tmp_path / "state"
    s = open_store(state)
    assert isinstance(s, SQLiteStore)
    try:
        assert s.check_writable()
        db = state / DB_FILE_NAME
        assert stat.S_IMODE(db.stat().st_mode) == 0o600
        assert stat.S_IMODE(state.stat().st_mode) == 0o700
        assert stat.S_IMODE((state / (DB_FILE_NAME + "-wal")).stat().st_mode) == 0o600
        assert s._conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        assert s._conn.execute("PRAGMA busy_timeout").fetchone()[0] > 0
    finally:
        s.close()


def test_open_store_picks_the_backend(tmp_path: Path) -> None:
    s = open_store(tmp_path, "  ")
    assert s.backend == "sqlite"
    s.close()
    for bad in ("mysql://x/y", "sqlite:///x", "/tmp/db"):
        with pytest.raises(ConfigError) as info:
            open_store(tmp_path, bad)
        assert info.value.key == "database_url"


def test_store_settings_from_config(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Until the config grows ``database_url``/``[database]``, the environment stands in."""

    class Bare:
        state_dir = tmp_path

    monkeypatch.delenv("GATEWAY_DATABASE_URL", raising=False)
    assert store_settings(Bare()).database_url == ""
    monkeypatch.setenv("GATEWAY_DATABASE_URL", "postgresql://u:p@h/db")
    got = store_settings(Bare())
    assert (got.database_url, got.pool_size, got.connect_timeout) == (
        "postgresql://u:p@h/db",
        8,
        5.0,
    )

    class Database:
        pool_size = 3
        connect_timeout_seconds = 1.5

    class Full:
        state_dir = tmp_path
        database_url = ""
        database = Database()

    got = store_settings(Full())  # the config's own (empty) value wins over the environment
    assert (got.database_url, got.pool_size, got.connect_timeout) == ("", 3, 1.5)
    s = open_configured_store(Full())
    assert s.backend == "sqlite"
    s.close()


# -- migrations ---------------------------------------------------------------------------


def test_migrations_are_idempotent(tmp_path: Path) -> None:
    for _ in range(3):
        s = open_store(tmp_path)
        try:
            assert s.schema_version() == EXPECTED_VERSION == len(MIGRATIONS)
            s.create_artifact(make_record(f"a{os.urandom(4).hex()}"))
            assert s.migrate() == (EXPECTED_VERSION, EXPECTED_VERSION)
        finally:
            s.close()
    s = open_store(tmp_path)
    try:
        assert len(s.list_artifacts("alice")) == 3
    finally:
        s.close()
    conn = sqlite3.connect(tmp_path / DB_FILE_NAME)
    rows = conn.execute("SELECT version FROM schema_version ORDER BY version").fetchall()
    assert [r[0] for r in rows] == list(range(1, EXPECTED_VERSION + 1))
    assert conn.execute("PRAGMA user_version").fetchone()[0] == EXPECTED_VERSION
    conn.close()


def test_concurrent_openers_migrate_once(tmp_path: Path) -> None:
    assert together([lambda: open_store(tmp_path).close()] * 6) == []
    conn = sqlite3.connect(tmp_path / DB_FILE_NAME)
    assert conn.execute("SELECT COUNT(*) FROM schema_version").fetchone()[0] == EXPECTED_VERSION
    conn.close()


def test_opening_waits_for_a_writer_before_entering_wal(tmp_path: Path) -> None:
    """Entering WAL needs an exclusive lock, and SQLite refuses it at once (no busy
    handler) while another connection holds the write lock: the store waits instead
    (this is what made the concurrent openers above fail now and then)."""
    other = sqlite3.connect(tmp_path / DB_FILE_NAME, isolation_level=None, check_same_thread=False)
    other.execute("CREATE TABLE unrelated (x)")  # a rollback-journal file, not WAL yet
    other.execute("BEGIN IMMEDIATE")
    release = threading.Timer(0.2, other.execute, ("COMMIT",))
    release.start()
    try:
        open_store(tmp_path).close()
    finally:
        release.join()
        other.close()
    conn = sqlite3.connect(tmp_path / DB_FILE_NAME)
    assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    conn.close()


def test_a_user_version_database_is_adopted_and_upgraded(tmp_path: Path) -> None:
    """A file of the previous release: migration 1 applied, recorded in PRAGMA user_version,
    no schema_version table, artifact rows without ctime."""
    db = tmp_path / DB_FILE_NAME
    conn = sqlite3.connect(db, isolation_level=None)
    for statement in MIGRATIONS[0].sqlite.split(";"):
        if statement.strip():
            conn.execute(statement)
    conn.execute("PRAGMA user_version = 1")
    conn.execute(
        "INSERT INTO artifacts (id, owner, link_mode, path, filename, device, inode, size,"
        " mtime_ns, created, expires, revoked, content_type) VALUES"
        " ('old', 'alice', 'private', '/srv/a', 'a', '1', '2', 3, 4, 5.0, NULL, 0, 'text/plain')"
    )
    conn.close()
    s = open_store(tmp_path)
    try:
        assert s.schema_version() == EXPECTED_VERSION
        old = s.get_artifact("old")
        assert old is not None and old.ctime_ns is None and old.size == 3
        s.create_run(new_run())  # the newer tables are there
    finally:
        s.close()
    conn = sqlite3.connect(db)
    rows = conn.execute("SELECT version, description FROM schema_version").fetchall()
    assert rows[0][0] == 1 and "user_version" in rows[0][1]
    assert [r[0] for r in rows] == list(range(1, EXPECTED_VERSION + 1))
    conn.close()


@pytest.mark.parametrize("how", ["user_version", "schema_version"])
def test_newer_schema_is_refused(tmp_path: Path, how: str) -> None:
    if how == "user_version":  # a file of a newer release from before schema_version
        conn = sqlite3.connect(tmp_path / DB_FILE_NAME)
        conn.execute(f"PRAGMA user_version = {EXPECTED_VERSION + 1}")
        conn.close()
    else:
        open_store(tmp_path).close()
        conn = sqlite3.connect(tmp_path / DB_FILE_NAME, isolation_level=None)
        conn.execute(
            "INSERT INTO schema_version VALUES (?, 'from the future', 0)", (EXPECTED_VERSION + 1,)
        )
        conn.close()
    with pytest.raises(ConfigError) as info:
        open_store(tmp_path)
    assert info.value.key == "state_dir"
    assert f"schema version {EXPECTED_VERSION + 1}" in info.value.message
    s = open_store(tmp_path, migrate=False)  # `gateway db check` still reads it
    try:
        assert s.schema_version() == EXPECTED_VERSION + 1
        assert not s.check().ok
    finally:
        s.close()


def test_migrations_are_additive() -> None:
    """Expand/contract: no migration drops, renames or retypes anything, and no added
    column is NOT NULL without a default (an old instance could not insert). The one
    data change allowed is a backfill: an UPDATE that sets only a column the same
    migration added (no instance of an older release reads it)."""
    forbidden = re.compile(r"\b(DROP|RENAME|ALTER\s+COLUMN|TRUNCATE|DELETE|UPDATE)\b", re.I)
    backfill = re.compile(r"\bUPDATE\s+(\w+)\s+SET\s+(\w+)\s*=[^;]*;", re.I)
    for m in MIGRATIONS:
        for script in (m.sqlite, m.postgres):
            script = re.sub(r"\bON\s+(DELETE|UPDATE)\s+\w+", "", script, flags=re.I)
            added = {
                (t.lower(), c.lower())
                for t, c in re.findall(
                    r"ALTER\s+TABLE\s+(\w+)\s+ADD\s+COLUMN\s+(\w+)", script, re.I
                )
            }
            for table, column in backfill.findall(script):
                assert (table.lower(), column.lower()) in added, (m.version, table, column)
            script = backfill.sub("", script)
            assert not forbidden.search(script), (m.version, forbidden.search(script))
            for added in re.findall(r"ADD\s+COLUMN\s+([^;,]+)", script, re.I):
                assert "NOT NULL" not in added.upper() or "DEFAULT" in added.upper(), added
        assert m.sqlite.strip() and m.postgres.strip() and m.description


def test_garbage_database_is_a_config_error(tmp_path: Path) -> None:
    (tmp_path / DB_FILE_NAME).write_bytes(b"this is not a database" * 100)
    with pytest.raises(ConfigError) as info:
        open_store(tmp_path)
    assert str(tmp_path) not in info.value.message


# -- health -------------------------------------------------------------------------------


def test_check_writable_false_when_another_writer_holds_the_lock(tmp_path: Path) -> None:
    """A real failure mode that works as root too: the db is locked by another writer."""
    s = SQLiteStore(tmp_path / DB_FILE_NAME, busy_timeout_ms=50)
    other = sqlite3.connect(tmp_path / DB_FILE_NAME, isolation_level=None)
    try:
        assert s.check_writable()
        other.execute("BEGIN EXCLUSIVE")
        assert s.check_writable() is False
        with pytest.raises(StoreError) as info:
            s.put_json("k", "alice", "x", {})
        assert info.value.status == 503
        assert str(tmp_path) not in info.value.message
        with pytest.raises(StoreError):
            s.update_json("k", "alice", "x", lambda d: {"n": 1})
        check = s.check()
        assert check.reachable and not check.writable and not check.ok
        other.execute("ROLLBACK")
        assert s.check_writable()
        assert s.update_json("k", "alice", "x", lambda d: {"n": 1}) == {"n": 1}
    finally:
        other.close()
        s.close()


def test_check_writable_false_when_the_database_is_read_only(store: SQLiteStore) -> None:
    """``query_only`` makes SQLite refuse writes as a read-only file would, even for root."""
    assert store.check_writable()
    store._conn.execute("PRAGMA query_only = ON")
    assert store.check_writable() is False
    assert store.get_artifact("x") is None  # reads still work
    store._conn.execute("PRAGMA query_only = OFF")
    assert store.check_writable()


@pytest.mark.skipif(
    not hasattr(os, "geteuid") or os.geteuid() == 0, reason="root ignores file modes"
)
def test_check_writable_false_on_read_only_file(tmp_path: Path) -> None:
    s = open_store(tmp_path)
    s.close()
    (tmp_path / DB_FILE_NAME).chmod(0o400)
    s = SQLiteStore(tmp_path / DB_FILE_NAME)
    try:
        assert s.get_artifact("a1") is None  # still readable
        assert s.check_writable() is False
    finally:
        s.close()


def test_check_reports_the_file(store: SQLiteStore) -> None:
    check = store.check()
    assert check.ok and check.backend == "sqlite" and check.location == str(store.path)
    assert check.latency_ms is not None and check.detail == ""
