"""The lean upstream reader (gateway/leanbody.py) over a real socket and real httpx.

A raw trio server on 127.0.0.1 writes scripted responses, each write its own segment
(so each is its own read at the client). The lean reader must give exactly the bytes
httpx's own iterator gives, one item per read, leave the connection reusable, and
raise what httpx raises when the body is cut or malformed.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from itertools import pairwise

import httpx
import pytest
import trio

from gateway.leanbody import LeanBody
from gateway.sources import SSESource
from gateway.upstream import translate

HEAD = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"


def chunk(data: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(data), data)


EVENTS = [b'data: {"n": %d, "text": "caf\xc3\xa9 \xe4\xb8\xad"}\n\n' % i for i in range(40)]
BODY = b"".join(chunk(e) for e in EVENTS) + b"0\r\n\r\n"


@dataclass
class Server:
    url: str
    connections: list[int] = field(default_factory=list)


Script = Callable[[int], list[bytes]]  # request number -> the writes of its answer


@asynccontextmanager
async def raw_server(script: Script, *, close_after: bool = False) -> AsyncIterator[Server]:
    listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
    port = listeners[0].socket.getsockname()[1]
    server = Server(f"http://127.0.0.1:{port}")
    served = [0]

    async def handle(stream: trio.SocketStream) -> None:
        server.connections.append(len(server.connections))
        buf = b""
        async with stream:
            while True:
                while b"\r\n\r\n" not in buf:
                    data = await stream.receive_some(65536)
                    if not data:
                        return
                    buf += data
                head, _, buf = buf.partition(b"\r\n\r\n")
                length = 0
                for line in head.split(b"\r\n")[1:]:
                    name, _, value = line.partition(b":")
                    if name.strip().lower() == b"content-length":
                        length = int(value)
                while len(buf) < length:
                    buf += await stream.receive_some(65536)
                buf = buf[length:]
                served[0] += 1
                try:
                    for part in script(served[0]):
                        await stream.send_all(part)
                        await trio.sleep(0.005)  # each write its own read at the client
                except trio.BrokenResourceError:
                    return  # the client left early
                if close_after:
                    return

    async with trio.open_nursery() as nursery:
        nursery.start_soon(trio.serve_listeners, handle, listeners)
        yield server
        nursery.cancel_scope.cancel()


def split(body: bytes, *cuts: int) -> list[bytes]:
    points = [0, *cuts, len(body)]
    return [body[a:b] for a, b in pairwise(points)]


async def read_all(resp: httpx.Response) -> tuple[list[bytes], bool]:
    lean = LeanBody.attach(resp)
    if lean is None:
        return [c async for c in resp.aiter_raw()], False
    return [c async for c in lean], True


# cuts inside a size line, inside data, between CR and LF, inside the last chunk
CUTS = [(3,), (1, 2, 20, 21), (len(BODY) - 3,), tuple(range(7, len(BODY), 97))]


@pytest.mark.parametrize("cuts", CUTS, ids=range(len(CUTS)))
async def test_same_bytes_as_httpx_one_item_per_read(cuts: tuple[int, ...]) -> None:
    writes = [HEAD, *split(BODY, *cuts)]
    async with raw_server(lambda n: writes) as srv, httpx.AsyncClient() as client:
        async with client.stream("GET", srv.url) as resp:
            items, lean = await read_all(resp)
        assert lean
        async with client.stream("GET", srv.url) as resp:
            resp.stream  # noqa: B018 - httpx's own iterator for the comparison
            reference = [c async for c in resp.aiter_raw()]
        assert b"".join(items) == b"".join(reference) == b"".join(EVENTS)
        assert len(items) <= len(writes)  # batched: never more items than reads
        # the lean reader left the connection in the pool, ready for the next request
        async with client.stream("GET", srv.url) as resp:
            items, lean = await read_all(resp)
        assert lean and b"".join(items) == b"".join(EVENTS)
        assert len(srv.connections) == 1


async def test_head_and_body_in_one_write() -> None:
    async with raw_server(lambda n: [HEAD + BODY]) as srv, httpx.AsyncClient() as client:
        async with client.stream("GET", srv.url) as resp:
            items, lean = await read_all(resp)
        assert lean and items == [b"".join(EVENTS)]
        r = await client.get(srv.url)  # reused, and httpx reads it as usual
        assert r.content == b"".join(EVENTS)
        assert len(srv.connections) == 1


async def test_leaving_early_closes_the_connection() -> None:
    writes = [HEAD, chunk(EVENTS[0]), chunk(EVENTS[1]), b"0\r\n\r\n"]
    async with raw_server(lambda n: writes) as srv, httpx.AsyncClient() as client:
        async with client.stream("GET", srv.url) as resp:
            lean = LeanBody.attach(resp)
            assert lean is not None
            assert await lean.__anext__() == EVENTS[0]
            await lean.aclose()
            with pytest.raises(StopAsyncIteration):
                await lean.__anext__()
        r = await client.get(srv.url)
        assert r.content == EVENTS[0] + EVENTS[1]
        assert len(srv.connections) == 2  # the half-read one was not reused


@pytest.mark.parametrize(
    "tail",
    [b"", b"5\r\nab", b"5\r\nabcde", b"5\r\nabcde\r\n"],
    ids=["between-chunks", "inside-data", "before-crlf", "before-last-chunk"],
)
async def test_a_cut_body_raises_what_httpx_raises(tail: bytes) -> None:
    writes = [HEAD, chunk(EVENTS[0]) + tail]
    async with raw_server(lambda n: writes, close_after=True) as srv:
        async with httpx.AsyncClient() as client, client.stream("GET", srv.url) as resp:
            lean = LeanBody.attach(resp)
            assert lean is not None
            got = []
            with pytest.raises(httpx.RemoteProtocolError) as info:
                async for item in lean:
                    got.append(item)
            assert b"".join(got).startswith(EVENTS[0])  # what arrived was passed on
        assert translate(info.value).code == "upstream_disconnected"
        async with httpx.AsyncClient() as client, client.stream("GET", srv.url) as resp:
            with pytest.raises(httpx.RemoteProtocolError):
                async for _ in resp.aiter_raw():
                    pass


async def test_bad_framing_raises() -> None:
    writes = [HEAD, chunk(EVENTS[0]) + b"zz\r\n"]
    async with (
        raw_server(lambda n: writes) as srv,
        httpx.AsyncClient() as client,
        client.stream("GET", srv.url) as resp,
    ):
        lean = LeanBody.attach(resp)
        assert lean is not None
        with pytest.raises(httpx.RemoteProtocolError):
            async for _ in lean:
                pass


async def test_read_timeout_is_kept() -> None:
    writes = [HEAD, chunk(EVENTS[0])]  # then silence
    async with (
        raw_server(lambda n: writes) as srv,
        httpx.AsyncClient() as client,
        client.stream("GET", srv.url, timeout=httpx.Timeout(5, read=0.2)) as resp,
    ):
        lean = LeanBody.attach(resp)
        assert lean is not None and lean._sock is None  # httpcore's read, with timeout
        assert await lean.__anext__() == EVENTS[0]
        with pytest.raises(httpx.ReadTimeout):
            await lean.__anext__()


async def test_not_applicable_keeps_httpx() -> None:
    sized = b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello"
    async with (
        raw_server(lambda n: [sized]) as srv,
        httpx.AsyncClient() as client,
        client.stream("GET", srv.url) as resp,
    ):
        assert LeanBody.attach(resp) is None  # Content-Length: httpx reads it
        assert await resp.aread() == b"hello"

    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, content=b"data: x\n\n")

    async with (
        httpx.AsyncClient(transport=httpx.MockTransport(handler)) as client,
        client.stream("GET", "http://test/") as resp,
    ):
        assert LeanBody.attach(resp) is None


async def test_sse_source_events_match_httpxs_iterator() -> None:
    writes = [HEAD, *split(BODY, 5, 50, 51, 300, 301, 302, 900)]
    async with raw_server(lambda n: writes) as srv, httpx.AsyncClient() as client:
        got = []
        for lean in (True, False):
            async with client.stream("GET", srv.url) as resp:
                if lean:
                    source = SSESource.from_response(resp, max_event_bytes=1 << 20)
                    assert isinstance(source._chunks, LeanBody)
                else:
                    source = SSESource(resp.aiter_raw(), max_event_bytes=1 << 20, response=resp)
                events = []
                while (batch := await source.read()) is not None:
                    events.extend(batch)
                await source.aclose()
                got.append(events)
        assert got[0] == got[1] and len(got[0]) == len(EVENTS)
