"""Per-principal quotas across two instances on one PostgreSQL (issue 33, Build 3).

Two real ``gateway run`` processes (``A`` and ``B``, :mod:`harness.instances`) share a
copy of the session cluster's migrated database; the demo upstream runs in a third
process (``demo-long``: 200 deltas 200 ms apart, a 40 s run unless stopped). Each
quota is counted in the database, so a principal gets one limit over both instances,
whichever instance its requests reach, and the other principal is never refused:

* runs: ``max_running_runs = 1``, ``max_queued_runs = 1``: alice's second run (on B)
  waits while her first runs on A, a third is refused on either; bob's runs at once;
  stopping A's run (from B) lets B's queued run start;
* links: ``links_per_minute = 3`` over A and B together;
* self-tests: ``selftests_per_hour = 2`` over A and B together;
* stored bytes: ``max_stored_bytes = 40000``: stored on A, refused on B.

Also: ``gateway run`` warns at start when its config file holding keys is readable by
others (A's is 0644, B's 0600).
"""

from __future__ import annotations

import secrets
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
import trio

from harness.instances import GatewayProcess, UpstreamProcess, start_all, stop_all
from harness.pgcluster import PgCluster
from tests.conftest import ALICE_KEY, BOB_KEY, PG_TEMPLATE
from tests.e2e.test_quotas import assert_refused, fresh_window

PUBLIC = "http://gateway.test"
QUOTAS = {
    "max_running_runs": 1,
    "max_queued_runs": 1,
    "links_per_minute": 3,
    "selftests_per_hour": 2,
    "max_stored_bytes": 40_000,
}


@dataclass
class Fleet:
    upstream: UpstreamProcess
    a: GatewayProcess
    b: GatewayProcess


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory, pg_cluster: PgCluster) -> Iterator[Fleet]:
    name = "quota_" + secrets.token_hex(4)
    url = pg_cluster.create_database(name, template=PG_TEMPLATE)
    base = tmp_path_factory.mktemp("quotas")
    root = base / "artifacts"
    upstream = UpstreamProcess(root, base / "upstream.log", chunk_delay=0.2)
    keys = [(ALICE_KEY, "alice", "user"), (BOB_KEY, "bob", "user")]
    instances: list[GatewayProcess] = []
    try:
        upstream.start()
        a, b = instances = [
            GatewayProcess.create(
                base / inst,
                name=inst,
                upstream_url=upstream.url + "/v1",
                roots=[root],
                keys=keys,
                database_url=url,
                public_base_url=PUBLIC,
                sections={"quotas": QUOTAS, "server": {"drain_timeout_seconds": 2.0}},
            )
            for inst in ("a", "b")
        ]
        a.config.chmod(0o644)
        b.config.chmod(0o600)
        start_all([a, b])
        yield Fleet(upstream, a, b)
    finally:
        stop_all(instances)
        upstream.stop()
        pg_cluster.drop_database(name)


def client(inst: GatewayProcess, key: str = ALICE_KEY) -> httpx.AsyncClient:
    return httpx.AsyncClient(
        base_url=inst.url, headers={"Authorization": f"Bearer {key}"}, timeout=10
    )


async def start_run(inst: GatewayProcess, key: str = ALICE_KEY) -> httpx.Response:
    async with client(inst, key) as c:
        return await c.post("/v1/runs", json={"model": "demo-long", "input": "go"})


async def status(inst: GatewayProcess, run_id: str, key: str = ALICE_KEY) -> str:
    async with client(inst, key) as c:
        r = await c.get(f"/v1/runs/{run_id}")
    assert r.status_code == 200, r.text
    value: str = r.json()["status"]
    return value


async def wait_status(
    inst: GatewayProcess, run_id: str, want: str, key: str = ALICE_KEY, within: float = 5.0
) -> float:
    t0 = time.monotonic()
    with trio.fail_after(within):
        while (now := await status(inst, run_id, key)) != want:
            assert now in ("queued", "running"), now
            await trio.sleep(0.05)
    return time.monotonic() - t0


