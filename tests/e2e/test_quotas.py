"""Per-principal quotas on one gateway, end to end (issue 33, Build 3).

The chain is real: the demo upstream (for the runs, ``demo-long`` streams 200 deltas,
200 ms apart: a run lasts 40 s unless stopped), the API server and the Open WebUI runs
proxy, each on hypercorn on loopback, SQLite under ``tmp_path``. Every quota refuses
at its limit with 429, its documented code, one sentence and ``Retry-After``, and the
other principals (bob, another Open WebUI user) go on as if nothing happened:

* running and queued background runs (runs, background responses, the proxy's chats):
  a queued run starts once a slot frees;
* stored bytes (stored responses, sessions, run journals): refused before anything is
  stored, free again after a delete;
* links per minute: the paths beyond the quota become their names, the share route 429;
* self-tests per hour;
* a session and a ``previous_response_id`` chain are bounded in bytes, and a stored
  response holds its own turn only.

Two instances on one PostgreSQL: tests/e2e/test_quotas_shared.py.
"""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
import trio

from gateway.api.smoke import SELFTEST_ROUTE
from gateway.core.errors import QuotaExceeded
from tests.conftest import (
    ALICE_KEY,
    BOB_KEY,
    OWUI_KEY,
    Gateway,
    Proxy,
    Upstream,
    make_config,
    proxy_config,
    start_demo_upstream,
    start_gateway,
    start_proxy,
)

USER_A = "3f2b9c1e-8d7a-4e5f-9b1c-2a3d4e5f6a7b"
USER_B = "9a8b7c6d-5e4f-4a3b-8c2d-1e0f9a8b7c6d"
ASK = [{"role": "user", "content": "Tell me a long story."}]


@dataclass
class Chain:
    upstream: Upstream
    gateway: Gateway
    proxy: Proxy


async def start_chain(
    nursery: trio.Nursery, tmp_path: Path, *, delay: float = 0.0, **overrides: Any
) -> Chain:
    up = await start_demo_upstream(nursery, tmp_path, chunk_delay=delay)
    gw = await start_gateway(nursery, make_config(tmp_path, up.url + "/v1", **overrides))
    px = await start_proxy(nursery, proxy_config(tmp_path, up.url + "/v1", gw.url, **overrides))
    return Chain(up, gw, px)


def assert_refused(r: httpx.Response, code: str, *, most_wait: float) -> int:
    """A quota refusal: 429, the code, one sentence, ``Retry-After`` (returned)."""
    assert r.status_code == 429, (r.status_code, r.text)
    err = r.json()["error"]
    assert err["code"] == code and err["type"] == code, err
    message = err["message"]
    assert message.endswith(".") and message.count(". ") == 0 and "\n" not in message, message
    wait = int(r.headers["retry-after"])
    assert 1 <= wait <= most_wait, wait
    return wait


async def fresh_window(seconds: int, need: float = 20.0) -> None:
    """Wait until the current fixed quota window has ``need`` seconds left (a test that
    counts in one window must not straddle two)."""
    left = seconds - time.time() % seconds
    if left < need:
        await trio.sleep(left + 0.1)


def owui(user_id: str) -> dict[str, str]:
    return {
        "Authorization": f"Bearer {OWUI_KEY}",
        "X-OpenWebUI-User-Id": user_id,
        "X-OpenWebUI-User-Name": "user",
        "X-OpenWebUI-User-Email": "user@example.org",
        "X-OpenWebUI-User-Role": "user",
    }


async def run_status(c: httpx.AsyncClient, run_id: str) -> str:
    r = await c.get(f"/v1/runs/{run_id}")
    assert r.status_code == 200, r.text
    status: str = r.json()["status"]
    return status


async def wait_status(c: httpx.AsyncClient, run_id: str, want: str, within: float = 5.0) -> float:
    t0 = time.monotonic()
    with trio.fail_after(within):
        while (status := await run_status(c, run_id)) != want:
            assert status in ("queued", "running"), status
            await trio.sleep(0.05)
    return time.monotonic() - t0


# --------------------------------------------------------------------------- runs


