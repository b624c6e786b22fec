"""Issue 3, "Must show": the chat-completions relay end to end.

Real hypercorn on 127.0.0.1 (ephemeral ports) for the gateway, and either the real
demo upstream (``tests.conftest.start_demo_upstream``) or a
:class:`harness.transport.ScriptedTransport` injected as the gateway's upstream
transport when exact adversarial chunk boundaries are needed. Clients are httpx and
the ``openai`` SDK (async, and sync in a worker thread).

A host path comes out as a managed-download link when it is a regular file under an
artifact root (the demo upstream's files), else as its file name alone; never with
its folder part.
"""

from __future__ import annotations

import collections
import gc
import itertools
import json
import logging
import random
import re
import socket
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

from gateway.cli.demo_upstream import DemoFiles, demo_long_delta
from gateway.core.rewrite import rewrite
from gateway.core.sse import DONE, SSEDecoder, SSEEvent, encode_comment, encode_json
from harness.nothing import NOTHING_FOUND
from harness.transport import Scripted, ScriptedTransport, split_at, split_every
from tests.conftest import (
    ALICE_KEY,
    BOB_KEY,
    PROXY_KEY,
    Gateway,
    Upstream,
    make_config,
    start_gateway,
)
from tests.helpers import HOST_PATH_RE, SDK_WARNINGS, assert_no_demo_folders, json_strings

CHAT = "/v1/chat/completions"
ROUTE = "/v1/chat/completions"
MESSAGES = [{"role": "user", "content": "Make me a report."}]
#: never contacted: gateways with a ScriptedTransport answer every request themselves
SCRIPTED_URL = "http://127.0.0.1:9/v1"
KEEPALIVE = encode_comment()  # b": keepalive\n"


# --------------------------------------------------------------------------- helpers


@dataclass
class Received:
    """What one streaming client saw: status, headers, every network chunk, events."""

    status: int = 0
    headers: httpx.Headers = field(default_factory=httpx.Headers)
    raw: list[bytes] = field(default_factory=list)
    events: list[SSEEvent] = field(default_factory=list)

    @property
    def body(self) -> bytes:
        return b"".join(self.raw)

    @property
    def chunks(self) -> list[dict[str, Any]]:
        out = []
        for e in self.events:
            if e.event == "message" and e.data != "[DONE]":
                out.append(json.loads(e.data))
        return out

    @property
    def deltas(self) -> list[dict[str, Any]]:
        return [ch["delta"] for c in self.chunks for ch in c.get("choices") or []]

    @property
    def content(self) -> str:
        return "".join(d.get("content") or "" for d in self.deltas)

    @property
    def arguments(self) -> str:
        return "".join(
            call["function"].get("arguments") or ""
            for d in self.deltas
            for call in d.get("tool_calls") or []
            if isinstance(call.get("function"), dict)
        )

    @property
    def final(self) -> dict[str, Any]:
        """The terminal chunk: the last JSON event before ``[DONE]``."""
        return self.chunks[-1]

    def finish_reasons(self) -> list[str]:
        return [
            ch["finish_reason"]
            for c in self.chunks
            for ch in c.get("choices") or []
            if ch.get("finish_reason") is not None
        ]


async def stream_chat(
    client: httpx.AsyncClient,
    body: dict[str, Any],
    *,
    headers: dict[str, str] | None = None,
    on_piece: Callable[[Received, bytes], None] | None = None,
    into: Received | None = None,
) -> Received:
    """POST a streaming chat request and read the response to its end."""
    got = Received() if into is None else into
    decoder = SSEDecoder()
    payload = {"messages": MESSAGES, "stream": True, **body}
    async with client.stream("POST", CHAT, json=payload, headers=headers) as resp:
        got.status = resp.status_code
        got.headers = resp.headers
        async for piece in resp.aiter_raw():
            got.raw.append(piece)
            got.events.extend(decoder.feed(piece))
            if on_piece is not None:
                on_piece(got, piece)
    return got


def assert_wire_format(got: Received) -> None:
    """SSE as the design fixes it: LF only, one-line JSON data, comments, [DONE] last."""
    assert got.status == 200
    assert got.headers["content-type"].startswith("text/event-stream")
    assert got.headers["cache-control"] == "no-cache"
    assert got.headers["x-accel-buffering"] == "no"
    text = got.body.decode("utf-8")
    assert "\r" not in text
    assert text.endswith(DONE.decode())
    for block in text.split("\n\n")[:-1]:
        lines = [ln for ln in block.split("\n") if ln and not ln.startswith(":")]
        data = [ln for ln in lines if ln.startswith("data: ")]
        assert len(data) == 1, block
        assert all(ln.startswith(("data: ", "event: ")) for ln in lines), block
        value = data[0][len("data: ") :]
        if value != "[DONE]":
            assert isinstance(json.loads(value), dict)
    # the decoder agrees with the line view
    events = SSEDecoder().feed(got.body)
    assert events == got.events
    assert [e.data for e in events].count("[DONE]") == 1
    assert events[-1].data == "[DONE]"


def assert_demo_answer(text: str, manifest: dict[str, Any], files: DemoFiles) -> None:
    """The ``demo`` answer as rewritten: links for the root files, names for the rest."""
    assert_no_demo_folders(text, files)
    assert manifest["download_link_mode"] == "private"
    artifacts = manifest["artifacts"]
    assert sorted(a["filename"] for a in artifacts) == sorted(p.name for p in files.in_root)
    for a in artifacts:
        assert a["url"] == f"http://127.0.0.1:8642/v1/artifacts/{a['id']}"
        assert a["url"] in text  # one link per path, the deltas and the manifest agree
        assert a["link_mode"] == "private" and a["bytes"] > 0
    assert "[report.pdf](http://127.0.0.1:8642/v1/artifacts/" in text  # prose
    assert files.outside_txt.name in text  # outside the root: the name alone
    assert " plot.png for the slides" in text  # the Windows path: the name alone


def mask_links(text: str) -> str:
    """Links are minted per response: compare texts of two responses without the ids."""
    return re.sub(r"/v1/artifacts/[\w-]+", "/v1/artifacts/ID", text)


def assert_clean_error_body(text: str, tmp_path: Path) -> None:
    assert "Traceback" not in text
    assert str(tmp_path) not in text
    assert HOST_PATH_RE.search(text) is None, text


