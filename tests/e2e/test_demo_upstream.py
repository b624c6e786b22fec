"""End-to-end tests of the demo upstream: real hypercorn on loopback, real httpx.

Each test gets its own server on 127.0.0.1 with an ephemeral port, started inside a
fixture nursery that is cancelled when the test ends, so nothing outlives the test.
"""

from __future__ import annotations

import gc
import json
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest
import trio

from gateway.cli.demo_upstream import (
    MODELS,
    WINDOWS_PATH,
    DemoUpstreamApp,
    create_demo_upstream_app,
    demo_long_delta,
    serve_demo_upstream,
)
from gateway.core.sse import SSEDecoder, SSEEvent, encode_comment
from tests.helpers import SDK_WARNINGS


@dataclass
class Upstream:
    app: DemoUpstreamApp
    url: str  # origin; the OpenAI base URL is url + "/v1"
    client: httpx.AsyncClient


@pytest.fixture
async def upstream(tmp_path: Path) -> AsyncIterator[Upstream]:
    app = create_demo_upstream_app(
        tmp_path / "artifacts", outside_dir=tmp_path / "outside", chunk_delay=0.0
    )
    async with trio.open_nursery() as nursery:
        url = await nursery.start(serve_demo_upstream, app, "127.0.0.1", 0)
        async with httpx.AsyncClient(base_url=f"{url}/v1", timeout=10.0) as client:
            yield Upstream(app, url, client)
        nursery.cancel_scope.cancel()


@dataclass
class Collected:
    events: list[SSEEvent] = field(default_factory=list)
    raw: list[bytes] = field(default_factory=list)

    @property
    def chunks(self) -> list[dict[str, Any]]:
        return [
            json.loads(e.data) for e in self.events if e.event == "message" and e.data != "[DONE]"
        ]

    @property
    def deltas(self) -> list[dict[str, Any]]:
        return [c["choices"][0]["delta"] for c in self.chunks if c["choices"]]

    @property
    def contents(self) -> list[str]:
        return [d["content"] for d in self.deltas if d.get("content")]

    @property
    def text(self) -> str:
        return "".join(self.contents)


async def stream_chat(client: httpx.AsyncClient, body: dict[str, Any], into: Collected) -> None:
    decoder = SSEDecoder()
    async with client.stream("POST", "/chat/completions", json={"stream": True, **body}) as resp:
        assert resp.status_code == 200
        assert resp.headers["content-type"].startswith("text/event-stream")
        assert resp.headers["cache-control"] == "no-cache"
        async for piece in resp.aiter_raw():
            into.raw.append(piece)
            into.events.extend(decoder.feed(piece))


async def wait_until(condition: Callable[[], bool]) -> None:
    """Poll a counter of the app (it exposes plain numbers on purpose, not events)."""
    with trio.fail_after(5):
        while not condition():  # noqa: ASYNC110
            await trio.sleep(0.005)


MESSAGES = [{"role": "user", "content": "Make me a report."}]


async def test_models_lists_every_scenario(upstream: Upstream) -> None:
    resp = await upstream.client.get("/models")
    assert resp.status_code == 200
    body = resp.json()
    assert body["object"] == "list"
    assert [m["id"] for m in body["data"]] == list(MODELS)
    assert all(m["object"] == "model" for m in body["data"])
    one = await upstream.client.get("/models/demo-long")
    assert one.json()["id"] == "demo-long"


async def test_demo_stream_mentions_real_files(upstream: Upstream) -> None:
    files = upstream.app.demo_files
    got = Collected()
    await stream_chat(
        upstream.client,
        {"model": "demo", "messages": MESSAGES, "stream_options": {"include_usage": True}},
        got,
    )

    assert got.events[-1].data == "[DONE]"
    chunks = got.chunks
    assert all(c["object"] == "chat.completion.chunk" for c in chunks)
    assert chunks[0]["choices"][0]["delta"]["role"] == "assistant"
    assert chunks[-1]["choices"] == [] and chunks[-1]["usage"]["total_tokens"] > 0
    assert chunks[-2]["choices"][0]["finish_reason"] == "stop"

    text = got.text
    for path in (*files.in_root, files.outside_txt):
        assert path.is_file() and path.is_absolute()
        assert str(path) in text
        assert str(files.root) in str(path) or path == files.outside_txt
    assert not files.outside_txt.is_relative_to(files.root)
    assert WINDOWS_PATH in text
    assert f"`{files.resume_txt}`" in text
    assert f"]({files.plot_png})" in text
    assert files.report_pdf.read_bytes().startswith(b"%PDF-")
    assert files.plot_png.read_bytes().startswith(b"\x89PNG\r\n\x1a\n")

    # Paths are cut between deltas, including "C:" | "\Users…".
    contents = got.contents
    assert not any(str(files.report_pdf) in c for c in contents)
    assert not any(str(files.results_csv) in c for c in contents)
    assert not any(WINDOWS_PATH in c for c in contents)
    assert any(c.endswith("C:") for c in contents)
    # One body write ends inside a multi-byte UTF-8 character.
    split_inside_char = False
    for piece in got.raw:
        try:
            piece.decode("utf-8")
        except UnicodeDecodeError:
            split_inside_char = True
    assert split_inside_char

    progress = [e for e in got.events if e.event == "hermes.tool.progress"]
    assert len(progress) == 1
    assert str(files.root) in json.loads(progress[0].data)["message"]

    calls = [d["tool_calls"] for d in got.deltas if d.get("tool_calls")]
    assert calls[0][0]["function"]["name"] == "write_file"
    arguments = "".join(call[0]["function"]["arguments"] for call in calls)
    assert len(calls) > 2
    assert json.loads(arguments)["path"] == str(files.results_csv)
    assert any("tool_calls" in d and d["tool_calls"] is None for d in got.deltas)