@pytest.fixture
async def small_runs(nursery: trio.Nursery, tmp_path: Path) -> AsyncIterator[Chain]:
    quotas = {"max_running_runs": 2, "max_queued_runs": 1}
    yield await start_chain(nursery, tmp_path, delay=0.2, quotas=quotas)


async def test_runs_beyond_running_wait_and_beyond_the_queue_are_refused(
    small_runs: Chain,
) -> None:
    gw = small_runs.gateway
    async with gw.client(ALICE_KEY) as alice, gw.client(BOB_KEY) as bob:
        ids = []
        for _ in range(3):
            r = await alice.post("/v1/runs", json={"model": "demo-long", "input": "go"})
            assert r.status_code == 202, r.text
            ids.append(r.json()["run_id"])
        await wait_status(alice, ids[0], "running")
        await wait_status(alice, ids[1], "running")
        await trio.sleep(1.2)  # a slot poll or more: the third still waits
        assert await run_status(alice, ids[2]) == "queued"

        # the fourth: refused, and so is a background response (one pool per principal)
        r = await alice.post("/v1/runs", json={"model": "demo-long", "input": "go"})
        assert assert_refused(r, "run_quota_exceeded", most_wait=5) == 5
        r = await alice.post(
            "/v1/responses", json={"model": "demo-long", "input": "go", "background": True}
        )
        assert_refused(r, "run_quota_exceeded", most_wait=5)
        assert "3 background runs" in r.json()["error"]["message"]

        # bob is not alice: his run starts at once
        r = await bob.post("/v1/runs", json={"model": "demo-long", "input": "go"})
        assert r.status_code == 202
        bobs = r.json()["run_id"]
        await wait_status(bob, bobs, "running", within=3)
        assert (await alice.get(f"/v1/runs/{bobs}")).status_code == 404

        # a running one stops: the queued one takes its slot at once (same instance)
        r = await alice.post(f"/v1/runs/{ids[0]}/stop")
        assert r.status_code == 200 and r.json()["status"] == "cancelled"
        waited = await wait_status(alice, ids[2], "running", within=3)
        print(f"\nthe queued run started {waited * 1000:.0f} ms after the stop answered")
        # and the journal says so: run.started once it runs
        for _ in range(100):
            journal = gw.app.gateway.store.read_run_events(ids[2], 0, 10)
            if journal:
                break
            await trio.sleep(0.05)
        assert journal and journal[0]["event"] == "run.started"

        # a queued run that is stopped ends cancelled without ever running
        r = await alice.post("/v1/runs", json={"model": "demo-long", "input": "go"})
        assert r.status_code == 202
        queued = r.json()["run_id"]
        await trio.sleep(0.3)
        assert await run_status(alice, queued) == "queued"
        r = await alice.post(f"/v1/runs/{queued}/stop")
        assert r.json()["status"] == "cancelled"
        for run_id in (ids[1], ids[2], bobs):
            await (bob if run_id == bobs else alice).post(f"/v1/runs/{run_id}/stop")


async def test_the_proxys_chats_count_per_open_webui_user(small_runs: Chain) -> None:
    """Open WebUI users are principals of their own (``openwebui:<id>``): user A at its
    limit gets 429 with Retry-After through the proxy, user B and alice go on."""
    px, gw = small_runs.proxy, small_runs.gateway
    opened: list[int] = []
    three = trio.Event()

    async def chat(user: str) -> None:
        body = {"model": "demo-long", "messages": ASK, "stream": True}
        async with (
            px.client(key=None) as c,
            c.stream("POST", "/v1/chat/completions", json=body, headers=owui(user)) as r,
        ):
            opened.append(r.status_code)
            if len(opened) == 3:
                three.set()
            async for _ in r.aiter_raw():
                pass

    async with trio.open_nursery() as nursery:
        for _ in range(3):  # two run, one waits
            nursery.start_soon(chat, USER_A)
        with trio.fail_after(5):
            await three.wait()
        assert opened == [200, 200, 200]
        async with px.client(key=None) as c:
            r = await c.post(
                "/v1/chat/completions",
                json={"model": "demo-long", "messages": ASK, "stream": True},
                headers=owui(USER_A),
            )
            assert_refused(r, "run_quota_exceeded", most_wait=5)
            # another Open WebUI user, and a key of the gateway: unaffected
            r = await c.post(
                "/v1/chat/completions",
                json={"model": "demo", "messages": ASK, "stream": True},
                headers=owui(USER_B),
            )
            assert r.status_code == 200 and r.text.rstrip().endswith("data: [DONE]")
        async with gw.client(ALICE_KEY) as alice:
            r = await alice.post("/v1/runs", json={"model": "demo", "input": "go"})
            assert r.status_code == 202
        nursery.cancel_scope.cancel()  # Open WebUI's users close their chats
    # the proxy stops the runs of closed chats: user A can chat again
    async with px.client(key=None) as c:
        with trio.fail_after(10):
            for _ in range(100):
                r = await c.post(
                    "/v1/chat/completions",
                    json={"model": "demo", "messages": ASK, "stream": True},
                    headers=owui(USER_A),
                )
                if r.status_code == 200:
                    break
                assert_refused(r, "run_quota_exceeded", most_wait=5)
                await trio.sleep(0.1)
        assert r.status_code == 200


