"""RunBus wake-ups (local and across instances over NOTIFY), follow_events, the lease
watcher, keep_lease and the retention reaper, on SQLite and a real PostgreSQL."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import pytest
import trio

from gateway.runs.bus import RunBus, follow_events
from gateway.runs.reaper import (
    MaintenanceSettings,
    keep_lease,
    lease_watcher,
    reap_once,
    run_maintenance,
)
from gateway.store import INTERRUPTED_ERROR, RunRecord, Store
from tests.conftest import Backend
from tests.unit.test_store_contract import ev, new_run

ROOT = Path(__file__).resolve().parents[2]


async def until(predicate: Any, within: float = 10.0) -> None:
    """Poll state that other threads or processes change (a test's eyes, not a wake-up)."""
    with trio.fail_after(within):
        while not predicate():  # noqa: ASYNC110
            await trio.sleep(0.01)


def leased(run_id: str = "run_1", seconds: float = 60.0, **kw: Any) -> RunRecord:
    now = time.time()
    return new_run(run_id, created=now, lease_expires=now + seconds, **kw)


# -- local wake-ups -----------------------------------------------------------------------


async def test_local_publish_wakes_at_once(tmp_path: Path) -> None:
    from gateway.store import open_store

    bus = RunBus(open_store(tmp_path))
    assert await bus.wait_beyond("r", 0, 0.01) is False  # nothing known: times out
    woke: list[float] = []

    async def follower(seq: int) -> None:
        t0 = time.monotonic()
        if await bus.wait_beyond("r", seq, 10):
            woke.append(time.monotonic() - t0)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(follower, 0)
        nursery.start_soon(follower, 5)
        await trio.sleep(0.05)
        bus.published("r", 3)  # wakes the follower at 0, not the one at 5
        await trio.sleep(0.05)
        assert len(woke) == 1 and woke[0] < 0.5
        bus.published("r", 2)  # older news: nothing
        bus.published("other", 9)
        await trio.sleep(0.05)
        assert len(woke) == 1
        bus.published("r", None)  # "something changed": everyone re-reads
    assert len(woke) == 2
    assert await bus.wait_beyond("r", 2, 10) is True  # seq 3 is known: no wait at all
    assert await bus.wait_beyond("r", 3, 0.01) is False
    assert bus._waiters == {}
    bus.store.close()


async def test_the_bus_forgets_old_runs(tmp_path: Path) -> None:
    from gateway.store import open_store

    bus = RunBus(open_store(tmp_path), remember=3)
    for i in range(10):
        bus.published(f"r{i}", 1)
    assert list(bus._latest) == ["r7", "r8", "r9"]
    bus.store.close()


# -- across instances ---------------------------------------------------------------------


async def test_notify_wakes_a_follower_on_another_instance(backend: Backend) -> None:
    a, b = backend.open(), backend.open()
    bus = RunBus(a)
    async with trio.open_nursery() as nursery:
        await nursery.start(bus.run)
        if backend.name == "postgresql":
            await until(lambda: bus.connected)
        b.create_run(leased())
        t0 = time.monotonic()

        async def append_later() -> None:
            await trio.sleep(0.2)
            await trio.to_thread.run_sync(b.append_run_events, "run_1", [ev(1)], "A")

        nursery.start_soon(append_later)
        # PostgreSQL: NOTIFY, well before the 5 s safety timeout; SQLite: one instance,
        # no cross-process wake-up, so the (shorter) timeout is what ends the wait
        woke = await bus.wait_beyond("run_1", 0, 5.0 if backend.name == "postgresql" else 0.6)
        elapsed = time.monotonic() - t0
        if backend.name == "postgresql":
            assert woke and elapsed < 2.0
        else:
            assert not woke
        nursery.cancel_scope.cancel()


async def test_follow_events_across_instances(backend: Backend) -> None:
    a, b = backend.open(), backend.open()
    bus_a, bus_b = RunBus(a), RunBus(b)
    b.create_run(leased())
    got: list[list[dict[str, Any]]] = []

    async def follow() -> None:
        async for batch in follow_events(a, bus_a, "run_1", "alice", 0, idle=0.3):
            got.append(batch)

    async def produce() -> None:
        for seq in range(1, 6):
            await trio.sleep(0.05)
            await trio.to_thread.run_sync(b.append_run_events, "run_1", [ev(seq)], "A")
            bus_b.published("run_1", seq)
        await trio.sleep(0.5)  # a silence: the follower gets one idle batch
        await trio.to_thread.run_sync(
            lambda: b.finish_run("run_1", "completed", {}, "A", [ev(6, "run.completed")])
        )

    with trio.fail_after(20):
        async with trio.open_nursery() as nursery:
            await nursery.start(bus_a.run)
            await nursery.start(bus_b.run)
            if backend.name == "postgresql":
                await until(lambda: bus_a.connected)
            async with trio.open_nursery() as inner:
                inner.start_soon(follow)
                inner.start_soon(produce)
            nursery.cancel_scope.cancel()
    events = [e for batch in got for e in batch]
    assert [e["seq"] for e in events] == [1, 2, 3, 4, 5, 6]
    assert events[-1]["event"] == "run.completed"
    assert [] in got  # the idle batch: time for a keep-alive
    # resuming after the end: the tail, then the end of the iteration
    rest = [b async for b in follow_events(a, bus_a, "run_1", "alice", 4, idle=0.1)]
    assert [e["seq"] for batch in rest for e in batch] == [5, 6]
    assert [x async for x in follow_events(a, bus_a, "run_1", "bob", 0, idle=0.1)] == []


# -- leases -------------------------------------------------------------------------------


async def test_lease_watcher_interrupts_and_wakes_followers(backend: Backend) -> None:
    store = backend.open()
    bus = RunBus(store)
    store.create_run(leased("run_1", seconds=-1))  # its holder is gone
    store.append_run_events("run_1", [ev(1, "run.started")], "A")
    store.create_run(leased("run_2", seconds=600))
    got: list[dict[str, Any]] = []

    async def follow() -> None:
        async for batch in follow_events(store, bus, "run_1", "alice", 1, idle=30):
            got.extend(batch)

    with trio.fail_after(10):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(follow)
            await trio.sleep(0.05)
            await nursery.start(
                lambda task_status: lease_watcher(
                    store, bus, interval=0.05, task_status=task_status
                )
            )
            await until(lambda: bool(got))
            nursery.cancel_scope.cancel()
    assert got == [{"event": "run.failed", "seq": 2, "run_id": "run_1", "error": INTERRUPTED_ERROR}]
    run2 = store.get_run("run_2", "alice")
    assert run2 is not None and run2.status == "running"


async def test_keep_lease_renews_then_reports_a_lost_lease(store: Store) -> None:
    store.create_run(leased("run_1", seconds=0.6))
    lost: list[bool] = []
    with trio.fail_after(10):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(
                lambda: keep_lease(
                    store, "run_1", "A", lease_seconds=0.6, on_lost=lambda: lost.append(True)
                )
            )
            await trio.sleep(1.5)  # past the first lease: renewed meanwhile
            run = store.get_run("run_1", "alice")
            assert run is not None and run.lease_expires is not None
            assert run.lease_expires > time.time() and not lost
            assert store.interrupt_expired_runs(time.time()) == []
            store.interrupt_expired_runs(time.time() + 3600)  # as if it had expired
            await until(lambda: lost == [True])
    assert lost == [True]


CHILD = """
import sys, time, trio
from pathlib import Path
from gateway.runs.reaper import keep_lease
from gateway.store import RunRecord, open_store

store = open_store(Path(sys.argv[1]), sys.argv[2])
now = time.time()
store.create_run(RunRecord("run_k", "alice", "run", "m", "private", "running", now,
                           holder="child", lease_expires=now + 1.0))
store.append_run_events("run_k", [{"event": "run.started", "run_id": "run_k", "seq": 1}], "child")

async def main():
    print("running", flush=True)
    await keep_lease(store, "run_k", "child", lease_seconds=1.0, on_lost=lambda: None)

trio.run(main)
"""


def start_child(state: Path, url: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(CHILD), str(state), url],
        stdout=subprocess.PIPE,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )


