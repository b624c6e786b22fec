"""Several instances on one PostgreSQL, end to end over real processes.

Two ``gateway run`` processes (``A`` and ``B``, :mod:`harness.instances`), each with
its own ``state_dir``, share one PostgreSQL database (a copy of the session cluster's
migrated template); the demo upstream (:mod:`gateway.cli.demo_upstream`, 20 ms between
body writes: ``demo-long`` lasts about 4 s) runs in a third process. The clients are
this test process (httpx, and the ``openai`` SDK for ``starting_after``). What each
test shows:

* links and sessions: a link minted on A downloads on B (public: by its signature;
  private: for its owner only); revoked on B, A refuses it at once (410); a session
  written on A is read and continued on B;
* a run started on A is followed live from B: every event, and promptly (LISTEN/NOTIFY;
  the delay against a follower on A itself is measured and printed; a polling follower
  would lag by up to its 5 s safety re-read);
* ``POST /v1/runs/{id}/stop`` on B stops a run executing on A (the holder is told by
  NOTIFY, the run ends ``run.cancelled``);
* a background Response started on B resumes on A with ``starting_after`` (OpenAI
  ``sequence_number`` semantics: the events after N, each once), and ``POST
  /v1/responses/{id}/cancel`` on A stops one running on B;
* A is SIGKILLed while it runs a run and a background response: the clients resume on
  B (``Last-Event-ID``, ``starting_after``) and get every event exactly once and a
  terminal event (``run_interrupted``, status ``interrupted``) within the documented
  bound ``runs.lease_seconds + lease_seconds / 3`` (``lease_seconds = 3`` here).

The processes are started once for the module (about 2 s); a test that killed one
gets it back from the ``fleet`` fixture before the next test.
"""

from __future__ import annotations

import json
import secrets
import statistics
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import httpx2
import openai
import pytest
import trio

from gateway.cli.demo_upstream import demo_long_delta
from gateway.core.sse import SSEDecoder
from harness.instances import GatewayProcess, UpstreamProcess, start_all, stop_all
from harness.pgcluster import PgCluster
from tests.conftest import ALICE_KEY, BOB_KEY, PG_TEMPLATE
from tests.helpers import SDK_WARNINGS

LEASE = 3.0
#: the documented interruption bound (docs/deployment.md): lease + lease / 3
BOUND = LEASE + LEASE / 3
PUBLIC = "http://gateway.test"  # both instances' public_base_url (the load balancer)
LONG_TEXT = "".join(demo_long_delta(i) for i in range(200))  # demo-long's answer
RUN_TERMINALS = ("run.completed", "run.failed", "run.cancelled")
RESPONSE_TERMINALS = ("response.completed", "response.failed", "response.cancelled")


@dataclass
class Fleet:
    upstream: UpstreamProcess
    a: GatewayProcess
    b: GatewayProcess
    root: Path  # the artifact root both instances (and the upstream) use
    database_url: str


@pytest.fixture(scope="module")
def database(pg_cluster: PgCluster) -> Iterator[str]:
    name = "multi_" + secrets.token_hex(4)
    url = pg_cluster.create_database(name, template=PG_TEMPLATE)
    try:
        yield url
    finally:
        pg_cluster.drop_database(name)


@pytest.fixture(scope="module")
def fleet_started(tmp_path_factory: pytest.TempPathFactory, database: str) -> Iterator[Fleet]:
    base = tmp_path_factory.mktemp("multi")
    root = base / "artifacts"
    upstream = UpstreamProcess(root, base / "upstream.log", chunk_delay=0.02)
    upstream.start()
    keys = [(ALICE_KEY, "alice", "user"), (BOB_KEY, "bob", "user")]
    sections = {
        "runs": {"lease_seconds": LEASE},
        "server": {"drain_timeout_seconds": 3.0},
    }
    a, b = (
        GatewayProcess.create(
            base / name,
            name=name,
            upstream_url=upstream.url + "/v1",
            roots=[root],
            keys=keys,
            database_url=database,
            public_base_url=PUBLIC,
            sections=sections,
        )
        for name in ("a", "b")
    )
    try:
        start_all([a, b])
        yield Fleet(upstream, a, b, root, database)
    finally:
        stop_all([a, b])
        upstream.stop()


