"""A user reaches only their own files, whatever the agent says (issue 33), over real
servers: the API server on hypercorn, the Open WebUI runs proxy in front of it.

The upstream is a scripted agent (:class:`ScriptedTransport`) that names the path it is
told — in the text, in a tool call's arguments, in a tool-progress event, in a
Responses ``function_call`` and its ``function_call_output`` (``resolved_path``,
``files_modified``: the agent "reports writing" it), in a run's ``tool.started``
preview — on every front (chat streamed and not, Responses streamed and not, runs, the
proxy) and both ways of reaching the agent (emulated over chat; its own APIs). Each
principal has its own folder (``roots = [".../{principal}"]``). Asked by bob, alice's
file must come back exactly as a missing file does (its name; no link, nothing in the
manifest): no link to another user's file, and no existence oracle. Asked by alice, the
same file is a link (the test can fail).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest
import trio

from gateway.core.errors import StoreError
from harness.transport import Scripted, ScriptedTransport
from tests.conftest import (
    ALICE_KEY,
    BOB_KEY,
    OWUI_KEY,
    Gateway,
    make_config,
    proxy_config,
    start_gateway,
    start_proxy,
)
from tests.hostile_agent import CAPABILITIES

LINK = "/v1/artifacts/"


def sse(*events: tuple[str, dict[str, Any]]) -> bytes:
    out = b""
    for name, obj in events:
        head = f"event: {name}\n" if name else ""
        out += f"{head}data: {json.dumps(obj)}\n\n".encode()
    return out


def chat_events(path: str) -> bytes:
    def chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
        return {
            "id": "c1",
            "object": "chat.completion.chunk",
            "created": 1,
            "model": "agent",
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
        }

    progress = {"tool": "write_file", "label": path, "toolCallId": "t1", "status": "running"}
    call = {
        "index": 0,
        "id": "call_1",
        "function": {"name": "read_file", "arguments": json.dumps({"path": path})},
    }
    return (
        sse(
            ("", chunk({"role": "assistant"})),
            ("hermes.tool.progress", progress),
            ("", chunk({"tool_calls": [call]})),
            ("", chunk({"content": f"Here it is: {path} (and `{path}`)."})),
            ("", chunk({}, "stop")),
        )
        + b"data: [DONE]\n\n"
    )


def chat_completion(path: str) -> bytes:
    return json.dumps(
        {
            "id": "c1",
            "object": "chat.completion",
            "created": 1,
            "model": "agent",
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": f"It is {path}."},
                    "finish_reason": "stop",
                }
            ],
        }
    ).encode()


def responses_events(path: str) -> bytes:
    args = json.dumps({"path": path, "content": "x"})
    result = json.dumps({"resolved_path": path, "files_modified": [path]})
    call = {
        "id": "fc_1",
        "type": "function_call",
        "name": "write_file",
        "call_id": "call_1",
        "arguments": args,
    }
    output = {
        "id": "fco_1",
        "type": "function_call_output",
        "call_id": "call_1",
        "output": [{"type": "input_text", "text": result}],
    }
    resp = {"id": "resp_upstream1", "object": "response", "status": "completed", "output": []}
    return sse(
        (
            "response.created",
            {"type": "response.created", "response": {**resp, "status": "in_progress"}},
        ),
        ("response.output_item.added", {"type": "response.output_item.added", "item": call}),
        ("response.output_item.added", {"type": "response.output_item.added", "item": output}),
        (
            "response.output_text.delta",
            {"type": "response.output_text.delta", "delta": f"Saved {path}."},
        ),
        ("response.completed", {"type": "response.completed", "response": resp}),
    )


def run_events(path: str) -> bytes:
    return sse(
        ("", {"event": "tool.started", "run_id": "r1", "tool": "write_file", "preview": path}),
        ("", {"event": "tool.completed", "run_id": "r1", "tool": "write_file", "duration": 0.1}),
        ("", {"event": "message.delta", "run_id": "r1", "delta": f"Wrote {path}."}),
        ("", {"event": "run.completed", "run_id": "r1", "output": f"Wrote {path}.", "usage": {}}),
    )


def agent(path: Callable[[], str], sent: list[bytes]) -> ScriptedTransport:
    """An agent that names ``path()`` everywhere it can, on every API."""

    def answer(req: httpx.Request) -> Scripted:
        sent.append(req.content)
        route, p = req.method + " " + req.url.path, path()
        json_ct = {"content-type": "application/json"}
        if route.endswith("/capabilities"):
            return Scripted([json.dumps(CAPABILITIES).encode()], headers=json_ct)
        if route == "POST /v1/runs":
            return Scripted(
                [b'{"run_id": "run_up1", "status": "started"}'], status=202, headers=json_ct
            )
        if route.endswith("/events"):
            return Scripted([run_events(p)])
        if route.endswith("/stop"):
            return Scripted([b"{}"], headers=json_ct)
        if route == "POST /v1/responses":
            return Scripted([responses_events(p)])
        if b'"stream": true' in req.content or b'"stream":true' in req.content:
            return Scripted([chat_events(p)])
        return Scripted([chat_completion(p)], headers=json_ct)

    return ScriptedTransport(answer)


async def ask(gw: Gateway, front: str, key: str) -> str:
    """Everything a client of ``front`` gets back (bytes as text)."""
    msgs = [{"role": "user", "content": "Show me the file."}]
    async with gw.client(key) as c:
        if front == "chat-stream":
            r = await c.post(
                "/v1/chat/completions", json={"model": "agent", "messages": msgs, "stream": True}
            )
        elif front == "chat":
            r = await c.post("/v1/chat/completions", json={"model": "agent", "messages": msgs})
        elif front == "responses-stream":
            r = await c.post(
                "/v1/responses", json={"model": "agent", "input": "file?", "stream": True}
            )
        elif front == "responses":
            r = await c.post("/v1/responses", json={"model": "agent", "input": "file?"})
        else:
            r = await c.post("/v1/runs", json={"model": "agent", "input": "file?"})
            assert r.status_code == 202, r.text
            r = await c.get(f"/v1/runs/{r.json()['run_id']}/events")
    assert r.status_code == 200, r.text
    return r.text


_VARYING = {
    "id",
    "created",
    "created_at",
    "run_id",
    "item_id",
    "tool_call_id",
    "call_id",
    "sequence_number",
    "seq",
}


def _strip(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _strip(v) for k, v in value.items() if k not in _VARYING}
    if isinstance(value, list):
        return [_strip(v) for v in value]
    return value


def without_ids(text: str) -> str:
    """An answer with what differs between two answers anyway (ids, times) taken out."""
    if text.startswith("{"):
        return json.dumps(_strip(json.loads(text)), sort_keys=True)
    out = []
    for line in text.splitlines():
        if line.startswith("data: {"):
            line = "data: " + json.dumps(_strip(json.loads(line[6:])), sort_keys=True)
        out.append(line)
    return "\n".join(out)


FRONTS = ["chat-stream", "chat", "responses-stream", "responses", "runs"]


@pytest.mark.parametrize("apis", ["chat", "native"])
@pytest.mark.parametrize("front", FRONTS)
async def test_no_link_to_another_users_file_and_no_oracle(
    nursery: trio.Nursery, tmp_path: Path, front: str, apis: str
) -> None:
    users = tmp_path / "users"
    secret = users / "alice" / "q3-plan.txt"
    secret.parent.mkdir(parents=True)
    secret.write_text("alice's plan")
    (users / "bob").mkdir()
    target = [str(secret)]
    sent: list[bytes] = []
    config = make_config(
        tmp_path,
        "http://agent.test/v1",
        upstream={"apis": apis},
        artifacts={"roots": [str(users / "{principal}")], "shared_roots": []},
    )
    gw = await start_gateway(nursery, config, transport=agent(lambda: target[0], sent))
    by_bob = await ask(gw, front, BOB_KEY)
    assert LINK not in by_bob and str(users) not in by_bob and "q3-plan.txt" in by_bob
    target[0] = str(users / "alice" / "nothing-here" / "q3-plan.txt")  # no such file
    missing = await ask(gw, front, BOB_KEY)
    assert without_ids(by_bob) == without_ids(missing)  # the same answer: no oracle
    target[0] = str(secret)
    by_alice = await ask(gw, front, ALICE_KEY)
    assert LINK in by_alice  # her own file is a link (the check above can fail)
    assert gw.app.gateway.store.list_artifacts("bob") == []


async def test_another_users_link_in_the_history_is_not_mapped_back(
    nursery: trio.Nursery, tmp_path: Path
) -> None:
    """Alice's private link pasted into bob's conversation goes upstream as it is (only
    the requester's own links become the agent's paths again), and the agent repeating
    alice's folder gets bob nothing."""
    users = tmp_path / "users"
    secret = users / "alice" / "q3-plan.txt"
    secret.parent.mkdir(parents=True)
    secret.write_text("plan")
    sent: list[bytes] = []
    config = make_config(
        tmp_path,
        "http://agent.test/v1",
        artifacts={"roots": [str(users / "{principal}")], "shared_roots": []},
    )
    gw = await start_gateway(nursery, config, transport=agent(lambda: str(secret), sent))
    alice_link = gw.app.gateway.artifacts.url(
        gw.app.gateway.artifacts.mint(
            gw.app.gateway.artifacts.inspect(str(secret), "alice"), "alice", "private"
        )  # type: ignore[arg-type]
    )
    msgs = [
        {"role": "user", "content": f"what is in {alice_link}?"},
        {"role": "assistant", "content": f"[q3-plan.txt]({alice_link})"},
        {"role": "user", "content": "and again"},
    ]
    async with gw.client(BOB_KEY) as c:
        r = await c.post("/v1/chat/completions", json={"model": "agent", "messages": msgs})
    assert r.status_code == 200 and LINK not in r.json()["choices"][0]["message"]["content"]
    upstream = sent[-1].decode()
    assert str(users) not in upstream and alice_link in upstream


