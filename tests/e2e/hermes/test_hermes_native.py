"""The Hermes agent's own Responses and runs APIs, relayed (``upstream.apis = "auto"``).

The gateway finds them at ``GET /v1/capabilities`` and relays ``/v1/responses`` and
``/v1/runs`` to Hermes's own instead of emulating them over chat: the client sees the
tools Hermes ran (function-call items and their outputs; ``tool.started`` /
``tool.completed`` run events), rewritten, with the gateway's own ids; the files the
tools wrote reach their owner; another principal reaches none of the upstream's state
by any route; a run outlives the gateway instance that started it.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import httpx
import pytest
import trio

from harness.instances import GatewayProcess, start_all, stop_all
from harness.scripted_llm import Turn
from tests.conftest import ALICE_KEY, BOB_KEY, Gateway, make_config, start_gateway
from tests.e2e.hermes.conftest import HermesRun
from tests.e2e.hermes.test_hermes_gateway import (
    Answer,
    _client,
    _events,
    assert_delivered,
    write,
)

pytestmark = pytest.mark.hermes
MODEL = "hermes-agent"


async def native_gateway(nursery: trio.Nursery, tmp: Path, hermes: HermesRun) -> Gateway:
    config = make_config(
        tmp,
        hermes.base_url,
        upstream={"api_key": hermes.key, "first_byte_timeout_seconds": 60.0, "apis": "auto"},
        artifacts={
            "roots": [str(tmp / "users" / "{principal}")],
            "shared_roots": [],
            "scopes": [{"principal": "alice", "roots": [str(hermes.workdir)]}],
        },
    )
    gw = await start_gateway(nursery, config)
    assert await gw.app.gateway.native.responses() and await gw.app.gateway.native.runs()
    return gw


async def response_stream(gw: Gateway, body: dict[str, Any], key: str = ALICE_KEY) -> Answer:
    async with _client(gw, key) as c, c.stream("POST", "/v1/responses", json=body) as r:
        assert r.status_code == 200, await r.aread()
        raw = b"".join([chunk async for chunk in r.aiter_raw()])
    text, manifest, items = [], None, []
    for _, obj in _events(raw):
        if obj.get("type") == "response.output_text.delta":
            text.append(obj["delta"])
        if obj.get("type") == "response.output_item.done":
            items.append(json.dumps(obj["item"]))
        if obj.get("type") == "response.completed":
            manifest = obj["response"].get("gateway")
            assert obj["response"]["output_text"] == "".join(text)
    return Answer(raw, "".join(text), manifest, items)


def _completed(raw: bytes) -> dict[str, Any]:
    (done,) = [o for _, o in _events(raw) if o.get("type") == "response.completed"]
    return done["response"]


async def test_responses_relay_the_agents_tools_and_files(
    hermes: HermesRun, nursery: trio.Nursery, tmp_path: Path
) -> None:
    """function_call and function_call_output items reach the client rewritten (the
    path a link, the upstream's ids not at all); the file the tool wrote is the
    owner's, as a link in the text and in the manifest."""
    gw = await native_gateway(nursery, tmp_path, hermes)
    memo = hermes.workdir / "out" / "memo.md"
    hermes.llm.script(
        [Turn(tool_calls=[write(memo, "memo v1\n")]), Turn(text=f"The memo is at {memo}.")]
    )
    got = await response_stream(
        gw, {"model": MODEL, "stream": True, "input": f"Memo ({hermes.workdir.name})."}
    )
    links = await assert_delivered(gw, hermes, got, {memo: "memo v1\n"}, named=[memo])
    final = _completed(got.raw)
    kinds = [i["type"] for i in final["output"]]
    assert kinds == ["message", "function_call", "function_call_output"], kinds
    call, result = final["output"][1], final["output"][2]
    assert call["name"] == "write_file" and result["call_id"] == call["call_id"]
    # the tool was given the path before the file existed: its name there; its result
    # names the written file: a link
    assert json.loads(call["arguments"])["path"] == "memo.md"
    assert json.loads(result["output"])["resolved_path"] == links[memo]
    doc = gw.app.gateway.store.get_json("response", "alice", final["id"])
    assert doc["upstream_id"] and doc["upstream_id"] not in got.raw.decode()
    assert final["id"].startswith("resp_") and final["id"] != doc["upstream_id"]


async def test_a_chain_continues_at_the_upstream_and_only_for_its_owner(
    hermes: HermesRun, nursery: trio.Nursery, tmp_path: Path
) -> None:
    """previous_response_id is the gateway's id; the upstream gets its own, so Hermes
    answers with the conversation it keeps. Bob cannot continue, read or delete it."""
    gw = await native_gateway(nursery, tmp_path, hermes)
    hermes.llm.script([Turn(text="First answer: 42."), Turn(text="Second answer.")])
    first = await response_stream(
        gw, {"model": MODEL, "stream": True, "input": f"Chain one ({hermes.workdir.name})."}
    )
    rid = _completed(first.raw)["id"]
    second = await response_stream(
        gw, {"model": MODEL, "stream": True, "input": "And then?", "previous_response_id": rid}
    )
    assert second.text.strip() == "Second answer."
    last = hermes.llm.requests[-1]
    said = json.dumps(last["messages"])
    assert "First answer: 42." in said and "Chain one" in said  # Hermes's own history
    async with _client(gw, BOB_KEY) as bob:
        body = {"model": MODEL, "input": "steal", "previous_response_id": rid}
        for r in (
            await bob.post("/v1/responses", json=body),
            await bob.get(f"/v1/responses/{rid}"),
            await bob.delete(f"/v1/responses/{rid}"),
        ):
            assert r.status_code == 404 and r.json()["error"]["code"] == "response_not_found"
        upstream_id = gw.app.gateway.store.get_json("response", "alice", rid)["upstream_id"]
        body["previous_response_id"] = upstream_id  # the upstream's id means nothing here
        r = await bob.post("/v1/responses", json=body)
        assert r.status_code == 404
    async with _client(gw) as alice:
        r = await alice.get(f"/v1/responses/{rid}")
        assert r.status_code == 200 and r.json()["id"] == rid
        assert (await alice.delete(f"/v1/responses/{rid}")).status_code == 200


async def test_a_non_streamed_response_is_collected(
    hermes: HermesRun, nursery: trio.Nursery, tmp_path: Path
) -> None:
    gw = await native_gateway(nursery, tmp_path, hermes)
    plan = hermes.workdir / "plan.txt"
    hermes.llm.script([Turn(tool_calls=[write(plan, "plan\n")]), Turn(text=f"See {plan}.")])
    async with _client(gw) as alice:
        r = await alice.post(
            "/v1/responses", json={"model": MODEL, "input": f"Plan ({hermes.workdir.name})."}
        )
    assert r.status_code == 200, r.text
    obj = r.json()
    got = Answer(r.content, obj["output_text"], obj["gateway"])
    await assert_delivered(gw, hermes, got, {plan: "plan\n"}, named=[plan])
    assert obj["status"] == "completed"


async def run_answer(gw: Gateway, prompt: str) -> tuple[str, Answer, list[dict[str, Any]]]:
    async with _client(gw) as c:
        r = await c.post("/v1/runs", json={"model": MODEL, "input": prompt})
        assert r.status_code == 202, r.text
        run_id = r.json()["run_id"]
        async with c.stream("GET", f"/v1/runs/{run_id}/events") as ev:
            raw = b"".join([chunk async for chunk in ev.aiter_raw()])
    events = [o for _, o in _events(raw)]
    text = "".join(e["delta"] for e in events if e["event"] == "message.delta")
    end = events[-1]
    return run_id, Answer(raw, text, end.get("gateway")), events


async def test_runs_relay_the_agents_tool_events_and_files(
    hermes: HermesRun, nursery: trio.Nursery, tmp_path: Path
) -> None:
    gw = await native_gateway(nursery, tmp_path, hermes)
    plan = hermes.workdir / "out" / "plan.md"
    hermes.llm.script(
        [Turn(tool_calls=[write(plan, "the plan\n")]), Turn(text=f"The plan is at {plan}.")]
    )
    run_id, got, events = await run_answer(gw, f"Plan run ({hermes.workdir.name}).")
    links = await assert_delivered(gw, hermes, got, {plan: "the plan\n"}, named=[plan])
    kinds = [e["event"] for e in events]
    assert kinds[0] == "run.started" and kinds[-1] == "run.completed"
    (started,) = [e for e in events if e["event"] == "tool.started"]
    (done,) = [e for e in events if e["event"] == "tool.completed"]
    assert started["name"] == done["name"] == "write_file"
    assert started["tool_call_id"] == done["tool_call_id"] and done["error"] is False
    assert started["preview"] in (links[plan], "plan.md")  # a link or the name, never the path
    assert events[-1]["output"] == got.text
    upstream_id = gw.app.gateway.store.get_run(run_id, "alice").summary.get("upstream_run_id")
    assert upstream_id is None or upstream_id not in got.raw.decode()
    async with _client(gw, BOB_KEY) as bob:
        for r in (
            await bob.get(f"/v1/runs/{run_id}"),
            await bob.get(f"/v1/runs/{run_id}/events"),
            await bob.post(f"/v1/runs/{run_id}/stop"),
        ):
            assert r.status_code == 404 and r.json()["error"]["code"] == "run_not_found"


async def test_a_stopped_run_is_stopped_at_the_agent_too(
    hermes: HermesRun, nursery: trio.Nursery, tmp_path: Path
) -> None:
    gw = await native_gateway(nursery, tmp_path, hermes)
    hermes.llm.script([Turn(text="counting " * 200, chunk_chars=8, delay=0.05)])
    async with _client(gw) as c:
        r = await c.post("/v1/runs", json={"model": MODEL, "input": "Count slowly."})
        run_id = r.json()["run_id"]
        st = gw.app.gateway
        upstream_id = None
        with trio.fail_after(30):
            while upstream_id is None:
                await trio.sleep(0.1)
                upstream_id = st.store.get_run(run_id, "alice").summary.get("upstream_run_id")
        r = await c.post(f"/v1/runs/{run_id}/stop")
        assert r.json()["status"] == "cancelled"
    async with httpx.AsyncClient(
        base_url=hermes.url, headers={"Authorization": f"Bearer {hermes.key}"}
    ) as h:
        with trio.fail_after(30):
            while True:
                status = (await h.get(f"/v1/runs/{upstream_id}")).json().get("status")
                if status in ("stopping", "cancelled"):
                    break
                await trio.sleep(0.2)


async def test_a_run_survives_its_instance_and_ends_on_another(
    hermes: HermesRun, tmp_path: Path, pg_url: str
) -> None:
    """Instance A starts a run at the agent and is SIGKILLed mid-run; B adopts it
    once A's lease expired, follows it at the agent to its end and journals
    ``run.completed`` with the whole output and its files; the client reads the run
    to its end from B."""
    report = hermes.workdir / "long.md"
    hermes.llm.script(
        [
            Turn(tool_calls=[write(report, "long report\n")]),
            Turn(text=f"Slowly: {report} is done. " + "tick " * 60, chunk_chars=6, delay=0.1),
        ]
    )
    keys = [(ALICE_KEY, "alice", "user"), (BOB_KEY, "bob", "user")]
    sections = {
        "upstream": {"api_key": hermes.key, "apis": "auto", "first_byte_timeout_seconds": 60},
        "runs": {"lease_seconds": 3.0},
        "artifacts": {"scopes": [{"principal": "alice", "roots": [str(hermes.workdir)]}]},
    }
    a, b = (
        GatewayProcess.create(
            tmp_path / name,
            name=name,
            upstream_url=hermes.base_url,
            roots=[tmp_path / "shared"],
            keys=keys,
            database_url=pg_url,
            public_base_url="http://gateway.test",
            sections=sections,
        )
        for name in ("a", "b")
    )
    (tmp_path / "shared").mkdir()
    try:
        start_all([a, b])
        async with httpx.AsyncClient(
            headers={"Authorization": f"Bearer {ALICE_KEY}"}, timeout=30
        ) as c:
            r = await c.post(a.url + "/v1/runs", json={"model": MODEL, "input": "Long run."})
            run_id = r.json()["run_id"]
            with trio.fail_after(60):  # until A relays the answer's first words
                while True:
                    s = (await c.get(f"{a.url}/v1/runs/{run_id}")).json()
                    if "tick" in s["output"]:
                        break
                    await trio.sleep(0.2)
            killed = time.monotonic()
            a.kill()
            with trio.fail_after(90):
                async with c.stream("GET", f"{b.url}/v1/runs/{run_id}/events") as ev:
                    raw = b"".join([chunk async for chunk in ev.aiter_raw()])
            took = time.monotonic() - killed
        events = [o for _, o in _events(raw)]
        end = events[-1]
        assert end["event"] == "run.completed", end
        assert "is done" in end["output"] and str(report) not in raw.decode()
        assert [e["seq"] for e in events] == list(range(1, len(events) + 1))
        (art,) = end["gateway"]["artifacts"]
        assert art["filename"] == "long.md"
        print(f"SIGKILL of A to run.completed from B: {took:.1f} s")
    finally:
        stop_all([a, b])


async def test_a_background_response_runs_at_the_agent_and_is_journaled(
    hermes: HermesRun, nursery: trio.Nursery, tmp_path: Path
) -> None:
    gw = await native_gateway(nursery, tmp_path, hermes)
    notes = hermes.workdir / "bg-notes.md"
    hermes.llm.script([Turn(tool_calls=[write(notes, "bg\n")]), Turn(text=f"Wrote {notes}.")])
    async with _client(gw) as alice:
        r = await alice.post(
            "/v1/responses",
            json={
                "model": MODEL,
                "input": f"Background ({hermes.workdir.name}).",
                "background": True,
            },
        )
        assert r.status_code == 200 and r.json()["status"] == "queued"
        rid = r.json()["id"]
        async with alice.stream("GET", f"/v1/responses/{rid}?stream=true") as ev:
            raw = b"".join([chunk async for chunk in ev.aiter_raw()])
        final = (await alice.get(f"/v1/responses/{rid}")).json()
    assert final["status"] == "completed" and final["id"] == rid
    got = Answer(raw, final["output_text"], final["gateway"])
    await assert_delivered(gw, hermes, got, {notes: "bg\n"}, named=[notes])
    assert [i["type"] for i in final["output"]] == [
        "message",
        "function_call",
        "function_call_output",
    ]
