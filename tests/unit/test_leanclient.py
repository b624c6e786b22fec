"""The lean streaming client (gateway/leanclient.py) against httpx, over a real socket.

The same scripted raw server as tests/unit/test_leanbody.py. Every answer is opened
twice through :meth:`gateway.upstream.Upstream.open_chat_stream`: once by the lean
client, once by httpx (the lean pool switched off); both must give the same events or
the same error (code, status, message, Retry-After).
"""

from __future__ import annotations

import gzip
import socket
from typing import Any

import httpx
import pytest
import trio

from gateway.config import UpstreamConfig
from gateway.errors import GatewayError
from gateway.h1lean import ResponseHead
from gateway.leanclient import LeanResponse
from gateway.sources import SSESource
from gateway.upstream import Upstream
from tests.unit.test_leanbody import BODY, CUTS, EVENTS, HEAD, chunk, raw_server, split

BODY_IN = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "stream": True}


def upstream(url: str, *, lean: bool, first_byte: float = 5.0, **kw: Any) -> Upstream:
    cfg = UpstreamConfig(base_url=url + "/v1", first_byte_timeout_seconds=first_byte, **kw)
    u = Upstream(cfg, scrub=lambda s: s.replace("/srv/secret/", ""))
    if lean:
        assert u._lean is not None
    else:
        u._lean = None
    return u


async def events_of(u: Upstream, principal: str = "principal-1") -> list[bytes]:
    resp = await u.open_chat_stream(BODY_IN, principal)
    source = SSESource.from_response(resp, max_event_bytes=1 << 20)
    out: list[bytes] = []
    try:
        while (batch := await source.read()) is not None:
            out.extend(e.data.encode() for e in batch)
    finally:
        await source.aclose()
    return out


async def outcome(u: Upstream) -> Any:
    try:
        return await events_of(u)
    except GatewayError as exc:
        return (exc.code, exc.status, str(exc), exc.retry_after)


async def both(url: str, **kw: Any) -> tuple[Any, Any]:
    lean, plain = upstream(url, lean=True, **kw), upstream(url, lean=False, **kw)
    try:
        return await outcome(lean), await outcome(plain)
    finally:
        await lean.aclose()
        await plain.aclose()


@pytest.mark.parametrize("cuts", CUTS, ids=range(len(CUTS)))
async def test_same_events_as_httpx_and_the_connection_is_reused(cuts: tuple[int, ...]) -> None:
    writes = [HEAD, *split(BODY, *cuts)]
    async with raw_server(lambda n: writes) as srv:
        got, ref = await both(srv.url)
        assert got == ref and len(got) == len(EVENTS)
        u = upstream(srv.url, lean=True)
        before = len(srv.connections)
        for _ in range(3):
            assert await events_of(u) == ref
        await u.aclose()
        assert len(srv.connections) == before + 1  # one keep-alive connection, reused


async def test_the_request_is_what_httpx_sends() -> None:
    seen: list[bytes] = []
    listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
    port = listeners[0].socket.getsockname()[1]

    async def handle(stream: trio.SocketStream) -> None:
        buf = b""
        while b"\r\n\r\n" not in buf or not buf.endswith(b"}"):
            buf += await stream.receive_some(65536)
        seen.append(buf)
        await stream.send_all(HEAD + BODY)
        await stream.aclose()

    async with trio.open_nursery() as nursery:
        nursery.start_soon(trio.serve_listeners, handle, listeners)
        await both(f"http://127.0.0.1:{port}", api_key="sk-up")
        nursery.cancel_scope.cancel()

    def parsed(raw: bytes) -> tuple[bytes, dict[bytes, bytes], bytes]:
        head, _, body = raw.partition(b"\r\n\r\n")
        line, *fields = head.split(b"\r\n")
        pairs = (f.split(b": ", 1) for f in fields)
        return line, {k.lower(): v for k, v in pairs}, body

    lean, plain = parsed(seen[0]), parsed(seen[1])
    assert lean == plain
    assert lean[1][b"authorization"] == b"Bearer sk-up"
    assert lean[1][b"x-gateway-principal"] == b"principal-1"
    assert b"cookie" not in lean[1]


