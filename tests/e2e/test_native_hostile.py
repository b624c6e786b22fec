"""The native relay (docs/api.md, "Native relay") against a hostile or failing agent.

The contract: the agent's own ids never reach a client, an ordinary failure of the
agent (a restart, a forgotten response) is not blamed on the configuration, and no
client's header reaches the agent (red-team findings of issue 34, kept as regressions).
"""

from __future__ import annotations

import json
import logging
import time
from pathlib import Path

import httpx
import pytest
import trio

from harness.transport import Scripted
from tests.conftest import ALICE_KEY, BOB_KEY, Gateway, Upstream, make_config, start_gateway
from tests.hostile_agent import (
    UPSTREAM_SECRET_RESP,
    UPSTREAM_SECRET_RUN,
    HostileAgent,
    js,
    responses_ok,
    run_started,
    sse,
)


async def native_gw(nursery: trio.Nursery, tmp: Path, agent: HostileAgent, **over) -> Gateway:
    config = make_config(tmp, "http://agent.test/v1", upstream={"apis": "native"}, **over)
    return await start_gateway(nursery, config, transport=agent.transport)


async def run_to_end(gw: Gateway, key: str = ALICE_KEY) -> tuple[str, str]:
    async with gw.client(key) as c:
        r = await c.post("/v1/runs", json={"model": "agent", "input": "go"})
        assert r.status_code == 202, r.text
        rid = r.json()["run_id"]
        with trio.fail_after(20):
            ev = await c.get(f"/v1/runs/{rid}/events")
        summary = await c.get(f"/v1/runs/{rid}")
    return ev.text, summary.text


async def test_run_events_5xx_does_not_leak_the_upstream_run_id(
    nursery: trio.Nursery, tmp_path: Path
) -> None:
    """The agent accepted the run, then its events URL fails with 500 (Hermes
    restarting, a proxy in front of it): the run fails, and neither its events nor its
    summary name the URL's run id."""
    agent = HostileAgent()
    agent.on("POST /v1/runs", run_started())
    agent.on("GET /v1/runs/*/events", js({"error": {"message": "boom"}}, 500))
    agent.on("POST /v1/runs/*/stop", js({}))
    gw = await native_gw(nursery, tmp_path, agent)
    events, summary = await run_to_end(gw)
    assert "run.failed" in events
    leaks = [
        w
        for w, t in (("events", events), ("GET /v1/runs/{id}", summary))
        if UPSTREAM_SECRET_RUN in t
    ]
    assert not leaks, f"the upstream's run id reached the client in: {leaks}\n{events[-600:]}"


async def test_run_events_404_does_not_leak_the_upstream_run_id(
    nursery: trio.Nursery, tmp_path: Path
) -> None:
    """Hermes answers its own 404 for an events stream it no longer has (``Run not
    found: <id>``, code run_not_found: a restart between POST /runs and GET /events):
    the client reads ``upstream_lost``, not the agent's code or id."""
    agent = HostileAgent()
    agent.on("POST /v1/runs", run_started())
    agent.on(
        "GET /v1/runs/*/events",
        js(
            {
                "error": {
                    "message": f"Run not found: {UPSTREAM_SECRET_RUN}",
                    "code": "run_not_found",
                }
            },
            404,
        ),
    )
    agent.on("POST /v1/runs/*/stop", js({}))
    gw = await native_gw(nursery, tmp_path, agent)
    events, summary = await run_to_end(gw)
    last = json.loads([ln for ln in events.splitlines() if ln.startswith("data: ")][-1][6:])
    assert UPSTREAM_SECRET_RUN not in events + summary, last["error"]
    assert last["error"]["code"] == "upstream_lost", last