async def test_demo_fail_cuts_the_body_before_done(upstream: Upstream) -> None:
    got = Collected()
    with pytest.raises(httpx.RemoteProtocolError):
        await stream_chat(upstream.client, {"model": "demo-fail", "messages": MESSAGES}, got)
    assert all(e.data != "[DONE]" for e in got.events)
    last = got.contents[-1]
    pdf = str(upstream.app.demo_files.report_pdf)
    assert pdf.startswith(last) and last != pdf
    assert all(c["choices"][0]["finish_reason"] is None for c in got.chunks)
    assert upstream.app.demo_aborts == 1
    assert upstream.app.demo_disconnects == 0


async def test_demo_fail_partial_event(upstream: Upstream) -> None:
    got = Collected()
    with pytest.raises(httpx.RemoteProtocolError):
        await stream_chat(
            upstream.client,
            {"model": "demo-fail", "messages": MESSAGES, "demo_fail_partial": True},
            got,
        )
    assert not b"".join(got.raw).endswith(b"\n\n")


async def test_unknown_model_is_404(upstream: Upstream) -> None:
    resp = await upstream.client.post(
        "/chat/completions", json={"model": "gpt-nope", "messages": MESSAGES, "stream": True}
    )
    assert resp.status_code == 404
    error = resp.json()["error"]
    assert error["type"] == "invalid_request_error"
    assert error["code"] == "model_not_found"
    assert "gpt-nope" in error["message"]


async def test_error_scenarios(upstream: Upstream) -> None:
    resp = await upstream.client.post(
        "/chat/completions", json={"model": "demo-error", "messages": MESSAGES, "stream": True}
    )
    assert resp.status_code == 500
    assert resp.json()["error"]["message"]
    resp = await upstream.client.post(
        "/chat/completions", json={"model": "demo-429", "messages": MESSAGES}
    )
    assert resp.status_code == 429
    assert resp.headers["retry-after"] == "1"
    assert resp.json()["error"]["code"] == "rate_limit_exceeded"


async def test_bad_parameter_is_400(upstream: Upstream) -> None:
    resp = await upstream.client.post(
        "/chat/completions", json={"model": "demo-long", "stream": True, "demo_events": "many"}
    )
    assert resp.status_code == 400
    assert resp.json()["error"]["code"] == "invalid_demo_parameter"


async def test_non_stream_shape(upstream: Upstream) -> None:
    files = upstream.app.demo_files
    resp = await upstream.client.post(
        "/chat/completions", json={"model": "demo", "messages": MESSAGES, "stream": False}
    )
    assert resp.status_code == 200
    body = resp.json()
    assert body["object"] == "chat.completion"
    assert body["model"] == "demo"
    choice = body["choices"][0]
    assert choice["finish_reason"] == "stop"
    assert choice["message"]["role"] == "assistant"
    assert str(files.report_pdf) in choice["message"]["content"]
    assert choice["message"]["tool_calls"][0]["function"]["name"] == "write_file"
    assert body["usage"]["total_tokens"] == (
        body["usage"]["prompt_tokens"] + body["usage"]["completion_tokens"]
    )

    # The streamed text and the plain text are the same script.
    got = Collected()
    await stream_chat(upstream.client, {"model": "demo", "messages": MESSAGES}, got)
    assert got.text == choice["message"]["content"]


async def test_records_requests_and_headers(upstream: Upstream) -> None:
    await upstream.client.post(
        "/chat/completions",
        json={"model": "demo-long", "messages": MESSAGES, "demo_events": 3},
        headers={"Authorization": "Bearer up-key", "X-Gateway-Principal": "p-123"},
    )
    entry = upstream.app.demo_log[-1]
    assert entry["path"] == "/v1/chat/completions"
    assert entry["body"]["demo_events"] == 3
    assert entry["authorization"] == "Bearer up-key"
    assert entry["principal"] == "p-123"
    assert entry["headers"]["x-gateway-principal"] == "p-123"


async def test_demo_long_plain_text_without_delay(upstream: Upstream) -> None:
    got = Collected()
    await stream_chat(
        upstream.client,
        {"model": "demo-long", "messages": MESSAGES, "demo_events": 50, "demo_delay": 0},
        got,
    )
    assert got.contents == [demo_long_delta(i) for i in range(50)]
    assert not any(ch in got.text for ch in "/\\:~")
    assert got.events[-1].data == "[DONE]"
    assert upstream.app.demo_streams_completed == 1