def gauge(gw: Gateway, name: str, labels: dict[str, str] | None = None) -> float:
    value = gw.app.gateway.metrics.registry.get_sample_value(name, labels or {})
    return 0.0 if value is None else float(value)


def open_streams(gw: Gateway) -> float:
    return gauge(gw, "gateway_open_streams", {"route": ROUTE})


def live_task_names() -> list[str]:
    """Names of every task alive in this trio run."""
    names: list[str] = []
    todo = [trio.lowlevel.current_root_task()]
    while todo:
        task = todo.pop()
        names.append(task.name)
        for nursery in task.child_nurseries:
            todo.extend(nursery.child_tasks)
    return names


async def wait_until(condition: Callable[[], bool], limit: float = 5.0) -> None:
    """Poll plain counters of the apps (they expose numbers, not events)."""
    with trio.fail_after(limit):
        while not condition():  # noqa: ASYNC110
            await trio.sleep(0.002)


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
    return port


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


def scripted_gateway_config(tmp_path: Path, **overrides: Any) -> Any:
    return make_config(tmp_path, SCRIPTED_URL, **overrides)


# --------------------------------------------------------------------------- openai SDK


@SDK_WARNINGS
async def test_openai_async_sdk_consumes_demo_stream(gateway: Gateway, upstream: Upstream) -> None:
    files = upstream.app.demo_files
    text: list[str] = []
    finish = None
    usage = None
    manifest = None
    async with httpx2.AsyncClient(timeout=httpx2.Timeout(10, read=30)) as http:
        client = openai.AsyncOpenAI(
            base_url=gateway.url + "/v1", api_key=ALICE_KEY, http_client=http, max_retries=0
        )
        stream = await client.chat.completions.create(
            model="demo",
            messages=[{"role": "user", "content": "Make me a report."}],
            stream=True,
            stream_options={"include_usage": True},
        )
        async with stream:
            async for c in stream:
                # the relayed hermes.tool.progress event arrives as a chunk without choices
                for choice in c.choices or []:
                    if choice.delta.content:
                        text.append(choice.delta.content)
                    finish = choice.finish_reason or finish
                usage = c.usage or usage
                manifest = (c.model_extra or {}).get("gateway") or manifest
        del stream
    gc.collect()
    assert manifest is not None
    assert_demo_answer("".join(text), manifest, files)
    assert finish == "stop"
    assert usage is not None and usage.total_tokens > 0


async def test_openai_sync_sdk_consumes_demo_stream(gateway: Gateway, upstream: Upstream) -> None:
    files = upstream.app.demo_files

    def consume() -> tuple[str, str | None, Any]:
        with httpx2.Client(timeout=httpx2.Timeout(10, read=30)) as http:
            client = openai.OpenAI(
                base_url=gateway.url + "/v1", api_key=ALICE_KEY, http_client=http, max_retries=0
            )
            parts: list[str] = []
            finish: str | None = None
            manifest = None
            with client.chat.completions.create(
                model="demo", messages=[{"role": "user", "content": "hi"}], stream=True
            ) as stream:
                for c in stream:
                    for choice in c.choices or []:
                        parts.append(choice.delta.content or "")
                        finish = choice.finish_reason or finish
                    manifest = (c.model_extra or {}).get("gateway") or manifest
            return "".join(parts), finish, manifest

    joined, finish, manifest = await trio.to_thread.run_sync(consume)
    assert_demo_answer(joined, manifest, files)
    assert finish == "stop"


# --------------------------------------------------------------------------- streaming rules


async def test_ordinary_text_is_not_delayed(nursery: trio.Nursery, tmp_path: Path) -> None:
    """Invariant 3: each upstream chunk is released only after the client has received
    the previous delta, so a held delta would deadlock (guarded by fail_after)."""
    steps = [
        # (upstream delta, what the client must have received right after it)
        ("Hello there, ", "Hello there, "),
        ("plain words, numbers 42 and 3.14, ", "plain words, numbers 42 and 3.14, "),
        ("unicode café 中文 ✓ and/or 1/2 ", "unicode café 中文 ✓ and/or 1/2 "),
        (
            "see https://example.com/x and /v1/models. ",
            "see https://example.com/x and /v1/models. ",
        ),
        # a path candidate: only the tail from its start is held...
        ("the file is /Us", "the file is "),
        # ...and goes out, as a file name, with the chunk that completes it
        ("ers/someone/out/report.pdf now. ", "report.pdf now. "),
        ("More text right after. ", "More text right after. "),
    ]
    chunks = [ROLE_EVENT, *(content_event(d) for d, _ in steps), STOP_EVENT, DONE]
    gates = [trio.Event() for _ in chunks]
    transport = ScriptedTransport(lambda req: Scripted(chunks, gates=gates))
    gw = await start_gateway(nursery, scripted_gateway_config(tmp_path), transport=transport)

    got = Received()
    log: list[str] = []
    finished = trio.Event()

    def on_piece(rec: Received, piece: bytes) -> None:
        log.append(f"received {rec.content!r}")

    async def reader() -> None:
        async with gw.client() as c:
            await stream_chat(c, {"model": "scripted"}, on_piece=on_piece, into=got)
        finished.set()

    nursery.start_soon(reader)
    gates[0].set()  # the role chunk
    await wait_until(lambda: len(got.events) >= 1 and len(got.raw) >= 1)
    expected = ""
    for i, (_, visible) in enumerate(steps, start=1):
        log.append(f"released {i}")
        gates[i].set()
        expected += visible
        await wait_until(lambda expected=expected: got.content == expected, 3.0)
    for gate in gates[len(steps) + 1 :]:
        gate.set()
    with trio.fail_after(5):
        await finished.wait()
    # ordering, not timing: every release is followed by its delta before the next one
    releases = [n for n, line in enumerate(log) if line.startswith("released")]
    for a, b in itertools.pairwise(releases):
        assert any(line.startswith("received") for line in log[a + 1 : b]), log
    assert_wire_format(got)
    assert "someone" not in got.body.decode()
    assert got.final["choices"][0]["finish_reason"] == "stop"