ERRORS = {
    "html-200": [b"HTTP/1.1 200 OK\r\nContent-Type: text/html\r\nContent-Length: 6\r\n\r\n<html>"],
    "429": [
        b"HTTP/1.1 429 Too Many\r\nRetry-After: 7\r\nContent-Type: application/json\r\n"
        b'Content-Length: 36\r\n\r\n{"error": {"message": "slow down."}}'
    ],
    "bad-retry-after": [b"HTTP/1.1 429 Too Many\r\nRetry-After: soon\r\nContent-Length: 0\r\n\r\n"],
    "500-scrubbed": [
        b"HTTP/1.1 500 Oops\r\nTransfer-Encoding: chunked\r\n\r\n"
        + chunk(b'{"error": {"message": "no /srv/secret/a.txt"}}')
        + b"0\r\n\r\n"
    ],
    "401": [b"HTTP/1.1 401 No\r\nContent-Length: 0\r\n\r\n"],
    "404-no-api": [b"HTTP/1.1 404 Not Found\r\n\r\nnothing here"],
    "redirect": [b"HTTP/1.1 307 Moved\r\nLocation: /elsewhere\r\nContent-Length: 0\r\n\r\n"],
    "model-4xx": [
        b"HTTP/1.1 400 Bad\r\nContent-Length: 55\r\n\r\n"
        b'{"error": {"message": "nope", "code": "model_not_found"}}'[:55]
    ],
    "garbage-head": [b"SMTP ready\r\n\r\n"],
    "bad-header": [b"HTTP/1.1 200 OK\r\nBad Header\r\n\r\n"],
    "two-lengths": [b"HTTP/1.1 200 OK\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\nab"],
    "gzip-te": [b"HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip\r\n\r\n"],
    "cut-in-head": [b"HTTP/1.1 200 OK\r\nContent-Ty"],
    "cut-in-body": [HEAD + chunk(EVENTS[0]) + b"5\r\nab"],
    "bad-chunk": [HEAD + chunk(EVENTS[0]) + b"zz\r\n"],
    "continue-then-200": [b"HTTP/1.1 100 Continue\r\n\r\n" + HEAD + BODY],
    "content-length-sse": [
        b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nContent-Length: %d\r\n\r\n%s"
        % (len(b"".join(EVENTS)), b"".join(EVENTS))
    ],
    "close-delimited-sse": [
        b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nConnection: close\r\n\r\n",
        b"".join(EVENTS),
    ],
    "gzip-sse": [
        b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nContent-Encoding: gzip\r\n"
        b"Transfer-Encoding: chunked\r\n\r\n"
        + chunk(gzip.compress(b"".join(EVENTS)))
        + b"0\r\n\r\n"
    ],
    # read without h11 (whole in the first read), and by h11 (in pieces, TE with CL)
    "429-retry-after": [b"HTTP/1.1 429 Slow\r\nRetry-After: 7\r\nContent-Length: 0\r\n\r\n"],
    "te-upper-case": [HEAD.replace(b"chunked", b"CHUNKED") + BODY],
    "head-in-pieces": [HEAD[:9], HEAD[9:40], HEAD[40:-1], HEAD[-1:] + BODY],
    "te-and-cl": [HEAD.replace(b"\r\n\r\n", b"\r\nContent-Length: 3\r\n\r\n") + BODY],
    "http10-sse": [
        b"HTTP/1.0 200 OK\r\nContent-Type: text/event-stream\r\n\r\n" + b"".join(EVENTS[:3])
    ],
}


@pytest.mark.parametrize("name", list(ERRORS))
async def test_every_answer_as_httpx(name: str) -> None:
    async with raw_server(lambda n: ERRORS[name], close_after=True) as srv:
        got, ref = await both(srv.url)
    assert got == ref, name
    if isinstance(ref, list):
        assert ref, name
    else:
        assert ref[0].startswith("upstream_") or ref[0] == "model_not_found", ref