async def test_a_sigkilled_holder_is_interrupted_within_the_bound(
    backend: Backend, tmp_path: Path
) -> None:
    """A real process holds a run and renews its lease; SIGKILL it: the watcher of a
    surviving instance ends the run within lease_seconds + interval."""
    store = backend.open()
    url = "" if backend.name == "sqlite" else store._url  # type: ignore[attr-defined]
    state = tmp_path / "state"
    settings = MaintenanceSettings(lease_seconds=1.0)
    child = start_child(state, url)
    try:
        assert child.stdout is not None
        line = await trio.to_thread.run_sync(child.stdout.readline)
        assert line == b"running\n"
        await trio.sleep(2.0)  # two leases long: still held, the child renews it
        run = store.get_run("run_k", "alice")
        assert run is not None and run.status == "running" and run.holder == "child"
        os.kill(child.pid, signal.SIGKILL)
        killed_at = time.time()
        child.wait(10)
    finally:
        if child.poll() is None:
            child.kill()
            child.wait(10)
        if child.stdout is not None:
            child.stdout.close()
    with trio.fail_after(15):
        async with trio.open_nursery() as nursery:
            await nursery.start(
                lambda task_status: lease_watcher(
                    store, None, interval=settings.lease_interval, task_status=task_status
                )
            )

            def interrupted() -> bool:
                run = store.get_run("run_k", "alice")
                return run is not None and run.status == "interrupted"

            await until(interrupted, within=10)
            nursery.cancel_scope.cancel()
    elapsed = time.time() - killed_at
    assert elapsed <= settings.interruption_bound + 0.5, elapsed
    events = store.read_run_events("run_k", 0)
    assert [e["event"] for e in events] == ["run.started", "run.failed"]