SECRET = "zz-Secret-Folder-7q"
POSIX = f"/Users/{SECRET}/out/report.pdf"
WIN = f"C:\\Users\\{SECRET}\\Desktop\\plot.png"
TOOL_PATH = f"/home/{SECRET}/data/results.csv"
TAIL = f"/var/{SECRET}/logs/tail.log"
CONTENT_DELTAS = [
    "Saved the report to " + POSIX[:9],
    POSIX[9:22],
    POSIX[22:] + " and the chart to C:",
    WIN[2:14],
    WIN[14:] + " (naïve café, 中文/路径). ",
    "In quotes: `" + POSIX[:-3],
    POSIX[-3:] + "` and last: " + TAIL,
]
TOOL_ARGS = json.dumps({"path": TOOL_PATH, "body": "a\nb", "mirror": f"C:\\{SECRET}\\x.txt"})
TOOL_PIECES = [TOOL_ARGS[:15], TOOL_ARGS[15:33], TOOL_ARGS[33:60], TOOL_ARGS[60:]]
PROGRESS = {"tool": "write_file", "message": f"Writing {POSIX}", "args": {"path": WIN}}


def leak_body() -> bytes:
    head = {"index": 0, "id": "call_1", "type": "function", "function": {"name": "write_file"}}
    events = [
        ROLE_EVENT,
        content_event(CONTENT_DELTAS[0]),
        content_event(CONTENT_DELTAS[1]),
        encode_json(PROGRESS, event="hermes.tool.progress"),
        content_event(CONTENT_DELTAS[2]),
        encode_json(chunk({"tool_calls": [{**head, "function": {"name": "write_file"}}]})),
        *(
            encode_json(chunk({"tool_calls": [{"index": 0, "function": {"arguments": p}}]}))
            for p in TOOL_PIECES
        ),
        encode_json(chunk({"content": None, "tool_calls": None})),
        *(content_event(d) for d in CONTENT_DELTAS[3:]),
        STOP_EVENT,
        encode_json({**chunk({}), "choices": [], "usage": {"prompt_tokens": 3, "total_tokens": 9}}),
        DONE,
    ]
    return b"".join(events)


def per_event(body: bytes) -> list[bytes]:
    return [e + b"\n\n" for e in body.split(b"\n\n") if e]


def short_leak_body() -> bytes:
    """A compact body (minimal chunk objects) for the every-split-point pass."""

    def ev(delta: dict[str, Any], finish: str | None = None) -> bytes:
        return encode_json({"choices": [{"index": 0, "delta": delta, "finish_reason": finish}]})

    def args(text: str) -> dict[str, Any]:
        return {"tool_calls": [{"index": 0, "function": {"arguments": text}}]}

    return b"".join(
        [
            ev({"content": "At " + POSIX[:11]}),
            ev({"content": POSIX[11:] + ", C:"}),
            encode_json({"msg": f"on {WIN}"}, event="hermes.tool.progress"),
            ev({"content": WIN[2:] + " ok"}),
            ev(args('{"p":"' + TOOL_PATH[:12])),
            ev(args(TOOL_PATH[12:] + '"}')),
            ev({"content": None, "tool_calls": None}),
            ev({}, "stop"),
            encode_json({"choices": [], "usage": {"total_tokens": 9}}),
            DONE,
        ]
    )


def random_chunkings(body: bytes, n: int = 20) -> list[tuple[str, list[bytes]]]:
    cases = []
    for seed in range(n):
        rnd = random.Random(seed)
        points = rnd.sample(range(1, len(body)), rnd.randint(1, min(80, len(body) - 1)))
        cases.append((f"random-{seed}", split_at(body, points)))
    return cases


def chunkings(body: bytes, *, split_points: bool) -> list[tuple[str, list[bytes]]]:
    cases: list[tuple[str, list[bytes]]] = [
        ("whole", [body]),
        ("per-event", per_event(body)),
        ("every-byte", split_every(body, 1)),
        ("crlf-every-byte", split_every(body.replace(b"\n", b"\r\n"), 1)),
        *random_chunkings(body),
    ]
    if split_points:
        cases += [(f"split-{i}", [body[:i], body[i:]]) for i in range(1, len(body))]
    return cases


def upstream_texts(body: bytes) -> tuple[str, str]:
    """The content and the tool-call arguments the upstream body carries, raw."""
    got = Received(events=SSEDecoder().feed(body))
    return got.content, got.arguments


@dataclass
class LeakWatch:
    """Checks each network chunk as it arrives: does the cumulative byte stream now
    contain a needle? (Only the last len(needle)-1 bytes need keeping.) Hits are
    recorded, not raised, so the stream is still read to its end."""

    needles: tuple[bytes, ...]
    tail: bytes = b""
    hits: list[tuple[int, bytes]] = field(default_factory=list)

    def __call__(self, rec: Received, piece: bytes) -> None:
        window = self.tail + piece
        for needle in self.needles:
            if needle in window:
                self.hits.append((len(rec.raw) - 1, needle))
        keep = max(len(n) for n in self.needles) - 1
        self.tail = window[-keep:]


def _without_id(data: str) -> str:
    if data == "[DONE]":
        return data
    obj = json.loads(data)
    obj.pop("id", None)  # made per stream when the upstream sends none, like "created"
    obj.pop("created", None)
    return json.dumps(obj, sort_keys=True)