async def test_connect_errors_and_silence_as_httpx() -> None:
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    got, ref = await both(f"http://127.0.0.1:{port}")
    assert got == ref and got[0] == "upstream_unreachable"

    async def silent(stream: trio.SocketStream) -> None:
        await trio.sleep_forever()

    listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
    port = listeners[0].socket.getsockname()[1]
    async with trio.open_nursery() as nursery:
        nursery.start_soon(trio.serve_listeners, silent, listeners)
        got, ref = await both(f"http://127.0.0.1:{port}", first_byte=0.2)
        nursery.cancel_scope.cancel()
    assert got == ref and got[0] == "upstream_timeout" and got[1] == 504


async def test_leaving_early_or_a_server_that_closes_never_reuses() -> None:
    writes = [HEAD, chunk(EVENTS[0]), chunk(EVENTS[1]), b"0\r\n\r\n"]
    async with raw_server(lambda n: writes) as srv:
        u = upstream(srv.url, lean=True)
        resp = await u.open_chat_stream(BODY_IN, "p")
        assert isinstance(resp, LeanResponse)
        assert await resp.__anext__() == EVENTS[0]
        await resp.aclose()  # left early: that connection is closed
        assert await events_of(u) == [e.strip().removeprefix(b"data: ") for e in EVENTS[:2]]
        assert len(srv.connections) == 2
        assert await events_of(u)
        assert len(srv.connections) == 2  # the one read to the end was reused
        await u.aclose()
    async with raw_server(lambda n: [HEAD + BODY], close_after=True) as srv:
        u = upstream(srv.url, lean=True)
        for _ in range(3):  # a pooled connection the server closed: a fresh one each time
            assert len(await events_of(u)) == len(EVENTS)  # (retried if it crossed the FIN)
        for _ in range(2):
            await trio.sleep(0.05)  # the FIN arrived before the reuse: not reused
            assert len(await events_of(u)) == len(EVENTS)
        assert len(srv.connections) == 5
        await u.aclose()


async def test_cancelled_while_waiting_closes_the_connection() -> None:
    async with raw_server(lambda n: [HEAD, chunk(EVENTS[0])]) as srv:
        u = upstream(srv.url, lean=True)
        resp = await u.open_chat_stream(BODY_IN, "p")
        assert isinstance(resp, LeanResponse)
        with trio.move_on_after(0.1):
            async for _ in resp:
                pass
        await resp.aclose()
        assert not u._lean._idle  # type: ignore[union-attr]
        await u.aclose()


def test_lean_only_where_httpx_would_do_nothing_more(monkeypatch: pytest.MonkeyPatch) -> None:
    assert upstream("http://127.0.0.1:9", lean=True)._lean is not None
    u = Upstream(UpstreamConfig(base_url="https://example.com/v1"))
    assert u._lean is None
    u = Upstream(
        UpstreamConfig(base_url="http://127.0.0.1:9/v1"),
        transport=httpx.MockTransport(lambda r: httpx.Response(200)),
    )
    assert u._lean is None
    monkeypatch.setenv("HTTP_PROXY", "http://proxy.invalid:3128")
    u = Upstream(UpstreamConfig(base_url="http://model.example:8000/v1"))
    assert u._lean is None


async def test_a_body_left_at_its_last_event_is_finished_if_already_here() -> None:
    # a relay stops reading at [DONE]; the chunked body's end is usually in the socket
    writes = [HEAD, chunk(EVENTS[0]), b"0\r\n\r\n"]
    async with raw_server(lambda n: writes) as srv:
        u = upstream(srv.url, lean=True)
        for _ in range(2):
            resp = await u.open_chat_stream(BODY_IN, "p")
            assert isinstance(resp, LeanResponse)
            assert await resp.__anext__() == EVENTS[0]
            await trio.sleep(0.05)  # the last chunk arrived meanwhile
            await resp.aclose()
        assert len(srv.connections) == 1  # finished without waiting, and reused
        resp = await u.open_chat_stream(BODY_IN, "p")
        assert isinstance(resp, LeanResponse)
        assert await resp.__anext__() == EVENTS[0]
        await resp.aclose()  # the end is not here yet: never waited for, closed
        assert not u._lean._idle  # type: ignore[union-attr]
        await u.aclose()