async def test_open_webui_users_reach_only_their_own_folder(
    nursery: trio.Nursery, tmp_path: Path
) -> None:
    """Through the runs proxy: Open WebUI user u2 asking about u1's file gets its name."""
    users = tmp_path / "users"
    secret = users / "openwebui+u1" / "notes.md"
    secret.parent.mkdir(parents=True)
    secret.write_text("u1's notes")
    sent: list[bytes] = []
    arts = {"roots": [str(users / "{principal}")], "shared_roots": []}
    config = make_config(tmp_path, "http://agent.test/v1", artifacts=arts)
    gw = await start_gateway(nursery, config, transport=agent(lambda: str(secret), sent))
    px = await start_proxy(
        nursery, proxy_config(tmp_path, "http://agent.test/v1", gw.url, artifacts=arts)
    )

    async def ask_as(user: str) -> str:
        headers = {"X-OpenWebUI-User-Id": user}
        body = {
            "model": "agent",
            "stream": True,
            "messages": [{"role": "user", "content": "notes?"}],
        }
        async with px.client(OWUI_KEY) as c:
            r = await c.post("/v1/chat/completions", json=body, headers=headers)
        assert r.status_code == 200, r.text
        return r.text

    assert LINK not in await ask_as("u2")
    assert LINK in await ask_as("u1")


