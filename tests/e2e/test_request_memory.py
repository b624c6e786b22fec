"""A streamed answer does not keep its request's body alive: a conversation's body can
be megabytes, and an answer can stream for minutes (per open stream, that body was
held by the connection's last read, the request's scope, its queued ASGI message, the
handler's request object, and the parsed messages by the answer's end hook even
without a session). Checked with tracemalloc in the process that serves: mid-stream,
no allocation made by the gateway's serving of half the body's size is alive.
Removing any one of the releases makes a case fail."""

from __future__ import annotations

import tracemalloc
from pathlib import Path
from typing import Any

import pytest
import trio

from tests.conftest import ALICE_KEY, Gateway, Upstream, make_config, start_gateway

# the user's message: 2 MiB of text (read in many pieces; the body limit is 4 MiB), or
# 48 KiB (usually whole in the connection's first read, with the head)
SIZES = [2 * 1024 * 1024, 48 * 1024]


def _largest_alive_in_the_gateway() -> int:
    """The largest live allocation made while the gateway served (the test's client and
    the demo upstream run in this process too: their copies are theirs)."""
    snap = tracemalloc.take_snapshot()
    serving = ("gateway/http/exchange.py", "gateway/http/connection.py")
    sizes = [
        t.size
        for t in snap.traces
        if any(f.filename.endswith(serving) for f in t.traceback)
        and not any(f.filename.endswith("demo_upstream.py") for f in t.traceback)
    ]
    return max(sizes, default=0)


@pytest.mark.parametrize("size", SIZES)
async def test_a_streamed_answer_does_not_keep_its_request_body(
    gateway: Gateway, upstream: Upstream, size: int
) -> None:
    body = {
        "model": "demo-quiet",
        "quiet_seconds": 3,  # the answer pauses mid-stream: measured then
        "stream": True,
        "messages": [{"role": "user", "content": "x" * size}],
    }
    tracemalloc.start(30)
    try:
        async with (
            gateway.client(ALICE_KEY) as client,
            client.stream("POST", "/v1/chat/completions", json=body) as resp,
        ):
            assert resp.status_code == 200
            got = b""
            chunks = resp.aiter_raw()
            while b"for a moment" not in got:  # then the upstream is quiet for 3 s
                got += await chunks.__anext__()
            await trio.sleep(0.2)
            del body  # the test's own copy
            largest = _largest_alive_in_the_gateway()
            async for chunk in chunks:
                got += chunk
        assert got.rstrip().endswith(b"data: [DONE]")
    finally:
        tracemalloc.stop()
    assert largest < size // 2, largest  # the body, raw or parsed, is not held


def _caught_exceptions_alive() -> list[str]:
    """Exceptions of the waits a stream makes, alive: a wait inside an ``except`` block
    keeps the caught exception, its traceback and their frames for as long as it waits."""
    import gc

    kinds = (trio.WouldBlock, BlockingIOError, trio.EndOfChannel)
    return [type(o).__name__ for o in gc.get_objects() if isinstance(o, kinds)]


async def test_a_waiting_stream_keeps_no_caught_exception_alive(
    gateway: Gateway, upstream: Upstream
) -> None:
    body = {
        "model": "demo-quiet",
        "quiet_seconds": 3,
        "stream": True,
        "messages": [{"role": "user", "content": "hello"}],
    }
    async with (
        gateway.client(ALICE_KEY) as client,
        client.stream("POST", "/v1/chat/completions", json=body) as resp,
    ):
        got = b""
        chunks = resp.aiter_raw()
        while b"for a moment" not in got:  # the upstream is quiet now: the stream waits
            got += await chunks.__anext__()
        await trio.sleep(0.2)
        alive = _caught_exceptions_alive()
        async for chunk in chunks:
            got += chunk
    assert got.rstrip().endswith(b"data: [DONE]")
    assert alive == []


async def _slow_head_upstream(
    nursery: trio.Nursery, answer: trio.Event, task_status: Any = trio.TASK_STATUS_IGNORED
) -> None:
    """An upstream that reads a whole request, then answers only once ``answer`` is set
    (its first byte "takes seconds", as a model's may)."""

    async def serve(stream: trio.SocketStream) -> None:
        async with stream:
            data = b""
            while b"\r\n\r\n" not in data:
                data += await stream.receive_some(1 << 16)
            head, _, body = data.partition(b"\r\n\r\n")
            length = int(head.lower().split(b"content-length:")[1].split(b"\r\n")[0])
            while len(body) < length:
                body += await stream.receive_some(1 << 16)
            del data, body
            await answer.wait()
            event = b'data: {"choices":[{"index":0,"delta":{"content":"ok"}}]}\n\n'
            sse = event + b"data: [DONE]\n\n"
            await stream.send_all(
                b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
                b"Content-Length: %d\r\n\r\n%s" % (len(sse), sse)
            )

    listeners = await nursery.start(trio.serve_tcp, serve, 0)
    task_status.started(listeners[0].socket.getsockname()[1])


async def test_the_parsed_request_is_not_held_while_the_upstream_thinks(
    nursery: trio.Nursery, tmp_path: Path
) -> None:
    """While the upstream's first byte is awaited (seconds, for a model; 500 requests
    waiting held all their conversations), the gateway holds the request's encoded bytes
    only: the raw body and the parsed conversation are let go. Two large objects stay,
    the encoded body and the request's bytes, kept for a retry on a fresh connection."""
    answer = trio.Event()
    port = await nursery.start(_slow_head_upstream, nursery, answer)
    gw = await start_gateway(nursery, make_config(tmp_path, f"http://127.0.0.1:{port}/v1"))
    size = 1024 * 1024
    body = {"model": "m", "stream": True, "messages": [{"role": "user", "content": "x" * size}]}
    tracemalloc.start(30)
    try:
        async with gw.client(ALICE_KEY) as client, trio.open_nursery() as inner:

            async def ask() -> None:
                async with client.stream("POST", "/v1/chat/completions", json=body) as resp:
                    assert resp.status_code == 200
                    assert (await resp.aread()).rstrip().endswith(b"data: [DONE]")

            inner.start_soon(ask)
            await trio.sleep(1.0)  # sent, and waiting for the upstream's head
            large = _alive_in_the_gateway(size // 2)
            answer.set()
    finally:
        tracemalloc.stop()
    assert len(large) <= 2, large


def _alive_in_the_gateway(at_least: int) -> list[int]:
    """The sizes of the live allocations of at least ``at_least`` bytes made while the
    gateway served."""
    snap = tracemalloc.take_snapshot()
    serving = ("gateway/http/exchange.py", "gateway/http/connection.py")
    return sorted(
        t.size
        for t in snap.traces
        if t.size >= at_least and any(f.filename.endswith(serving) for f in t.traceback)
    )
