"""The one upstream client (gateway/clients/httpclient.py, through gateway/clients/upstream.py) over
real sockets: a scripted raw server on 127.0.0.1 writes exact bytes, each write its own
read at the client. Every answer is read the way the relay reads it
(:class:`gateway.clients.sources.SSESource`): the events, or the error (code, status,
Retry-After), whatever the framing, the splits and the order of reads."""

from __future__ import annotations

import gzip
import socket
import zlib
from typing import Any

import pytest
import trio

from gateway.clients import httpclient
from gateway.clients.httpclient import HTTPClient
from gateway.clients.sources import SSESource
from gateway.clients.upstream import Upstream
from gateway.core.errors import GatewayError
from gateway.ops.config import UpstreamConfig
from tests.upstream_server import BODY, CUTS, EVENTS, HEAD, chunk, raw_server, split

BODY_IN = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "stream": True}
DATA = [e[len(b"data: ") : -2] for e in EVENTS]


def upstream(url: str, *, first_byte: float = 5.0, **kw: Any) -> Upstream:
    cfg = UpstreamConfig(base_url=url + "/v1", first_byte_timeout_seconds=first_byte, **kw)
    return Upstream(cfg, scrub=lambda s: s.replace("/srv/secret/", ""))


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
        return (exc.code, exc.status, exc.retry_after)


async def once(writes: list[bytes], **kw: Any) -> Any:
    async with raw_server(lambda n: writes, close_after=True) as srv:
        u = upstream(srv.url, **kw)
        try:
            return await outcome(u)
        finally:
            await u.aclose()


@pytest.mark.parametrize("cuts", CUTS, ids=range(len(CUTS)))
async def test_every_split_gives_the_events_and_the_connection_is_reused(
    cuts: tuple[int, ...],
) -> None:
    writes = [HEAD, *split(BODY, *cuts)]
    async with raw_server(lambda n: writes) as srv:
        u = upstream(srv.url)
        for _ in range(3):
            assert await events_of(u) == DATA
        await u.aclose()
        assert len(srv.connections) == 1  # one keep-alive connection, reused


async def test_one_item_per_read() -> None:
    writes = [HEAD, *split(BODY, 5, 50, 51, 300, 301, 302, 900)]
    async with raw_server(lambda n: writes) as srv:
        client = HTTPClient(srv.url)
        resp = await client.open("GET", "/")
        items = [item async for item in resp]
        await resp.aclose()
        await client.aclose()
    assert b"".join(items) == b"".join(EVENTS)
    assert len(items) <= len(writes)  # batched: never more items than reads


async def test_the_request_on_the_wire() -> None:
    async with raw_server(lambda n: [HEAD + BODY]) as srv:
        u = upstream(srv.url, api_key="sk-up")
        await events_of(u)
        await u.aclose()
    head, _, body = srv.requests[0].partition(b"\r\n\r\n")
    line, *fields = head.split(b"\r\n")
    named = {k.lower(): v for k, v in (f.split(b": ", 1) for f in fields)}
    assert line == b"POST /v1/chat/completions HTTP/1.1"
    assert named[b"host"] == srv.url.split("//")[1].encode()
    assert named[b"authorization"] == b"Bearer sk-up"
    assert named[b"x-gateway-principal"] == b"principal-1"
    assert named[b"x-hermes-session-key"] == b"principal-1"  # memory scoped per principal
    assert named[b"accept"] == b"text/event-stream"
    assert named[b"content-type"] == b"application/json"
    assert int(named[b"content-length"]) == len(body)
    assert b"cookie" not in named


async def test_no_session_key_without_an_api_key() -> None:
    """The Hermes agent answers 403 to ``X-Hermes-Session-Key`` from a client without
    its API key: without one, the gateway sends none (on any route)."""
    async with raw_server(lambda n: [HEAD + BODY]) as srv:
        u = upstream(srv.url)
        await events_of(u)
        await u.aclose()
    head = srv.requests[0].partition(b"\r\n\r\n")[0].lower()
    assert b"x-gateway-principal: principal-1" in head
    assert b"x-hermes-session-key" not in head


def _sse(body: bytes, *head: bytes) -> bytes:
    return b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n%s\r\n%s" % (
        b"".join(h + b"\r\n" for h in head),
        body,
    )


