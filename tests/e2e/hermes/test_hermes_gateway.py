"""The gateway in front of the real Hermes agent (issue 32 items 1, 2 and 4).

Hermes 0.19.0's API server (``conftest.py``: one per session, a scripted LLM as its
model) writes real files with its real ``write_file`` and ``terminal`` tools into
the test's folder; the gateway runs on real hypercorn with that folder as its only
artifact root and Hermes as its upstream. Every front a client has today: streamed
and non-streamed chat, the Responses and runs fronts (emulated over Hermes's chat),
the openai SDK.

What must hold, whatever the front (the issue's semantics):

* every file Hermes wrote under the root reaches its owner as a link, in the text
  where the answer names it and in the terminal manifest (also a file the answer
  forgot but a tool-progress event reported), and the owner's download returns the
  file's bytes as the answer left them (also after an overwrite in the same answer);
* another principal gets 404 for each link;
* a file outside the root is its bare name, never a link;
* no raw path (the project folder, Hermes's folders) anywhere in what the client got.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import httpx2
import openai
import pytest
import trio

from gateway.core.sse import SSEDecoder
from harness.scripted_llm import ToolCall, Turn
from tests.conftest import ALICE_KEY, BOB_KEY, Gateway, make_config, start_gateway
from tests.e2e.hermes.conftest import HermesRun
from tests.helpers import SDK_WARNINGS

pytestmark = pytest.mark.hermes

PUBLIC = "http://127.0.0.1:8642"  # make_config's public_base_url
LINK_RE = re.compile(re.escape(PUBLIC) + r"/v1/artifacts/[A-Za-z0-9_-]+")


@dataclass
class Answer:
    """What one client got: the raw bytes, the assembled text, the manifest."""

    raw: bytes
    text: str
    manifest: dict[str, Any] | None
    extra: list[str] = field(default_factory=list)  # other strings (named events)


async def gateway_for(
    nursery: trio.Nursery, tmp: Path, hermes: HermesRun, front: str = "chat-stream"
) -> Gateway:
    """The gateway in front of ``hermes`` as deployed (``upstream.apis = "auto"``: its
    own Responses and runs relayed); an ``-emulated`` front's over chat only."""
    apis = "chat" if front.endswith("-emulated") else "auto"
    config = make_config(
        tmp,
        hermes.base_url,
        upstream={"api_key": hermes.key, "first_byte_timeout_seconds": 60.0, "apis": apis},
        # alice's folder is the agent's project; bob has his own (empty) one
        artifacts={
            "roots": [str(tmp / "users" / "{principal}")],
            "shared_roots": [],
            "scopes": [{"principal": "alice", "roots": [str(hermes.workdir)]}],
        },
    )
    return await start_gateway(nursery, config)


def _client(gw: Gateway, key: str = ALICE_KEY) -> httpx.AsyncClient:
    return httpx.AsyncClient(
        base_url=gw.url,
        headers={"Authorization": f"Bearer {key}"},
        timeout=httpx.Timeout(10, read=90),
    )


def _events(raw: bytes) -> list[tuple[str, Any]]:
    out = []
    for ev in SSEDecoder().feed(raw):
        if ev.data == "[DONE]":
            continue
        out.append((ev.event, json.loads(ev.data)))
    return out


async def chat_stream(gw: Gateway, prompt: str) -> Answer:
    body = {
        "model": "hermes-agent",
        "stream": True,
        "messages": [{"role": "user", "content": prompt}],
    }
    async with _client(gw) as c, c.stream("POST", "/v1/chat/completions", json=body) as r:
        assert r.status_code == 200, await r.aread()
        raw = b"".join([chunk async for chunk in r.aiter_raw()])
    text, manifest, extra = [], None, []
    for name, obj in _events(raw):
        if name not in ("", "message"):
            extra.append(json.dumps(obj))
            continue
        for ch in obj.get("choices") or ():
            text.append((ch.get("delta") or {}).get("content") or "")
        manifest = obj.get("gateway") or manifest
    assert raw.endswith(b"data: [DONE]\n\n")
    return Answer(raw, "".join(text), manifest, extra)