async def events_nowait_first(u: Upstream, taken: list[int] | None = None) -> Any:
    """As :func:`outcome`, but every read tries ``read_nowait`` first (the relay's
    inline start does): the same events or the same error must come out."""
    try:
        resp = await u.open_chat_stream(BODY_IN, "principal-1")
        source = SSESource.from_response(resp, max_event_bytes=1 << 20)
        out: list[bytes] = []
        try:
            while True:
                try:
                    batch = source.read_nowait()
                    if taken is not None:
                        taken.append(1)
                except trio.WouldBlock:
                    batch = await source.read()
                if batch is None:
                    return out
                out.extend(e.data.encode() for e in batch)
        finally:
            await source.aclose()
    except GatewayError as exc:
        return (exc.code, exc.status, str(exc), exc.retry_after)


@pytest.mark.parametrize("name", [*ERRORS, *(f"cuts-{i}" for i in range(len(CUTS)))])
async def test_read_nowait_first_gives_what_read_gives(name: str) -> None:
    if name.startswith("cuts-"):
        writes = [HEAD, *split(BODY, *CUTS[int(name[5:])])]
    else:
        writes = ERRORS[name]
    async with raw_server(lambda n: writes, close_after=True) as srv:
        u = upstream(srv.url, lean=True)
        try:
            assert await events_nowait_first(u) == await outcome(u), name
        finally:
            await u.aclose()


async def test_an_answer_that_came_with_its_head_is_read_without_waiting() -> None:
    async with raw_server(lambda n: [HEAD + BODY]) as srv:
        u = upstream(srv.url, lean=True)
        try:
            resp = await u.open_chat_stream(BODY_IN, "principal-1")
            source = SSESource.from_response(resp, max_event_bytes=1 << 20)
            try:
                got: list[bytes] = []
                while (batch := source.read_nowait()) is not None:  # never WouldBlock
                    got.extend(e.data.encode() for e in batch)
            finally:
                await source.aclose()
            assert got == await events_of(u)
            assert len(srv.connections) == 1  # read to its end: the connection was reused
        finally:
            await u.aclose()


async def test_a_gzip_body_is_never_read_without_waiting() -> None:
    writes = ERRORS["gzip-sse"]
    async with raw_server(lambda n: writes, close_after=True) as srv:
        u = upstream(srv.url, lean=True)
        try:
            taken: list[int] = []
            assert await events_nowait_first(u, taken) == await outcome(u)
            assert taken == []  # decoded by httpx's decoders: the waiting path only
        finally:
            await u.aclose()


async def test_close_nowait_recycles_only_a_body_read_to_its_end() -> None:
    async with raw_server(lambda n: [HEAD + BODY]) as srv:
        u = upstream(srv.url, lean=True)
        try:
            whole = await u.open_chat_stream(BODY_IN, "principal-1")
            assert isinstance(whole, LeanResponse)
            assert whole.close_nowait() and whole.is_closed  # the rest was here: recycled
            assert whole.close_nowait()  # and again: nothing to do
        finally:
            await u.aclose()
    async with raw_server(lambda n: [HEAD, BODY]) as srv:  # the body comes later
        u = upstream(srv.url, lean=True)
        try:
            early = await u.open_chat_stream(BODY_IN, "principal-1")
            assert isinstance(early, LeanResponse)
            if not early.close_nowait():  # the body was not here yet: the usual close
                assert not early.is_closed
                await early.aclose()
            assert early.is_closed
        finally:
            await u.aclose()


async def test_bytes_waiting_in_the_socket_are_taken_without_waiting() -> None:
    async with raw_server(lambda n: [HEAD, BODY]) as srv:  # the body is a later write
        u = upstream(srv.url, lean=True)
        try:
            resp = await u.open_chat_stream(BODY_IN, "principal-1")
            source = SSESource.from_response(resp, max_event_bytes=1 << 20)
            try:
                await trio.sleep(0.2)  # the body has arrived by now, unread
                got: list[bytes] = []
                while (batch := source.read_nowait()) is not None:  # one recv, no wait
                    got.extend(e.data.encode() for e in batch)
            finally:
                await source.aclose()
            assert got and got == await events_of(u)
        finally:
            await u.aclose()