async def test_a_forgotten_previous_response_does_not_leak_or_blame_the_base_url(
    nursery: trio.Nursery, tmp_path: Path
) -> None:
    """Hermes keeps 100 responses (one LRU for every principal). Once it forgot
    alice's, it answers 404 ``Previous response not found: <its id>``: the gateway
    sends the conversation it holds instead, and the chain goes on."""
    agent = HostileAgent()
    forgotten = [False]

    def responses(req):  # first call answers; once forgotten, 404s like Hermes
        body = json.loads(req.content)
        if forgotten[0] and body.get("previous_response_id"):
            pid = body["previous_response_id"]
            return js(
                {
                    "error": {
                        "message": f"Previous response not found: {pid}",
                        "type": "invalid_request_error",
                    }
                },
                404,
            )
        return Scripted([responses_ok("First answer.")])

    agent.on("POST /v1/responses", responses)
    gw = await native_gw(nursery, tmp_path, agent)
    async with gw.client() as c:
        r = await c.post("/v1/responses", json={"model": "agent", "input": "one", "stream": True})
        assert r.status_code == 200
        done = [json.loads(ln[6:]) for ln in r.text.splitlines() if ln.startswith("data: ")][-1]
        rid = done["response"]["id"]
        forgotten[0] = True
        r2 = await c.post(
            "/v1/responses", json={"model": "agent", "input": "two", "previous_response_id": rid}
        )
    problems = []
    if UPSTREAM_SECRET_RESP in r2.text:
        problems.append("the upstream's response id is in the error")
    if "upstream_wrong_path" in r2.text:
        problems.append("blames upstream.base_url (upstream_wrong_path) for a forgotten response")
    if r2.status_code != 200:
        problems.append(f"the chain broke: HTTP {r2.status_code}")
    assert not problems, "; ".join(problems) + "\n" + r2.text
    again = json.loads(agent.requests[-1].content)
    assert "previous_response_id" not in again
    assert [m["content"] for m in again["conversation_history"]] == ["one", "First answer."]


def _chat_chunk(delta: dict[str, object], finish: str | None = None, **extra: object) -> dict:
    choice = {"index": 0, "delta": delta, "finish_reason": finish}
    return {
        "id": "c1",
        "object": "chat.completion.chunk",
        "created": 1,
        "model": "agent",
        "choices": [choice],
        **extra,
    }


def chat_stream(*chunks: dict | tuple[str, dict]) -> Scripted:
    """An agent's chat answer as its stream (``[DONE]`` at the end)."""
    return Scripted(
        [sse(*chunks) + b"data: [DONE]\n\n"], headers={"content-type": "text/event-stream"}
    )


async def test_client_hermes_headers_never_reach_the_agent(
    nursery: trio.Nursery, tmp_path: Path
) -> None:
    """Bob sends Hermes's own session headers and the gateway's principal header
    (as a hostile user trying to join alice's Hermes session / memory)."""
    agent = HostileAgent()
    agent.on("POST /v1/responses", Scripted([responses_ok("hi")]))
    agent.on("POST /v1/runs", run_started())
    agent.on(
        "GET /v1/runs/*/events",
        Scripted([sse({"event": "run.completed", "output": "ok", "usage": {}})]),
    )
    gw = await native_gw(nursery, tmp_path, agent)
    evil = {
        "X-Hermes-Session-Id": "alice-session",
        "X-Hermes-Session-Key": "p_alice",
        "X-Gateway-Principal": "p_alice",
        "X-Hermes-Profile": "alice",
    }
    async with httpx.AsyncClient(
        base_url=gw.url, headers={"Authorization": f"Bearer {BOB_KEY}", **evil}, timeout=30
    ) as c:
        await c.post("/v1/responses", json={"model": "agent", "input": "x", "stream": True})
        r = await c.post(
            "/v1/runs",
            json={
                "model": "agent",
                "input": "x",
                "session_id": "alice-session",
                "conversation": "alice",
                "previous_response_id": "x",
            },
        )
        await c.get(f"/v1/runs/{r.json()['run_id']}/events")
        await c.post(
            "/v1/chat/completions",
            json={"model": "agent", "messages": [{"role": "user", "content": "x"}]},
        )
    pid_bob = gw.app.gateway.signer.principal_id("bob")
    for req in agent.requests:
        if req.url.path.endswith(("/capabilities", "/models")):
            continue
        hdrs = {k.lower(): v for k, v in req.headers.items()}
        assert hdrs.get("x-hermes-session-id") is None, (req.url.path, hdrs)
        assert hdrs.get("x-hermes-session-key") in (None, pid_bob), (req.url.path, hdrs)
        assert hdrs.get("x-gateway-principal") == pid_bob, (req.url.path, hdrs)
        assert "x-hermes-profile" not in hdrs
        body = req.content.decode()
        assert "alice-session" not in body and '"conversation"' not in body, body