_DEFLATE = zlib.compressobj(wbits=-zlib.MAX_WBITS)
RAW_DEFLATE = _DEFLATE.compress(b"".join(EVENTS)) + _DEFLATE.flush()
ALL = b"".join(EVENTS)
MODEL_ERR = b'{"error": {"message": "nope", "code": "model_not_found"}}'
ERRORS: dict[str, tuple[list[bytes], Any]] = {
    "html-200": (
        [b"HTTP/1.1 200 OK\r\nContent-Type: text/html\r\nContent-Length: 6\r\n\r\n<html>"],
        ("upstream_wrong_path", 502, None),
    ),
    "429": (
        [
            b"HTTP/1.1 429 Too Many\r\nRetry-After: 7\r\nContent-Type: application/json\r\n"
            b'Content-Length: 36\r\n\r\n{"error": {"message": "slow down."}}'
        ],
        ("upstream_rate_limited", 429, 7),
    ),
    "bad-retry-after": (
        [b"HTTP/1.1 429 Too Many\r\nRetry-After: soon\r\nContent-Length: 0\r\n\r\n"],
        ("upstream_rate_limited", 429, None),
    ),
    "500": (
        [b"HTTP/1.1 500 Oops\r\nTransfer-Encoding: chunked\r\n\r\n" + chunk(b"{}") + b"0\r\n\r\n"],
        ("upstream_error", 502, None),
    ),
    "401": ([b"HTTP/1.1 401 No\r\nContent-Length: 0\r\n\r\n"], ("upstream_auth_failed", 502, None)),
    "404-no-api": (
        [b"HTTP/1.1 404 Not Found\r\n\r\nnothing here"],
        ("upstream_wrong_path", 502, None),
    ),
    "redirect": (
        [b"HTTP/1.1 307 Moved\r\nLocation: /elsewhere\r\nContent-Length: 0\r\n\r\n"],
        ("upstream_bad_response", 502, None),
    ),
    "model-4xx": (
        [b"HTTP/1.1 400 Bad\r\nContent-Length: %d\r\n\r\n%s" % (len(MODEL_ERR), MODEL_ERR)],
        ("model_not_found", 400, None),
    ),
    "garbage-head": ([b"SMTP ready\r\n\r\n"], ("upstream_bad_response", 502, None)),
    "bad-header": (
        [b"HTTP/1.1 200 OK\r\nBad Header\r\n\r\n"],
        ("upstream_bad_response", 502, None),
    ),
    "two-lengths": (
        [b"HTTP/1.1 200 OK\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\nab"],
        ("upstream_bad_response", 502, None),
    ),
    "gzip-te": (
        [b"HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip\r\n\r\n"],
        ("upstream_bad_response", 502, None),
    ),
    "cut-in-head": ([b"HTTP/1.1 200 OK\r\nContent-Ty"], ("upstream_disconnected", 502, None)),
    "cut-in-body": ([HEAD + chunk(EVENTS[0]) + b"5\r\nab"], ("upstream_disconnected", 502, None)),
    "bad-chunk": ([HEAD + chunk(EVENTS[0]) + b"zz\r\n"], ("upstream_disconnected", 502, None)),
    "unknown-coding": (
        [_sse(b"", b"Content-Encoding: zstd-ish", b"Content-Length: 0")],
        ("upstream_bad_response", 502, None),
    ),
    "bad-gzip": (
        [_sse(b"not gzip", b"Content-Encoding: gzip", b"Content-Length: 8")],
        ("upstream_bad_response", 502, None),
    ),
    "continue-then-200": ([b"HTTP/1.1 100 Continue\r\n\r\n" + HEAD + BODY], DATA),
    "content-length-sse": ([_sse(ALL, b"Content-Length: %d" % len(ALL))], DATA),
    "close-delimited-sse": ([_sse(b"", b"Connection: close"), ALL], DATA),
    "gzip-sse": (
        [
            _sse(b"", b"Content-Encoding: gzip", b"Transfer-Encoding: chunked")
            + chunk(gzip.compress(ALL))
            + b"0\r\n\r\n"
        ],
        DATA,
    ),
    "deflate-sse": (
        [_sse(zlib.compress(ALL), b"Content-Encoding: deflate", b"Connection: close")],
        DATA,
    ),
    "raw-deflate-sse": (
        [_sse(RAW_DEFLATE, b"Content-Encoding: deflate", b"Connection: close")],
        DATA,
    ),
    "429-retry-after": (
        [b"HTTP/1.1 429 Slow\r\nRetry-After: 7\r\nContent-Length: 0\r\n\r\n"],
        ("upstream_rate_limited", 429, 7),
    ),
    "te-upper-case": ([HEAD.replace(b"chunked", b"CHUNKED") + BODY], DATA),
    "head-in-pieces": ([HEAD[:9], HEAD[9:40], HEAD[40:-1], HEAD[-1:] + BODY], DATA),
    "te-and-cl": ([HEAD.replace(b"\r\n\r\n", b"\r\nContent-Length: 3\r\n\r\n") + BODY], DATA),
    "http10-sse": (
        [b"HTTP/1.0 200 OK\r\nContent-Type: text/event-stream\r\n\r\n" + b"".join(EVENTS[:3])],
        DATA[:3],
    ),
}