@pytest.fixture
def fleet(fleet_started: Fleet) -> Fleet:
    """Both instances up (one a previous test killed is started again)."""
    for inst in (fleet_started.a, fleet_started.b):
        if not inst.alive:
            inst.start()
            inst.wait_ready()
    return fleet_started


def client(inst: GatewayProcess, key: str = ALICE_KEY) -> httpx.AsyncClient:
    return httpx.AsyncClient(
        base_url=inst.url,
        headers={"Authorization": f"Bearer {key}"},
        timeout=httpx.Timeout(10, read=30),
    )


def on(inst: GatewayProcess, link: str) -> str:
    """A minted link (public base URL) as a URL of ``inst``."""
    assert link.startswith(PUBLIC + "/v1/artifacts/"), link
    return inst.url + link[len(PUBLIC) :]


# -- SSE reading with arrival times ---------------------------------------------------------


@dataclass
class Stream:
    """What one SSE client saw: each event's JSON with its arrival time (monotonic)."""

    status: int = 0
    events: list[dict[str, Any]] = field(default_factory=list)
    ids: list[str] = field(default_factory=list)
    times: list[float] = field(default_factory=list)
    broken: str = ""  # the transport error that ended it, if any
    done: trio.Event = field(default_factory=trio.Event)
    grew: trio.Event = field(default_factory=trio.Event)

    def seqs(self) -> list[int]:
        return [int(e["seq"]) for e in self.events]

    def numbers(self) -> list[int]:
        return [int(e["sequence_number"]) for e in self.events]

    async def wait_events(self, n: int, limit: float = 10.0) -> None:
        with trio.fail_after(limit):
            while len(self.events) < n and not self.done.is_set():
                self.grew = trio.Event()
                await self.grew.wait()
        assert len(self.events) >= n, (self.status, self.broken, self.events[-1:])


async def read_stream(
    inst: GatewayProcess,
    path: str,
    got: Stream,
    *,
    headers: dict[str, str] | None = None,
    until: Callable[[Stream], bool] | None = None,
) -> Stream:
    """GET an SSE route of ``inst`` to its end, or until ``until`` (left by cancellation:
    breaking out of httpx's generators would abandon them), or until the connection
    breaks (a killed instance)."""
    decoder = SSEDecoder()
    try:
        with trio.CancelScope() as reading:
            async with (
                client(inst) as c,
                c.stream("GET", path, headers=headers) as resp,
            ):
                got.status = resp.status_code
                if resp.status_code != 200:
                    await resp.aread()
                    got.broken = resp.text
                    return got
                async for piece in resp.aiter_raw():
                    now = time.monotonic()
                    for ev in decoder.feed(piece):
                        got.events.append(json.loads(ev.data))
                        got.ids.append(ev.id)
                        got.times.append(now)
                    got.grew.set()
                    if until is not None and until(got):
                        reading.cancel()
    except httpx.TransportError as exc:
        got.broken = type(exc).__name__
    finally:
        got.done.set()
        got.grew.set()
    return got


def follow(
    nursery: trio.Nursery,
    inst: GatewayProcess,
    path: str,
    *,
    headers: dict[str, str] | None = None,
    until: Callable[[Stream], bool] | None = None,
) -> Stream:
    got = Stream()
    nursery.start_soon(lambda: read_stream(inst, path, got, headers=headers, until=until))
    return got


async def start_run(inst: GatewayProcess, model: str = "demo-long") -> str:
    async with client(inst) as c:
        got = await c.post("/v1/runs", json={"model": model, "input": "Count for me."})
    assert got.status_code == 202, got.text
    run_id: str = got.json()["run_id"]
    return run_id


async def start_background(inst: GatewayProcess) -> str:
    async with client(inst) as c:
        got = await c.post(
            "/v1/responses",
            json={"model": "demo-long", "input": "Count for me.", "background": True},
        )
    assert got.status_code == 200, got.text
    body = got.json()
    assert body["status"] == "queued" and body["background"] is True
    response_id: str = body["id"]
    return response_id


async def get_json(inst: GatewayProcess, path: str) -> dict[str, Any]:
    async with client(inst) as c:
        got = await c.get(path)
    assert got.status_code == 200, got.text
    body: dict[str, Any] = got.json()
    return body