async def test_a_connection_is_reused_only_for_the_principal_it_served() -> None:
    """Bytes an upstream sends after a complete answer, arriving once the next request
    is on its way, would be read as that request's answer: never another user's."""
    async with raw_server(lambda n: [HEAD + BODY]) as srv:
        u = upstream(srv.url, lean=True)
        try:
            for who in ("alice", "bob", "alice", "bob", "alice"):
                assert await events_of(u, who)
            assert len(srv.connections) == 2  # one each, each reused by its own only
        finally:
            await u.aclose()


async def test_idle_connections_are_bounded_for_all_principals_together() -> None:
    async with raw_server(lambda n: [HEAD + BODY]) as srv:
        u = upstream(srv.url, lean=True)
        pool = u._lean
        assert pool is not None
        pool.max_idle = 2
        try:
            for who in ("p1", "p2", "p3"):
                await events_of(u, who)
            assert [k for k, _, _ in pool._idle] == ["p2", "p3"]  # p1's, the oldest, went
            await events_of(u, "p1")  # its connection was closed: a new one
            assert len(srv.connections) == 4
            await events_of(u, "p3")  # kept: reused
            assert len(srv.connections) == 4
        finally:
            await u.aclose()
        assert pool._idle == []


def _close_delimited(stream: trio.SocketStream) -> LeanResponse:
    head = ResponseHead(200, [], chunked=False, length=-1, keep_alive=False, size=0)
    return LeanResponse(None, stream, head, b"")  # type: ignore[arg-type]