@pytest.fixture
def store(backend: Backend) -> Store:
    return backend.open()


# -- retention ----------------------------------------------------------------------------


def test_reap_once(backend: Backend) -> None:
    a, b = backend.open(), backend.open()
    a.create_run(leased("old"))
    a.finish_run("old", "completed", {}, "A", [ev(1, "run.completed")])
    a.create_run(leased("live"))
    a.put_json("response", "alice", "gone", {"x": 1}, expires=1.0)
    a.put_json("response", "alice", "kept", {"x": 2}, expires=time.time() + 3600)
    now = time.time()
    with b.try_advisory_lock("reaper"):
        if backend.name == "postgresql":
            assert reap_once(a, now + 10, 5) is None  # another instance is reaping
    assert reap_once(a, now, 3600) == (0, 1)  # the run finished a moment ago: kept
    assert reap_once(a, now + 10, 5) == (1, 0)
    assert a.get_run("old", "alice") is None and a.read_run_events("old", 0) == []
    assert a.get_run("live", "alice") is not None
    assert a.get_json("response", "alice", "kept") == {"x": 2}


async def test_run_maintenance_starts_and_stops(backend: Backend) -> None:
    from gateway.links.signing import Signer

    store = backend.open()
    signer = Signer.from_store(store)
    store.create_run(leased("run_1", seconds=-1))
    settings = MaintenanceSettings(lease_seconds=0.3, reaper_interval_seconds=0.1)
    with trio.fail_after(10):
        async with trio.open_nursery() as nursery:
            await nursery.start(run_maintenance, store, None, signer, settings)

            def interrupted() -> bool:
                run = store.get_run("run_1", "alice")
                return run is not None and run.status == "interrupted"

            await until(interrupted)
            nursery.cancel_scope.cancel()


def test_settings_from_config() -> None:
    from gateway.ops.config import config_from_dict

    assert MaintenanceSettings.from_config(config_from_dict({})) == MaintenanceSettings()
    got = MaintenanceSettings.from_config(
        config_from_dict(
            {
                "runs": {"lease_seconds": 30},
                "retention": {
                    "runs_seconds": 60,
                    "responses_seconds": 120,
                    "reaper_interval_seconds": 5,
                },
            }
        )
    )
    assert got == MaintenanceSettings(30.0, 60.0, 120.0, 5.0)
    assert got.lease_interval == 10.0 and got.interruption_bound == 40.0


async def test_a_stop_asked_on_another_instance_reaches_the_holder(backend: Backend) -> None:
    holder_store, other_store = backend.open(), backend.open()
    bus = RunBus(holder_store)
    holder_store.create_run(leased())
    stopped: list[str] = []

    async def run_holder() -> None:
        await bus.wait_stop("run_1")
        stopped.append("bus")

    with trio.fail_after(10):
        async with trio.open_nursery() as nursery:
            await nursery.start(bus.run)
            if backend.name == "postgresql":
                await until(lambda: bus.connected)
            nursery.start_soon(run_holder)
            await trio.sleep(0.05)
            t0 = time.monotonic()
            assert await trio.to_thread.run_sync(other_store.request_run_stop, "run_1", "alice")
            if backend.name == "sqlite":
                bus.stop_requested("run_1")  # one instance: the route wakes it itself
            await until(lambda: stopped == ["bus"])
            assert time.monotonic() - t0 < 2.0
            nursery.cancel_scope.cancel()
    assert bus._stops == {}


async def test_keep_lease_notices_a_stop_request(store: Store) -> None:
    """The safety net under wait_stop: a stop asked while no one listened is noticed at
    the next renewal, once, and the lease is still renewed (to journal run.cancelled)."""
    store.create_run(leased("run_1", seconds=0.6))
    stops: list[bool] = []
    with trio.fail_after(10):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(
                lambda: keep_lease(
                    store,
                    "run_1",
                    "A",
                    lease_seconds=0.6,
                    on_lost=lambda: pytest.fail("the lease is not lost"),
                    on_stop=lambda: stops.append(True),
                )
            )
            await trio.sleep(0.3)
            assert stops == []
            assert store.request_run_stop("run_1", "alice")
            await until(lambda: stops == [True])
            await trio.sleep(0.6)  # more renewals: on_stop is not called again
            assert stops == [True]
            run = store.get_run("run_1", "alice")
            assert run is not None and run.lease_expires is not None
            assert run.lease_expires > time.time()
            nursery.cancel_scope.cancel()