def run_text(events: list[dict[str, Any]]) -> str:
    return "".join(e["delta"] for e in events if e["event"] == "message.delta")


def response_text(events: list[dict[str, Any]]) -> str:
    return "".join(e["delta"] for e in events if e["type"] == "response.output_text.delta")


def report(what: str, **figures: float) -> None:
    """Print the figures (``pytest -s`` shows them; docs/deployment.md quotes them)."""
    cells = ", ".join(
        f"{k} {v * 1000:.1f} ms" if k != "n" else f"n {v:.0f}" for k, v in figures.items()
    )
    print(f"\n[multi-instance] {what}: {cells}")


# -- links, revocations, sessions -----------------------------------------------------------


async def test_links_and_sessions_across_instances(fleet: Fleet) -> None:
    a, b = fleet.a, fleet.b
    body = {"model": "demo", "messages": [{"role": "user", "content": "Make me a report."}]}
    async with client(a) as ca:
        pub = await ca.post("/v1/chat/completions", json={**body, "download_link_mode": "public"})
        priv = await ca.post("/v1/chat/completions", json=body)
    assert pub.status_code == priv.status_code == 200, (pub.text, priv.text)
    public = {x["filename"]: x for x in pub.json()["gateway"]["artifacts"]}
    private = {x["filename"]: x for x in priv.json()["gateway"]["artifacts"]}
    assert set(public) == set(private) >= {"report.pdf", "plot.png"}
    assert all(x["link_mode"] == "public" and "&sig=" in x["url"] for x in public.values())

    async with (
        httpx.AsyncClient(timeout=10) as anon,
        client(b) as alice_b,
        client(b, BOB_KEY) as bob_b,
    ):
        # minted on A, served by B: a public link by its signature alone...
        files = {p.name: p.read_bytes() for p in fleet.root.rglob("*") if p.is_file()}
        for name, art in public.items():
            got = await anon.get(on(b, art["url"]))
            assert got.status_code == 200, (name, got.text)
            assert got.content == files[name]
        # ...a private one to its owner only
        link = private["report.pdf"]["url"]
        assert (await alice_b.get(on(b, link))).status_code == 200
        assert (await bob_b.get(on(b, link))).status_code == 404
        assert (await anon.get(on(b, link))).status_code == 401

        # revoked on B: A refuses both at once
        for art in (public["report.pdf"], private["report.pdf"]):
            assert (await alice_b.delete(f"/v1/artifacts/{art['id']}")).status_code == 200
        async with client(a) as alice_a:
            gone_pub = await anon.get(on(a, public["report.pdf"]["url"]))
            gone_priv = await alice_a.get(on(a, link))
            listing = (await alice_a.get("/v1/artifacts")).json()["data"]
        assert gone_pub.status_code == gone_priv.status_code == 410
        assert gone_pub.json()["error"]["code"] == "artifact_revoked"
        revoked = {x["id"]: x["revoked"] for x in listing}
        assert revoked[public["report.pdf"]["id"]] is True
        assert revoked[public["plot.png"]["id"]] is False
        assert (await anon.get(on(a, public["plot.png"]["url"]))).status_code == 200

    # a session written through A is read, and continued, through B
    sid = "s-" + secrets.token_hex(4)
    hello = {"model": "demo", "messages": [{"role": "user", "content": "hello"}]}
    again = {"model": "demo", "messages": [{"role": "user", "content": "once more"}]}
    async with client(a) as ca, client(b) as cb, client(b, BOB_KEY) as bob_b:
        r1 = await ca.post("/v1/chat/completions", json=hello, headers={"X-Session-Id": sid})
        assert r1.status_code == 200
        seen = (await cb.get(f"/v1/sessions/{sid}")).json()
        assert [m["role"] for m in seen["messages"]] == ["user", "assistant"]
        assert seen["messages"][0]["content"] == "hello"
        reply = seen["messages"][1]["content"]
        assert "report.pdf" in reply and str(fleet.root) not in reply
        r2 = await cb.post("/v1/chat/completions", json=again, headers={"X-Session-Id": sid})
        assert r2.status_code == 200
        # the upstream got the turn written on A as the history of the turn on B
        both = (await ca.get(f"/v1/sessions/{sid}")).json()
        assert [m["content"] for m in both["messages"] if m["role"] == "user"] == [
            "hello",
            "once more",
        ]
        assert (await bob_b.get(f"/v1/sessions/{sid}")).status_code == 404