async def chat_json(gw: Gateway, prompt: str) -> Answer:
    body = {"model": "hermes-agent", "messages": [{"role": "user", "content": prompt}]}
    async with _client(gw) as c:
        r = await c.post("/v1/chat/completions", json=body)
    assert r.status_code == 200, r.text
    obj = r.json()
    return Answer(r.content, obj["choices"][0]["message"]["content"], obj.get("gateway"))


async def responses_stream(gw: Gateway, prompt: str) -> Answer:
    body = {"model": "hermes-agent", "stream": True, "input": prompt}
    async with _client(gw) as c, c.stream("POST", "/v1/responses", json=body) as r:
        assert r.status_code == 200, await r.aread()
        raw = b"".join([chunk async for chunk in r.aiter_raw()])
    text, manifest = [], None
    for _, obj in _events(raw):
        if obj.get("type") == "response.output_text.delta":
            text.append(obj["delta"])
        if obj.get("type") == "response.completed":
            manifest = obj["response"].get("gateway")
            assert obj["response"]["output_text"] == "".join(text)
    return Answer(raw, "".join(text), manifest)


async def run_events(gw: Gateway, prompt: str) -> Answer:
    async with _client(gw) as c:
        r = await c.post("/v1/runs", json={"model": "hermes-agent", "input": prompt})
        assert r.status_code == 202, r.text
        run_id = r.json()["run_id"]
        async with c.stream("GET", f"/v1/runs/{run_id}/events") as ev:
            assert ev.status_code == 200
            raw = b"".join([chunk async for chunk in ev.aiter_raw()])
    text, manifest = [], None
    for _, obj in _events(raw):
        if obj.get("event") == "message.delta":
            text.append(obj["delta"])
        if obj.get("event") == "run.completed":
            manifest = obj.get("gateway")
    return Answer(r.content + raw, "".join(text), manifest)


async def sdk_stream(gw: Gateway, prompt: str) -> Answer:
    def consume() -> Answer:
        with httpx2.Client(timeout=httpx2.Timeout(10, read=90)) as http:
            client = openai.OpenAI(
                base_url=gw.url + "/v1", api_key=ALICE_KEY, http_client=http, max_retries=0
            )
            parts: list[str] = []
            manifest = None
            raw: list[str] = []
            with client.chat.completions.create(
                model="hermes-agent",
                messages=[{"role": "user", "content": prompt}],
                stream=True,
            ) as stream:
                for chunk in stream:
                    raw.append(chunk.model_dump_json())
                    for choice in chunk.choices or []:
                        parts.append(choice.delta.content or "")
                    manifest = (chunk.model_extra or {}).get("gateway") or manifest
            return Answer("".join(raw).encode(), "".join(parts), manifest)

    return await trio.to_thread.run_sync(consume)


FRONTS = {
    "chat-stream": chat_stream,
    "chat-json": chat_json,
    "responses": responses_stream,
    "runs": run_events,
    "responses-emulated": responses_stream,
    "runs-emulated": run_events,
    "openai-sdk": sdk_stream,
}


# --------------------------------------------------------------------------- checks


def _local(url: str, gw: Gateway) -> str:
    return gw.url + url[len(PUBLIC) :]


async def assert_delivered(
    gw: Gateway, hermes: HermesRun, got: Answer, files: dict[Path, str], *, named: list[Path]
) -> dict[Path, str]:
    """Each of ``files`` (path -> bytes Hermes wrote) is in the manifest and downloads
    for alice, 404 for bob; each of ``named`` is a link in the text. The link per file."""
    assert_no_raw_path(got, hermes)
    assert got.manifest is not None, "no manifest on the terminal event"
    by_name = {a["filename"]: a for a in got.manifest.get("artifacts", [])}
    links: dict[Path, str] = {}
    problems = []
    for path in files:
        art = by_name.get(path.name)
        if art is None:
            problems.append(f"{path.name}: not in the manifest {sorted(by_name)}")
            continue
        links[path] = art["url"]
        if path in named and art["url"] not in got.text:
            problems.append(f"{path.name}: the text has no link to it: {got.text!r}")
    assert not problems, "\n".join(problems)
    async with _client(gw) as alice, _client(gw, BOB_KEY) as bob:
        for path, url in links.items():
            r = await alice.get(_local(url, gw))
            assert r.status_code == 200, (path.name, r.status_code, r.text[:200])
            assert r.content == files[path].encode(), path.name
            assert r.content == path.read_bytes()
            r = await bob.get(_local(url, gw))
            assert r.status_code == 404, (path.name, r.status_code)
    return links