@pytest.mark.parametrize("front", FRONTS)
async def test_a_store_that_fails_while_linking_is_a_503_or_a_failed_stream(
    nursery: trio.Nursery, tmp_path: Path, front: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Links cannot be stored (the database fails as the answer names a file): a
    stream ends with store_unavailable after the text as names, and a non-streamed
    answer is 503 store_unavailable like any other request the store failed (it came
    back 200 with the names: the client could not tell)."""
    config = make_config(tmp_path, "http://agent.test/v1", upstream={"apis": "chat"})
    own = tmp_path / "artifacts" / "report.md"
    own.write_text("r")
    gw = await start_gateway(nursery, config, transport=agent(lambda: str(own), []))

    def down(*args: Any) -> None:
        raise StoreError("The state store is unavailable.", code="store_unavailable")

    monkeypatch.setattr(gw.app.gateway.store, "save_artifacts", down)
    if front in ("chat", "responses"):
        async with gw.client(ALICE_KEY) as c:
            if front == "chat":
                msgs = [{"role": "user", "content": "Show me the file."}]
                r = await c.post("/v1/chat/completions", json={"model": "agent", "messages": msgs})
            else:
                r = await c.post("/v1/responses", json={"model": "agent", "input": "file?"})
        assert r.status_code == 503 and r.json()["error"]["code"] == "store_unavailable"
        return
    text = await ask(gw, front, ALICE_KEY)
    assert "store_unavailable" in text and str(own.parent) not in text