def test_a_config_file_others_can_read_is_warned_about_at_start(fleet: Fleet) -> None:
    a_log, b_log = fleet.a.tail(100_000), fleet.b.tail(100_000)
    assert "is readable by every user of this host (mode 0644)" in a_log
    assert "auth.keys[0].key, auth.keys[1].key" in a_log and ALICE_KEY not in a_log
    assert "is readable by" not in b_log


async def test_runs_quota_is_one_over_both_instances(fleet: Fleet) -> None:
    a, b = fleet.a, fleet.b
    first = await start_run(a)
    assert first.status_code == 202, first.text
    r1 = first.json()["run_id"]
    await wait_status(a, r1, "running")
    second = await start_run(b)  # on the other instance: waits for alice's slot
    assert second.status_code == 202
    r2 = second.json()["run_id"]
    await trio.sleep(1.5)
    assert await status(a, r2) == "queued"
    for inst in (a, b):
        assert_refused(await start_run(inst), "run_quota_exceeded", most_wait=5)
    bobs = await start_run(b, BOB_KEY)
    assert bobs.status_code == 202
    rb = bobs.json()["run_id"]
    await wait_status(b, rb, "running", BOB_KEY)

    async with client(b) as c:  # stopped from B, it ran on A
        r = await c.post(f"/v1/runs/{r1}/stop")
        assert r.json()["status"] == "cancelled"
    waited = await wait_status(a, r2, "running", within=4)
    print(f"\nB's queued run started {waited * 1000:.0f} ms after A's run was stopped")
    async with client(a) as c:
        await c.post(f"/v1/runs/{r2}/stop")
    async with client(a, BOB_KEY) as c:
        await c.post(f"/v1/runs/{rb}/stop")


async def test_links_per_minute_over_both_instances(fleet: Fleet) -> None:
    chat = {"model": "demo", "messages": [{"role": "user", "content": "hi"}], "stream": False}
    await fresh_window(60)
    async with client(fleet.a) as alice_a, client(fleet.b) as alice_b:
        r = await alice_a.post("/v1/chat/completions", json=chat)
        assert len(r.json()["gateway"]["artifacts"]) == 3  # of the demo's four files
        r = await alice_b.post("/v1/chat/completions", json=chat)
        assert r.json()["gateway"]["artifacts"] == []
    async with client(fleet.b, BOB_KEY) as bob:
        r = await bob.post("/v1/chat/completions", json=chat)
        assert len(r.json()["gateway"]["artifacts"]) == 3


async def test_selftests_per_hour_over_both_instances(fleet: Fleet) -> None:
    await fresh_window(3600)
    for inst, nonce in ((fleet.a, "a" * 32), (fleet.b, "b" * 32)):
        async with client(inst) as c:
            r = await c.post("/v1/selftest", json={"nonce": nonce})
            assert r.status_code == 200, r.text
    async with client(fleet.a) as c:
        r = await c.post("/v1/selftest", json={"nonce": "c" * 32})
        assert_refused(r, "selftest_quota_exceeded", most_wait=3600)
    async with client(fleet.b, BOB_KEY) as c:
        assert (await c.post("/v1/selftest", json={"nonce": "d" * 32})).status_code == 200


async def test_stored_bytes_over_both_instances(fleet: Fleet, tmp_path: Path) -> None:
    big = "word " * 4000  # 20 KB stored with each response
    async with client(fleet.a) as alice_a:
        for _ in range(2):
            r = await alice_a.post("/v1/responses", json={"model": "demo", "input": big})
            assert r.status_code == 200, r.text
    async with client(fleet.b) as alice_b:
        r = await alice_b.post("/v1/responses", json={"model": "demo", "input": "hi"})
        assert_refused(r, "storage_quota_exceeded", most_wait=86400)
    async with client(fleet.b, BOB_KEY) as bob:
        r = await bob.post("/v1/responses", json={"model": "demo", "input": "hi"})
        assert r.status_code == 200