def assert_no_raw_path(got: Answer, hermes: HermesRun) -> None:
    everything = got.raw.decode("utf-8", "replace") + got.text + "".join(got.extra)
    for secret in {str(hermes.workdir), str(hermes.agent.base), str(hermes.home)}:
        for form in (secret, json.dumps(secret)[1:-1]):
            assert form not in everything, f"raw path {form!r} reached the client"


def write(path: Path, content: str) -> ToolCall:
    return ToolCall("write_file", {"path": str(path), "content": content})


# --------------------------------------------------------------------------- tests


@SDK_WARNINGS
@pytest.mark.parametrize("front", list(FRONTS))
async def test_a_fresh_file_reaches_its_owner_on_every_front(
    front: str, hermes: HermesRun, nursery: trio.Nursery, tmp_path: Path
) -> None:
    """Hermes names the path in tool progress before the file exists, writes it, then
    the answer names it: the answer's mention is a link, the download is the file."""
    gw = await gateway_for(nursery, tmp_path, hermes, front)
    report = hermes.workdir / "out" / "report.md"
    hermes.llm.script(
        [
            Turn(tool_calls=[write(report, "# Report\n\nfresh\n")]),
            Turn(text=f"Done. I wrote the report to {report}."),
        ]
    )
    got = await FRONTS[front](gw, f"Write the report ({front}, {hermes.workdir.name}).")
    assert report.read_text() == "# Report\n\nfresh\n"
    assert (report.stat().st_mode & 0o777) == 0o600  # as Hermes writes files
    assert hermes.llm.turns_left == 0
    await assert_delivered(gw, hermes, got, {report: "# Report\n\nfresh\n"}, named=[report])


@SDK_WARNINGS
@pytest.mark.parametrize("front", list(FRONTS))
async def test_an_overwritten_file_serves_the_final_bytes(
    front: str, hermes: HermesRun, nursery: trio.Nursery, tmp_path: Path
) -> None:
    """Two requests in the same project: the second rewrites the file the first wrote
    (Hermes names it while the old version is still there). Each answer's link serves
    the version that answer left; no answer's link serves the other's bytes."""
    gw = await gateway_for(nursery, tmp_path, hermes, front)
    report = hermes.workdir / "report.md"
    hermes.llm.script(
        [
            Turn(tool_calls=[write(report, "version 1\n")]),
            Turn(text=f"Wrote {report}."),
            Turn(tool_calls=[write(report, "version 2, longer\n")]),
            Turn(text=f"Rewrote {report} with the new figures."),
        ]
    )
    first = await FRONTS[front](gw, f"First draft please ({front}, {hermes.workdir.name}).")
    links1 = await assert_delivered(gw, hermes, first, {report: "version 1\n"}, named=[report])
    second = await FRONTS[front](gw, f"Now rewrite it ({front}, {hermes.workdir.name}).")
    links2 = await assert_delivered(
        gw, hermes, second, {report: "version 2, longer\n"}, named=[report]
    )
    assert links1[report] != links2[report]
    async with _client(gw) as alice:
        r = await alice.get(_local(links1[report], gw))
    assert r.status_code == 410, "a link sealed to version 1 must not serve version 2"


@SDK_WARNINGS
@pytest.mark.parametrize("front", list(FRONTS))
async def test_several_files_at_once_all_reach_the_owner(
    front: str, hermes: HermesRun, nursery: trio.Nursery, tmp_path: Path
) -> None:
    """Three write_file calls in one model turn; the answer names two. All three
    (the forgotten one from its tool-progress event) are in the manifest."""
    gw = await gateway_for(nursery, tmp_path, hermes, front)
    out = hermes.workdir / "out"
    files = {
        out / "notes.md": "notes\n",
        out / "data.csv": "x,y\n1,2\n",
        out / "chart.svg": "<svg xmlns='http://www.w3.org/2000/svg'/>\n",
    }
    hermes.llm.script(
        [
            Turn(tool_calls=[write(p, c) for p, c in files.items()]),
            Turn(text=f"Wrote {out / 'notes.md'} and {out / 'data.csv'}, plus the chart."),
        ]
    )
    got = await FRONTS[front](gw, f"All three files ({front}, {hermes.workdir.name}).")
    await assert_delivered(gw, hermes, got, files, named=[out / "notes.md", out / "data.csv"])