@pytest.mark.parametrize("name", list(ERRORS))
async def test_every_answer(name: str) -> None:
    writes, want = ERRORS[name]
    assert await once(writes) == want


async def test_an_error_message_names_the_url_and_never_a_path() -> None:
    body = b'{"error": {"message": "no /srv/secret/a.txt"}}'
    writes = [b"HTTP/1.1 500 Oops\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body)]
    async with raw_server(lambda n: writes, close_after=True) as srv:
        u = upstream(srv.url)
        with pytest.raises(GatewayError) as info:
            await events_of(u)
        await u.aclose()
    assert "a.txt" in info.value.message and "/srv/secret" not in info.value.message
    assert f"{srv.url}/v1/chat/completions" in info.value.message


async def test_a_compression_bomb_is_decoded_in_bounded_steps() -> None:
    bomb = gzip.compress(b"data: " + b"x" * (8 << 20) + b"\n\n")
    writes = [_sse(bomb, b"Content-Encoding: gzip", b"Content-Length: %d" % len(bomb))]
    async with raw_server(lambda n: writes) as srv:
        client = HTTPClient(srv.url)
        resp = await client.open("GET", "/")
        sizes = [len(item) async for item in resp]
        await resp.aclose()
        await client.aclose()
    assert sum(sizes) == 8 * (1 << 20) + 8
    assert max(sizes) <= httpclient.MAX_DECODED


async def test_silence_is_a_timeout() -> None:
    async def silent(stream: trio.SocketStream) -> None:
        await trio.sleep_forever()

    listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
    port = listeners[0].socket.getsockname()[1]
    async with trio.open_nursery() as nursery:
        nursery.start_soon(trio.serve_listeners, silent, listeners)
        got = await outcome(upstream(f"http://127.0.0.1:{port}", first_byte=0.2))
        nursery.cancel_scope.cancel()
    assert got == ("upstream_timeout", 504, None)


async def test_a_body_that_stops_is_an_idle_timeout_for_a_whole_read() -> None:
    async with raw_server(lambda n: [HEAD, chunk(EVENTS[0])]) as srv:
        client = HTTPClient(srv.url)
        resp = await client.open("GET", "/")
        with pytest.raises(GatewayError) as info:
            await resp.read(1 << 20, idle_timeout=0.2)
        await resp.aclose()
        await client.aclose()
    assert info.value.code == "upstream_timeout" and info.value.status == 504


async def test_leaving_early_or_a_server_that_closes_never_reuses() -> None:
    writes = [HEAD, chunk(EVENTS[0]), chunk(EVENTS[1]), b"0\r\n\r\n"]
    async with raw_server(lambda n: writes) as srv:
        u = upstream(srv.url)
        resp = await u.open_chat_stream(BODY_IN, "p")
        assert await resp.receive_some() == EVENTS[0]
        await resp.aclose()  # left early: that connection is closed
        assert await events_of(u) == DATA[:2]
        assert len(srv.connections) == 2
        assert await events_of(u)
        assert len(srv.connections) == 2  # the one read to the end was reused
        await u.aclose()
    async with raw_server(lambda n: [HEAD + BODY], close_after=True) as srv:
        u = upstream(srv.url)
        for _ in range(3):  # a pooled connection the server closed: a fresh one each time
            assert await events_of(u) == DATA  # (retried if it crossed the FIN)
        for _ in range(2):
            await trio.sleep(0.05)  # the FIN arrived before the reuse: not reused
            assert await events_of(u) == DATA
        assert len(srv.connections) == 5
        await u.aclose()


async def test_cancelled_while_waiting_closes_the_connection() -> None:
    async with raw_server(lambda n: [HEAD, chunk(EVENTS[0])]) as srv:
        u = upstream(srv.url)
        resp = await u.open_chat_stream(BODY_IN, "p")
        with trio.move_on_after(0.1):
            while await resp.receive_some():
                pass
        await resp.aclose()
        assert await once([HEAD + BODY]) == DATA
        await u.aclose()
        writes_after = len(srv.connections)
    assert writes_after == 1


async def test_a_body_left_at_its_last_event_is_finished_if_already_here() -> None:
    # a relay stops reading at [DONE]; the chunked body's end is usually in the socket
    writes = [HEAD, chunk(EVENTS[0]), b"0\r\n\r\n"]
    async with raw_server(lambda n: writes) as srv:
        u = upstream(srv.url)
        for _ in range(2):
            resp = await u.open_chat_stream(BODY_IN, "p")
            assert await resp.receive_some() == EVENTS[0]
            await trio.sleep(0.05)  # the last chunk arrived meanwhile
            await resp.aclose()
        assert len(srv.connections) == 1  # finished without waiting, and reused
        resp = await u.open_chat_stream(BODY_IN, "p")
        assert await resp.receive_some() == EVENTS[0]
        await resp.aclose()  # the end is not here yet: never waited for, closed
        await events_of(u, "p")
        assert len(srv.connections) == 2
        await u.aclose()


async def events_nowait_first(u: Upstream) -> Any:
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
                except trio.WouldBlock:
                    batch = await source.read()
                if batch is None:
                    return out
                out.extend(e.data.encode() for e in batch)
        finally:
            await source.aclose()
    except GatewayError as exc:
        return (exc.code, exc.status, exc.retry_after)


@pytest.mark.parametrize("name", [*ERRORS, *(f"cuts-{i}" for i in range(len(CUTS)))])
async def test_read_nowait_first_gives_what_read_gives(name: str) -> None:
    if name.startswith("cuts-"):
        writes, want = [HEAD, *split(BODY, *CUTS[int(name[5:])])], DATA
    else:
        writes, want = ERRORS[name]
    async with raw_server(lambda n: writes, close_after=True) as srv:
        u = upstream(srv.url)
        try:
            assert await events_nowait_first(u) == want, name
        finally:
            await u.aclose()


async def test_an_answer_that_came_with_its_head_is_read_without_waiting() -> None:
    for writes in ([HEAD + BODY], ERRORS["gzip-sse"][0]):
        async with raw_server(lambda n, w=writes: w) as srv:  # type: ignore[misc]
            u = upstream(srv.url)
            try:
                resp = await u.open_chat_stream(BODY_IN, "principal-1")
                source = SSESource.from_response(resp, max_event_bytes=1 << 20)
                assert source.pull_safe  # a plain socket, decoded or not
                try:
                    got: list[bytes] = []
                    while (batch := source.read_nowait()) is not None:  # never WouldBlock
                        got.extend(e.data.encode() for e in batch)
                finally:
                    await source.aclose()
                assert got == DATA
                assert await events_of(u) == DATA
                assert len(srv.connections) == 1  # read to its end: reused
            finally:
                await u.aclose()


async def test_close_nowait_recycles_only_a_body_read_to_its_end() -> None:
    async with raw_server(lambda n: [HEAD + BODY]) as srv:
        u = upstream(srv.url)
        try:
            whole = await u.open_chat_stream(BODY_IN, "principal-1")
            assert whole.close_nowait() and whole.is_closed  # the rest was here: recycled
            assert whole.close_nowait()  # and again: nothing to do
        finally:
            await u.aclose()
    async with raw_server(lambda n: [HEAD, BODY]) as srv:  # the body comes later
        u = upstream(srv.url)
        try:
            early = await u.open_chat_stream(BODY_IN, "principal-1")
            if not early.close_nowait():  # the body was not here yet: the usual close
                assert not early.is_closed
                await early.aclose()
            assert early.is_closed
        finally:
            await u.aclose()


async def test_bytes_waiting_in_the_socket_are_taken_without_waiting() -> None:
    async with raw_server(lambda n: [HEAD, BODY]) as srv:  # the body is a later write
        u = upstream(srv.url)
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
            assert got == DATA
        finally:
            await u.aclose()


async def test_a_connection_is_reused_only_for_the_principal_it_served() -> None:
    """Bytes an upstream sends after a complete answer, arriving once the next request
    is on its way, would be read as that request's answer: never another user's."""
    async with raw_server(lambda n: [HEAD + BODY]) as srv:
        u = upstream(srv.url)
        try:
            for who in ("alice", "bob", "alice", "bob", "alice"):
                assert await events_of(u, who)
            assert len(srv.connections) == 2  # one each, each reused by its own only
        finally:
            await u.aclose()


async def test_idle_connections_are_bounded_for_all_principals_together() -> None:
    async with raw_server(lambda n: [HEAD + BODY]) as srv:
        u = upstream(srv.url)
        u.http.max_idle = 2
        try:
            for who in ("p1", "p2", "p3"):
                await events_of(u, who)
            await events_of(u, "p1")  # p1's, the oldest, was closed: a new one
            assert len(srv.connections) == 4
            await events_of(u, "p3")  # kept: reused
            assert len(srv.connections) == 4
        finally:
            await u.aclose()


async def test_bytes_there_in_a_row_yield_every_quick_reads(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A read that finds bytes there takes no scheduler round, so an upstream that never
    pauses could starve every other task: every QUICK_READS such reads yield once."""
    monkeypatch.setattr(httpclient, "READ_BYTES", 1)  # a read per byte, all there
    body = b"x" * 40
    writes = [b"HTTP/1.1 200 OK\r\nConnection: close\r\n\r\n" + body]
    ran = [0]

    async def other() -> None:
        while True:
            ran[0] += 1
            await trio.lowlevel.checkpoint()

    async with raw_server(lambda n: writes) as srv:
        client = HTTPClient(srv.url)
        resp = await client.open("GET", "/")
        await trio.sleep(0.05)  # the whole body is in the socket
        async with trio.open_nursery() as nursery:
            nursery.start_soon(other)
            await trio.lowlevel.checkpoint()
            before = ran[0]
            for _ in range(4 * httpclient.QUICK_READS):
                assert await resp.receive_some() == b"x"
            assert ran[0] - before >= 2  # it ran while the bytes were read
            nursery.cancel_scope.cancel()
        await resp.aclose()
        await client.aclose()


async def test_a_read_cancelled_while_it_waits_loses_nothing() -> None:
    async with raw_server(lambda n: [HEAD, *split(BODY, *range(7, len(BODY), 37))]) as srv:
        u = upstream(srv.url)
        try:
            resp = await u.open_chat_stream(BODY_IN, "principal-1")
            source = SSESource.from_response(resp, max_event_bytes=1 << 20)
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
            assert cancelled > 5
            assert got == DATA
        finally:
            await u.aclose()


async def test_an_interrupted_read_loses_nothing_and_the_next_one_waits_again() -> None:
    async with raw_server(lambda n: [HEAD, *split(BODY, *range(7, len(BODY), 37))]) as srv:
        u = upstream(srv.url)
        try:
            resp = await u.open_chat_stream(BODY_IN, "principal-1")
            source = SSESource.from_response(resp, max_event_bytes=1 << 20)
            assert source.pull_safe
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
            assert got == DATA
        finally:
            await u.aclose()


@pytest.mark.parametrize(
    "pieces", [1, 4, len(HEAD)], ids=["silent-after-head-start", "4", "bytewise"]
)
async def test_the_first_byte_bound_holds_for_a_head_that_trickles(pieces: int) -> None:
    from gateway.stream.clock import clock

    partial = HEAD[:-1]  # never whole
    size = max(1, len(partial) // pieces)
    parts = [partial[i : i + size] for i in range(0, len(partial), size)]

    async def script_server(stream: trio.SocketStream) -> None:
        await stream.receive_some(65536)
        for part in parts:
            await stream.send_all(part)
            await trio.sleep(0.03)  # the bound passes mid-way
        await trio.sleep_forever()

    listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
    port = listeners[0].socket.getsockname()[1]
    async with trio.open_nursery() as nursery:
        nursery.start_soon(trio.serve_listeners, script_server, listeners)
        u = upstream(f"http://127.0.0.1:{port}", first_byte=0.25)
        started = trio.current_time()
        try:
            got = await outcome(u)
        finally:
            await u.aclose()
        took = trio.current_time() - started
        nursery.cancel_scope.cancel()
    assert got == ("upstream_timeout", 504, None)
    assert 0.24 <= took < 0.6, took
    stats = clock().statistics()
    assert stats["entries"] == stats["dead"], stats  # the head's timer was cancelled


async def test_a_head_just_in_time_and_its_body_read_after_it() -> None:
    async with raw_server(lambda n: [HEAD, *split(BODY, 50, 500)]) as srv:
        u = upstream(srv.url, first_byte=0.05)
        try:
            assert await events_of(u) == DATA
        finally:
            await u.aclose()


def test_headers_that_cannot_be_sent_as_they_are_are_refused() -> None:
    with pytest.raises(ValueError):
        HTTPClient("http://127.0.0.1:9/v1", headers=[("Authorization", "Bearer a\r\nX: y")])
    client = HTTPClient("http://127.0.0.1:9/v1")
    for path in ("v1", "/a b", "/a\r\nX: y"):
        with pytest.raises(ValueError):
            client.request_bytes("GET", path, [], b"")


async def test_a_refused_port() -> None:
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    assert await outcome(upstream(f"http://127.0.0.1:{port}")) == ("upstream_refused", 502, None)