async def test_demo_quiet_is_silent_then_finishes(upstream: Upstream) -> None:
    decoder = SSEDecoder()
    arrivals: list[tuple[float, str]] = []
    body = {"model": "demo-quiet", "messages": MESSAGES, "stream": True, "demo_quiet_seconds": 0.4}
    async with upstream.client.stream("POST", "/chat/completions", json=body) as resp:
        async for piece in resp.aiter_raw():
            for event in decoder.feed(piece):
                arrivals.append((trio.current_time(), event.data))
    assert arrivals[-1][1] == "[DONE]"
    contents = [
        (t, json.loads(d)["choices"][0]["delta"].get("content"))
        for t, d in arrivals
        if d != "[DONE]"
    ]
    texts = [(t, c) for t, c in contents if c]
    assert len(texts) == 2
    assert texts[1][0] - texts[0][0] >= 0.35


async def test_client_disconnect_mid_stream_is_counted(upstream: Upstream) -> None:
    app = upstream.app
    body = {
        "model": "demo-long",
        "messages": MESSAGES,
        "stream": True,
        "demo_events": 1000,
        "demo_delay": 0.01,
    }
    decoder = SSEDecoder()
    seen = 0
    # Leave by cancellation, not `break`: breaking out of httpx's nested async
    # generators abandons them unexhausted (a ResourceWarning under trio).
    with trio.CancelScope() as reading:
        async with upstream.client.stream("POST", "/chat/completions", json=body) as resp:
            async for piece in resp.aiter_raw():
                seen += len(decoder.feed(piece))
                if seen >= 5:
                    assert app.demo_streams_open == 1
                    reading.cancel()
    assert reading.cancelled_caught
    before = trio.current_time()
    await wait_until(lambda: app.demo_disconnects > 0)
    assert trio.current_time() - before < 1.0
    assert app.demo_streams_open == 0
    assert len(app.demo_disconnect_times) == 1
    assert app.demo_streams_completed == 0


@SDK_WARNINGS  # see tests/helpers.py
async def test_openai_sdk_consumes_demo_stream(upstream: Upstream) -> None:
    text: list[str] = []
    finish = None
    usage = None
    async with openai.AsyncOpenAI(
        base_url=f"{upstream.url}/v1", api_key="x", max_retries=0
    ) as client:
        stream = await client.chat.completions.create(
            model="demo",
            messages=[{"role": "user", "content": "Make me a report."}],
            stream=True,
            stream_options={"include_usage": True},
        )
        async with stream:
            async for chunk in stream:
                # The named hermes.tool.progress event arrives as a chunk without choices.
                for choice in getattr(chunk, "choices", None) or []:
                    if choice.delta.content:
                        text.append(choice.delta.content)
                    finish = choice.finish_reason or finish
                usage = getattr(chunk, "usage", None) or usage
        del stream
    gc.collect()
    assert str(upstream.app.demo_files.report_pdf) in "".join(text)
    assert WINDOWS_PATH in "".join(text)
    assert finish == "stop"
    assert usage is not None


async def test_demo_quiet_upstream_keepalive_comments(upstream: Upstream) -> None:
    got = Collected()
    await stream_chat(
        upstream.client,
        {
            "model": "demo-quiet",
            "messages": MESSAGES,
            "demo_quiet_seconds": 0.25,
            "demo_keepalive": 0.1,
        },
        got,
    )
    assert b"".join(got.raw).count(encode_comment()) == 2
    assert got.events[-1].data == "[DONE]"


async def test_a_temporary_outside_dir_is_removed_when_it_stops_serving(tmp_path: Path) -> None:
    app = create_demo_upstream_app(tmp_path / "artifacts", chunk_delay=0.0)
    outside = app.demo_files.outside_txt.parent
    assert outside.name.startswith("demo-upstream-outside-") and outside.is_dir()
    stop = trio.Event()
    async with trio.open_nursery() as nursery:
        await nursery.start(
            partial(serve_demo_upstream, app, "127.0.0.1", 0, shutdown_trigger=stop.wait)
        )
        stop.set()
    assert not outside.exists()  # no demo-upstream-outside-* left behind in /tmp


def test_a_temporary_outside_dir_is_removed_when_serving_cannot_begin(tmp_path: Path) -> None:
    """``python -m gateway.cli.demo_upstream`` on a port in use fails, and leaves no
    ``demo-upstream-outside-*`` directory behind (its ``TMPDIR`` is looked at)."""
    import os
    import socket
    import subprocess
    import sys

    tmpdir = tmp_path / "tmp"
    tmpdir.mkdir()
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        args = ["--port", str(port), "--root", str(tmp_path / "artifacts")]
        proc = subprocess.run(
            [sys.executable, "-m", "gateway.cli.demo_upstream", *args],
            env={**os.environ, "TMPDIR": str(tmpdir)},
            capture_output=True,
            text=True,
            timeout=60,
        )
    assert proc.returncode != 0 and "in use" in proc.stderr, proc.stderr[-2000:]
    assert list(tmpdir.iterdir()) == []