async def test_bytes_there_in_a_row_yield_every_quick_reads(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A read that finds bytes there takes no scheduler round, so an upstream that never
    pauses could starve every other task: every QUICK_READS such reads yield once."""
    from gateway import leanclient

    monkeypatch.setattr(leanclient, "READ_BYTES", 1)  # a read per byte, all there
    a, b = socket.socketpair()
    b.sendall(b"x" * 40)
    resp = _close_delimited(trio.SocketStream(trio.socket.from_stdlib_socket(a)))
    ran = [0]

    async def other() -> None:
        while True:
            ran[0] += 1
            await trio.lowlevel.checkpoint()

    try:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(other)
            await trio.lowlevel.checkpoint()
            before = ran[0]
            for _ in range(4 * leanclient.QUICK_READS):
                assert await resp.__anext__() == b"x"
            assert ran[0] - before >= 2  # it ran while the bytes were read (3 yields)
            nursery.cancel_scope.cancel()
    finally:
        b.close()
        await resp._stream.aclose()


async def _pulled_source(u: Upstream) -> SSESource:
    """The body of a chat answer as the relay reads it in pull mode."""
    resp = await u.open_chat_stream(BODY_IN, "principal-1")
    source = SSESource.from_response(resp, max_event_bytes=1 << 20)
    assert source.pull_safe
    return source


async def test_a_read_cancelled_while_it_waits_loses_nothing() -> None:
    """The relay reads a pull-safe source in the consumer and cancels a read that waits
    (a keep-alive, a stop): the next read goes on where it was, no byte lost."""
    async with raw_server(lambda n: [HEAD, *split(BODY, *range(7, len(BODY), 37))]) as srv:
        u = upstream(srv.url, lean=True)
        try:
            source = await _pulled_source(u)
            got: list[bytes] = []
            cancelled = 0
            try:
                while True:
                    batch: Any = False
                    with trio.move_on_after(0.002) as scope:
                        batch = await source.read()
                    if scope.cancelled_caught:
                        cancelled += 1
                        continue
                    if batch is None:
                        break
                    got.extend(e.data.encode() for e in batch)
            finally:
                await source.aclose()
            assert cancelled > 5  # many reads were cancelled while they waited
            assert got == await events_of(u)
        finally:
            await u.aclose()


async def test_a_gzip_or_httpx_source_is_not_pull_safe() -> None:
    async with raw_server(lambda n: ERRORS["gzip-sse"], close_after=True) as srv:
        u = upstream(srv.url, lean=True)
        try:
            resp = await u.open_chat_stream(BODY_IN, "principal-1")
            source = SSESource.from_response(resp, max_event_bytes=1 << 20)
            assert not source.pull_safe  # httpx's decoders: an async generator
            await source.aclose()
        finally:
            await u.aclose()
    async with raw_server(lambda n: [HEAD + BODY]) as srv:
        u = upstream(srv.url, lean=False)
        try:
            resp = await u.open_chat_stream(BODY_IN, "principal-1")
            source = SSESource.from_response(resp, max_event_bytes=1 << 20)
            assert not source.pull_safe
            await source.aclose()
        finally:
            await u.aclose()


async def test_an_interrupted_read_loses_nothing_and_the_next_one_waits_again() -> None:
    """interrupt() wakes a waiting body read (WouldBlock, nothing taken), however often,
    also when it lands while no read waits; later reads wait for bytes as before."""
    async with raw_server(lambda n: [HEAD, *split(BODY, *range(7, len(BODY), 37))]) as srv:
        u = upstream(srv.url, lean=True)
        try:
            source = await _pulled_source(u)
            got: list[bytes] = []
            woken = [0]

            async def interrupter() -> None:
                for _ in range(10):  # then the reads go on without: they must still wake
                    await trio.sleep(0.0015)
                    source.interrupt()

            try:
                async with trio.open_nursery() as nursery:
                    nursery.start_soon(interrupter)
                    while True:
                        try:
                            batch = await source.read()
                        except trio.WouldBlock:
                            woken[0] += 1
                            continue
                        if batch is None:
                            break
                        got.extend(e.data.encode() for e in batch)
            finally:
                await source.aclose()
            assert woken[0] >= 3
            assert got == await events_of(u)
        finally:
            await u.aclose()


@pytest.mark.parametrize(
    "pieces", [1, 4, len(HEAD)], ids=["silent-after-head-start", "4", "bytewise"]
)
async def test_the_first_byte_bound_holds_for_a_head_that_trickles(pieces: int) -> None:
    """The answer's head must be whole by ``first_byte_timeout_seconds`` (one bound
    for all its reads, kept by the stream clock): a head that keeps trickling, or that
    stops half-way, ends in ``upstream_timeout`` at that moment; the clock keeps no
    entry for it afterwards."""
    from gateway.streamclock import clock

    partial = HEAD[:-1]  # never whole
    size = max(1, len(partial) // pieces)
    parts = [partial[i : i + size] for i in range(0, len(partial), size)]
    writes = [*(p for part in parts for p in (part, b"")), b""]

    async def script_server(stream: trio.SocketStream) -> None:
        await stream.receive_some(65536)
        for part in writes:
            if part:
                await stream.send_all(part)
            await trio.sleep(0.03)  # 30 ms apart: the bound passes mid-way
        await trio.sleep_forever()

    listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
    port = listeners[0].socket.getsockname()[1]
    async with trio.open_nursery() as nursery:
        nursery.start_soon(trio.serve_listeners, script_server, listeners)
        u = upstream(f"http://127.0.0.1:{port}", lean=True, first_byte=0.25)
        started = trio.current_time()
        try:
            got = await outcome(u)
        finally:
            await u.aclose()
        took = trio.current_time() - started
        nursery.cancel_scope.cancel()
    assert got[0] == "upstream_timeout" and got[1] == 504
    assert 0.24 <= took < 0.6, took
    stats = clock().statistics()
    assert stats["entries"] == stats["dead"], stats  # the head's timer was cancelled


async def test_a_head_just_in_time_and_its_body_read_after_it() -> None:
    """A head that comes right before its bound is read, and the body's reads (which
    wait on the same socket the clock may have woken) go on as usual."""
    async with raw_server(lambda n: [HEAD, *split(BODY, 50, 500)]) as srv:
        u = upstream(srv.url, lean=True, first_byte=0.05)
        try:
            assert await events_of(u) == [e[len(b"data: ") : -2] for e in EVENTS]
        finally:
            await u.aclose()
