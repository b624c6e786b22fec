"""The Store contract (gateway/store/base.py), run against SQLite and PostgreSQL alike.

``backend`` opens stores on one backing database: the first is "instance A", a second
:meth:`Backend.open` is "instance B" (another SQLiteStore on the same file, another
connection pool on the same PostgreSQL database), so the cross-instance promises
(no cache outlives a revoke, atomic read-modify-write, one terminal event) are tested
for real.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import json
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

import pytest

from gateway.store import (
    EXPECTED_VERSION,
    INTERRUPTED_ERROR,
    LINK_RECORD_BYTES,
    ArtifactRecord,
    LeaseLost,
    QuotaTake,
    RunRecord,
    SigningKey,
    Store,
    StoredUsage,
    StoreError,
)
from tests.conftest import Backend


@pytest.fixture
def store(backend: Backend) -> Store:
    return backend.open()


def together(targets: Sequence[Callable[[], object]]) -> list[BaseException]:
    """Run each target in a thread of its own, all released at once by one barrier;
    what they raised (``[]``: none failed)."""
    errors: list[BaseException] = []
    start = threading.Barrier(len(targets))

    def run(target: Callable[[], object]) -> None:
        try:
            start.wait()
            target()
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(t,)) for t in targets]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return errors


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
        "ctime_ns": 1_700_000_001_987_654_321,
    }
    fields.update(kw)
    return ArtifactRecord(**fields)  # type: ignore[arg-type]


def test_satisfies_the_protocol(store: Store, backend: Backend) -> None:
    assert store.backend == backend.name
    assert store.check_writable()
    assert store.schema_version() == EXPECTED_VERSION
    check = store.check()
    assert check.ok and check.backend == backend.name
    assert (check.schema_version, check.expected_version) == (EXPECTED_VERSION, EXPECTED_VERSION)


# -- artifacts ----------------------------------------------------------------------------


def test_artifact_round_trip(store: Store) -> None:
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
    store.create_artifact(make_record("old", ctime_ns=None))  # minted before ctime existed
    assert store.get_artifact("old") == make_record("old", ctime_ns=None)


def test_duplicate_id_and_bad_mode_are_refused(store: Store) -> None:
    store.create_artifact(make_record("a1"))
    with pytest.raises(ValueError):
        store.create_artifact(make_record("a1", owner="bob"))
    assert store.get_artifact("a1") == make_record("a1")
    with pytest.raises(ValueError):
        store.create_artifact(make_record("a2", link_mode="shared"))
    assert store.get_artifact("a2") is None


def test_create_artifacts_stores_all_or_none(store: Store) -> None:
    """One transaction: every record, or (a duplicate id, a bad mode) none of them."""
    store.create_artifacts([])
    recs = [make_record(f"m{i}", created=float(i)) for i in range(5)]
    store.create_artifacts(recs)
    assert [store.get_artifact(r.id) for r in recs] == recs
    assert [r.id for r in store.list_artifacts("alice")] == ["m4", "m3", "m2", "m1", "m0"]
    with pytest.raises(ValueError):  # m2 exists: n1 is not kept either
        store.create_artifacts([make_record("n1"), make_record("m2", owner="bob")])
    assert store.get_artifact("n1") is None
    assert store.get_artifact("m2") == recs[2]
    with pytest.raises(ValueError):  # the same id twice in one batch
        store.create_artifacts([make_record("n2"), make_record("n2")])
    assert store.get_artifact("n2") is None
    with pytest.raises(ValueError):  # refused before anything is written
        store.create_artifacts([make_record("n3"), make_record("n4", link_mode="shared")])
    assert store.get_artifact("n3") is None
    assert len(store.list_artifacts("alice")) == 5


def test_list_is_scoped_by_owner_and_newest_first(store: Store) -> None:
    store.create_artifact(make_record("a-old", created=1.0))
    store.create_artifact(make_record("b-1", owner="bob", created=2.0))
    store.create_artifact(make_record("a-new", created=3.0))
    store.create_artifact(make_record("a-mid", created=2.0))
    store.create_artifact(make_record("a-mid2", created=2.0))  # same instant: later insert first
    assert [r.id for r in store.list_artifacts("alice")] == ["a-new", "a-mid2", "a-mid", "a-old"]
    assert [r.id for r in store.list_artifacts("bob")] == ["b-1"]
    assert store.list_artifacts("carol") == []
    assert [r.id for r in store.list_artifacts("alice", limit=2)] == ["a-new", "a-mid2"]
    with pytest.raises(ValueError):
        store.list_artifacts("alice", limit=0)


def test_revoke_only_by_owner(store: Store) -> None:
    store.create_artifact(make_record("a1"))
    assert store.revoke_artifact("a1", "bob") is False
    assert store.get_artifact("a1") == make_record("a1")
    assert store.revoke_artifact("unknown", "alice") is False
    assert store.revoke_artifact("a1", "alice") is True
    assert store.get_artifact("a1") == dataclasses.replace(make_record("a1"), revoked=True)
    assert store.revoke_artifact("a1", "alice") is True  # idempotent
    assert store.list_artifacts("alice")[0].revoked is True


def test_a_revoke_on_one_instance_is_seen_by_the_other_at_once(backend: Backend) -> None:
    a, b = backend.open(), backend.open()
    a.create_artifact(make_record("x1"))
    assert b.get_artifact("x1") == make_record("x1")  # b read it (and would cache it, if any)
    assert b.revoke_artifact("x1", "alice")
    got = a.get_artifact("x1")
    assert got is not None and got.revoked


def test_purge_keeps_artifacts(store: Store) -> None:
    store.create_artifact(make_record("a1", link_mode="public", expires=1.0))
    assert store.purge_expired() == 0
    assert store.get_artifact("a1") is not None  # an expired link still answers 410


# -- documents ----------------------------------------------------------------------------


def test_json_round_trip_scoped_by_owner(store: Store) -> None:
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


def test_json_keeps_strings_exactly(store: Store) -> None:
    """NUL, lone surrogates, astral characters, key order: what was put is what is read."""
    doc = {"z": "\x00nul", "a": "\ud800 lone", "m": "𝄞 ✓ ﬁ", "nested": {"b": [1, 2.5, None]}}
    store.put_json("response", "alice", "r1", doc)
    got = store.get_json("response", "alice", "r1")
    assert got == doc and list(got) == ["z", "a", "m", "nested"]


def test_json_upsert_and_list_newest_first(store: Store) -> None:
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


def test_json_expiry_and_purge(store: Store) -> None:
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


def test_update_json(store: Store) -> None:
    seen: list[Any] = []

    def bump(doc: dict[str, Any] | None) -> dict[str, Any]:
        seen.append(doc)
        return {"n": (doc or {}).get("n", 0) + 1}

    assert store.update_json("session", "alice", "s", bump) == {"n": 1}
    assert store.update_json("session", "alice", "s", bump) == {"n": 2}
    assert seen == [None, {"n": 1}]
    assert store.get_json("session", "bob", "s") is None  # scoped by owner
    # None leaves the document as it is, and returns it
    assert store.update_json("session", "alice", "s", lambda d: None) == {"n": 2}
    assert store.update_json("session", "alice", "absent", lambda d: None) is None
    assert store.get_json("session", "alice", "absent") is None

    def boom(doc: dict[str, Any] | None) -> dict[str, Any]:
        raise RuntimeError("no")

    with pytest.raises(RuntimeError):
        store.update_json("session", "alice", "s", boom)
    assert store.get_json("session", "alice", "s") == {"n": 2}  # rolled back, still usable
    # an expired document reads as absent, and the write gives it the new expiry
    store.put_json("session", "alice", "old", {"n": 41}, expires=1.0)
    assert store.update_json("session", "alice", "old", bump, expires=None) == {"n": 1}
    assert store.get_json("session", "alice", "old") == {"n": 1}
    store.update_json("session", "alice", "old", bump, expires=1.0)
    assert store.get_json("session", "alice", "old") is None


def test_update_json_is_atomic_across_instances(backend: Backend) -> None:
    """Two instances x four threads, 25 increments each, half of them racing to create
    the document: every increment lands (a lost update would show as a lower count)."""
    stores = [backend.open(), backend.open()]

    def bump(doc: dict[str, Any] | None) -> dict[str, Any]:
        return {"n": (doc or {"n": 0})["n"] + 1}

    def work(i: int) -> None:
        for _ in range(25):
            stores[i % 2].update_json("session", "alice", "counter", bump)

    assert together([functools.partial(work, i) for i in range(8)]) == []
    assert stores[0].get_json("session", "alice", "counter") == {"n": 200}


async def test_session_appends_from_two_instances_all_land(backend: Backend) -> None:
    import trio

    from gateway.principals.sessions import Sessions

    one, two = Sessions(backend.open()), Sessions(backend.open())
    async with trio.open_nursery() as nursery:
        for i in range(20):
            target = one if i % 2 else two
            nursery.start_soon(
                target.append, "alice", "s1", [{"role": "user", "content": f"q{i}"}], f"a{i}"
            )
    history = await one.history("alice", "s1")
    assert len(history) == 40
    assert sorted(m["content"] for m in history if m["role"] == "user") == sorted(
        f"q{i}" for i in range(20)
    )
    assert await two.history("bob", "s1") == []


# -- signing keys -------------------------------------------------------------------------


def key(kid: str, active: bool = False, created: int = 1_700_000_000) -> SigningKey:
    return SigningKey(kid, bytes.fromhex(kid) * 8, created, active)


def test_signing_seed_once_and_rotate(backend: Backend) -> None:
    a, b = backend.open(), backend.open()
    assert a.principal_salt() is None and a.active_signing_key() is None
    assert a.list_signing_keys() == []
    salt = b"s" * 32
    with pytest.raises(ValueError):
        a.init_signing([key("00000001"), key("00000002")], salt)  # no active key
    assert a.init_signing([key("00000001"), key("00000002", active=True)], salt)
    assert not b.init_signing([key("0000000f", active=True)], b"t" * 32)  # the first seed won
    assert b.principal_salt() == salt
    assert [k.kid for k in b.list_signing_keys()] == ["00000001", "00000002"]
    assert b.active_signing_key() == key("00000002", active=True)
    assert b.get_signing_key("00000001") == key("00000001").secret
    assert b.get_signing_key("0000000f") is None
    assert "secret" not in repr(b.active_signing_key()) and "\\x" not in repr(key("00000001"))

    b.add_signing_key(key("00000003", active=True, created=1_800_000_000))
    assert a.active_signing_key() == key("00000003", active=True, created=1_800_000_000)
    assert [(k.kid, k.active) for k in a.list_signing_keys()] == [
        ("00000001", False),
        ("00000002", False),
        ("00000003", True),
    ]
    with pytest.raises(ValueError):
        a.add_signing_key(key("00000002", active=True))  # kid taken
    with pytest.raises(ValueError):
        a.retire_signing_key("00000003")  # the active one
    with pytest.raises(ValueError):
        a.retire_signing_key("0000000e")  # unknown
    a.retire_signing_key("00000001")
    assert b.get_signing_key("00000001") is None  # at once, on the other instance
    assert [k.kid for k in b.list_signing_keys()] == ["00000002", "00000003"]


def test_concurrent_rotations_keep_one_active_key(backend: Backend) -> None:
    stores = [backend.open(), backend.open()]
    stores[0].init_signing([key("00000000", active=True)], b"s" * 32)

    def work(i: int) -> None:
        for j in range(5):
            stores[i % 2].add_signing_key(key(f"{i:04x}{j:04x}", active=True))

    assert together([functools.partial(work, i + 1) for i in range(6)]) == []
    keys = stores[1].list_signing_keys()
    assert len(keys) == 31 and sum(k.active for k in keys) == 1
    assert keys[-1].active  # the last one added is the active one


# -- run journal --------------------------------------------------------------------------

T = 1_800_000_000.0


def new_run(run_id: str = "run_1", owner: str = "alice", **kw: Any) -> RunRecord:
    fields: dict[str, Any] = {
        "id": run_id,
        "owner": owner,
        "kind": "run",
        "model": "m",
        "link_mode": "private",
        "status": "running",
        "created": T,
        "summary": {"model": "m"},
        "holder": "A",
        "lease_expires": T + 15,
    }
    fields.update(kw)
    return RunRecord(**fields)


def ev(seq: int, name: str = "message.delta", **fields: Any) -> dict[str, Any]:
    return {"event": name, "run_id": "run_1", "seq": seq, **fields}


def test_run_create_get_scoped(store: Store) -> None:
    store.create_run(new_run())
    got = store.get_run("run_1", "alice")
    assert got == new_run() and got.last_seq == 0 and not got.finished
    assert store.get_run("run_1", "bob") is None
    assert store.get_run("run_2", "alice") is None
    with pytest.raises(ValueError):
        store.create_run(new_run(owner="bob"))
    with pytest.raises(ValueError):
        store.create_run(new_run("run_x", status="paused"))
    with pytest.raises(ValueError):
        store.create_run(new_run("run_y", last_seq=3))


def test_run_events_append_and_read(store: Store) -> None:
    store.create_run(new_run())
    store.append_run_events("run_1", [ev(1, "run.started", model="m")], "A")
    store.append_run_events("run_1", [ev(2, delta="he"), ev(3, delta="llo 𝄞\x00")], "A")
    store.append_run_events("run_1", [], "A")  # nothing read upstream: nothing journaled
    assert store.read_run_events("run_1", 0) == [
        ev(1, "run.started", model="m"),
        ev(2, delta="he"),
        ev(3, delta="llo 𝄞\x00"),
    ]
    # opaque JSON: key order and unknown keys are kept as written
    assert list(store.read_run_events("run_1", 2)[0]) == ["event", "run_id", "seq", "delta"]
    assert store.read_run_events("run_1", 1, limit=1) == [ev(2, delta="he")]
    assert store.read_run_events("run_1", 3) == []
    assert store.read_run_events("nope", 0) == []
    run = store.get_run("run_1", "alice")
    assert run is not None and run.last_seq == 3

    for bad in ([ev(3)], [ev(5)], [ev(4), ev(6)], [{"event": "x"}], [ev(4), {"seq": True}]):
        with pytest.raises(ValueError):
            store.append_run_events("run_1", bad, "A")
    assert [e["seq"] for e in store.read_run_events("run_1", 0)] == [1, 2, 3]  # all or nothing

    with pytest.raises(LeaseLost) as lost:
        store.append_run_events("run_1", [ev(4)], "B")
    assert lost.value.status == 409
    with pytest.raises(LeaseLost):
        store.append_run_events("unknown", [ev(1)], "A")


def test_update_run(store: Store) -> None:
    store.create_run(new_run(status="queued"))
    store.update_run("run_1", "A", status="running")
    store.update_run("run_1", "A", summary={"model": "m", "usage": {"n": 1}})
    run = store.get_run("run_1", "alice")
    assert run is not None and run.status == "running"
    assert run.summary == {"model": "m", "usage": {"n": 1}}
    with pytest.raises(ValueError):
        store.update_run("run_1", "A", status="completed")  # finish_run ends a run
    with pytest.raises(LeaseLost):
        store.update_run("run_1", "B", status="running")


def test_finish_run_is_one_transaction_and_ends_the_lease(store: Store) -> None:
    store.create_run(new_run())
    store.append_run_events("run_1", [ev(1, "run.started")], "A")
    with pytest.raises(ValueError):  # a gap: nothing of the finish happens
        store.finish_run("run_1", "completed", {"output": "x"}, "A", [ev(3, "run.completed")])
    run = store.get_run("run_1", "alice")
    assert run is not None and run.status == "running" and run.holder == "A"
    with pytest.raises(LeaseLost):
        store.finish_run("run_1", "completed", {}, "B", [ev(2, "run.completed")])
    with pytest.raises(ValueError):
        store.finish_run("run_1", "running", {}, "A")

    store.finish_run("run_1", "completed", {"output": "x"}, "A", [ev(2, "run.completed")])
    run = store.get_run("run_1", "alice")
    assert run is not None
    assert (run.status, run.summary, run.holder, run.lease_expires, run.last_seq) == (
        "completed",
        {"output": "x"},
        None,
        None,
        2,
    )
    assert run.finished and run.finished_at is not None and run.finished_at >= T - 10**9
    with pytest.raises(LeaseLost):  # finished: nothing more, from anyone
        store.append_run_events("run_1", [ev(3)], "A")
    with pytest.raises(LeaseLost):
        store.finish_run("run_1", "failed", {}, "A")
    assert store.renew_run_lease("run_1", "A", T + 99) is False
    assert store.interrupt_expired_runs(T + 10**6) == []


def test_renew_lease(store: Store) -> None:
    store.create_run(new_run())
    assert store.renew_run_lease("run_1", "A", T + 30)
    assert store.renew_run_lease("run_1", "B", T + 60) is False
    assert store.renew_run_lease("unknown", "A", T + 60) is False
    run = store.get_run("run_1", "alice")
    assert run is not None and run.lease_expires == T + 30


def test_interrupt_expired_runs(store: Store) -> None:
    store.create_run(new_run("run_1"))  # lease until T+15
    store.append_run_events("run_1", [ev(1, "run.started"), ev(2, delta="partial")], "A")
    store.create_run(new_run("run_2", owner="bob", lease_expires=T + 100))
    store.create_run(new_run("run_3", lease_expires=T + 5, status="queued"))
    store.create_run(new_run("run_4", holder=None, lease_expires=None))  # never leased
    store.create_run(new_run("run_5", lease_expires=T + 1))
    store.finish_run("run_5", "completed", {}, "A", [])

    assert store.interrupt_expired_runs(T) == []
    done = store.interrupt_expired_runs(T + 20)
    assert sorted(done) == [("run_1", "alice", 3), ("run_3", "alice", 1)]
    assert store.read_run_events("run_1", 2) == [
        {"event": "run.failed", "seq": 3, "run_id": "run_1", "error": INTERRUPTED_ERROR}
    ]
    for rid in ("run_1", "run_3"):
        run = store.get_run(rid, "alice")
        assert run is not None and run.status == "interrupted" and run.finished
        assert run.holder is None and run.finished_at == T + 20
    run2 = store.get_run("run_2", "bob")
    assert run2 is not None and run2.status == "running"
    assert store.interrupt_expired_runs(T + 20) == []  # once
    with pytest.raises(LeaseLost):  # the old holder comes back: refused
        store.append_run_events("run_1", [ev(4)], "A")
    assert store.renew_run_lease("run_1", "A", T + 99) is False
    run4 = store.get_run("run_4", "alice")
    assert run4 is not None and run4.status == "running"


def test_runs_the_upstream_runs_are_adopted_not_interrupted(backend: Backend) -> None:
    """A run whose summary names the upstream's own run is adopted (its lease taken by
    one instance, nothing journaled); the others are left for interruption. Two
    instances sweeping at once adopt each run once."""
    stores = [backend.open(), backend.open()]
    for i in range(10):
        stores[0].create_run(new_run(f"run_{i}", lease_expires=T + i / 10))
        if i % 2 == 0:
            stores[0].update_run(f"run_{i}", "A", summary={"upstream_run_id": f"up_{i}"})
    assert stores[0].adopt_expired_runs(T, "B", T + 30) == []  # nothing expired yet
    taken: list[list[str]] = []

    def sweep(i: int) -> None:
        recs = stores[i % 2].adopt_expired_runs(T + 60, f"inst{i}", T + 90)
        taken.append([r.id for r in recs])

    assert together([functools.partial(sweep, i) for i in range(4)]) == []
    adopted = sorted(r for batch in taken for r in batch)
    assert adopted == [f"run_{i}" for i in range(0, 10, 2)]
    for run_id in adopted:
        run = stores[0].get_run(run_id, "alice")
        assert run is not None and not run.finished and run.lease_expires == T + 90
        assert run.summary["upstream_run_id"] == "up_" + run_id[4:]
        assert stores[0].read_run_events(run_id, 0) == []
    interrupted = sorted(r.run_id for r in stores[0].interrupt_expired_runs(T + 60))
    assert interrupted == [f"run_{i}" for i in range(1, 10, 2)]


def test_concurrent_interruption_gives_one_terminal_event(backend: Backend) -> None:
    """Two instances x three threads sweep 30 expired runs at once; meanwhile the old
    holder keeps trying to append. Every run ends with exactly one terminal event."""
    stores = [backend.open(), backend.open()]
    for i in range(30):
        stores[0].create_run(new_run(f"run_{i}", lease_expires=T + i / 10))
        stores[0].append_run_events(f"run_{i}", [ev(1, "run.started")], "A")
    results: list[list[tuple[str, str, int]]] = []

    def sweep(i: int) -> None:
        results.append([tuple(r) for r in stores[i % 2].interrupt_expired_runs(T + 60)])

    def old_holder() -> None:
        for i in range(30):
            with contextlib.suppress(LeaseLost):
                stores[1].append_run_events(f"run_{i}", [ev(2)], "A")

    assert together([*(functools.partial(sweep, i) for i in range(6)), old_holder]) == []
    interrupted = [r for batch in results for r in batch]
    assert sorted(r[0] for r in interrupted) == sorted(f"run_{i}" for i in range(30))
    for run_id, _, seq in interrupted:
        events = stores[0].read_run_events(run_id, 0)
        terminal = [e for e in events if e["event"] == "run.failed"]
        assert len(terminal) == 1 and terminal[0]["seq"] == seq == events[-1]["seq"]
        assert [e["seq"] for e in events] == list(range(1, seq + 1))


def test_purge_runs(store: Store) -> None:
    for i in range(3):
        store.create_run(new_run(f"run_{i}"))
        store.append_run_events(f"run_{i}", [ev(1)], "A")
    store.finish_run("run_0", "completed", {}, "A", [ev(2, "run.completed")])
    store.finish_run("run_1", "failed", {}, "A", [ev(2, "run.failed")])
    finished = store.get_run("run_1", "alice")
    assert finished is not None and finished.finished_at is not None
    assert store.purge_runs(finished.finished_at - 3600) == 0
    assert store.purge_runs(finished.finished_at + 1) == 2
    assert store.get_run("run_0", "alice") is None and store.read_run_events("run_0", 0) == []
    assert store.get_run("run_2", "alice") is not None  # unfinished: kept, events too
    assert len(store.read_run_events("run_2", 0)) == 1
    store.create_run(new_run("run_0"))  # the id is free again, its old events gone
    assert store.read_run_events("run_0", 0) == []


# -- coordination, health, lifetime -------------------------------------------------------


def test_advisory_lock(backend: Backend) -> None:
    a, b = backend.open(), backend.open()
    with a.try_advisory_lock("reaper") as first:
        assert first is True
        with b.try_advisory_lock("reaper") as second:
            # SQLite: one instance per file, so the lock is trivially its own
            assert second is (backend.name == "sqlite")
        with b.try_advisory_lock("other") as other:
            assert other is True
    with b.try_advisory_lock("reaper") as again:
        assert again is True  # released at exit


def test_notifications_only_where_instances_share(store: Store, backend: Backend) -> None:
    source = store.open_notifications(["gateway_runs"])
    assert (source is None) is (backend.name == "sqlite")
    if source is not None:
        source.close()


def test_closed_store_raises_store_error(backend: Backend) -> None:
    s = backend.open()
    s.close()
    s.close()  # idempotent
    assert s.check_writable() is False
    with pytest.raises(StoreError) as info:
        s.get_artifact("a1")
    assert info.value.status == 503 and info.value.code == "store_unavailable"


def test_records_persist_across_reopen(backend: Backend) -> None:
    s = backend.open()
    s.create_artifact(make_record("a1"))
    s.put_json("session", "alice", "s1", {"n": 1})
    s.revoke_artifact("a1", "alice")
    s.create_run(new_run())
    s.close()
    s = backend.open()
    assert s.get_artifact("a1") == make_record("a1", revoked=True)
    assert s.get_json("session", "alice", "s1") == {"n": 1}
    assert s.get_run("run_1", "alice") == new_run()


def test_concurrent_use_from_eight_threads(store: Store) -> None:
    per_thread = 30

    def work(n: int) -> None:
        owner = f"owner{n}"
        for i in range(per_thread):
            store.create_artifact(make_record(f"t{n}-{i}", owner=owner, created=float(i)))
            store.put_json("run", owner, f"r{i}", {"i": i})
            assert store.get_artifact(f"t{n}-{i}") is not None
            assert store.check_writable()
            if i % 10 == 0:
                store.list_artifacts(owner)
                store.revoke_artifact(f"t{n}-{i}", owner)

    t0 = time.monotonic()
    errors = together([functools.partial(work, n) for n in range(8)])
    assert errors == [], time.monotonic() - t0
    for n in range(8):
        owner = f"owner{n}"
        recs = store.list_artifacts(owner, limit=1000)
        assert sorted(r.id for r in recs) == sorted(f"t{n}-{i}" for i in range(per_thread))
        assert sum(r.revoked for r in recs) == per_thread // 10
        assert len(store.list_json("run", owner, limit=1000)) == per_thread


def test_request_run_stop(backend: Backend) -> None:
    a, b = backend.open(), backend.open()
    a.create_run(new_run())
    assert a.run_stop_requested("run_1") is False
    assert b.request_run_stop("run_1", "bob") is False  # someone else's: as if unknown
    assert b.request_run_stop("nope", "alice") is False
    assert a.run_stop_requested("run_1") is False
    assert b.request_run_stop("run_1", "alice") is True  # asked on B, the holder is A
    assert a.run_stop_requested("run_1") is True
    first = a.get_run("run_1", "alice")
    assert first is not None and first.stop_requested is not None
    assert b.request_run_stop("run_1", "alice") is True  # idempotent, the first time kept
    again = a.get_run("run_1", "alice")
    assert again is not None and again.stop_requested == first.stop_requested
    a.finish_run("run_1", "cancelled", {}, "A", [ev(1, "run.cancelled")])
    assert b.request_run_stop("run_1", "alice") is False  # finished: nothing to stop
    assert a.run_stop_requested("unknown") is False


# -- quotas -------------------------------------------------------------------------------


def test_take_quota_counts_per_owner_kind_and_window(store: Store) -> None:
    now = 6000.0  # a window start for 60 s windows
    got = store.take_quota("alice", "links", 5, 60, n=3, now=now + 1)
    assert got == QuotaTake(3, 3, now + 60)
    assert store.take_quota("alice", "links", 5, 60, n=3, now=now + 59) == QuotaTake(2, 5, now + 60)
    assert store.take_quota("alice", "links", 5, 60, now=now + 30).granted == 0  # at the limit
    # other owners, other kinds, the next window: each its own count
    assert store.take_quota("bob", "links", 5, 60, n=5, now=now + 30).granted == 5
    assert store.take_quota("alice", "selftests", 5, 3600, now=now).granted == 1
    assert store.take_quota("alice", "links", 5, 60, n=9, now=now + 60) == QuotaTake(
        5, 5, now + 120
    )
    # a lower limit (configuration changed) grants nothing more, never a negative number
    assert store.take_quota("bob", "links", 2, 60, now=now + 30) == QuotaTake(0, 5, now + 60)
    with pytest.raises(ValueError):
        store.take_quota("alice", "links", 5, 0, now=now)
    assert store.purge_quota_counters(now + 60) == 3  # the three windows that began at 6000
    assert store.take_quota("alice", "links", 5, 60, n=5, now=now + 1).granted == 5


def test_take_quota_never_grants_more_than_the_limit_across_instances(backend: Backend) -> None:
    stores = [backend.open(), backend.open()]
    granted: list[int] = []
    lock = threading.Lock()

    def take(s: Store) -> None:
        for _ in range(15):
            got = s.take_quota("alice", "links", 40, 3600, n=2, now=7200.0)
            with lock:
                granted.append(got.granted)

    assert together([functools.partial(take, stores[i % 2]) for i in range(4)]) == []
    assert sum(granted) == 40 and len(granted) == 60


def test_stored_usage_counts_documents_and_run_journals(store: Store) -> None:
    now = time.time()
    empty = store.stored_usage("alice", now)
    assert empty == StoredUsage(0, None, None)
    store.put_json("session", "alice", "s1", {"m": "x" * 100})
    doc = len('{"m":"' + "x" * 100 + '"}')
    assert store.stored_usage("alice").bytes == doc
    store.update_json("session", "alice", "s1", lambda d: {"m": "y" * 10})
    store.update_json("session", "alice", "s2", lambda d: {"m": "é"})  # JSON: "\u00e9"
    small, accent = len('{"m":"' + "y" * 10 + '"}'), len('{"m":"\\u00e9"}')
    assert store.stored_usage("alice").bytes == small + accent
    store.put_json("response", "alice", "r1", {"a": 1}, expires=now + 100)
    store.put_json("response", "alice", "r0", {"a": 2}, expires=now - 1)  # expired: not counted
    usage = store.stored_usage("alice", now)
    assert usage.bytes == small + accent + len('{"a":1}') and usage.next_expiry == now + 100
    assert store.stored_usage("bob", now) == empty  # scoped by owner
    store.create_run(new_run())
    store.append_run_events("run_1", [ev(1, "run.started"), ev(2, delta="ab")], "A")
    journal = sum(
        len(json.dumps(e, separators=(",", ":"))) for e in [ev(1, "run.started"), ev(2, delta="ab")]
    )
    assert store.stored_usage("alice", now).bytes == small + accent + 7 + journal
    store.finish_run("run_1", "completed", {}, "A", [ev(3, "run.completed")])
    journal += len(json.dumps(ev(3, "run.completed"), separators=(",", ":")))
    usage = store.stored_usage("alice", now)
    assert usage.bytes == small + accent + 7 + journal and usage.oldest_finished is not None
    store.delete_json("session", "alice", "s1")
    assert store.stored_usage("alice", now).bytes == accent + 7 + journal
    store.purge_runs(time.time() + 1)
    assert store.stored_usage("alice", now).bytes == accent + 7


def test_create_run_with_max_active_admits_per_owner(backend: Backend) -> None:
    a, b = backend.open(), backend.open()
    assert a.create_run(new_run("r1", status="queued"), max_active=2) is True
    assert b.create_run(new_run("r2", status="queued"), max_active=2) is True
    assert a.create_run(new_run("r3", status="queued"), max_active=2) is False
    assert a.get_run("r3", "alice") is None
    assert b.create_run(new_run("r4", owner="bob"), max_active=2) is True  # bob's own count
    assert a.create_run(new_run("r5"), max_active=None) is True  # no limit asked
    with pytest.raises(ValueError):
        a.create_run(new_run("r4", owner="bob"), max_active=9)  # a duplicate id
    a.finish_run("r1", "completed", {}, "A", [ev(1, "run.completed", run_id="r1")])
    assert b.create_run(new_run("r6"), max_active=3) is True  # r2, r5 and r6


def test_create_run_admission_is_atomic_across_instances(backend: Backend) -> None:
    stores = [backend.open(), backend.open()]
    results: list[bool] = []

    def create(i: int) -> None:
        rec = new_run(f"c{i}", status="queued")
        results.append(stores[i % 2].create_run(rec, max_active=3))

    assert together([functools.partial(create, i) for i in range(8)]) == []
    assert sorted(results) == [False] * 5 + [True] * 3


def test_claim_run_slot_first_come_first_served(store: Store) -> None:
    for i, created in enumerate((T, T + 1, T + 2)):
        store.create_run(new_run(f"q{i}", status="queued", created=created))
    store.create_run(new_run("busy", status="running"))
    assert store.claim_run_slot("q1", "A", 2) is False  # q0 came first and waits too
    assert store.claim_run_slot("q0", "A", 2) is True
    assert store.claim_run_slot("q0", "A", 2) is True  # running already: stays so
    assert store.claim_run_slot("q1", "A", 2) is False  # busy and q0 run: no slot
    store.finish_run("busy", "completed", {}, "A", [ev(1, "run.completed", run_id="busy")])
    assert store.claim_run_slot("q2", "A", 2) is False  # q1 first
    assert store.claim_run_slot("q1", "A", 2) is True
    run = store.get_run("q1", "alice")
    assert run is not None and run.status == "running"
    with pytest.raises(LeaseLost):
        store.claim_run_slot("q2", "B", 2)
    with pytest.raises(LeaseLost):
        store.claim_run_slot("unknown", "A", 2)


def test_link_records_count_toward_stored_bytes(store: Store) -> None:
    """A principal's links are stored too (red team: shares made rows without bound)."""
    before = store.stored_usage("alice", T).bytes
    for i in range(3):
        store.create_artifact(make_record(f"art{i:020d}"))
    assert store.stored_usage("alice", T).bytes == before + 3 * LINK_RECORD_BYTES
    assert store.stored_usage("bob", T).bytes == 0