# --------------------------------------------------------------------------- stored bytes


async def test_stored_bytes_refuse_what_would_store_more(
    nursery: trio.Nursery, tmp_path: Path
) -> None:
    chain = await start_chain(nursery, tmp_path, quotas={"max_stored_bytes": 40_000})
    gw = chain.gateway
    big = "word " * 3000  # 15 KB of input, stored with its response
    async with gw.client(ALICE_KEY) as alice, gw.client(BOB_KEY) as bob:
        kept = []
        for _ in range(3):
            r = await alice.post("/v1/responses", json={"model": "demo", "input": big})
            assert r.status_code == 200, r.text
            kept.append(r.json()["id"])
        usage = gw.app.gateway.store.stored_usage("alice")
        assert usage.bytes >= 40_000
        r = await alice.post("/v1/responses", json={"model": "demo", "input": "hi"})
        wait = assert_refused(r, "storage_quota_exceeded", most_wait=86400)
        assert wait >= 60  # the earliest expiry is a month away: a day at most
        message = r.json()["error"]["message"]
        assert "MiB" in message and "DELETE /v1/responses/{id}" in message
        # everything else that stores is refused too, before the upstream is asked
        asked = len(chain.upstream.app.demo_log)
        chat = {"model": "demo", "messages": ASK, "stream": False}
        r = await alice.post("/v1/chat/completions", json=chat, headers={"X-Session-Id": "s1"})
        assert_refused(r, "storage_quota_exceeded", most_wait=86400)
        r = await alice.post("/v1/runs", json={"model": "demo", "input": "go"})
        assert_refused(r, "storage_quota_exceeded", most_wait=86400)
        r = await alice.post(
            "/v1/responses", json={"model": "demo", "input": "go", "background": True}
        )
        assert_refused(r, "storage_quota_exceeded", most_wait=86400)
        assert len(chain.upstream.app.demo_log) == asked
        # what stores nothing still works
        r = await alice.post("/v1/chat/completions", json=chat)
        assert r.status_code == 200
        r = await alice.post("/v1/responses", json={"model": "demo", "input": "hi", "store": False})
        assert r.status_code == 200
        # bob stores as he likes
        r = await bob.post("/v1/responses", json={"model": "demo", "input": big})
        assert r.status_code == 200
        # a delete makes room again
        for rid in kept[:2]:
            assert (await alice.delete(f"/v1/responses/{rid}")).status_code == 200
        r = await alice.post("/v1/responses", json={"model": "demo", "input": "hi"})
        assert r.status_code == 200


# --------------------------------------------------------------------------- links


