"""The run bus on PostgreSQL: the LISTEN connection, and tests/unit/test_runbus.py's
backend cases (SQLite there) on PostgreSQL here."""

from __future__ import annotations

import time
from pathlib import Path

import trio

from gateway.runs.bus import RunBus
from gateway.store.postgres import PostgresStore
from tests.unit.test_runbus import *  # noqa: F403  (its backend cases, on PostgreSQL)
from tests.unit.test_runbus import ev, leased, until

BACKENDS = ("postgresql",)


async def test_the_listener_reconnects_and_everyone_rereads(pg_url: str, tmp_path: Path) -> None:
    from gateway.store import open_store

    a = open_store(tmp_path, pg_url, pool_size=2)
    b = open_store(tmp_path, pg_url, pool_size=2)
    assert isinstance(b, PostgresStore)
    bus = RunBus(a, backoff_min=0.05)
    try:
        async with trio.open_nursery() as nursery:
            await nursery.start(bus.run)
            await until(lambda: bus.connects == 1 and bus.connected)
            b.create_run(leased())
            woke: list[bool] = []

            async def follower() -> None:
                woke.append(await bus.wait_beyond("run_1", 0, 30))

            nursery.start_soon(follower)
            await trio.sleep(0.05)
            killed = b._run(
                lambda c: c.execute(
                    "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
                    " WHERE application_name = 'artifact-gateway-listen'"
                ).fetchall()
            )
            assert killed == [(True,)]
            await until(lambda: bus.connects == 2)
            await until(lambda: woke == [True])  # woken by the reconnect (missed news?)
            t0 = time.monotonic()
            await trio.to_thread.run_sync(b.append_run_events, "run_1", [ev(1)], "A")
            assert await bus.wait_beyond("run_1", 0, 5)  # and listening again
            assert time.monotonic() - t0 < 2
            nursery.cancel_scope.cancel()
    finally:
        a.close()
        b.close()


async def test_closing_the_bus_stops_its_thread_promptly(pg_url: str, tmp_path: Path) -> None:
    from gateway.store import open_store

    store = open_store(tmp_path, pg_url, pool_size=1)
    bus = RunBus(store)
    async with trio.open_nursery() as nursery:
        await nursery.start(bus.run)
        await until(lambda: bus.connected)
        thread = bus._thread
        assert thread is not None and thread.is_alive()
        t0 = time.monotonic()
        nursery.cancel_scope.cancel()
    assert time.monotonic() - t0 < 2.0  # poll_seconds = 0.5
    assert not thread.is_alive()
    store.close()