# -- runs across instances -------------------------------------------------------------------


async def listeners(database_url: str) -> int:
    """The instances' dedicated LISTEN connections on the database."""
    import psycopg

    def count() -> int:
        with psycopg.connect(database_url, autocommit=True) as conn:
            row = conn.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()"
                " AND application_name = 'artifact-gateway-listen'"
            ).fetchone()
            return int(row[0]) if row else 0

    return await trio.to_thread.run_sync(count)


async def test_run_on_a_followed_live_from_b(fleet: Fleet, nursery: trio.Nursery) -> None:
    a, b = fleet.a, fleet.b
    with trio.fail_after(5):  # one LISTEN connection per instance (connected at start)
        while await listeners(fleet.database_url) != 2:  # noqa: ASYNC110 - polls the database
            await trio.sleep(0.05)
    run_id = await start_run(a)
    path = f"/v1/runs/{run_id}/events"
    on_a = follow(nursery, a, path)  # the holder's own follower: woken locally
    on_b = follow(nursery, b, path)  # another instance's: woken by NOTIFY
    with trio.fail_after(20):
        await on_a.done.wait()
        await on_b.done.wait()
    assert not on_a.broken and not on_b.broken
    n = len(on_a.events)
    assert on_b.events == on_a.events and on_a.seqs() == list(range(1, n + 1))
    assert on_a.events[-1]["event"] == "run.completed"
    assert run_text(on_b.events) == LONG_TEXT == on_b.events[-1]["output"]

    # the delay of B's follower behind A's, per event, once both were following
    since = max(on_a.times[0], on_b.times[0])
    delays = [tb - ta for ta, tb in zip(on_a.times, on_b.times, strict=True) if ta >= since]
    assert len(delays) > 100
    delays.sort()
    med, p95, worst = statistics.median(delays), delays[int(len(delays) * 0.95)], delays[-1]
    report(
        "follow on B, behind the holder's own follower",
        n=len(delays),
        median=med,
        p95=p95,
        max=worst,
    )
    # polling would lag by up to the 5 s safety re-read; NOTIFY is milliseconds
    assert med < 0.25 and worst < 1.5, delays[-10:]
    summary = await get_json(b, f"/v1/runs/{run_id}")
    assert summary["status"] == "completed" and summary["last_seq"] == n


async def test_stop_on_b_stops_a_run_executing_on_a(fleet: Fleet, nursery: trio.Nursery) -> None:
    a, b = fleet.a, fleet.b
    run_id = await start_run(a)
    on_a = follow(nursery, a, f"/v1/runs/{run_id}/events")
    await on_a.wait_events(10)
    t0 = time.monotonic()
    async with client(b) as cb:
        got = await cb.post(f"/v1/runs/{run_id}/stop")
    answered = time.monotonic() - t0
    assert got.status_code == 200 and got.json()["status"] == "cancelled", got.text
    with trio.fail_after(5):
        await on_a.done.wait()
    ended = on_a.times[-1] - t0
    report("stop on B of a run on A", answered=answered, terminal_on_a=ended)
    events = on_a.events
    assert events[-1]["event"] == "run.cancelled" and not on_a.broken
    assert [e["event"] for e in events].count("run.cancelled") == 1
    assert on_a.seqs() == list(range(1, len(events) + 1))
    text = run_text(events)
    assert events[-1]["output"] == text and LONG_TEXT.startswith(text) and text != LONG_TEXT
    summary = await get_json(a, f"/v1/runs/{run_id}")
    assert summary["status"] == "cancelled" and summary["last_seq"] == events[-1]["seq"]
    assert ended < 2.0  # NOTIFY to the holder, not its next lease renewal (lease / 3 = 1 s)


# -- background responses across instances ------------------------------------------------------