async def test_upstream_answer_headers_do_not_reach_the_client(
    nursery: trio.Nursery, tmp_path: Path
) -> None:
    """The agent answers with its session header, a cookie and a Location."""
    agent = HostileAgent()
    hdrs = {
        "content-type": "text/event-stream",
        "x-hermes-session-id": "sess_SECRET",
        "set-cookie": "hermes=SECRET",
        "x-hermes-error": "/root/.hermes/x",
    }
    agent.on("POST /v1/responses", Scripted([responses_ok("hi")], headers=hdrs))
    gw = await native_gw(nursery, tmp_path, agent)
    async with gw.client() as c:
        for stream in (True, False):
            r = await c.post(
                "/v1/responses", json={"model": "agent", "input": "x", "stream": stream}
            )
            assert r.status_code == 200, r.text
            flat = json.dumps(dict(r.headers)) + r.text
            assert "SECRET" not in flat and ".hermes" not in flat, dict(r.headers)


async def test_hostile_run_ids_and_response_ids_with_path_characters(
    nursery: trio.Nursery, tmp_path: Path
) -> None:
    """Upstream ids that try to steer the gateway's later calls (a stop, a delete, a
    poll) to another URL: path characters, a query, a fragment, 10 kB."""
    bad_ids = [
        "../responses/x",
        "run%2F..%2Fx",
        "a/../../b",
        "x?y=1",
        "x#y",
        "r" * 10_000,
        "",
        None,
        5,
    ]
    for i, bad in enumerate(bad_ids):
        agent = HostileAgent()
        agent.on("POST /v1/runs", js({"run_id": bad, "status": "started"}, 202))
        gw = await native_gw(nursery, tmp_path / str(i), agent)
        events, summary = await run_to_end(gw)
        assert "run.failed" in events, events
        paths = [r.url.raw_path.decode() for r in agent.requests]
        assert all(p.startswith("/v1/") and ".." not in p and "%2F" not in p for p in paths), paths
        if isinstance(bad, str) and len(bad) > 3:
            assert bad not in events + summary


async def test_every_route_scopes_the_agents_memory_per_principal(
    nursery: trio.Nursery, tmp_path: Path
) -> None:
    """Chat and the native APIs alike carry X-Hermes-Session-Key = the requester's
    principal id when the gateway has the agent's API key; without one (Hermes answers
    the header 403 then) none."""
    for key in ("sk-agent", ""):
        agent = HostileAgent()
        agent.on("POST /v1/chat/completions", chat_stream(_chat_chunk({"content": "hi"}, "stop")))
        agent.on("POST /v1/responses", Scripted([responses_ok("hi")]))
        upstream = {"apis": "native", "api_key": key}
        config = make_config(tmp_path / (key or "none"), "http://agent.test/v1", upstream=upstream)
        gw = await start_gateway(nursery, config, transport=agent.transport)
        async with gw.client(BOB_KEY) as c:
            r = await c.post(
                "/v1/chat/completions",
                json={"model": "agent", "messages": [{"role": "user", "content": "x"}]},
            )
            assert r.status_code == 200, r.text
            r = await c.post("/v1/responses", json={"model": "agent", "input": "x"})
            assert r.status_code == 200, r.text
        pid = gw.app.gateway.signer.principal_id("bob") if key else None
        got = {
            r.url.path: r.headers.get("x-hermes-session-key")
            for r in agent.requests
            if r.url.path.endswith(("/chat/completions", "/responses"))
        }
        assert got == {"/v1/chat/completions": pid, "/v1/responses": pid}, got