async def test_links_beyond_the_minute_become_names(nursery: trio.Nursery, tmp_path: Path) -> None:
    chain = await start_chain(nursery, tmp_path, quotas={"links_per_minute": 3})
    gw, files = chain.gateway, chain.upstream.app.demo_files
    chat = {"model": "demo", "messages": ASK, "stream": False}
    await fresh_window(60)
    async with gw.client(ALICE_KEY) as alice, gw.client(BOB_KEY) as bob:
        r = await alice.post("/v1/chat/completions", json=chat)
        first = r.json()
        minted = first["gateway"]["artifacts"]
        assert len(minted) == 3, minted
        text = first["choices"][0]["message"]["content"]
        named = {p.name for p in files.in_root} - {a["filename"] for a in minted}
        assert len(named) == 1 and next(iter(named)) in text  # the fourth: its name
        for folder in {str(p.parent) for p in files.in_root}:
            assert folder not in text
        again = (await alice.post("/v1/chat/completions", json=chat)).json()
        assert again["gateway"]["artifacts"] == []
        # the share route mints a link too: refused with the minute's end
        r = await alice.post(f"/v1/artifacts/{minted[0]['id']}/share")
        assert_refused(r, "link_quota_exceeded", most_wait=60)
        # bob's links are his own count
        r = await bob.post("/v1/chat/completions", json=chat)
        assert len(r.json()["gateway"]["artifacts"]) == 3
        # alice's links still download
        assert (await alice.get(minted[0]["url"].split("8642", 1)[1])).status_code == 200


# --------------------------------------------------------------------------- self-tests


async def test_selftests_per_hour(nursery: trio.Nursery, tmp_path: Path) -> None:
    chain = await start_chain(nursery, tmp_path, quotas={"selftests_per_hour": 2})
    gw = chain.gateway
    await fresh_window(3600)
    async with gw.client(ALICE_KEY) as alice, gw.client(BOB_KEY) as bob:
        for i in range(2):
            r = await alice.post(SELFTEST_ROUTE, json={"nonce": f"{i:032x}"})
            assert r.status_code == 200, r.text
        r = await alice.post(SELFTEST_ROUTE, json={"nonce": "f" * 32})
        assert_refused(r, "selftest_quota_exceeded", most_wait=3600)
        folder = tmp_path / "artifacts" / ".gateway-selftest"
        assert sorted(p.name for p in folder.iterdir()) == [
            f"artifact-gateway-selftest-{i:032x}.txt" for i in range(2)
        ]
        r = await bob.post(SELFTEST_ROUTE, json={"nonce": "e" * 32})
        assert r.status_code == 200


# --------------------------------------------------------------------------- history bounds


def upstream_messages(up: Upstream, since: int) -> list[dict[str, Any]]:
    sent = [e for e in up.app.demo_log[since:] if e["path"].endswith("/chat/completions")]
    messages: list[dict[str, Any]] = sent[-1]["body"]["messages"]
    return messages


def weight(messages: list[dict[str, Any]]) -> int:
    return sum(len(json.dumps(m, separators=(",", ":"))) for m in messages)


async def test_a_session_is_bounded_in_bytes(nursery: trio.Nursery, tmp_path: Path) -> None:
    chain = await start_chain(nursery, tmp_path, limits={"history_max_bytes": 6000})
    gw, up = chain.gateway, chain.upstream
    async with gw.client(ALICE_KEY) as alice:
        for turn in range(5):
            since = len(up.app.demo_log)
            ask = [{"role": "user", "content": f"turn {turn} " + "x" * 1500}]
            r = await alice.post(
                "/v1/chat/completions",
                json={"model": "demo", "messages": ask, "stream": False},
                headers={"X-Session-Id": "long"},
            )
            assert r.status_code == 200
            sent = upstream_messages(up, since)
            assert weight(sent[:-1]) <= 6000  # the history before the new message
        session = (await alice.get("/v1/sessions/long")).json()
        assert weight(session["messages"]) <= 6000
        assert session["messages"][-2]["content"].startswith("turn 4 ")  # the newest kept
        assert not any(m["content"].startswith("turn 0 ") for m in session["messages"])


