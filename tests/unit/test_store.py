"""Tests for gateway.store: owner scoping, persistence, migrations, documents, health."""

from __future__ import annotations

import dataclasses
import os
import sqlite3
import stat
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from gateway.errors import ConfigError
from gateway.store import (
    DB_FILE_NAME,
    MIGRATIONS,
    ArtifactRecord,
    SQLiteStore,
    Store,
    StoreError,
    open_store,
)


def make_record(
    aid: str, owner: str = "alice", created: float = 1000.0, **kw: object
) -> ArtifactRecord:
    fields: dict[str, object] = {
        "id": aid,
        "owner": owner,
        "link_mode": "private",
        "path": f"/srv/artifacts/{aid}.txt",
        "filename": f"{aid}.txt",
        "device": 2049,
        "inode": 123456,
        "size": 42,
        "mtime_ns": 1_700_000_000_123_456_789,
        "created": created,
        "expires": None,
    }
    fields.update(kw)
    return ArtifactRecord(**fields)  # type: ignore[arg-type]


@pytest.fixture
def store(tmp_path: Path) -> Iterator[SQLiteStore]:
    s = open_store(tmp_path)
    try:
        yield s
    finally:
        s.close()


def test_satisfies_the_protocol(store: SQLiteStore) -> None:
    as_protocol: Store = store
    assert as_protocol.check_writable()


def test_file_is_0600_and_wal(tmp_path: Path) -> None:
    state = tmp_path / "state"
    s = open_store(state)
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


# -- artifacts ----------------------------------------------------------------------------


def test_create_get_round_trip(store: SQLiteStore) -> None:
    rec = make_record(
        "a1",
        link_mode="public",
        expires=2000.5,
        content_type="text/plain; charset=utf-8",
        device=2**64 - 1,  # st_dev / st_ino may not fit a signed int64
        inode=2**63 + 5,
        filename="résumé “final”.pdf",
    )
    store.create_artifact(rec)
    assert store.get_artifact("a1") == rec
    assert store.get_artifact("nope") is None


def test_duplicate_id_and_bad_mode_are_refused(store: SQLiteStore) -> None:
    store.create_artifact(make_record("a1"))
    with pytest.raises(ValueError):
        store.create_artifact(make_record("a1", owner="bob"))
    assert store.get_artifact("a1") == make_record("a1")
    with pytest.raises(ValueError):
        store.create_artifact(make_record("a2", link_mode="shared"))


def test_list_is_scoped_by_owner_and_newest_first(store: SQLiteStore) -> None:
    store.create_artifact(make_record("a-old", created=1.0))
    store.create_artifact(make_record("b-1", owner="bob", created=2.0))
    store.create_artifact(make_record("a-new", created=3.0))
    store.create_artifact(make_record("a-mid", created=2.0))
    assert [r.id for r in store.list_artifacts("alice")] == ["a-new", "a-mid", "a-old"]
    assert [r.id for r in store.list_artifacts("bob")] == ["b-1"]
    assert store.list_artifacts("carol") == []
    assert [r.id for r in store.list_artifacts("alice", limit=2)] == ["a-new", "a-mid"]
    with pytest.raises(ValueError):
        store.list_artifacts("alice", limit=0)


def test_revoke_only_by_owner(store: SQLiteStore) -> None:
    store.create_artifact(make_record("a1"))
    assert store.revoke_artifact("a1", "bob") is False
    assert store.get_artifact("a1") is not None
    assert store.get_artifact("a1").revoked is False  # type: ignore[union-attr]
    assert store.revoke_artifact("unknown", "alice") is False
    assert store.revoke_artifact("a1", "alice") is True
    assert store.get_artifact("a1") == dataclasses.replace(make_record("a1"), revoked=True)
    assert store.revoke_artifact("a1", "alice") is True  # idempotent
    assert store.list_artifacts("alice")[0].revoked is True


def test_records_persist_across_reopen(tmp_path: Path) -> None:
    s = open_store(tmp_path)
    s.create_artifact(make_record("a1"))
    s.put_json("session", "alice", "s1", {"n": 1})
    s.revoke_artifact("a1", "alice")
    s.close()
    s.close()  # idempotent
    s = open_store(tmp_path)
    try:
        assert s.get_artifact("a1") == make_record("a1", revoked=True)
        assert s.get_json("session", "alice", "s1") == {"n": 1}
    finally:
        s.close()


# -- migrations ---------------------------------------------------------------------------


def test_migrations_are_idempotent(tmp_path: Path) -> None:
    for _ in range(3):
        s = open_store(tmp_path)
        try:
            assert s.schema_version == len(MIGRATIONS)
            s.create_artifact(make_record(f"a{os.urandom(4).hex()}"))
        finally:
            s.close()
    s = open_store(tmp_path)
    try:
        assert len(s.list_artifacts("alice")) == 3
    finally:
        s.close()


def test_two_stores_open_the_same_file(tmp_path: Path) -> None:
    one, two = open_store(tmp_path), open_store(tmp_path)
    try:
        one.create_artifact(make_record("a1"))
        assert two.get_artifact("a1") == make_record("a1")
    finally:
        one.close()
        two.close()