@pytest.mark.parametrize(
    ("body", "split_points"),
    [(leak_body(), False), (short_leak_body(), True)],
    ids=["full-body", "short-body-every-split"],
)
async def test_no_leak_for_every_chunking(
    nursery: trio.Nursery, tmp_path: Path, body: bytes, split_points: bool
) -> None:
    """Invariants 1 and 2 over one gateway whose scripted upstream pops the next
    chunking of the same bytes for every request."""
    cases = chunkings(body, split_points=split_points)
    queue: collections.deque[list[bytes]] = collections.deque()
    transport = ScriptedTransport(lambda req: Scripted(queue.popleft()))
    gw = await start_gateway(nursery, scripted_gateway_config(tmp_path), transport=transport)
    roots = gw.app.gateway.extra_roots
    raw_content, raw_arguments = upstream_texts(body)
    assert SECRET in raw_content and SECRET in raw_arguments
    want_content = rewrite(raw_content, extra_roots=roots)  # the one-shot rewrite
    want_arguments = rewrite(raw_arguments, extra_roots=roots)
    assert SECRET not in want_content and SECRET not in want_arguments
    needles = (SECRET.encode(), b"zz-Secret")

    reference: list[tuple[str, str]] | None = None
    async with gw.client() as c:
        for name, pieces in cases:
            assert b"".join(pieces).replace(b"\r\n", b"\n") == body
            queue.append(pieces)
            watch = LeakWatch(needles)
            got = await stream_chat(c, {"model": "scripted"}, on_piece=watch)
            assert not queue
            try:
                assert watch.hits == []
                assert_wire_format(got)
                for e in got.events:
                    if e.data != "[DONE]":
                        for text in json_strings(json.loads(e.data)):
                            assert "zz-Secret" not in text, text
                            assert HOST_PATH_RE.search(text) is None, text
                events = [(e.event, _without_id(e.data)) for e in got.events]
                if reference is None:
                    reference = events
                    assert got.content == want_content
                    assert got.arguments == want_arguments
                    assert "report.pdf" in got.content and "plot.png" in got.content
                    assert "results.csv" in got.arguments
                    progress = [e for e in got.events if e.event == "hermes.tool.progress"]
                    assert len(progress) == 1
                    assert "plot.png" in progress[0].data
                    # the demo's `tool_calls: null` sentinel is no value: not relayed
                    assert not any(d.get("tool_calls", 0) is None for d in got.deltas)
                    assert got.chunks[-1]["usage"]["total_tokens"] == 9
                    assert got.chunks[-1]["gateway"]["download_link_mode"] == "private"
                    assert got.finish_reasons() == ["stop"]
                else:
                    # every chunking of the same bytes gives the very same events
                    assert events == reference
            except AssertionError as exc:
                raise AssertionError(f"chunking {name!r}: {exc}") from exc
    assert len(transport.requests) == len(cases)
    assert open_streams(gw) == 0


async def test_leak_check_is_not_vacuous(nursery: trio.Nursery, tmp_path: Path) -> None:
    """With rewriting switched off (harness-only switch) the same check fails."""
    body = leak_body()
    transport = ScriptedTransport(lambda req: Scripted(split_every(body, 7)))

    gw = await start_gateway(
        nursery, scripted_gateway_config(tmp_path), transport=transport, settings=NOTHING_FOUND
    )
    watch = LeakWatch((SECRET.encode(),))
    async with gw.client() as c:
        await stream_chat(c, {"model": "scripted"}, on_piece=watch)
    assert watch.hits


async def test_tool_call_null_sentinel_passes_through(
    nursery: trio.Nursery, tmp_path: Path
) -> None:
    chunks = [
        ROLE_EVENT,
        encode_json(chunk({"content": None, "tool_calls": None})),
        encode_json(chunk({"content": None, "tool_calls": None, "function_call": None})),
        content_event("done"),
        encode_json(chunk({"content": None, "tool_calls": None}, "stop")),
        DONE,
    ]
    transport = ScriptedTransport(lambda req: Scripted(chunks))
    gw = await start_gateway(nursery, scripted_gateway_config(tmp_path), transport=transport)
    async with gw.client() as c:
        got = await stream_chat(c, {"model": "scripted"})
    assert_wire_format(got)
    # nulls are no value: nothing is relayed for them, nothing is invented, no crash
    assert all(v is not None for d in got.deltas for v in d.values()), got.deltas
    assert not any("tool_calls" in d or "function_call" in d for d in got.deltas)
    assert got.content == "done"
    assert got.finish_reasons() == ["stop"]
    assert "gateway" in got.final


# --------------------------------------------------------------------------- failures mid-stream


async def test_upstream_dies_mid_stream_demo_fail(gateway: Gateway, upstream: Upstream) -> None:
    files = upstream.app.demo_files
    pdf = str(files.report_pdf)
    async with gateway.client() as c:
        got = await stream_chat(c, {"model": "demo-fail"})
    assert_wire_format(got)
    final = got.final
    assert final["choices"][0]["finish_reason"] == "error"
    assert final["error"]["code"] == "upstream_disconnected"
    assert final["error"]["message"]
    assert final["gateway"] == {"download_link_mode": "private", "artifacts": []}
    # the cut path ("…/report.pdf" minus 6 characters) flushed as its last segment only
    partial = Path(pdf[: len(pdf) - 6]).name
    assert got.content.endswith("next to the report at " + partial)
    assert_no_demo_folders(got.body.decode(), files)
    assert upstream.app.demo_aborts == 1
    await wait_until(lambda: open_streams(gateway) == 0)


@SDK_WARNINGS
async def test_upstream_dies_mid_stream_sdk_raises(gateway: Gateway) -> None:
    # The design's contract for a mid-stream upstream failure is a final chunk with
    # finish_reason "error" and an `error` object, then [DONE]. openai-python raises
    # APIError on any chunk with a truthy `error`: that is the intended client-side
    # signal, not a protocol violation.
    text: list[str] = []
    async with httpx2.AsyncClient(timeout=httpx2.Timeout(10, read=30)) as http:
        client = openai.AsyncOpenAI(
            base_url=gateway.url + "/v1", api_key=ALICE_KEY, http_client=http, max_retries=0
        )
        stream = await client.chat.completions.create(
            model="demo-fail", messages=[{"role": "user", "content": "hi"}], stream=True
        )
        with pytest.raises(openai.APIError) as info:
            async with stream:
                async for c in stream:
                    text.extend(ch.delta.content or "" for ch in c.choices)
        del stream
    gc.collect()
    assert info.value.code == "upstream_disconnected"
    assert "I am writing the summary now." in "".join(text)


