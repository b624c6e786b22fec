"""Issue 5, "Must show": the Responses API, background runs and sessions end to end.

Real hypercorn on 127.0.0.1 (ephemeral ports) for the gateway, with either the real
demo upstream (``tests.conftest.start_demo_upstream``) or a
:class:`harness.transport.ScriptedTransport` as the gateway's upstream transport when
exact chunk boundaries matter. Clients: httpx and the ``openai`` SDK.

What is shown here:

* the SDK's Responses streaming client (``responses.create(stream=True)`` and the
  accumulating ``responses.stream(...)`` helper) and its plain ``responses.create()``
  consume ``/v1/responses``; the text carries managed-download links, never a path;
* a path split across upstream chunks never leaks through any Responses event, and the
  terminal events agree with the deltas and carry the artifact manifest;
* ``store`` / ``previous_response_id`` / ``GET`` / ``DELETE`` of stored responses;
* runs: resumable event log (``Last-Event-ID`` / ``?after=``) delivered exactly once,
  stop, failure, a run outliving its request, the terminal event's payload;
* sessions continue a conversation with the rewritten reply, are validated and are
  per principal;
* every read/write route of sessions, responses, runs and artifacts is 404 to another
  principal and for a guessed id.
"""

from __future__ import annotations

import gc
import json
import re
import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import httpx2
import openai
import pytest
import trio
from openai.types.responses import (
    ResponseCompletedEvent,
    ResponseContentPartAddedEvent,
    ResponseContentPartDoneEvent,
    ResponseCreatedEvent,
    ResponseFunctionCallArgumentsDeltaEvent,
    ResponseInProgressEvent,
    ResponseOutputItemAddedEvent,
    ResponseOutputItemDoneEvent,
    ResponseTextDeltaEvent,
    ResponseTextDoneEvent,
)

from gateway.cli.demo_upstream import DemoFiles, demo_long_delta
from gateway.core.sse import DONE, SSEDecoder, SSEEvent, encode_json
from gateway.links.signing import new_artifact_id
from harness.nothing import NOTHING_FOUND
from harness.transport import Scripted, ScriptedTransport, split_at, split_every
from tests.conftest import (
    ALICE_KEY,
    BOB_KEY,
    Gateway,
    Upstream,
    make_config,
    start_demo_upstream,
    start_gateway,
)
from tests.helpers import (
    HOST_PATH_RE,
    SDK_WARNINGS,
    assert_no_demo_folders,
    json_strings,
    paths_for_links,
)

RESPONSES = "/v1/responses"
RUNS = "/v1/runs"
CHAT = "/v1/chat/completions"
BASE = "http://127.0.0.1:8642"  # public_base_url of tests.conftest.make_config
#: never contacted: gateways with a ScriptedTransport answer every request themselves
SCRIPTED_URL = "http://127.0.0.1:9/v1"
LINK_RE = re.compile(re.escape(BASE) + r"/v1/artifacts/[A-Za-z0-9_-]+")
TERMINAL = ("run.completed", "run.failed", "run.cancelled")
LONG_TEXT = "".join(demo_long_delta(i) for i in range(200))  # demo-long's default answer


# --------------------------------------------------------------------------- helpers


@dataclass
class Received:
    """What one SSE client saw: status, every network chunk, the decoded events."""

    status: int = 0
    headers: httpx.Headers = field(default_factory=httpx.Headers)
    raw: list[bytes] = field(default_factory=list)
    events: list[SSEEvent] = field(default_factory=list)
    error: dict[str, Any] | None = None

    @property
    def body(self) -> bytes:
        return b"".join(self.raw)

    @property
    def objects(self) -> list[dict[str, Any]]:
        return [json.loads(e.data) for e in self.events if e.data != "[DONE]"]

    def of_type(self, kind: str) -> list[dict[str, Any]]:
        return [o for o in self.objects if o.get("type") == kind]

    @property
    def deltas(self) -> list[str]:
        return [o["delta"] for o in self.of_type("response.output_text.delta")]


async def read_sse(
    client: httpx.AsyncClient,
    method: str,
    url: str,
    *,
    json_body: dict[str, Any] | None = None,
    headers: dict[str, str] | None = None,
    until: Callable[[Received], bool] | None = None,
) -> Received:
    """Read an SSE response to its end, or leave (by cancellation) once ``until`` holds."""
    got = Received()
    decoder = SSEDecoder()
    # Leave by cancellation, not `break`: breaking out of httpx's nested async
    # generators abandons them unexhausted (a ResourceWarning under trio).
    with trio.CancelScope() as reading:
        async with client.stream(method, url, json=json_body, headers=headers) as resp:
            got.status = resp.status_code
            got.headers = resp.headers
            if resp.status_code != 200:
                await resp.aread()
                got.error = resp.json()
                return got
            async for piece in resp.aiter_raw():
                got.raw.append(piece)
                got.events.extend(decoder.feed(piece))
                if until is not None and until(got):
                    reading.cancel()
    return got


async def stream_response(
    client: httpx.AsyncClient, body: dict[str, Any], headers: dict[str, str] | None = None
) -> Received:
    got = await read_sse(
        client, "POST", RESPONSES, json_body={"stream": True, **body}, headers=headers
    )
    assert got.status == 200, got.error
    return got


def assert_sse_wire_format(got: Received) -> None:
    assert got.headers["content-type"].startswith("text/event-stream")
    assert got.headers["cache-control"] == "no-cache"
    assert got.headers["x-accel-buffering"] == "no"
    text = got.body.decode("utf-8")
    assert "\r" not in text and text.endswith("\n\n")
    for block in text.split("\n\n")[:-1]:
        lines = [ln for ln in block.split("\n") if ln and not ln.startswith(":")]
        data = [ln for ln in lines if ln.startswith("data: ")]
        assert len(data) == 1, block
        assert isinstance(json.loads(data[0][len("data: ") :]), dict)


def assert_responses_sequence(got: Received) -> None:
    """The Responses event sequence of the design, numbered 0, 1, 2... without a gap."""
    assert_sse_wire_format(got)
    objs = got.objects
    assert [o["sequence_number"] for o in objs] == list(range(len(objs)))
    assert [e.event for e in got.events] == [o["type"] for o in objs]
    kinds = [o["type"] for o in objs]
    assert kinds[:4] == [
        "response.created",
        "response.in_progress",
        "response.output_item.added",
        "response.content_part.added",
    ]
    assert kinds[-1] in ("response.completed", "response.failed")
    if kinds[-1] == "response.completed":
        done = kinds.index("response.output_text.done")
        assert kinds[done : done + 3] == [
            "response.output_text.done",
            "response.content_part.done",
            "response.output_item.done",
        ]
        assert "response.output_text.delta" not in kinds[done:]