def test_newer_schema_is_refused(tmp_path: Path) -> None:
    open_store(tmp_path).close()
    conn = sqlite3.connect(tmp_path / DB_FILE_NAME)
    conn.execute(f"PRAGMA user_version = {len(MIGRATIONS) + 1}")
    conn.close()
    with pytest.raises(ConfigError) as info:
        open_store(tmp_path)
    assert info.value.key == "state_dir"


def test_garbage_database_is_a_config_error(tmp_path: Path) -> None:
    (tmp_path / DB_FILE_NAME).write_bytes(b"this is not a database" * 100)
    with pytest.raises(ConfigError) as info:
        open_store(tmp_path)
    assert str(tmp_path) not in info.value.message


# -- JSON documents -----------------------------------------------------------------------


def test_json_round_trip_scoped_by_owner(store: SQLiteStore) -> None:
    store.put_json("session", "alice", "s1", {"messages": ["hi"], "n": 1})
    assert store.get_json("session", "alice", "s1") == {"messages": ["hi"], "n": 1}
    assert store.get_json("session", "bob", "s1") is None  # same key, other owner
    assert store.get_json("response", "alice", "s1") is None  # same key, other kind
    store.put_json("session", "bob", "s1", {"bob": True})
    assert store.get_json("session", "alice", "s1") == {"messages": ["hi"], "n": 1}
    assert store.delete_json("session", "bob", "nope") is False
    assert store.delete_json("session", "alice", "s1") is True
    assert store.get_json("session", "alice", "s1") is None
    assert store.get_json("session", "bob", "s1") == {"bob": True}
    with pytest.raises(TypeError):
        store.put_json("session", "alice", "s2", ["not", "a", "dict"])  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        store.put_json("session", "alice", "s2", {"x": float("nan")})


def test_json_upsert_and_list_newest_first(store: SQLiteStore) -> None:
    for key in ["k1", "k2", "k3"]:
        store.put_json("run", "alice", key, {"key": key})
    store.put_json("run", "bob", "k9", {"key": "k9"})
    store.put_json("run", "alice", "k1", {"key": "k1", "v": 2})  # now the newest write
    assert store.list_json("run", "alice") == [
        ("k1", {"key": "k1", "v": 2}),
        ("k3", {"key": "k3"}),
        ("k2", {"key": "k2"}),
    ]
    assert [k for k, _ in store.list_json("run", "alice", limit=1)] == ["k1"]
    assert store.list_json("run", "bob") == [("k9", {"key": "k9"})]
    assert store.list_json("session", "alice") == []


def test_json_expiry_and_purge(store: SQLiteStore) -> None:
    store.put_json("run", "alice", "gone", {"x": 1}, expires=1.0)  # long past
    store.put_json("run", "alice", "later", {"x": 2}, expires=4_000_000_000.0)
    store.put_json("run", "alice", "forever", {"x": 3})
    assert store.get_json("run", "alice", "gone") is None
    assert store.get_json("run", "alice", "later") == {"x": 2}
    assert [k for k, _ in store.list_json("run", "alice")] == ["forever", "later"]

    assert store.purge_expired() == 1
    assert store.purge_expired() == 0
    assert store.purge_expired(now=4_000_000_000.0) == 1  # "later" expires at that instant
    assert [k for k, _ in store.list_json("run", "alice")] == ["forever"]

    # Re-putting an expired key revives it with the new expiry.
    store.put_json("run", "alice", "forever", {"x": 4}, expires=1.0)
    assert store.get_json("run", "alice", "forever") is None
    store.put_json("run", "alice", "forever", {"x": 5})
    assert store.get_json("run", "alice", "forever") == {"x": 5}


def test_purge_keeps_artifacts(store: SQLiteStore) -> None:
    store.create_artifact(make_record("a1", link_mode="public", expires=1.0))
    assert store.purge_expired() == 0
    assert store.get_artifact("a1") is not None  # an expired link still answers 410


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
        other.execute("ROLLBACK")
        assert s.check_writable()
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


def test_check_writable_false_after_close(tmp_path: Path) -> None:
    s = open_store(tmp_path)
    s.close()
    assert s.check_writable() is False
    with pytest.raises(StoreError):
        s.get_artifact("a1")


# -- threads ------------------------------------------------------------------------------


def test_concurrent_use_from_eight_threads(store: SQLiteStore) -> None:
    per_thread = 50
    errors: list[BaseException] = []
    start = threading.Barrier(8)

    def work(n: int) -> None:
        try:
            start.wait()
            owner = f"owner{n}"
            for i in range(per_thread):
                store.create_artifact(make_record(f"t{n}-{i}", owner=owner, created=float(i)))
                store.put_json("run", owner, f"r{i}", {"i": i})
                assert store.get_artifact(f"t{n}-{i}") is not None
                assert store.check_writable()
                if i % 10 == 0:
                    store.list_artifacts(owner)
                    store.revoke_artifact(f"t{n}-{i}", owner)
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(n,)) for n in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    for n in range(8):
        owner = f"owner{n}"
        recs = store.list_artifacts(owner, limit=1000)
        assert sorted(r.id for r in recs) == sorted(f"t{n}-{i}" for i in range(per_thread))
        assert sum(r.revoked for r in recs) == per_thread // 10
        assert len(store.list_json("run", owner, limit=1000)) == per_thread