async def test_a_response_chain_stores_each_turn_once(
    nursery: trio.Nursery, tmp_path: Path
) -> None:
    """Each stored response holds its own input; the chain is walked back for the next
    turn, bounded by ``limits.history_max_bytes``, and ends at a deleted predecessor."""
    chain = await start_chain(nursery, tmp_path, limits={"history_max_bytes": 20_000})
    gw, up = chain.gateway, chain.upstream
    store = gw.app.gateway.store
    async with gw.client(ALICE_KEY) as alice, gw.client(BOB_KEY) as bob:
        prev: str | None = None
        ids = []
        for turn in range(4):
            body: dict[str, Any] = {"model": "demo", "input": f"turn {turn} " + "y" * 6000}
            if prev:
                body["previous_response_id"] = prev
            r = await alice.post("/v1/responses", json=body)
            assert r.status_code == 200, r.text
            prev = r.json()["id"]
            ids.append(prev)
        docs = [store.get_json("response", "alice", rid) for rid in ids]
        for turn, doc in enumerate(docs):
            assert doc is not None and "messages" not in doc
            text = json.dumps(doc)
            assert f"turn {turn} " in text
            assert not any(f"turn {other} " in text for other in range(4) if other != turn)
        assert [d["previous_response_id"] for d in docs] == [None, *ids[:-1]]

        since = len(up.app.demo_log)
        r = await alice.post(
            "/v1/responses",
            json={"model": "demo", "input": "and now?", "previous_response_id": prev},
        )
        assert r.status_code == 200
        sent = upstream_messages(up, since)
        users = [m["content"][:6] for m in sent if m["role"] == "user"]
        # 4 turns of ~6 KB (and the answers) do not fit in 20 KB: the newest that fit,
        # whole turns, in order
        turns = ["turn 0", "turn 1", "turn 2", "turn 3"]
        assert users[-1] == "and no" and 2 <= len(users) - 1 < 4, users
        assert users[:-1] == turns[-(len(users) - 1) :], users
        assert weight(sent[:-1]) <= 20_000

        # a deleted predecessor ends the conversation there
        assert (await alice.delete(f"/v1/responses/{ids[2]}")).status_code == 200
        since = len(up.app.demo_log)
        r = await alice.post(
            "/v1/responses",
            json={"model": "demo", "input": "and now?", "previous_response_id": prev},
        )
        assert r.status_code == 200
        users = [m["content"][:6] for m in upstream_messages(up, since) if m["role"] == "user"]
        assert users == ["turn 3", "and no"]

        # a response stored by an older release (the whole conversation) still chains
        legacy = {
            "response": {"id": "resp_old", "output_text": "old answer"},
            "messages": [
                {"role": "user", "content": "old question"},
                {"role": "assistant", "content": "old answer"},
            ],
        }
        store.put_json("response", "alice", "resp_old", legacy)
        since = len(up.app.demo_log)
        r = await alice.post(
            "/v1/responses",
            json={"model": "demo", "input": "next", "previous_response_id": "resp_old"},
        )
        assert r.status_code == 200
        sent = upstream_messages(up, since)
        assert [m["content"] for m in sent] == ["old question", "old answer", "next"]

        # bob cannot chain onto alice's response
        r = await bob.post(
            "/v1/responses", json={"model": "demo", "input": "x", "previous_response_id": prev}
        )
        assert r.status_code == 404 and r.json()["error"]["code"] == "response_not_found"


def test_quota_refusal_retry_after_is_whole_seconds() -> None:
    assert QuotaExceeded("x.", code="c", retry_after=0.2).retry_after == 1
    assert QuotaExceeded("x.", code="c", retry_after=59.01).retry_after == 60
    assert QuotaExceeded("x.", code="c", retry_after=-5).retry_after == 1


async def test_requests_admitted_at_once_count_each_other(
    nursery: trio.Nursery, tmp_path: Path
) -> None:
    """Twenty 300 kB requests at once against a 1 MiB store: those admitted while the
    others run reserve their bytes, so the principal ends above the limit by one
    request at most (red team: all twenty were admitted, 17 times the limit)."""
    chain = await start_chain(nursery, tmp_path, quotas={"max_stored_bytes": 1 << 20})
    gw = chain.gateway
    big = "w" * 300_000
    statuses: list[int] = []

    async def one() -> None:
        async with gw.client(ALICE_KEY) as alice:
            r = await alice.post("/v1/responses", json={"model": "demo", "input": big})
            statuses.append(r.status_code)

    async with trio.open_nursery() as n:
        for _ in range(20):
            n.start_soon(one)
    assert sorted(set(statuses)) == [200, 429]
    stored = gw.app.gateway.store.stored_usage("alice").bytes
    assert stored <= (1 << 20) + 400_000, stored