def assert_demo_text(text: str, manifest: dict[str, Any], files: DemoFiles) -> None:
    """The ``demo`` answer as rewritten: links for the root files, names for the rest."""
    assert_no_demo_folders(text, files)
    assert manifest["download_link_mode"] == "private"
    artifacts = manifest["artifacts"]
    assert sorted(a["filename"] for a in artifacts) == sorted(p.name for p in files.in_root)
    for a in artifacts:
        assert a["url"] == f"{BASE}/v1/artifacts/{a['id']}"
        assert a["link_mode"] == "private" and a["bytes"] > 0
    # one link per path; the text and the manifest agree
    assert set(LINK_RE.findall(text)) == {a["url"] for a in artifacts}
    assert "[report.pdf](" + BASE + "/v1/artifacts/" in text
    assert files.outside_txt.name in text
    assert " plot.png for the slides" in text


def local_path(url: str) -> str:
    """A minted link's path on the gateway under test (links use the public base URL)."""
    assert url.startswith(BASE)
    return url[len(BASE) :]


async def assert_links_download(
    gw: Gateway, manifest: dict[str, Any], files: DemoFiles | None = None
) -> None:
    """Each link downloads for its owner (alice) and is 404 to bob."""
    by_name = {p.name: p for p in files.in_root} if files is not None else {}
    async with gw.client(ALICE_KEY) as alice, gw.client(BOB_KEY) as bob:
        for a in manifest["artifacts"]:
            got = await alice.get(local_path(a["url"]))
            assert got.status_code == 200
            if a["filename"] in by_name:
                assert got.content == by_name[a["filename"]].read_bytes()
            assert (await bob.get(local_path(a["url"]))).status_code == 404


async def wait_until(condition: Callable[[], bool], limit: float = 5.0) -> None:
    """Poll plain counters of the apps (they expose numbers, not events)."""
    with trio.fail_after(limit):
        while not condition():  # noqa: ASYNC110
            await trio.sleep(0.005)


def sdk_client(gw: Gateway, http: httpx2.AsyncClient, key: str = ALICE_KEY) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(base_url=gw.url + "/v1", api_key=key, http_client=http, max_retries=0)


def http2_client() -> httpx2.AsyncClient:
    return httpx2.AsyncClient(timeout=httpx2.Timeout(10, read=30))


# --------------------------------------------------------------------------- openai SDK


@SDK_WARNINGS
async def test_sdk_responses_create_stream(gateway: Gateway, upstream: Upstream) -> None:
    files = upstream.app.demo_files
    seen: list[Any] = []
    async with http2_client() as http:
        client = sdk_client(gateway, http)
        stream = await client.responses.create(model="demo", input="Make me a report.", stream=True)
        async with stream:
            async for event in stream:
                seen.append(event)
        del stream
    gc.collect()

    kinds = [e.type for e in seen]
    assert kinds[0] == "response.created" and kinds[-1] == "response.completed"
    assert [e.sequence_number for e in seen] == list(range(len(seen)))
    typed = {
        "response.created": ResponseCreatedEvent,
        "response.in_progress": ResponseInProgressEvent,
        "response.output_item.added": ResponseOutputItemAddedEvent,
        "response.content_part.added": ResponseContentPartAddedEvent,
        "response.output_text.delta": ResponseTextDeltaEvent,
        "response.function_call_arguments.delta": ResponseFunctionCallArgumentsDeltaEvent,
        "response.output_text.done": ResponseTextDoneEvent,
        "response.content_part.done": ResponseContentPartDoneEvent,
        "response.output_item.done": ResponseOutputItemDoneEvent,
        "response.completed": ResponseCompletedEvent,
    }
    for event in seen:
        assert type(event) is typed.get(event.type, type(event)), event.type
    assert set(typed) - {"response.function_call_arguments.delta"} <= set(kinds)

    deltas = "".join(e.delta for e in seen if isinstance(e, ResponseTextDeltaEvent))
    (text_done,) = [e for e in seen if isinstance(e, ResponseTextDoneEvent)]
    completed = seen[-1]
    assert isinstance(completed, ResponseCompletedEvent)
    response = completed.response
    assert response.status == "completed"
    assert response.id.startswith("resp_") and response.model == "demo"
    assert text_done.text == deltas
    assert response.output_text == deltas
    message = response.output[0]
    assert message.type == "message"
    assert [getattr(part, "text", None) for part in message.content] == [deltas]
    # the write_file tool call is a function_call item, its arguments rewritten too
    calls = [item for item in response.output if item.type == "function_call"]
    assert [c.name for c in calls] == ["write_file"]
    assert_no_demo_folders(calls[0].arguments, files)
    assert response.usage is not None and response.usage.total_tokens > 0
    manifest = (response.model_extra or {})["gateway"]
    assert_demo_text(deltas, manifest, files)
    await assert_links_download(gateway, manifest, files)


@SDK_WARNINGS
async def test_sdk_responses_stream_helper(gateway: Gateway, upstream: Upstream) -> None:
    files = upstream.app.demo_files
    deltas: list[str] = []
    snapshots: list[str] = []
    async with http2_client() as http:
        client = sdk_client(gateway, http)
        async with client.responses.stream(
            model="demo", input=[{"role": "user", "content": "Make me a report."}]
        ) as stream:
            async for event in stream:
                if event.type == "response.output_text.delta":
                    deltas.append(event.delta)
                    snapshots.append(event.snapshot)
            final = await stream.get_final_response()
        del stream
    gc.collect()

    text = "".join(deltas)
    assert snapshots[-1] == text  # the helper's own accumulation agrees
    assert final.status == "completed"
    assert final.output_text == text
    manifest = (final.model_extra or {})["gateway"]
    assert_demo_text(text, manifest, files)


@SDK_WARNINGS
async def test_sdk_responses_create_plain(gateway: Gateway, upstream: Upstream) -> None:
    files = upstream.app.demo_files
    async with http2_client() as http:
        client = sdk_client(gateway, http)
        response = await client.responses.create(
            model="demo", input="Make me a report.", instructions="Be brief."
        )
    gc.collect()
    assert response.status == "completed" and response.object == "response"
    manifest = (response.model_extra or {})["gateway"]
    assert_demo_text(response.output_text, manifest, files)
    for s in json_strings(response.model_dump(mode="json")):
        assert_no_demo_folders(s, files)
    assert response.usage is not None and response.usage.total_tokens > 0
    # instructions go upstream as the system message, before the input
    sent = upstream.app.demo_log[-1]["body"]["messages"]
    assert sent == [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Make me a report."},
    ]
    await assert_links_download(gateway, manifest, files)