@SDK_WARNINGS
@pytest.mark.parametrize("front", list(FRONTS))
async def test_a_folder_with_a_space(
    front: str, hermes: HermesRun, nursery: trio.Nursery, tmp_path: Path
) -> None:
    gw = await gateway_for(nursery, tmp_path, hermes, front)
    summary = hermes.workdir / "My Reports" / "summary 2026.md"
    hermes.llm.script(
        [
            Turn(tool_calls=[write(summary, "summary\n")]),
            Turn(text=f"Saved it as `{summary}`."),
        ]
    )
    got = await FRONTS[front](gw, f"Save the summary ({front}, {hermes.workdir.name}).")
    await assert_delivered(gw, hermes, got, {summary: "summary\n"}, named=[summary])
    assert "My Reports" not in got.text


@SDK_WARNINGS
@pytest.mark.parametrize("front", list(FRONTS))
async def test_a_file_the_terminal_tool_writes(
    front: str, hermes: HermesRun, nursery: trio.Nursery, tmp_path: Path
) -> None:
    gw = await gateway_for(nursery, tmp_path, hermes, front)
    table = hermes.workdir / "out" / "table.csv"
    command = f"mkdir -p '{table.parent}' && printf 'a,b\\n1,2\\n' > '{table}'"
    hermes.llm.script(
        [
            Turn(tool_calls=[ToolCall("terminal", {"command": command})]),
            Turn(text=f"The table is at {table}."),
        ]
    )
    got = await FRONTS[front](gw, f"Make the table ({front}, {hermes.workdir.name}).")
    assert table.read_text() == "a,b\n1,2\n"
    await assert_delivered(gw, hermes, got, {table: "a,b\n1,2\n"}, named=[table])


@SDK_WARNINGS
@pytest.mark.parametrize("front", list(FRONTS))
async def test_a_file_outside_the_roots_is_a_bare_name(
    front: str, hermes: HermesRun, nursery: trio.Nursery, tmp_path: Path
) -> None:
    gw = await gateway_for(nursery, tmp_path, hermes, front)
    outside = hermes.agent.base / "outside" / hermes.workdir.name / "private notes.txt"
    hermes.llm.script(
        [
            Turn(tool_calls=[write(outside, "private\n")]),
            Turn(text=f"Your notes are in `{outside}`."),
        ]
    )
    got = await FRONTS[front](gw, f"Keep my notes ({front}, {hermes.workdir.name}).")
    assert outside.read_text() == "private\n"
    assert_no_raw_path(got, hermes)
    assert "private notes.txt" in got.text
    assert LINK_RE.search(got.text) is None, got.text
    assert got.manifest is not None and got.manifest["artifacts"] == []
    for extra in got.extra:
        assert LINK_RE.search(extra) is None, extra


@SDK_WARNINGS
@pytest.mark.parametrize("front", list(FRONTS))
async def test_a_long_run_with_several_tool_turns(
    front: str, hermes: HermesRun, nursery: trio.Nursery, tmp_path: Path
) -> None:
    """Three tool turns (write, terminal, write) from a slow model, text before the
    first; every file written reaches the owner, the two the answer names as links."""
    gw = await gateway_for(nursery, tmp_path, hermes, front)
    run = hermes.workdir / "run"
    step1, step2, final = run / "step1.txt", run / "step2.txt", run / "final.md"
    hermes.llm.script(
        [
            Turn(text="Starting.", tool_calls=[write(step1, "one\n")], delay=0.05),
            Turn(
                tool_calls=[ToolCall("terminal", {"command": f"printf 'two\\n' > '{step2}'"})],
                delay=0.05,
            ),
            Turn(tool_calls=[write(final, "# Final\n")], delay=0.05),
            Turn(text=f"All done: {step2} and the summary {final}.", delay=0.05, chunk_chars=5),
        ]
    )
    got = await FRONTS[front](gw, f"The long analysis ({front}, {hermes.workdir.name}).")
    files = {step1: "one\n", step2: "two\n", final: "# Final\n"}
    await assert_delivered(gw, hermes, got, files, named=[step2, final])
