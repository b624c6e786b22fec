"""PostgreSQL-only store behaviour, on a real server (the session's throw-away cluster):
the migration policy, outages, what error messages may say, NOTIFY."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit

import pytest

from gateway.core.errors import ConfigError
from gateway.store import (
    EXPECTED_VERSION,
    RUNS_CHANNEL,
    Notification,
    Store,
    StoreError,
    open_store,
)
from gateway.store.postgres import PostgresStore, redact_url
from harness.pgcluster import PgCluster
from tests.unit.test_store_contract import ev, new_run, together


def password_of(url: str) -> str:
    pw = urlsplit(url).password
    assert pw and len(pw) > 8
    return pw


@pytest.fixture
def pg(pg_url: str, tmp_path: Path) -> Iterator[Store]:
    s = open_store(tmp_path, pg_url, pool_size=2, connect_timeout=2.0)
    try:
        yield s
    finally:
        s.close()


# -- migrations ---------------------------------------------------------------------------


def test_run_refuses_an_empty_database_and_upgrade_migrates(
    pg_empty_url: str, tmp_path: Path
) -> None:
    with pytest.raises(ConfigError) as info:
        open_store(tmp_path, pg_empty_url)
    assert info.value.key == "database_url"
    assert "schema version 0" in info.value.message
    assert "gateway db upgrade" in info.value.message
    assert password_of(pg_empty_url) not in info.value.message

    s = open_store(tmp_path, pg_empty_url, migrate=False)  # what `gateway db check` opens
    try:
        assert s.schema_version() == 0
        check = s.check()
        assert check.reachable and not check.ok and check.schema_version == 0
        assert s.migrate() == (0, EXPECTED_VERSION)
        assert s.migrate() == (EXPECTED_VERSION, EXPECTED_VERSION)
    finally:
        s.close()
    open_store(tmp_path, pg_empty_url).close()  # now `gateway run` starts


def test_concurrent_upgrades_apply_each_migration_once(pg_empty_url: str, tmp_path: Path) -> None:
    results: list[tuple[int, int]] = []
    stores = [open_store(tmp_path, pg_empty_url, migrate=False, pool_size=1) for _ in range(4)]
    try:
        assert together([lambda s=s: results.append(s.migrate()) for s in stores]) == []
    finally:
        for s in stores:
            s.close()
    assert all(after == EXPECTED_VERSION for _, after in results)
    s = open_store(tmp_path, pg_empty_url)
    try:
        assert isinstance(s, PostgresStore)
        rows = s._run(
            lambda c: c.execute("SELECT version FROM schema_version ORDER BY version").fetchall()
        )
        assert [r[0] for r in rows] == list(range(1, EXPECTED_VERSION + 1))
    finally:
        s.close()


def test_a_newer_schema_always_refuses(pg: Store, pg_url: str, tmp_path: Path) -> None:
    assert isinstance(pg, PostgresStore)
    pg._run(
        lambda c: c.execute(
            "INSERT INTO schema_version VALUES (%s, 'from the future', 0)", (EXPECTED_VERSION + 1,)
        )
    )
    for migrate in (None, True):
        with pytest.raises(ConfigError) as info:
            open_store(tmp_path, pg_url, migrate=migrate)
        assert f"schema version {EXPECTED_VERSION + 1}" in info.value.message
        assert "roll forward" in info.value.message
    check = pg.check()
    assert check.schema_version == EXPECTED_VERSION + 1 and not check.ok


# -- outages and messages -----------------------------------------------------------------


def test_a_database_outage_is_store_unavailable_then_recovers(
    pg_cluster: PgCluster, pg_url: str, tmp_path: Path
) -> None:
    pg = open_store(tmp_path, pg_url, pool_size=2, connect_timeout=0.5)
    pg.put_json("session", "alice", "s", {"n": 1})
    assert pg.check_writable()
    pg_cluster.stop_server()
    try:
        t0 = time.monotonic()
        assert pg.check_writable() is False
        for call in (
            lambda: pg.get_json("session", "alice", "s"),
            lambda: pg.get_artifact("a1"),
            lambda: pg.append_run_events("r", [ev(1)], "A"),
            lambda: pg.get_signing_key("00000000"),
        ):
            with pytest.raises(StoreError) as info:
                call()
            assert info.value.status == 503 and info.value.code == "store_unavailable"
            assert password_of(pg_url) not in info.value.message
            assert "/" not in info.value.message  # no socket path, no URL
        check = pg.check()
        assert not check.reachable and not check.ok and check.schema_version is None
        assert password_of(pg_url) not in repr(check)
        assert time.monotonic() - t0 < 30  # each call waits at most connect_timeout
    finally:
        pg_cluster.start_server()
    for _ in range(50):  # the pool reconnects on demand
        if pg.check_writable():
            break
        time.sleep(0.1)
    assert pg.get_json("session", "alice", "s") == {"n": 1}
    pg.close()


def test_connection_failures_name_no_secret(
    pg_cluster: PgCluster, pg_url: str, tmp_path: Path
) -> None:
    pw = password_of(pg_url)
    cases = {
        pg_url.replace(pw, "wrong-" + pw[::-1]): "refused the credentials",
        pg_url.rsplit("/", 1)[0] + "/no_such_db": "does not exist",
        pg_url.replace(f":{pg_cluster.port}/", ":1/"): "cannot reach",
    }
    for url, says in cases.items():
        with pytest.raises(ConfigError) as info:
            open_store(tmp_path, url, connect_timeout=1.0)
        message = info.value.message
        assert says in message, message
        assert pw not in message and pw[::-1] not in message
        assert redact_url(url) in message  # host:port/dbname helps the operator


def test_redact_url() -> None:
    assert redact_url("postgresql://u:secret@db.example:6543/gw?sslmode=require") == (
        "db.example:6543/gw"
    )
    assert redact_url("postgresql:///gw") == "localhost:5432/gw"


# -- notifications ------------------------------------------------------------------------


def test_appends_notify_in_their_transaction(pg: Store, pg_url: str, tmp_path: Path) -> None:
    source = pg.open_notifications([RUNS_CHANNEL])
    assert source is not None
    other = open_store(tmp_path, pg_url, pool_size=1)  # the writing instance
    try:
        assert source.wait(0.05) == []  # connects and LISTENs
        T = time.time()
        other.create_run(new_run(lease_expires=T + 100))
        other.append_run_events("run_1", [ev(1), ev(2)], "A")
        with pytest.raises(Exception):  # noqa: B017 - refused append: rolled back, no NOTIFY
            other.append_run_events("run_1", [ev(5)], "A")
        other.finish_run("run_1", "completed", {}, "A", [ev(3, "run.completed")])
        other.create_run(new_run("run_2", lease_expires=T - 1))
        other.interrupt_expired_runs(T)
        other.create_run(new_run("run_3", lease_expires=T + 100))
        assert not other.request_run_stop("run_3", "bob")  # refused: no NOTIFY
        assert other.request_run_stop("run_3", "alice")
        got: list[Notification] = []
        deadline = time.monotonic() + 5
        while len(got) < 4 and time.monotonic() < deadline:
            got += source.wait(0.5)
        assert got == [
            Notification(RUNS_CHANNEL, "run_1:2"),
            Notification(RUNS_CHANNEL, "run_1:3"),
            Notification(RUNS_CHANNEL, "run_2:1"),
            Notification(RUNS_CHANNEL, "run_3:stop"),
        ]
        assert source.wait(0.2) == []
    finally:
        source.close()
        source.close()
        other.close()