@SDK_WARNINGS
async def test_background_response_on_b_resumes_on_a(fleet: Fleet, nursery: trio.Nursery) -> None:
    a, b = fleet.a, fleet.b
    rid = await start_background(b)
    first = Stream()
    await read_stream(
        b, f"/v1/responses/{rid}?stream=true", first, until=lambda s: len(s.events) >= 12
    )
    assert first.numbers() == list(range(len(first.events)))
    assert first.events[0]["type"] == "response.created"
    last = first.numbers()[-1]

    # resume on A with the openai SDK: the events with sequence_number > last, each once
    async with httpx2.AsyncClient(timeout=httpx2.Timeout(10, read=30)) as http:
        sdk = openai.AsyncOpenAI(
            base_url=a.url + "/v1", api_key=ALICE_KEY, http_client=http, max_retries=0
        )
        rest = [
            ev.model_dump()
            async for ev in await sdk.responses.retrieve(rid, stream=True, starting_after=last)
        ]
    numbers = [ev["sequence_number"] for ev in rest]
    assert numbers == list(range(last + 1, last + 1 + len(rest)))
    assert rest[-1]["type"] == "response.completed"
    whole = first.events + rest
    assert response_text(whole) == LONG_TEXT
    final = rest[-1]["response"]
    assert final["id"] == rid and final["status"] == "completed"
    assert final["output_text"] == LONG_TEXT

    # and the same journal read raw from either instance, from any point
    tail = Stream()
    await read_stream(a, f"/v1/responses/{rid}?stream=true&starting_after={last + 5}", tail)
    assert tail.numbers() == numbers[5:]
    stored = await get_json(b, f"/v1/responses/{rid}")
    assert stored["status"] == "completed" and stored["output_text"] == LONG_TEXT
    # a sequence number is a non-negative integer: anything else is refused up front
    async with client(a) as c:
        for bad in ("-1", "abc", "1e3", " 3", "٣", "9" * 13):
            q = {"stream": "true", "starting_after": bad}
            r = await c.get(f"/v1/responses/{rid}", params=q)
            assert r.status_code == 400, (bad, r.text)
            assert r.json()["error"]["code"] == "invalid_starting_after"


async def test_cancel_on_a_stops_a_background_response_on_b(
    fleet: Fleet, nursery: trio.Nursery
) -> None:
    a, b = fleet.a, fleet.b
    rid = await start_background(b)
    on_b = follow(nursery, b, f"/v1/responses/{rid}?stream=true")
    await on_b.wait_events(10)
    t0 = time.monotonic()
    async with client(a) as ca:
        got = await ca.post(f"/v1/responses/{rid}/cancel")
    answered = time.monotonic() - t0
    assert got.status_code == 200, got.text
    assert got.json()["status"] == "cancelled" and got.json()["id"] == rid
    with trio.fail_after(5):
        await on_b.done.wait()
    report("cancel on A of a response on B", answered=answered, terminal_on_b=on_b.times[-1] - t0)
    assert not on_b.broken and on_b.events[-1]["type"] == "response.cancelled"
    assert on_b.numbers() == list(range(len(on_b.events)))
    text = response_text(on_b.events)
    assert LONG_TEXT.startswith(text) and text != LONG_TEXT
    assert on_b.events[-1]["response"]["output_text"] == text
    for inst in (a, b):
        assert (await get_json(inst, f"/v1/responses/{rid}"))["status"] == "cancelled"


# -- a rolling restart: SIGTERM mid-run ----------------------------------------------------------


async def test_sigterm_drain_ends_runs_and_clients_resume_on_b(
    fleet: Fleet, nursery: trio.Nursery
) -> None:
    a, b = fleet.a, fleet.b
    run_id = await start_run(a)
    rid = await start_background(a)
    run_a = follow(nursery, a, f"/v1/runs/{run_id}/events")
    run_b = follow(nursery, b, f"/v1/runs/{run_id}/events")
    resp_b = follow(nursery, b, f"/v1/responses/{rid}?stream=true")
    await run_a.wait_events(20)
    await resp_b.wait_events(20)
    t0 = time.monotonic()
    stopped = await trio.to_thread.run_sync(a.stop)
    exited = time.monotonic() - t0
    assert stopped == 0, a.tail()
    with trio.fail_after(5):
        await run_a.done.wait()
        await run_b.done.wait()
        await resp_b.done.wait()
    report(
        "SIGTERM on A mid-run",
        exited=exited,
        run_terminal_on_b=run_b.times[-1] - t0,
        response_terminal_on_b=resp_b.times[-1] - t0,
    )
    # a follower on B sees the drain's terminal event, journaled by A before it left
    end = run_b.events[-1]
    assert end["event"] == "run.failed" and end["error"]["code"] == "gateway_draining"
    assert run_b.seqs() == list(range(1, len(run_b.events) + 1))
    summary = await get_json(b, f"/v1/runs/{run_id}")
    assert summary["status"] == "interrupted" and summary["last_seq"] == end["seq"]
    final = resp_b.events[-1]
    assert final["type"] == "response.failed"
    assert final["response"]["error"]["code"] == "gateway_draining"
    assert resp_b.numbers() == list(range(len(resp_b.events)))
    # the client that followed on A resumes on B: the rest, each event once
    if run_a.events[-1]["event"] not in RUN_TERMINALS:
        rest = Stream()
        await read_stream(
            b, f"/v1/runs/{run_id}/events", rest, headers={"Last-Event-ID": run_a.ids[-1]}
        )
        seen = run_a.events + rest.events
    else:
        seen = run_a.events
    assert seen == run_b.events