async def test_a_run_whose_lease_another_instance_took_is_not_a_crash(
    nursery: trio.Nursery, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """An instance that was paused past its lease (SIGSTOP, a frozen VM) finds another
    holder when it writes again: the run ends here quietly (the other instance has it),
    not "failed unexpectedly" with a traceback (the LeaseLost came in the nursery's
    exception group, red team)."""
    deltas = [sse({"event": "message.delta", "delta": f"tick {i} "}) for i in range(40)]
    agent = HostileAgent()
    agent.on("POST /v1/runs", run_started())
    agent.on("GET /v1/runs/*/events", Scripted(deltas, delay=0.05))
    agent.on("POST /v1/runs/*/stop", js({}))
    gw = await native_gw(nursery, tmp_path, agent)
    store = gw.app.gateway.store
    async with gw.client() as c:
        r = await c.post("/v1/runs", json={"model": "agent", "input": "go"})
        rid = r.json()["run_id"]
        with trio.fail_after(20):
            while "tick 3" not in (await c.get(f"/v1/runs/{rid}")).text:  # noqa: ASYNC110
                await trio.sleep(0.05)
        later = time.time() + 3600  # as if this instance had been paused for an hour
        taken = store.adopt_expired_runs(later, "the-other-instance", later + 60)
        assert [t.id for t in taken] == [rid]
        with trio.fail_after(20):
            while not any("lease lost" in m for m in caplog.messages):  # noqa: ASYNC110
                await trio.sleep(0.05)
        await trio.sleep(0.3)
    assert not any("failed unexpectedly" in m for m in caplog.messages), caplog.messages


CHAT_STREAM = Scripted(
    [
        b'data: {"id":"c","object":"chat.completion.chunk","created":1,"model":"m",'
        b'"choices":[{"index":0,"delta":{"content":"hi"},"finish_reason":"stop"}]}\n\n',
        b"data: [DONE]\n\n",
    ]
)


async def test_a_capabilities_document_that_never_ends_costs_one_bounded_wait(
    nursery: trio.Nursery, tmp_path: Path
) -> None:
    """``apis = "auto"`` and a /capabilities that sends a head and then nothing: every
    Responses and runs request waited for that probe up to the first-byte bound (120 s
    by default); the probe has its own few seconds, then the chat emulation answers."""
    agent = HostileAgent()
    agent.on(
        "GET /v1/capabilities",
        Scripted([b'{"object": "hermes.api_server.capabilities",', b"}"], delay=3600),
    )
    agent.on("POST /v1/chat/completions", CHAT_STREAM)
    config = make_config(tmp_path, "http://agent.test/v1", upstream={"apis": "auto"})
    gw = await start_gateway(nursery, config, transport=agent.transport)
    async with gw.client() as c:
        with trio.fail_after(60):  # (a guard: the default bound is 120 s)
            r = await c.post("/v1/responses", json={"model": "m", "input": "x", "stream": True})
    assert r.status_code == 200 and "hi" in r.text


async def test_a_capabilities_document_that_lies_names_the_setting(
    nursery: trio.Nursery, tmp_path: Path
) -> None:
    """A chat-only server behind something that answers Hermes's capabilities document:
    its 404 on /responses and /runs names upstream.apis, not only upstream.base_url."""
    agent = HostileAgent()
    agent.on("POST /v1/responses", js({"detail": "Not Found"}, 404))
    agent.on("POST /v1/runs", js({"detail": "Not Found"}, 404))
    config = make_config(tmp_path, "http://agent.test/v1", upstream={"apis": "auto"})
    gw = await start_gateway(nursery, config, transport=agent.transport)
    async with gw.client() as c:
        r = await c.post("/v1/responses", json={"model": "m", "input": "x"})
        started = await c.post("/v1/runs", json={"model": "m", "input": "x"})
        events = await c.get(f"/v1/runs/{started.json()['run_id']}/events")
    assert r.status_code == 502 and r.json()["error"]["code"] == "upstream_wrong_path"
    assert 'upstream.apis = "chat"' in r.json()["error"]["message"]
    failed = json.loads([ln for ln in events.text.splitlines() if ln.startswith("data: ")][-1][6:])
    assert 'upstream.apis = "chat"' in failed["error"]["message"], failed


@pytest.mark.parametrize(
    "odd",
    [
        {"instructions": {"path": "/root/.hermes/.env"}},
        {"instructions": ["a", 1]},
        {"temperature": "hot"},
        {"temperature": 1e308},
        {"temperature": True},
        {"top_p": -5},
        {"max_output_tokens": "many"},
        {"max_output_tokens": 0},
        {"max_output_tokens": 2**70},
    ],
)
async def test_options_for_the_agent_are_checked(
    nursery: trio.Nursery, tmp_path: Path, odd: dict[str, object]
) -> None:
    """What the relay passes on to the agent is checked first: a 400 with a stable
    code, nothing sent upstream (the agent answered some of these with a 500)."""
    agent = HostileAgent()
    gw = await native_gw(nursery, tmp_path, agent)
    async with gw.client() as c:
        for route in ("/v1/responses", "/v1/runs"):
            r = await c.post(route, json={"model": "agent", "input": "hi", **odd})
            assert r.status_code == 400, (route, r.text)
            assert r.json()["error"]["code"] == "invalid_request"
    assert not [q for q in agent.requests if q.url.path.endswith(("/responses", "/runs"))]


async def test_a_non_streamed_chat_answer_of_an_agent_carries_the_files_its_tools_wrote(
    nursery: trio.Nursery, tmp_path: Path
) -> None:
    """An agent reports its tools' files only in its stream (Hermes's non-streamed chat
    answer is the final text alone): a non-streamed request is read from the stream, so
    the file the text never names is in the manifest, alice's only; usage is kept."""
    agent = HostileAgent()
    (tmp_path / "artifacts").mkdir()
    report = tmp_path / "artifacts" / "report.md"
    report.write_text("# fresh\n")
    progress = {"tool": "write_file", "label": str(report), "status": "running"}
    usage = {"prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 5}
    agent.on(
        "POST /v1/chat/completions",
        chat_stream(
            _chat_chunk({"role": "assistant"}),
            ("hermes.tool.progress", progress),
            _chat_chunk({"content": "Done, the report is written."}),
            _chat_chunk({}, "stop", usage=usage),
        ),
    )
    gw = await native_gw(nursery, tmp_path, agent)
    msgs = [{"role": "user", "content": "write it"}]
    async with gw.client() as alice, gw.client(BOB_KEY) as bob:
        r = await alice.post("/v1/chat/completions", json={"model": "agent", "messages": msgs})
        assert r.status_code == 200, r.text
        got = r.json()
        assert got["object"] == "chat.completion"
        assert got["choices"][0]["message"]["content"] == "Done, the report is written."
        assert got["usage"] == usage
        arts = got["gateway"]["artifacts"]
        assert [a["filename"] for a in arts] == ["report.md"]
        assert str(report) not in r.text
        url = arts[0]["url"].replace("http://127.0.0.1:8642", gw.url)
        assert (await alice.get(url)).content == b"# fresh\n"
        assert (await bob.get(url)).status_code == 404
    sent = json.loads(agent.requests[-1].content)
    assert sent["stream"] is True and sent["stream_options"] == {"include_usage": True}


async def test_a_chat_only_server_without_capabilities_is_no_warning(
    nursery: trio.Nursery,
    tmp_path: Path,
    upstream: Upstream,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The demo upstream (like most chat-only servers) answers the capabilities probe
    with an HTML 404: that means "chat only", not a wrong base_url; the gateway warned
    "does upstream.base_url point at the OpenAI-compatible API?" (new operator)."""
    config = make_config(tmp_path, upstream.url + "/v1", upstream={"apis": "auto"})
    gw = await start_gateway(nursery, config)
    async with gw.client() as c:
        r = await c.post("/v1/responses", json={"model": "demo", "input": "hi"})
    assert r.status_code == 200, r.text
    warned = [rec.getMessage() for rec in caplog.records if rec.levelno >= logging.WARNING]
    assert not [m for m in warned if "capabilities" in m or "base_url" in m], warned


async def test_a_collected_answer_is_bounded(
    nursery: trio.Nursery, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A non-streamed chat answer read from an agent's stream is held until its end:
    beyond the bound (64 Mi characters, as a non-streamed upstream answer) it is refused
    with a clear 502, and what was held is let go."""
    from gateway.fronts import chat as chat_front

    monkeypatch.setattr(chat_front, "MAX_COLLECTED_CHARS", 1000)
    agent = HostileAgent()
    chunks = [_chat_chunk({"content": "x" * 300}) for _ in range(5)]
    agent.on("POST /v1/chat/completions", chat_stream(*chunks, _chat_chunk({}, "stop")))
    gw = await native_gw(nursery, tmp_path, agent)
    msgs = [{"role": "user", "content": "go"}]
    async with gw.client() as c:
        r = await c.post("/v1/chat/completions", json={"model": "agent", "messages": msgs})
        assert r.status_code == 502, r.text
        assert r.json()["error"]["code"] == "upstream_bad_response"
        assert "stream: true" in r.json()["error"]["message"]
        ok = await c.post(
            "/v1/chat/completions", json={"model": "agent", "messages": msgs, "stream": True}
        )
        assert ok.status_code == 200 and ok.text.count("x" * 300) == 5