# --------------------------------------------------------------------------- chunk boundaries


def chunk(delta: dict[str, Any], finish: str | None = None, **extra: Any) -> dict[str, Any]:
    return {
        "id": "chatcmpl-scripted",
        "object": "chat.completion.chunk",
        "created": 1700000000,
        "model": "scripted",
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
        **extra,
    }


def content_event(text: str) -> bytes:
    return encode_json(chunk({"content": text}))


ROLE_EVENT = encode_json(chunk({"role": "assistant", "content": ""}))
STOP_EVENT = encode_json(chunk({}, "stop"))
USAGE_EVENT = encode_json(
    {**chunk({}), "choices": [], "usage": {"prompt_tokens": 3, "completion_tokens": 6}}
)
SECRET = "zz-Secret-Folder-7q"
MISSING = f"/Users/{SECRET}/notes/todo.txt"  # not a file: its name alone


def split_body(report: str, cut: int) -> bytes:
    """The upstream body with the report's path cut between two deltas at ``cut``."""
    return b"".join(
        [
            ROLE_EVENT,
            content_event("Saved the report to " + report[:cut]),
            content_event(report[cut:] + " and the list to " + MISSING[:9]),
            content_event(MISSING[9:] + ". Done."),
            STOP_EVENT,
            USAGE_EVENT,
            DONE,
        ]
    )


def per_event(body: bytes) -> list[bytes]:
    return [e + b"\n\n" for e in body.split(b"\n\n") if e]


@dataclass
class LeakWatch:
    """Checks each network chunk as it arrives (windowed over chunk boundaries)."""

    needles: tuple[bytes, ...]
    tail: bytes = b""

    def __call__(self, piece: bytes) -> None:
        window = self.tail + piece
        for needle in self.needles:
            assert needle not in window, (needle, window)
        self.tail = window[-(max(len(n) for n in self.needles) - 1) :]