# -- a crash: SIGKILL mid-run ------------------------------------------------------------------


async def test_sigkill_mid_run_resumes_on_b_exactly_once(
    fleet: Fleet, nursery: trio.Nursery
) -> None:
    a, b = fleet.a, fleet.b
    run_id = await start_run(a)
    rid = await start_background(a)
    run_a = follow(nursery, a, f"/v1/runs/{run_id}/events")
    resp_a = follow(nursery, a, f"/v1/responses/{rid}?stream=true")
    await run_a.wait_events(20)
    await resp_a.wait_events(20)
    killed = time.monotonic()
    a.kill()
    with trio.fail_after(5):
        await run_a.done.wait()
        await resp_a.done.wait()
    assert run_a.broken and resp_a.broken  # cut: no terminal event from a dead process
    assert run_a.events[-1]["event"] not in RUN_TERMINALS

    # the clients come back through the load balancer: B
    run_b = follow(
        nursery, b, f"/v1/runs/{run_id}/events", headers={"Last-Event-ID": run_a.ids[-1]}
    )
    last_number = resp_a.numbers()[-1]
    resp_b = follow(nursery, b, f"/v1/responses/{rid}?stream=true&starting_after={last_number}")
    with trio.fail_after(BOUND + 5):
        await run_b.done.wait()
        await resp_b.done.wait()
    assert not run_b.broken and not resp_b.broken, (run_b.broken, resp_b.broken)

    # the run: every event exactly once across the two connections, then run_interrupted
    events = run_a.events + run_b.events
    assert [int(e["seq"]) for e in events] == list(range(1, len(events) + 1))
    end = events[-1]
    assert end["event"] == "run.failed" and end["error"]["code"] == "run_interrupted"
    assert LONG_TEXT.startswith(run_text(events))
    summary = await get_json(b, f"/v1/runs/{run_id}")
    assert summary["status"] == "interrupted" and summary["last_seq"] == end["seq"]
    assert summary["error"]["code"] == "run_interrupted"
    assert summary["output"] == run_text(events)

    # the response: every sequence_number once, then response.failed (run_interrupted)
    objs = resp_a.events + resp_b.events
    assert [o["sequence_number"] for o in objs] == list(range(len(objs)))
    final = objs[-1]
    assert final["type"] == "response.failed", final
    assert final["response"]["status"] == "failed" and final["response"]["id"] == rid
    assert final["response"]["error"]["code"] == "run_interrupted"
    assert LONG_TEXT.startswith(response_text(objs))
    stored = await get_json(b, f"/v1/responses/{rid}")
    assert stored["status"] == "failed" and stored["error"]["code"] == "run_interrupted"

    took_run, took_resp = run_b.times[-1] - killed, resp_b.times[-1] - killed
    report(
        f"SIGKILL to the terminal event on B (lease {LEASE:.0f} s, bound {BOUND:.0f} s)",
        run=took_run,
        response=took_resp,
    )
    # the last renewal was about lease / 3 before the kill at most: the lease expires
    # between 2/3 lease and a lease after the kill, and a sweep comes within lease / 3
    # (the lower bound, with room for a slow renewal, shows it was the lease that ended it)
    assert LEASE / 2 < took_run < BOUND + 0.5
    assert LEASE / 2 < took_resp < BOUND + 0.5