@pytest.mark.parametrize("partial_event", [False, True])
async def test_scripted_cut_inside_a_path(
    nursery: trio.Nursery, tmp_path: Path, partial_event: bool
) -> None:
    chunks = [
        ROLE_EVENT,
        content_event("Writing the result to " + POSIX[:5]),
        content_event(POSIX[5:-4]),  # ends inside the file name: ".../out/report"
    ]
    if partial_event:
        half = content_event(" and also " + WIN)
        chunks.append(half[: len(half) // 2])
    transport = ScriptedTransport(lambda req: Scripted(chunks, fail_after=True))
    gw = await start_gateway(nursery, scripted_gateway_config(tmp_path), transport=transport)
    watch = LeakWatch((SECRET.encode(),))
    async with gw.client() as c:
        got = await stream_chat(c, {"model": "scripted"}, on_piece=watch)
    assert watch.hits == []
    assert_wire_format(got)
    assert got.content == "Writing the result to report"
    assert got.final["choices"][0]["finish_reason"] == "error"
    assert got.final["choices"][0]["delta"] == {"content": "report"}
    assert got.final["error"]["code"] == "upstream_disconnected"
    assert SECRET not in got.body.decode()
    assert transport.closed  # the upstream response was closed
    await wait_until(lambda: open_streams(gw) == 0)


END_CASES = {
    # upstream closes cleanly without finish_reason and without [DONE]
    "eof-without-done": ([ROLE_EVENT, content_event("Saved to " + POSIX)], "stop", None),
    # an error object mid-stream, its message naming a path
    "error-event": (
        [ROLE_EVENT, content_event("Writing " + POSIX[:-4]),
         encode_json({"error": {"message": f"disk full at {POSIX}", "code": "x"}})],
        "error",
        "upstream_error",
    ),
    "not-json": ([ROLE_EVENT, content_event("at " + POSIX[:-4]), b"data: {oops\n\n"], "error", "upstream_bad_response"),
    # one event larger than limits.max_event_bytes (4096 here), never terminated
    "oversized-event": ([ROLE_EVENT, content_event("at " + POSIX[:-4]), b"data: " + b"x" * 8192], "error", "sse_event_too_large"),
}  # fmt: skip


@pytest.mark.parametrize("case", list(END_CASES))
async def test_stream_end_paths(nursery: trio.Nursery, tmp_path: Path, case: str) -> None:
    """Invariant 4 (clean end): every way a stream ends gives a proper terminal chunk,
    the held tail flushed as a file name, then [DONE]."""
    chunks, finish, code = END_CASES[case]
    transport = ScriptedTransport(lambda req: Scripted(chunks))
    cfg = scripted_gateway_config(tmp_path, limits={"max_event_bytes": 4096})
    gw = await start_gateway(nursery, cfg, transport=transport)
    watch = LeakWatch((SECRET.encode(),))
    async with gw.client() as c:
        got = await stream_chat(c, {"model": "scripted"}, on_piece=watch)
    assert watch.hits == []
    assert_wire_format(got)
    assert got.finish_reasons() == [finish]
    assert got.final["choices"][0]["finish_reason"] == finish
    assert "gateway" in got.final
    if code is None:
        assert "error" not in got.final
        assert got.content == "Saved to report.pdf"
    else:
        assert got.final["error"]["code"] == code
        assert "zz-Secret" not in json.dumps(got.final["error"])
        # the path was cut inside its file name ("…/out/report"): its last segment only
        assert got.content in ("Writing report", "at report")
    await wait_until(lambda: open_streams(gw) == 0)


async def test_upstream_idle_timeout_ends_stream(
    nursery: trio.Nursery, tmp_path: Path, upstream: Upstream
) -> None:
    cfg = make_config(
        tmp_path,
        upstream.url + "/v1",
        server={"keepalive_seconds": 0.1},
        upstream={"idle_timeout_seconds": 0.35},
    )
    gw = await start_gateway(nursery, cfg)
    async with gw.client() as c:
        got = await stream_chat(c, {"model": "demo-quiet", "demo_quiet_seconds": 5})
    assert_wire_format(got)
    assert got.final["choices"][0]["finish_reason"] == "error"
    assert got.final["error"]["code"] == "upstream_timeout"
    assert got.body.count(KEEPALIVE) >= 2
    await wait_until(lambda: upstream.app.demo_disconnects == 1)


@pytest.mark.parametrize(
    "body",
    [
        {"model": "demo-long", "demo_events": 5000, "demo_delay": 0.01},
        {"model": "demo-quiet", "demo_quiet_seconds": 30},  # cut while the upstream is silent
    ],
    ids=["while-streaming", "while-upstream-silent"],
)
async def test_client_disconnect_closes_upstream(
    upstream: Upstream, gateway: Gateway, body: dict[str, Any]
) -> None:
    app = upstream.app
    cancelled_at = 0.0
    relay_tasks: list[str] = []
    got = Received()
    decoder = SSEDecoder()
    async with gateway.client() as c:
        # Leave by cancellation, not `break` (breaking out of httpx's nested async
        # generators abandons them, a ResourceWarning under trio).
        with trio.CancelScope() as reading:
            payload = {"messages": MESSAGES, "stream": True, **body}
            async with c.stream("POST", CHAT, json=payload) as resp:
                async for piece in resp.aiter_raw():
                    got.events.extend(decoder.feed(piece))
                    if len(got.content) >= 20:
                        assert open_streams(gateway) == 1
                        assert app.demo_streams_open == 1
                        relay_tasks = [n for n in live_task_names() if _of_a_stream(n)]
                        cancelled_at = time.monotonic()
                        reading.cancel()
        assert reading.cancelled_caught
    await wait_until(lambda: app.demo_disconnects == 1)
    lag = app.demo_disconnect_times[0] - cancelled_at
    assert lag < 0.1, f"the upstream saw the disconnect {lag * 1000:.0f} ms later"
    assert app.demo_streams_open == 0 and app.demo_streams_completed == 0
    print(f"upstream saw the disconnect after {lag * 1000:.1f} ms; relay tasks {relay_tasks}")
    # no task outlives its request
    assert relay_tasks  # the check below is not vacuous
    await wait_until(lambda: open_streams(gateway) == 0, 1.0)
    await wait_until(lambda: not any(_of_a_stream(n) for n in live_task_names()), 1.0)


def _of_a_stream(task_name: str) -> bool:
    """A task that relays a stream: the request's own (its exchange's, which reads a
    pull-safe upstream itself) or a relay's producer."""
    return "gateway.stream.relay" in task_name or "gateway.http.exchange" in task_name


async def test_keepalive_comments_and_sdk(
    nursery: trio.Nursery, tmp_path: Path, upstream: Upstream
) -> None:
    cfg = make_config(tmp_path, upstream.url + "/v1", server={"keepalive_seconds": 0.2})
    gw = await start_gateway(nursery, cfg)
    body = {"model": "demo-quiet", "demo_quiet_seconds": 1.0}
    async with gw.client() as c:
        got = await stream_chat(c, body)
    assert_wire_format(got)
    lines = got.body.decode().split("\n")
    assert lines.count(KEEPALIVE.decode().rstrip("\n")) >= 3
    assert got.content == "Let me think about that for a moment... Done: all good."
    assert got.finish_reasons() == ["stop"]

    def consume() -> str:
        with httpx2.Client(timeout=httpx2.Timeout(10, read=30)) as http:
            client = openai.OpenAI(
                base_url=gw.url + "/v1", api_key=ALICE_KEY, http_client=http, max_retries=0
            )
            with client.chat.completions.create(
                model="demo-quiet",
                messages=[{"role": "user", "content": "hi"}],
                stream=True,
                extra_body={"demo_quiet_seconds": 1.0},
            ) as stream:
                return "".join(ch.delta.content or "" for c in stream for ch in c.choices)

    assert await trio.to_thread.run_sync(consume) == got.content


@pytest.mark.parametrize("way", ["lean", "quart"])
async def test_stream_outlives_response_timeout_config(
    nursery: trio.Nursery, tmp_path: Path, upstream: Upstream, way: str
) -> None:
    """Fast proof that Quart's RESPONSE_TIMEOUT (60 s) cannot cut a stream: the app's
    default is None, and even with a 0.3 s app-wide timeout a 1 s stream completes,
    because stream responses carry ``timeout = None`` themselves (quart's way; the
    direct route has no response timeout at all)."""
    timeouts: list[Any] = []

    def customize(app: Any) -> None:
        assert app.config["RESPONSE_TIMEOUT"] is None
        app.config["RESPONSE_TIMEOUT"] = 0.3
        if way == "quart":
            app.direct_routes = {}

        @app.after_request
        async def _record(response: Any) -> Any:
            timeouts.append(response.timeout)
            return response

    gw = await start_gateway(
        nursery, make_config(tmp_path, upstream.url + "/v1"), customize=customize
    )
    async with gw.client() as c:
        got = await stream_chat(c, {"model": "demo-quiet", "demo_quiet_seconds": 1.0})
    assert_wire_format(got)
    assert got.content.endswith("Done: all good.")
    assert timeouts == ([None] if way == "quart" else [])


@pytest.mark.slow
async def test_stream_longer_than_60_seconds(gateway: Gateway) -> None:
    n = 650
    t0 = trio.current_time()
    async with gateway.client() as c:
        got = await stream_chat(c, {"model": "demo-long", "demo_events": n, "demo_delay": 0.1})
    assert trio.current_time() - t0 > 60
    assert_wire_format(got)
    assert got.content == "".join(demo_long_delta(i) for i in range(n))
    assert got.finish_reasons() == ["stop"]


# --------------------------------------------------------------------------- bad input


@dataclass(frozen=True)
class Bad:
    name: str
    status: int
    code: str
    body: Any = None
    raw: bytes | None = None
    key: str | None = ALICE_KEY
    headers: dict[str, str] = field(default_factory=dict)


BAD = [
    Bad("malformed json", 400, "invalid_json", raw=b'{"model": "demo", '),
    Bad("json not an object", 400, "invalid_json", raw=b"[1, 2]"),
    Bad("empty body", 400, "invalid_json", raw=b""),
    Bad("missing messages", 400, "missing_messages", {"model": "demo", "stream": True}),
    Bad("missing model", 400, "missing_model", {"messages": MESSAGES, "stream": True}),
    Bad("bad stream flag", 400, "invalid_stream", {"model": "demo", "messages": MESSAGES, "stream": "yes"}),
    Bad("unknown model (stream)", 404, "model_not_found", {"model": "gpt-nope", "messages": MESSAGES, "stream": True}),
    Bad("unknown model", 404, "model_not_found", {"model": "gpt-nope", "messages": MESSAGES}),
    Bad("wrong key", 401, "invalid_api_key", {"model": "demo", "messages": MESSAGES}, key="wrong-key-0123456789abc"),
    Bad("no key", 401, "missing_api_key", {"model": "demo", "messages": MESSAGES}, key=None),
    Bad("not bearer", 401, "invalid_api_key", {"model": "demo", "messages": MESSAGES}, key=None, headers={"Authorization": f"Basic {ALICE_KEY}"}),
    Bad("user key asserts owner", 403, "forbidden_assertion", {"model": "demo", "messages": MESSAGES, "stream": True}, headers={"X-Gateway-Owner": "bob"}),
    Bad("user key asserts mode", 403, "forbidden_assertion", {"model": "demo", "messages": MESSAGES}, headers={"X-Gateway-Link-Mode": "public"}),
    Bad("oversized body", 413, "request_too_large", {"model": "demo", "messages": [{"role": "user", "content": "x" * 10_000}], "stream": True}),
    Bad("upstream 500 (stream)", 502, "upstream_error", {"model": "demo-error", "messages": MESSAGES, "stream": True}),
    Bad("upstream 500", 502, "upstream_error", {"model": "demo-error", "messages": MESSAGES}),
    Bad("upstream 429 (stream)", 429, "upstream_rate_limited", {"model": "demo-429", "messages": MESSAGES, "stream": True}),
    Bad("upstream 429", 429, "upstream_rate_limited", {"model": "demo-429", "messages": MESSAGES}),
    Bad("upstream cut (non-stream)", 502, "upstream_disconnected", {"model": "demo-fail", "messages": MESSAGES}),
    Bad("invalid download_link_mode", 400, "invalid_download_link_mode", {"model": "demo", "messages": MESSAGES, "stream": True, "download_link_mode": "everyone"}),
    Bad("invalid metadata.hermes mode", 400, "invalid_download_link_mode", {"model": "demo", "messages": MESSAGES, "metadata": {"hermes": {"download_link_mode": 1}}}),
    Bad("proxy asserts bad mode", 400, "invalid_download_link_mode", {"model": "demo", "messages": MESSAGES}, key=PROXY_KEY, headers={"X-Gateway-Link-Mode": "everyone"}),
]  # fmt: skip


@pytest.mark.parametrize("case", BAD, ids=[b.name for b in BAD])
async def test_bad_input(
    nursery: trio.Nursery, tmp_path: Path, upstream: Upstream, case: Bad
) -> None:
    cfg = make_config(tmp_path, upstream.url + "/v1", server={"max_body_bytes": 4096})
    gw = await start_gateway(nursery, cfg)
    headers = dict(case.headers)
    if case.key is not None:
        headers["Authorization"] = f"Bearer {case.key}"
    async with httpx.AsyncClient(base_url=gw.url, timeout=10) as c:
        if case.raw is not None:
            headers["Content-Type"] = "application/json"
            resp = await c.post(CHAT, content=case.raw, headers=headers)
        else:
            resp = await c.post(CHAT, json=case.body, headers=headers)
    assert resp.status_code == case.status, resp.text
    assert resp.headers["content-type"].startswith("application/json")
    err = resp.json()["error"]
    assert err["code"] == case.code
    assert err["type"] and err["message"]
    assert_clean_error_body(resp.text, tmp_path)
    assert case.key is None or case.key not in resp.text
    if case.status == 401:
        assert resp.headers["www-authenticate"].startswith("Bearer")
    if case.status == 429:
        assert resp.headers["retry-after"] == "1"
    chat_calls = [e for e in upstream.app.demo_log if e["path"] == "/v1/chat/completions"]
    if case.status in (400, 401, 403, 413):
        assert chat_calls == []  # refused before anything reached the upstream
    assert open_streams(gw) == 0


@pytest.mark.parametrize(
    ("status", "want_status", "want_code"),
    [
        (400, 400, "context_length_exceeded"),
        (500, 502, "upstream_error"),
        (503, 502, "upstream_error"),
    ],
)
@pytest.mark.parametrize("stream", [True, False], ids=["stream", "plain"])
async def test_upstream_error_bodies_are_scrubbed(
    nursery: trio.Nursery,
    tmp_path: Path,
    status: int,
    want_status: int,
    want_code: str,
    stream: bool,
) -> None:
    error = {
        "error": {"message": f"cannot read {POSIX}: too long", "code": "context_length_exceeded"}
    }
    body = json.dumps(error).encode()
    transport = ScriptedTransport(
        lambda req: Scripted([body], status=status, headers={"content-type": "application/json"})
    )
    gw = await start_gateway(nursery, scripted_gateway_config(tmp_path), transport=transport)
    async with gw.client() as c:
        resp = await c.post(CHAT, json={"model": "m", "messages": MESSAGES, "stream": stream})
    assert resp.status_code == want_status
    err = resp.json()["error"]
    assert err["code"] == want_code
    assert "report.pdf" in err["message"]
    assert "zz-Secret" not in resp.text
    assert_clean_error_body(resp.text, tmp_path)


async def test_upstream_unreachable(nursery: trio.Nursery, tmp_path: Path) -> None:
    cfg = make_config(tmp_path, f"http://127.0.0.1:{closed_port()}/v1")
    gw = await start_gateway(nursery, cfg)
    async with gw.client() as c:
        for stream in (True, False):
            resp = await c.post(
                CHAT, json={"model": "demo", "messages": MESSAGES, "stream": stream}
            )
            assert resp.status_code == 502
            assert resp.json()["error"]["code"] == "upstream_refused"
            assert cfg.upstream.base_url in resp.json()["error"]["message"]
            assert_clean_error_body(resp.text, tmp_path)
        resp = await c.get("/v1/models")
        assert resp.status_code == 502
        assert resp.json()["error"]["code"] == "upstream_refused"
        ready = await c.get("/health/ready")
        assert ready.status_code == 503
        assert ready.json()["checks"]["upstream"] == "upstream_refused"
        assert "refused the connection" in ready.json()["checks"]["upstream_detail"]
        live = await c.get("/health")
        assert live.status_code == 200


# --------------------------------------------------------------------------- principals, logs


async def test_upstream_sees_opaque_principal_not_key(gateway: Gateway, upstream: Upstream) -> None:
    body = {"model": "demo-long", "demo_events": 3, "download_link_mode": "public"}
    async with gateway.client(ALICE_KEY) as alice, gateway.client(BOB_KEY) as bob:
        await stream_chat(alice, body)
        r = await alice.post(
            CHAT, json={"model": "demo-long", "demo_events": 3, "messages": MESSAGES}
        )
        assert r.status_code == 200
        await stream_chat(bob, body)
    async with gateway.client(PROXY_KEY) as proxy:
        await stream_chat(proxy, body, headers={"X-Gateway-Owner": "openwebui:alice"})
    calls = [e for e in upstream.app.demo_log if e["path"] == "/v1/chat/completions"]
    assert len(calls) == 4
    ids = []
    for entry in calls:
        pid = entry["body"]["user"]
        assert entry["principal"] == pid
        assert entry["authorization"] is None  # no upstream api_key configured
        dump = json.dumps(entry)
        for key in (ALICE_KEY, BOB_KEY, PROXY_KEY):
            assert key not in dump
        assert "download_link_mode" not in entry["body"]  # the gateway's own field
        assert pid not in ("alice", "bob", "owui-proxy") and "alice" not in pid
        ids.append(pid)
    alice_stream, alice_plain, bob_id, proxied = ids
    assert alice_stream == alice_plain  # stable, and follows the owner
    assert len({alice_stream, bob_id, proxied}) == 3  # openwebui:alice is not alice


async def test_access_log(
    gateway: Gateway, upstream: Upstream, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="gateway.access")
    wrong = "wrong-key-0123456789abcdef"
    async with gateway.client() as c:
        await stream_chat(c, {"model": "demo-long", "demo_events": 3})
        assert (await c.post(CHAT, json={"model": "demo", "messages": MESSAGES})).status_code == 200
        assert (await c.get("/v1/models")).status_code == 200
        bad = await c.post(CHAT, json={}, headers={"Authorization": f"Bearer {wrong}"})
        assert bad.status_code == 401
        assert (await c.get("/health")).status_code == 200

    def access() -> list[logging.LogRecord]:
        return [r for r in caplog.records if r.name == "gateway.access"]

    await wait_until(lambda: len(access()) >= 5)
    await trio.sleep(0.05)
    records = access()
    assert len(records) == 5  # one line per request
    fields = [dict(kv.split("=", 1) for kv in r.getMessage().split()) for r in records]
    by_status = sorted((f["route"], f["status"], f["principal"]) for f in fields)
    assert by_status == sorted(
        [
            (ROUTE, "200", "alice"),
            (ROUTE, "200", "alice"),
            ("/v1/models", "200", "alice"),
            (ROUTE, "401", "-"),
            ("/health", "200", "-"),
        ]
    )
    for f in fields:
        assert int(f["bytes"]) > 0
        assert float(f["duration_ms"]) >= 0
        assert f["method"] in ("GET", "POST")
    for r in caplog.records:
        for key in (ALICE_KEY, wrong):
            assert key not in r.getMessage()


# --------------------------------------------------------------------------- health, metrics, models


async def test_health_ready_metrics_models(gateway: Gateway, upstream: Upstream) -> None:
    async with gateway.client() as c:
        live = await c.get("/health", headers={"Authorization": ""})
        assert live.status_code == 200
        assert live.json()["status"] == "ok" and live.json()["version"]
        ready = await c.get("/health/ready")
        assert ready.status_code == 200
        assert ready.json()["status"] == "ready"

        def model_gets() -> int:
            return sum(1 for e in upstream.app.demo_log if e["path"] == "/v1/models")

        before = model_gets()
        first = await c.get("/v1/models")
        second = await c.get("/v1/models")
        assert first.status_code == second.status_code == 200
        assert first.json() == second.json()
        assert "demo" in [m["id"] for m in first.json()["data"]]
        assert model_gets() - before == 1  # cached
        anon = await c.get("/v1/models", headers={"Authorization": ""})
        assert anon.status_code == 401

        await stream_chat(c, {"model": "demo"})
        metrics = await c.get("/metrics")
    assert metrics.status_code == 200
    assert metrics.headers["content-type"].startswith("text/plain")
    text = metrics.text
    for name in (
        "gateway_open_streams",
        "gateway_paths_rewritten",
        "gateway_requests_total",
        "gateway_request_seconds",
        "gateway_upstream_errors",
        "gateway_response_bytes_total",
    ):
        assert name in text, name
    assert 'gateway_open_streams{route="/v1/chat/completions"} 0.0' in text
    assert 'gateway_requests_total{route="/v1/models",status="200"} 2.0' in text


async def test_metrics_count_rewritten_paths(gateway: Gateway) -> None:
    async with gateway.client() as c:
        await stream_chat(c, {"model": "demo"})
        await wait_until(lambda: open_streams(gateway) == 0)
        assert (await c.post(CHAT, json={"model": "demo", "messages": MESSAGES})).status_code == 200
    total = sum(
        s.value
        for m in gateway.app.gateway.metrics.rewrites.collect()
        for s in m.samples
        if s.name == "gateway_paths_rewritten_total"
    )
    assert total >= 2 * 6  # the demo answer names six paths in its content alone


async def test_non_streaming_chat_is_rewritten(gateway: Gateway, upstream: Upstream) -> None:
    files = upstream.app.demo_files
    async with gateway.client() as c:
        resp = await c.post(CHAT, json={"model": "demo", "messages": MESSAGES})
    assert resp.status_code == 200
    assert resp.headers["content-type"].startswith("application/json")
    body = resp.json()
    assert body["object"] == "chat.completion"
    message = body["choices"][0]["message"]
    assert body["choices"][0]["finish_reason"] == "stop"
    assert_demo_answer(message["content"], body["gateway"], files)
    assert_no_demo_folders("\n".join(json_strings(body)), files)
    links = {a["filename"]: a["url"] for a in body["gateway"]["artifacts"]}
    args = json.loads(message["tool_calls"][0]["function"]["arguments"])
    assert args["path"] == links["results.csv"]  # a quoted path becomes the bare URL
    assert body["usage"]["total_tokens"] > 0
    # the link downloads for its owner only
    local = links["report.pdf"].replace("http://127.0.0.1:8642", gateway.url)
    async with gateway.client() as alice, gateway.client(BOB_KEY) as bob:
        mine = await alice.get(local)
        assert mine.status_code == 200 and mine.content == files.report_pdf.read_bytes()
        assert (await bob.get(local)).status_code == 404
        # the streamed and the plain answers rewrite to the same text (ids aside)
        got = await stream_chat(alice, {"model": "demo"})
    assert mask_links(got.content) == mask_links(message["content"])


async def test_link_mode_reaches_manifest(gateway: Gateway) -> None:
    async with gateway.client() as c:
        got = await stream_chat(
            c, {"model": "demo-long", "demo_events": 2, "download_link_mode": "public"}
        )
        meta = await c.post(
            CHAT,
            json={
                "model": "demo-long",
                "demo_events": 2,
                "messages": MESSAGES,
                "metadata": {"hermes": {"download_link_mode": "public"}},
            },
        )
    async with gateway.client(PROXY_KEY) as proxy:
        asserted = await stream_chat(
            proxy,
            {"model": "demo-long", "demo_events": 2, "download_link_mode": "public"},
            headers={"X-Gateway-Owner": "openwebui:alice", "X-Gateway-Link-Mode": "private"},
        )
    assert got.final["gateway"]["download_link_mode"] == "public"
    assert meta.json()["gateway"]["download_link_mode"] == "public"
    assert asserted.final["gateway"]["download_link_mode"] == "private"


async def test_unknown_events_are_scrubbed_whole_and_model_paths_too(
    nursery: trio.Nursery, tmp_path: Path
) -> None:
    """Every string of an unknown event is scrubbed (keys like ``name``/``status``
    included), and a model named by its host path (vLLM's default) shows its name."""
    body = (
        encode_json(
            {
                "tool": "write_file",
                "name": "/Users/alice/secret-plans/plan.txt",
                "status": "writing /Users/alice/secret-plans/b.txt",
            },
            event="hermes.tool.progress",
        )
        + encode_json({**chunk({"content": "ok"}), "model": "/home/bob/models/llama-3"})
        + encode_json({**chunk({"content": "!"}), "model": "local/home/bob/models/llama-3"})
        + STOP_EVENT
        + DONE
    )
    transport = ScriptedTransport(lambda req: Scripted([body]))
    gw = await start_gateway(nursery, scripted_gateway_config(tmp_path), transport=transport)
    async with gw.client() as c:
        r = await c.post(CHAT, json={"model": "m", "stream": True, "messages": MESSAGES})
    assert r.status_code == 200
    assert "/Users/alice" not in r.text and "/home/bob" not in r.text
    assert "plan.txt" in r.text and "b.txt" in r.text and '"model":"llama-3"' in r.text
    assert '"model":"local/llama-3"' in r.text