async def test_responses_stream_path_split_across_chunks(
    nursery: trio.Nursery, tmp_path: Path
) -> None:
    folder = tmp_path / "artifacts" / SECRET
    folder.mkdir(parents=True)
    report_file = folder / "report.pdf"
    report_file.write_bytes(b"%PDF-1.4 scripted\n")
    report = str(report_file)
    cases: list[tuple[str, list[bytes]]] = []
    for cut in (1, 2, 5, len(str(tmp_path)) + 3, report.index(SECRET) + 4, len(report) - 4):
        cases.append((f"delta-cut-{cut}", per_event(split_body(report, cut))))
    whole = split_body(report, len(report))  # the path whole inside one delta...
    inside = whole.index(report.encode())
    for offset in (1, 6, len(report) // 2, len(report) - 1):  # ...cut between body reads
        cases.append((f"bytes-cut-{offset}", split_at(whole, [inside + offset])))
    cases.append(("every-7-bytes", split_every(split_body(report, 12), 7)))
    cases.append(("every-byte", split_every(split_body(report, 30), 1)))

    queue = list(cases)
    transport = ScriptedTransport(lambda req: Scripted(queue.pop(0)[1]))
    gw = await start_gateway(nursery, make_config(tmp_path, SCRIPTED_URL), transport=transport)
    needles = (SECRET.encode(), str(tmp_path).encode(), b"/Users/", b"notes/")
    texts: set[str] = set()
    async with gw.client() as c:
        for name, _ in cases:
            watch = LeakWatch(needles)
            got = Received()
            decoder = SSEDecoder()
            body = {"model": "scripted", "input": "where is it?", "stream": True}
            async with c.stream("POST", RESPONSES, json=body) as resp:
                assert resp.status_code == 200
                got.headers = resp.headers
                async for piece in resp.aiter_raw():
                    watch(piece)
                    got.raw.append(piece)
                    got.events.extend(decoder.feed(piece))
            try:
                assert_responses_sequence(got)
                raw = got.body.decode()
                assert SECRET not in raw and str(tmp_path) not in raw
                for obj in got.objects:
                    for s in json_strings(obj):
                        assert HOST_PATH_RE.search(s) is None, s
                        assert "notes/" not in s, s
                deltas = got.deltas
                text = "".join(deltas)
                (completed,) = got.of_type("response.completed")
                response = completed["response"]
                manifest = response["gateway"]
                (artifact,) = manifest["artifacts"]
                url = artifact["url"]
                assert artifact["filename"] == "report.pdf"
                assert url == f"{BASE}/v1/artifacts/{artifact['id']}"
                assert (
                    text
                    == f"Saved the report to [report.pdf]({url}) and the list to todo.txt. Done."
                )
                # the deltas, the done events and the completed response agree
                assert LINK_RE.findall(text) == [url]
                (text_done,) = got.of_type("response.output_text.done")
                assert text_done["text"] == text
                (part_done,) = got.of_type("response.content_part.done")
                assert part_done["part"]["text"] == text
                item_done = got.of_type("response.output_item.done")[0]
                assert item_done["item"]["content"][0]["text"] == text
                assert response["status"] == "completed"
                assert response["output_text"] == text
                assert response["output"][0]["content"][0]["text"] == text
                assert response["usage"]["input_tokens"] == 3
                assert response["usage"]["output_tokens"] == 6
                assert manifest["download_link_mode"] == "private"
                texts.add(LINK_RE.sub("LINK", text))
                got_file = await c.get(local_path(url))
                assert got_file.status_code == 200
                assert got_file.content == report_file.read_bytes()
            except AssertionError as exc:
                raise AssertionError(f"chunking {name!r}: {exc}") from exc
    assert not queue and len(transport.requests) == len(cases)
    assert len(texts) == 1  # chunking invariance


async def test_split_path_check_is_not_vacuous(nursery: trio.Nursery, tmp_path: Path) -> None:
    """With rewriting switched off (harness-only switch) the same bytes do leak."""
    report = str(tmp_path / "artifacts" / SECRET / "report.pdf")
    chunks = per_event(split_body(report, 5))
    transport = ScriptedTransport(lambda req: Scripted(chunks))

    gw = await start_gateway(
        nursery, make_config(tmp_path, SCRIPTED_URL), transport=transport, settings=NOTHING_FOUND
    )
    async with gw.client() as c:
        got = await stream_response(c, {"model": "scripted", "input": "where is it?"})
    assert SECRET.encode() in got.body
    with pytest.raises(AssertionError):
        LeakWatch((SECRET.encode(),))(got.body)


async def test_responses_stream_upstream_cut_inside_path(
    nursery: trio.Nursery, tmp_path: Path
) -> None:
    path = f"/home/{SECRET}/out/report.pdf"
    chunks = [ROLE_EVENT, content_event("Writing to " + path[:8]), content_event(path[8:-4])]
    transport = ScriptedTransport(lambda req: Scripted(chunks, fail_after=True))
    gw = await start_gateway(nursery, make_config(tmp_path, SCRIPTED_URL), transport=transport)
    async with gw.client() as c:
        got = await stream_response(c, {"model": "scripted", "input": "go"})
    assert_responses_sequence(got)
    assert SECRET.encode() not in got.body
    assert "".join(got.deltas) == "Writing to report"
    (failed,) = got.of_type("response.failed")
    response = failed["response"]
    assert response["status"] == "failed"
    assert response["error"]["code"] == "upstream_disconnected"
    assert response["output_text"] == "Writing to report"
    assert response["gateway"] == {"download_link_mode": "private", "artifacts": []}
    assert transport.closed


# --------------------------------------------------------------------------- stored responses


async def test_store_previous_response_id_get_delete(gateway: Gateway, upstream: Upstream) -> None:
    files = upstream.app.demo_files
    log = upstream.app.demo_log
    async with gateway.client() as c:
        # 1. a streamed, stored response (store defaults to true)
        first = await stream_response(
            c, {"model": "demo", "input": "Make me a report.", "instructions": "Be brief."}
        )
        (completed,) = first.of_type("response.completed")
        r1 = completed["response"]
        reply = "".join(first.deltas)
        assert_demo_text(reply, r1["gateway"], files)

        got = await c.get(f"{RESPONSES}/{r1['id']}")
        assert got.status_code == 200
        assert got.json() == r1  # the stored object is the completed one

        # 2. a plain response chained on it: the upstream sees the first exchange, not
        #    the first instructions; alice's own links are her files' paths again
        got = await c.post(
            RESPONSES,
            json={"model": "demo-long", "input": "And now?", "previous_response_id": r1["id"]},
        )
        assert got.status_code == 200
        r2 = got.json()
        assert r2["output_text"] == LONG_TEXT
        sent = log[-1]["body"]["messages"]
        upstream_reply = paths_for_links(reply, r1["gateway"], files)
        assert sent == [
            {"role": "user", "content": "Make me a report."},
            {"role": "assistant", "content": upstream_reply},
            {"role": "user", "content": "And now?"},
        ]
        assert str(files.report_pdf) in upstream_reply
        assert str(files.outside_txt.parent) not in upstream_reply  # only ever a name

        # 3. chains go on: the third request sees both exchanges
        got = await c.post(
            RESPONSES,
            json={
                "model": "demo-long",
                "input": [{"role": "user", "content": [{"type": "input_text", "text": "More."}]}],
                "previous_response_id": r2["id"],
                "store": False,
            },
        )
        assert got.status_code == 200
        r3 = got.json()
        assert [m["content"] for m in log[-1]["body"]["messages"]] == [
            "Make me a report.",
            upstream_reply,
            "And now?",
            LONG_TEXT,
            "More.",
        ]

        # 4. store: false is never retrievable nor chainable
        assert (await c.get(f"{RESPONSES}/{r3['id']}")).status_code == 404
        before = len(log)
        got = await c.post(
            RESPONSES, json={"model": "demo", "input": "x", "previous_response_id": r3["id"]}
        )
        assert got.status_code == 404
        assert got.json()["error"]["code"] == "response_not_found"
        assert len(log) == before  # refused before the upstream is called

        # 5. streamed with store: false: not retrievable either
        plain = await stream_response(c, {"model": "demo-long", "input": "x", "store": False})
        rid = plain.of_type("response.completed")[0]["response"]["id"]
        assert (await c.get(f"{RESPONSES}/{rid}")).status_code == 404

        # 6. DELETE: gone for GET, DELETE and chaining
        got = await c.delete(f"{RESPONSES}/{r1['id']}")
        assert got.status_code == 200
        assert got.json() == {"id": r1["id"], "object": "response.deleted", "deleted": True}
        got = await c.get(f"{RESPONSES}/{r1['id']}")
        assert got.status_code == 404
        assert got.json()["error"]["code"] == "response_not_found"
        assert (await c.delete(f"{RESPONSES}/{r1['id']}")).status_code == 404
        got = await c.post(
            RESPONSES, json={"model": "demo", "input": "x", "previous_response_id": r1["id"]}
        )
        assert got.status_code == 404
        # r2 is still there (deleting one response does not touch another)
        assert (await c.get(f"{RESPONSES}/{r2['id']}")).json()["output_text"] == LONG_TEXT


# --------------------------------------------------------------------------- runs


def run_events(got: Received) -> list[dict[str, Any]]:
    events = got.objects
    assert [e.id for e in got.events] == [str(e["seq"]) for e in events]
    assert all(e.event == "message" for e in got.events)
    return events


async def slow_gateway(nursery: trio.Nursery, tmp_path: Path) -> tuple[Upstream, Gateway]:
    """A demo upstream that waits 10 ms between body writes (demo-long: about 2 s)."""
    up = await start_demo_upstream(nursery, tmp_path, chunk_delay=0.01)
    gw = await start_gateway(nursery, make_config(tmp_path, up.url + "/v1"))
    return up, gw


async def summary(c: httpx.AsyncClient, run_id: str) -> dict[str, Any]:
    got = await c.get(f"{RUNS}/{run_id}")
    assert got.status_code == 200
    body: dict[str, Any] = got.json()
    return body


async def wait_run_done(c: httpx.AsyncClient, run_id: str, limit: float = 10.0) -> dict[str, Any]:
    with trio.fail_after(limit):
        while True:
            s = await summary(c, run_id)
            if s["status"] not in ("queued", "running"):
                return s
            await trio.sleep(0.02)


async def test_run_events_resume_exactly_once(nursery: trio.Nursery, tmp_path: Path) -> None:
    up, gw = await slow_gateway(nursery, tmp_path)
    # the run is started by a client that goes away right after the 202...
    async with gw.client() as starter:
        t0 = time.monotonic()
        got = await starter.post(RUNS, json={"model": "demo-long", "input": "Count for me."})
        assert time.monotonic() - t0 < 1.5  # 202 at once, the run takes about 2 s
        assert got.status_code == 202
    # ...and is followed by others
    async with gw.client() as c:
        started = got.json()
        run_id = started["run_id"]
        assert run_id.startswith("run_") and started["status"] in ("queued", "running")
        # the run outlives its starting request: events keep coming after the 202
        events_url = f"{RUNS}/{run_id}/events"
        part1 = await read_sse(c, "GET", events_url, until=lambda g: len(g.events) >= 5)
        assert part1.status == 200
        assert_sse_wire_format(part1)
        last1 = part1.events[-1].id
        assert (await summary(c, run_id))["status"] == "running"

        # reconnect mid-run with the last seen id (header)
        part2 = await read_sse(
            c,
            "GET",
            events_url,
            headers={"Last-Event-ID": last1},
            until=lambda g: len(g.events) >= 5,
        )
        last2 = part2.events[-1].id
        mid = await summary(c, run_id)
        assert mid["status"] == "running" and mid["last_seq"] < 150

        # nobody listens for a while; then reconnect (query form) after completion
        done = await wait_run_done(c, run_id)
        assert done["status"] == "completed"
        part3 = await read_sse(c, "GET", f"{events_url}?after={last2}")
        assert_sse_wire_format(part3)

        full = run_events(await read_sse(c, "GET", events_url))
        received = [*run_events(part1), *run_events(part2), *run_events(part3)]
        assert received == full  # nothing lost, nothing twice
        n = len(full)
        assert [e["seq"] for e in full] == list(range(1, n + 1))
        assert n > 20 and done["last_seq"] == n
        assert full[0]["event"] == "run.started" and full[0]["model"] == "demo-long"
        assert [e["event"] for e in full[1:-1]] == ["message.delta"] * (n - 2)
        assert all(e["run_id"] == run_id for e in full)
        final = full[-1]
        assert final["event"] == "run.completed"
        assert "".join(e["delta"] for e in full[1:-1]) == LONG_TEXT
        assert final["output"] == LONG_TEXT == done["output"]
        assert final["usage"]["total_tokens"] > 0 and done["usage"] == final["usage"]
        assert final["gateway"] == {"download_link_mode": "private", "artifacts": []}

        # after completion, with the header: exactly the rest, then the stream closes
        k = n // 2
        rest = await read_sse(c, "GET", events_url, headers={"Last-Event-ID": str(k)})
        assert run_events(rest) == full[k:]
        nothing = await read_sse(c, "GET", events_url, headers={"Last-Event-ID": str(n)})
        assert nothing.status == 200 and nothing.events == []
        bad = await c.get(events_url, headers={"Last-Event-ID": "abc"})
        assert bad.status_code == 400
        assert bad.json()["error"]["code"] == "invalid_last_event_id"
    # the upstream stream ran to its end although the clients came and went
    assert up.app.demo_streams_completed == 1 and up.app.demo_disconnects == 0


async def test_run_completed_carries_output_usage_manifest(
    gateway: Gateway, upstream: Upstream
) -> None:
    files = upstream.app.demo_files
    async with gateway.client() as c:
        got = await c.post(RUNS, json={"model": "demo", "input": "Make me a report."})
        assert got.status_code == 202
        run_id = got.json()["run_id"]
        live = await read_sse(c, "GET", f"{RUNS}/{run_id}/events")  # follows to the end
        events = run_events(live)
        assert [e["seq"] for e in events] == list(range(1, len(events) + 1))
        for e in events:
            for string in json_strings(e):
                assert_no_demo_folders(string, files)
        kinds = [e["event"] for e in events]
        assert kinds[0] == "run.started" and kinds[-1] == "run.completed"
        assert kinds.count("run.completed") == 1
        # the model's tool call (with its arguments), and the agent's own tool progress
        # (hermes.tool.progress: tool_<n>, its preview a name or a link)
        calls = [e for e in events if e["event"].startswith("tool.")]
        asked = [e for e in calls if not e["tool_call_id"].startswith("tool_")]
        (tool_started,) = [e for e in asked if e["event"] == "tool.started"]
        (tool_done,) = [e for e in asked if e["event"] == "tool.completed"]
        assert tool_started["name"] == tool_done["name"] == "write_file"
        own = [(e["event"], e["name"]) for e in calls if e["tool_call_id"].startswith("tool_")]
        assert own and all(name for _, name in own)
        arguments = json.loads(tool_done["arguments"])
        assert arguments["path"].startswith(BASE + "/v1/artifacts/")  # a link, not a path
        end = events[-1]
        text = "".join(e["delta"] for e in events if e["event"] == "message.delta")
        assert end["output"] == text
        assert_demo_text(text, end["gateway"], files)
        assert end["usage"]["total_tokens"] > 0
        s = await summary(c, run_id)
        assert s["status"] == "completed" and s["output"] == text
        assert s["download_link_mode"] == "private" and s["last_seq"] == end["seq"]
    await assert_links_download(gateway, end["gateway"], files)


async def test_run_stop_mid_run(nursery: trio.Nursery, tmp_path: Path) -> None:
    up, gw = await slow_gateway(nursery, tmp_path)
    async with gw.client() as c:
        got = await c.post(RUNS, json={"model": "demo-long", "input": "Count for me."})
        run_id = got.json()["run_id"]
        events_url = f"{RUNS}/{run_id}/events"
        follower = Received()
        followed = trio.Event()

        async def follow() -> None:
            nonlocal follower
            async with gw.client() as f:
                follower = await read_sse(f, "GET", events_url)
            followed.set()

        nursery.start_soon(follow)
        first = await read_sse(c, "GET", events_url, until=lambda g: len(g.events) >= 4)
        assert up.app.demo_streams_open == 1
        stopped_at = time.monotonic()
        got = await c.post(f"{RUNS}/{run_id}/stop")
        assert got.status_code == 200
        stopped = got.json()
        assert stopped["status"] == "cancelled"
        # the upstream sees its connection closed, at once
        await wait_until(lambda: up.app.demo_disconnects == 1)
        assert up.app.demo_disconnect_times[0] - stopped_at < 1.0
        assert up.app.demo_streams_completed == 0
        # a live follower gets the terminal event and its stream ends
        with trio.fail_after(5):
            await followed.wait()
        events = run_events(follower)
        assert events[-1]["event"] == "run.cancelled"
        assert [e["event"] for e in events].count("run.cancelled") == 1
        assert [e["seq"] for e in events] == list(range(1, len(events) + 1))
        assert run_events(first) == events[: len(first.events)]
        text = "".join(e["delta"] for e in events if e["event"] == "message.delta")
        assert events[-1]["output"] == text and LONG_TEXT.startswith(text)
        assert len(text) < len(LONG_TEXT)
        s = await summary(c, run_id)
        assert s["status"] == "cancelled" and s["last_seq"] == events[-1]["seq"]
        # stopping again changes nothing; a reconnect replays up to run.cancelled
        again = await c.post(f"{RUNS}/{run_id}/stop")
        assert again.status_code == 200 and again.json()["status"] == "cancelled"
        replay = await read_sse(c, "GET", events_url)
        assert run_events(replay) == events
    assert up.app.demo_disconnects == 1


async def test_run_demo_fail_ends_with_run_failed(gateway: Gateway, upstream: Upstream) -> None:
    files = upstream.app.demo_files
    pdf = str(files.report_pdf)
    async with gateway.client() as c:
        got = await c.post(RUNS, json={"model": "demo-fail", "input": "Summarise."})
        run_id = got.json()["run_id"]
        events = run_events(await read_sse(c, "GET", f"{RUNS}/{run_id}/events"))
        s = await summary(c, run_id)
    final = events[-1]
    assert [e["event"] for e in events if e["event"] in TERMINAL] == ["run.failed"]
    assert final["error"]["code"] == "upstream_disconnected" and final["error"]["message"]
    # the path cut by the failure comes out as its last segment only
    partial = Path(pdf[: len(pdf) - 6]).name
    assert final["output"].endswith("next to the report at " + partial)
    assert final["gateway"] == {"download_link_mode": "private", "artifacts": []}
    for e in events:
        for string in json_strings(e):
            assert_no_demo_folders(string, files)
    assert s["status"] == "failed" and s["error"]["code"] == "upstream_disconnected"
    assert upstream.app.demo_aborts == 1


# --------------------------------------------------------------------------- sessions


async def ask(c: httpx.AsyncClient, front: str, model: str, text: str, sid: str) -> str:
    """One turn in session ``sid`` through ``front``; returns the (rewritten) reply."""
    headers = {"X-Session-Id": sid}
    if front == "responses-stream":
        got = await stream_response(c, {"model": model, "input": text}, headers)
        return "".join(got.deltas)
    if front == "responses-plain":
        resp = await c.post(RESPONSES, json={"model": model, "input": text}, headers=headers)
        assert resp.status_code == 200
        out: str = resp.json()["output_text"]
        return out
    messages = [{"role": "user", "content": text}]
    if front == "chat-stream":
        body = {"model": model, "messages": messages, "stream": True}
        got = await read_sse(c, "POST", CHAT, json_body=body, headers=headers)
        assert got.status == 200 and got.events[-1].data == "[DONE]"
        return "".join(
            ch["delta"].get("content") or "" for o in got.objects for ch in o.get("choices") or []
        )
    if front == "chat-plain":
        body = {"model": model, "messages": messages, "session_id": sid}
        resp = await c.post(CHAT, json=body)
        assert resp.status_code == 200
        content: str = resp.json()["choices"][0]["message"]["content"]
        return content
    assert front == "run"
    resp = await c.post(RUNS, json={"model": model, "input": text}, headers=headers)
    assert resp.status_code == 202
    events = run_events(await read_sse(c, "GET", f"{RUNS}/{resp.json()['run_id']}/events"))
    assert events[-1]["event"] == "run.completed"
    output: str = events[-1]["output"]
    return output


FRONTS = ["responses-stream", "responses-plain", "chat-stream", "chat-plain", "run"]


@pytest.mark.parametrize("front", FRONTS)
async def test_session_continues_conversation(
    gateway: Gateway, upstream: Upstream, front: str
) -> None:
    files = upstream.app.demo_files
    log = upstream.app.demo_log
    async with gateway.client(ALICE_KEY) as alice, gateway.client(BOB_KEY) as bob:
        reply = await ask(alice, front, "demo", "Make me a report.", "conv-1")
        assert_no_demo_folders(reply, files)
        assert "[report.pdf](" + BASE + "/v1/artifacts/" in reply
        assert log[-1]["body"]["messages"] == [{"role": "user", "content": "Make me a report."}]

        second = await ask(alice, front, "demo-long", "Thanks, and now?", "conv-1")
        assert second == LONG_TEXT
        # the upstream sees the first turn with alice's own links as her files' paths
        # (the agent can refer to them); what was a name stays a name
        sent = log[-1]["body"]["messages"]
        assert sent[0] == {"role": "user", "content": "Make me a report."}
        assert sent[2] == {"role": "user", "content": "Thanks, and now?"}
        back = sent[1]["content"]
        assert str(files.report_pdf) in back and BASE + "/v1/artifacts/" not in back
        assert str(files.outside_txt.parent) not in back

        stored = (await alice.get("/v1/sessions/conv-1")).json()
        assert stored["id"] == "conv-1" and stored["object"] == "session"
        assert [m["role"] for m in stored["messages"]] == ["user", "assistant"] * 2
        assert stored["messages"][3]["content"] == LONG_TEXT
        listing = (await alice.get("/v1/sessions")).json()
        assert [(s["id"], s["message_count"]) for s in listing["data"]] == [("conv-1", 4)]

        # the same id string under bob is another session: invisible, then his own
        got = await bob.get("/v1/sessions/conv-1")
        assert got.status_code == 404
        assert got.json()["error"]["code"] == "session_not_found"
        assert (await bob.get("/v1/sessions")).json()["data"] == []
        assert await ask(bob, front, "demo-long", "Hello from bob.", "conv-1") == LONG_TEXT
        assert log[-1]["body"]["messages"] == [{"role": "user", "content": "Hello from bob."}]
        bobs = (await bob.get("/v1/sessions/conv-1")).json()
        assert [m["content"] for m in bobs["messages"]] == ["Hello from bob.", LONG_TEXT]
        # alice's conversation is untouched by bob's
        assert (await alice.get("/v1/sessions/conv-1")).json()["messages"] == stored["messages"]

        # delete: gone for its owner only
        got = await alice.delete("/v1/sessions/conv-1")
        assert got.status_code == 200 and got.json()["deleted"] is True
        assert (await alice.get("/v1/sessions/conv-1")).status_code == 404
        assert (await alice.delete("/v1/sessions/conv-1")).status_code == 404
        assert (await bob.get("/v1/sessions/conv-1")).status_code == 200
        # a deleted session starts afresh
        await ask(alice, front, "demo-long", "Again.", "conv-1")
        assert log[-1]["body"]["messages"] == [{"role": "user", "content": "Again."}]


BAD_SESSION_IDS = [
    pytest.param({"X-Session-Id": "x" * 129}, None, id="header-too-long"),
    pytest.param({"X-Session-Id": ""}, None, id="header-empty"),
    pytest.param({"X-Session-Id": "a/b"}, None, id="header-slash"),
    pytest.param({"X-Session-Id": "a b"}, None, id="header-space"),
    pytest.param({"X-Session-Id": "conv;1"}, None, id="header-semicolon"),
    pytest.param({"X-Session-Id": "../etc"}, None, id="header-dotdot-slash"),
    pytest.param(None, "y" * 129, id="body-too-long"),
    pytest.param(None, "caf\u00e9", id="body-non-ascii"),
    pytest.param(None, "a\nb", id="body-newline"),
    pytest.param(None, 42, id="body-not-a-string"),
]


@pytest.mark.parametrize("headers, body_sid", BAD_SESSION_IDS)
async def test_invalid_session_id_is_400(
    gateway: Gateway, upstream: Upstream, headers: dict[str, str] | None, body_sid: Any
) -> None:
    extra = {} if body_sid is None else {"session_id": body_sid}
    requests = [
        (RESPONSES, {"model": "demo", "input": "hi", **extra}),
        (RESPONSES, {"model": "demo", "input": "hi", "stream": True, **extra}),
        (CHAT, {"model": "demo", "messages": [{"role": "user", "content": "hi"}], **extra}),
        (RUNS, {"model": "demo", "input": "hi", **extra}),
    ]
    before = len(upstream.app.demo_log)
    async with gateway.client() as c:
        for url, body in requests:
            got = await c.post(url, json=body, headers=headers)
            assert got.status_code == 400, (url, got.text)
            assert got.json()["error"]["code"] == "invalid_session_id"
        assert (await c.get("/v1/sessions")).json()["data"] == []
    assert len(upstream.app.demo_log) == before  # refused before the upstream is called
    assert gateway.app.gateway.runs.running_here() == []


def slow_session_store(delay: float) -> Callable[[Any], None]:
    """Make every session read in the store take ``delay`` seconds (worker thread)."""

    def customize(app: Any) -> None:
        store = app.gateway.store
        real_get = store.get_json

        def slow_get(kind: str, owner: str, key: str) -> dict[str, Any] | None:
            doc: dict[str, Any] | None = real_get(kind, owner, key)
            if kind == "session":
                time.sleep(delay)
            return doc

        store.get_json = slow_get

    return customize


async def test_concurrent_turns_in_one_session_are_all_kept(
    nursery: trio.Nursery, tmp_path: Path, upstream: Upstream
) -> None:
    """Two answers finishing together in one session: both turns are kept (no lost update)."""
    gw = await start_gateway(
        nursery, make_config(tmp_path, upstream.url + "/v1"), customize=slow_session_store(0.2)
    )
    async with gw.client() as c:
        async with trio.open_nursery() as turns:
            for i in range(3):
                turns.start_soon(ask, c, "chat-plain", "demo-long", f"turn {i}", "shared")
        stored = (await c.get("/v1/sessions/shared")).json()
    contents = [m["content"] for m in stored["messages"]]
    assert sorted(contents[0::2]) == ["turn 0", "turn 1", "turn 2"]
    assert contents[1::2] == [LONG_TEXT] * 3


async def test_run_session_turn_saved_before_run_completed(
    nursery: trio.Nursery, tmp_path: Path, upstream: Upstream
) -> None:
    """A client that sees ``run.completed`` and continues the session at once (the Open
    WebUI proxy does exactly that) must find the run's turn in the session."""

    def slow_append(app: Any) -> None:
        sessions = app.gateway.sessions
        real_append = sessions.append

        async def append(*args: Any) -> None:
            await trio.sleep(1.0)
            await real_append(*args)

        sessions.append = append

    gw = await start_gateway(
        nursery, make_config(tmp_path, upstream.url + "/v1"), customize=slow_append
    )
    async with gw.client() as c:
        reply = await ask(c, "run", "demo-long", "first", "conv-run")
        got = await c.get("/v1/sessions/conv-run")
        assert got.status_code == 200
        assert [m["content"] for m in got.json()["messages"]] == ["first", reply]


# --------------------------------------------------------------------------- isolation


@dataclass
class AliceObjects:
    session: str
    response: str
    run: str
    artifact: str
    artifact_url: str


async def make_alice_objects(c: httpx.AsyncClient, kind: str) -> AliceObjects:
    """Create (only) what the row needs: a session, a stored response, a run, or a link."""
    ids = AliceObjects("", "", "", "", "")
    if kind in ("session", "response", "artifact"):
        ids.session = "conv-alice"
        streamed = await stream_response(
            c, {"model": "demo", "input": "Make me a report."}, {"X-Session-Id": ids.session}
        )
        response = streamed.of_type("response.completed")[0]["response"]
        ids.response = response["id"]
        artifact = response["gateway"]["artifacts"][0]
        ids.artifact, ids.artifact_url = artifact["id"], local_path(artifact["url"])
    if kind == "run":
        # a live run, so that bob's stop would have something to cancel
        got = await c.post(RUNS, json={"model": "demo-quiet", "input": "Think."})
        assert got.status_code == 202
        ids.run = got.json()["run_id"]
    return ids


def guessed(kind: str) -> str:
    return {
        "session": "conv-" + secrets.token_hex(8),
        "response": "resp_" + secrets.token_hex(16),
        "run": "run_" + secrets.token_hex(16),
        "artifact": new_artifact_id(),
    }[kind]


ROUTES = [
    # (kind, method, route, error code)
    ("session", "GET", "/v1/sessions/{id}", "session_not_found"),
    ("session", "DELETE", "/v1/sessions/{id}", "session_not_found"),
    ("response", "GET", "/v1/responses/{id}", "response_not_found"),
    ("response", "DELETE", "/v1/responses/{id}", "response_not_found"),
    ("run", "GET", "/v1/runs/{id}", "run_not_found"),
    ("run", "GET", "/v1/runs/{id}/events", "run_not_found"),
    ("run", "POST", "/v1/runs/{id}/stop", "run_not_found"),
    ("artifact", "GET", "/v1/artifacts/{id}", "artifact_not_found"),
    ("artifact", "DELETE", "/v1/artifacts/{id}", "artifact_not_found"),
]


@pytest.mark.parametrize("who", ["bob-with-alices-id", "alice-with-guessed-id"])
@pytest.mark.parametrize(
    "kind, method, route, code", ROUTES, ids=[f"{m} {r}" for _, m, r, _ in ROUTES]
)
async def test_cross_principal_matrix(
    gateway: Gateway,
    upstream: Upstream,
    kind: str,
    method: str,
    route: str,
    code: str,
    who: str,
) -> None:
    async with gateway.client(ALICE_KEY) as alice, gateway.client(BOB_KEY) as bob:
        ids = await make_alice_objects(alice, kind)
        own = getattr(ids, kind)
        if who == "bob-with-alices-id":
            caller, target = bob, own
        else:
            caller, target = alice, guessed(kind)
        url = route.format(id=target)
        got = await caller.request(method, url)
        assert got.status_code == 404, got.text
        error = got.json()["error"]
        assert error["code"] == code
        # the same answer as for an id that does not exist at all (no existence oracle)
        other = await caller.request(method, route.format(id=guessed(kind)))
        assert other.status_code == 404 and other.json()["error"] == error
        assert target not in got.text  # the id is not echoed back

        # alice's object is intact, and still hers
        if kind == "session":
            assert (await alice.get(f"/v1/sessions/{own}")).status_code == 200
        elif kind == "response":
            assert (await alice.get(f"{RESPONSES}/{own}")).json()["id"] == own
        elif kind == "artifact":
            download = await alice.get(ids.artifact_url)
            assert download.status_code == 200 and download.content
        else:
            s = await summary(alice, own)
            assert s["status"] != "cancelled"  # not stopped by bob
            stopped = await alice.post(f"{RUNS}/{own}/stop")
            assert stopped.json()["status"] in ("cancelled", "completed")


# --------------------------------------------------------------------------- more run endings


async def test_run_log_full_ends_with_run_failed_and_manifest(
    nursery: trio.Nursery, tmp_path: Path
) -> None:
    """A run that outgrows its event log is stopped with ``run.failed`` whose output and
    manifest cover every logged delta (a link minted before the cut is listed)."""
    upstream = await start_demo_upstream(nursery, tmp_path, chunk_delay=0.01)
    files = upstream.app.demo_files
    cfg = make_config(tmp_path, upstream.url + "/v1", limits={"run_log_max_events": 8})
    gw = await start_gateway(nursery, cfg)
    async with gw.client() as c:
        got = await c.post(RUNS, json={"model": "demo", "input": "Make me a report."})
        run_id = got.json()["run_id"]
        events = run_events(await read_sse(c, "GET", f"{RUNS}/{run_id}/events"))
        s = await summary(c, run_id)
    assert [e["seq"] for e in events] == list(range(1, 10))
    final = events[-1]
    assert final["event"] == "run.failed" and final["error"]["code"] == "run_log_full"
    text = "".join(e["delta"] for e in events if e["event"] == "message.delta")
    assert final["output"] == text == s["output"]
    assert "[report.pdf](" + BASE + "/v1/artifacts/" in text
    # every link the client saw is in the manifest (which may list more: links minted
    # in the same upstream read, or in tool arguments, before the run was stopped)
    assert set(LINK_RE.findall(text)) <= {a["url"] for a in final["gateway"]["artifacts"]}
    assert_no_demo_folders(text, files)
    assert s["status"] == "failed" and s["error"] == final["error"]
    await wait_until(lambda: upstream.app.demo_disconnects == 1)  # the upstream was cut


async def test_run_stopped_at_once(nursery: trio.Nursery, tmp_path: Path) -> None:
    up, gw = await slow_gateway(nursery, tmp_path)
    async with gw.client() as c:
        got = await c.post(RUNS, json={"model": "demo-long", "input": "x"})
        run_id = got.json()["run_id"]
        stopped = await c.post(f"{RUNS}/{run_id}/stop")
        assert stopped.status_code == 200 and stopped.json()["status"] == "cancelled"
        events = run_events(await read_sse(c, "GET", f"{RUNS}/{run_id}/events"))
    assert events[-1]["event"] == "run.cancelled"
    assert [e["seq"] for e in events] == list(range(1, len(events) + 1))
    assert up.app.demo_streams_completed == 0 and up.app.demo_streams_open == 0


@pytest.mark.parametrize("via", ["responses", "run"])
async def test_public_links(gateway: Gateway, upstream: Upstream, via: str) -> None:
    files = upstream.app.demo_files
    body = {"model": "demo", "input": "Make me a report.", "download_link_mode": "public"}
    async with gateway.client() as c:
        if via == "responses":
            got = await stream_response(c, body)
            text = "".join(got.deltas)
            manifest = got.of_type("response.completed")[0]["response"]["gateway"]
        else:
            run_id = (await c.post(RUNS, json=body)).json()["run_id"]
            events = run_events(await read_sse(c, "GET", f"{RUNS}/{run_id}/events"))
            assert events[-1]["event"] == "run.completed"
            text, manifest = events[-1]["output"], events[-1]["gateway"]
        bad = await c.post(
            RESPONSES if via == "responses" else RUNS, json={**body, "download_link_mode": "open"}
        )
        assert bad.status_code == 400
        assert bad.json()["error"]["code"] == "invalid_download_link_mode"
    assert manifest["download_link_mode"] == "public"
    assert_no_demo_folders(text, files)
    public_re = re.compile(re.escape(BASE) + r"/v1/artifacts/[\w-]+\?exp=\d+&sig=[\w.-]+")
    urls = set(public_re.findall(text))
    assert urls == {a["url"] for a in manifest["artifacts"]} and len(urls) == 4
    by_name = {p.name: p for p in files.in_root}
    async with httpx.AsyncClient(base_url=gateway.url) as anonymous:
        for a in manifest["artifacts"]:
            assert a["link_mode"] == "public"
            got_file = await anonymous.get(local_path(a["url"]))
            assert got_file.status_code == 200
            assert got_file.content == by_name[a["filename"]].read_bytes()
            tampered = local_path(a["url"])[:-2] + ("AA" if not a["url"].endswith("AA") else "BB")
            assert (await anonymous.get(tampered)).status_code == 404
