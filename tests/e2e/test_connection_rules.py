"""The connection handler's rules that only a live socket shows (gateway.http.connection),
in-process with short limits: fairness against a flood, a long answer outliving the
header deadline, slow and stalled readers, the stop with a write blocked, and a
thousand connections arriving at once."""

from __future__ import annotations

import selectors
import socket
import time
from collections.abc import AsyncIterator
from functools import partial
from typing import Any

import pytest
import trio
import trio.testing
from hypercorn.config import Config
from quart import request
from quart_trio import QuartTrio

from gateway.http import connection
from gateway.http.connection import QUICK_READS, Connection, ConnectionPolicy, Server
from gateway.http.serve import serve_app
from tests.e2e.hostile import Case, run_case
from tests.e2e.test_hostile_http import wait_until
from tests.helpers import tick_forever

HEALTH = b"GET /health HTTP/1.1\r\nHost: h\r\n\r\n"


def streaming_app(total: int = 1 << 20, piece: int = 65536, pause: float = 0.0) -> QuartTrio:
    app = QuartTrio("rules")
    app.config["RESPONSE_TIMEOUT"] = None

    @app.get("/health")
    async def health() -> str:
        return "ok"

    @app.post("/")
    async def refuse() -> tuple[str, int]:
        return "no", 401

    @app.post("/echo")
    async def echo() -> bytes:
        return await request.get_data(as_text=False)

    @app.get("/stream")
    async def stream() -> Any:
        async def chunks() -> AsyncIterator[bytes]:
            for _ in range(total // piece):
                yield b"x" * piece
                if pause:
                    await trio.sleep(pause)

        return chunks(), 200, {"Content-Type": "application/octet-stream"}

    return app


async def _serve(nursery: trio.Nursery, policy: ConnectionPolicy, app: Any, **kw: Any) -> int:
    urls: list[str] = await nursery.start(
        partial(
            serve_app,
            app,
            "127.0.0.1:0",
            policy=policy,
            **{"shutdown_trigger": trio.sleep_forever, **kw},
        )
    )
    return int(urls[0].rsplit(":", 1)[1])


async def test_a_flood_of_waiting_bytes_never_starves_the_other_tasks(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Every read finds bytes waiting (one byte a read, the whole request there at
    once): the reader lets other tasks run after QUICK_READS reads in a row, and does
    not take a scheduler round for each read either."""
    monkeypatch.setattr(connection, "MAX_RECV", 1)
    log: list[str] = []
    real_take = Connection._take

    def take(self: Connection, data: bytes) -> None:
        log.append("r")
        real_take(self, data)

    monkeypatch.setattr(Connection, "_take", take)
    server = Server(streaming_app(), Config(), ConnectionPolicy())
    a, b = socket.socketpair()
    body = b"x" * 400
    b.sendall(b"POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 400\r\n\r\n" + body)
    b.shutdown(socket.SHUT_WR)
    stream = trio.SocketStream(trio.socket.from_stdlib_socket(a))
    async with trio.open_nursery() as nursery:
        nursery.start_soon(tick_forever, log)
        await trio.lowlevel.checkpoint()
        await server.serve_connection(stream, {})
        nursery.cancel_scope.cancel()
    assert b.recv(100).startswith(b"HTTP/1.1 401 ")
    b.close()
    runs = [r for r in "".join(log).split(".") if r]
    assert sum(len(r) for r in runs) > 400
    # trio may run the reader last in one batch and first in the next: two runs at most
    assert max(len(r) for r in runs) <= 2 * QUICK_READS
    assert max(len(r) for r in runs) >= QUICK_READS  # and no round per read


async def test_an_answer_longer_than_the_header_deadline_keeps_its_connection(
    nursery: trio.Nursery,
) -> None:
    """The reader's deadline from the connect (the first head's) passes while the
    answer streams: nothing happens to the connection, which then serves the next."""
    policy = ConnectionPolicy(header_timeout=0.3)
    port = await _serve(nursery, policy, streaming_app(total=20 * 65536, pause=0.05))
    o = await trio.to_thread.run_sync(
        run_case,
        Case("t", "t", [b"GET /stream HTTP/1.1\r\nHost: h\r\n\r\n" + HEALTH], read_timeout=1.5),
        port,
    )
    assert o.statuses == [200, 200] and o.seconds > 0.9, o.raw[-200:]
    assert len(o.responses[0].body) == 20 * 65536 and policy.timed_out == 0


def _stall(port: int, request: bytes, seconds: float) -> bytes:
    """Send ``request``, read nothing for ``seconds``, then read what is left."""
    with socket.create_connection(("127.0.0.1", port)) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        s.sendall(request)
        time.sleep(seconds)
        s.settimeout(2)
        got = b""
        try:
            while chunk := s.recv(65536):
                got += chunk
        except OSError:
            pass
        return got


async def test_a_client_that_stops_reading_is_dropped_at_the_write_timeout(
    nursery: trio.Nursery,
) -> None:
    policy = ConnectionPolicy(write_timeout=0.5)
    port = await _serve(nursery, policy, streaming_app(total=64 << 20))
    request = b"GET /stream HTTP/1.1\r\nHost: h\r\n\r\n"
    got = await trio.to_thread.run_sync(_stall, port, request, 2.0)
    assert got.startswith(b"HTTP/1.1 200 ") and len(got) < 64 << 20  # cut short
    await wait_until(lambda: policy.open == 0)
    assert policy.aborted == 1


async def test_a_slow_reader_gets_the_whole_answer(nursery: trio.Nursery) -> None:
    """Slow, not stalled: each write waits for the client, none past the bound."""
    policy = ConnectionPolicy(write_timeout=1.0)
    port = await _serve(nursery, policy, streaming_app(total=1 << 20))

    def slow() -> int:
        with socket.create_connection(("127.0.0.1", port)) as s:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 8192)
            s.sendall(b"GET /stream HTTP/1.1\r\nHost: h\r\nConnection: close\r\n\r\n")
            got = 0
            while chunk := s.recv(32768):
                got += len(chunk)
                time.sleep(0.002)
            return got

    got = await trio.to_thread.run_sync(slow)
    assert got > 1 << 20 and policy.aborted == 0


async def test_the_stop_ends_a_write_blocked_by_a_client_that_stopped_reading() -> None:
    """The server stops with a write waiting for a client that reads nothing: the
    graceful deadline ends it (the handler's writes are not shielded); the connection
    is gone long before the client would have read."""
    stop = trio.Event()
    policy = ConnectionPolicy()
    request = b"GET /stream HTTP/1.1\r\nHost: h\r\n\r\n"
    async with trio.open_nursery() as nursery:
        urls: list[str] = await nursery.start(
            partial(
                serve_app,
                streaming_app(total=64 << 20),
                "127.0.0.1:0",
                shutdown_trigger=stop.wait,
                graceful_timeout=0.5,
                policy=policy,
            )
        )
        port = int(urls[0].rsplit(":", 1)[1])
        nursery.start_soon(partial(trio.to_thread.run_sync, _stall, port, request, 4.0))
        await wait_until(lambda: policy.open == 1)
        await trio.sleep(0.3)  # the answer's write waits for the client now
        t0 = trio.current_time()
        stop.set()
        await wait_until(lambda: policy.open == 0, limit=3)
        assert trio.current_time() - t0 < 1.5  # the graceful deadline, not the stall


def _connect_all(port: int, n: int) -> list[bytes]:
    """``n`` connections opened at once (non-blocking connects), each sends ``GET
    /health`` and reads its answer; what each read."""
    sel = selectors.DefaultSelector()
    socks = []
    for _ in range(n):
        s = socket.socket()
        s.setblocking(False)
        s.connect_ex(("127.0.0.1", port))
        socks.append(s)
        sel.register(s, selectors.EVENT_WRITE, b"")
    got: dict[socket.socket, bytes] = {}
    deadline = time.monotonic() + 60
    while sel.get_map() and time.monotonic() < deadline:
        for key, events in sel.select(1.0):
            s = key.fileobj
            assert isinstance(s, socket.socket)
            if events & selectors.EVENT_WRITE:
                s.sendall(HEALTH.replace(b"\r\n\r\n", b"\r\nConnection: close\r\n\r\n"))
                sel.modify(s, selectors.EVENT_READ, b"")
                continue
            chunk = s.recv(65536)
            got[s] = got.get(s, b"") + chunk
            if not chunk:
                sel.unregister(s)
    for s in socks:
        s.close()
    return list(got.values())


async def test_a_thousand_connections_at_once_are_all_answered(nursery: trio.Nursery) -> None:
    policy = ConnectionPolicy()
    port = await _serve(nursery, policy, streaming_app())
    answers = await trio.to_thread.run_sync(_connect_all, port, 1000)
    assert len(answers) == 1000
    assert all(a.startswith(b"HTTP/1.1 200 ") and a.endswith(b"ok") for a in answers)
    await wait_until(lambda: policy.open == 0)
    assert policy.refused == 0 and policy.contained == 0


async def test_a_failure_in_one_connection_stays_in_it(
    nursery: trio.Nursery, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """Any exception in a connection's handling closes that connection only: counted,
    one warning line, and the server serves the next connection (stock hypercorn ended
    the whole server on anything but an OSError)."""
    policy = ConnectionPolicy()
    port = await _serve(nursery, policy, streaming_app())
    real_begin = Connection._begin

    def broken(self: Connection) -> None:
        if b"X-Break" in self.buffer:
            raise RuntimeError("a bug in the handler")
        real_begin(self)

    monkeypatch.setattr(Connection, "_begin", broken)
    o = await trio.to_thread.run_sync(
        run_case, Case("t", "t", [b"GET /health HTTP/1.1\r\nHost: h\r\nX-Break: 1\r\n\r\n"]), port
    )
    assert o.statuses == [] and o.end in ("eof", "rst")
    assert policy.contained == 1
    assert "a connection failed and was closed (contained: RuntimeError" in caplog.text
    last = HEALTH.replace(b"\r\n\r\n", b"\r\nConnection: close\r\n\r\n")
    o = await trio.to_thread.run_sync(run_case, Case("t", "t", [last]), port)
    assert o.statuses == [200]


async def test_a_client_that_expects_100_continue_gets_it_when_the_body_is_read(
    nursery: trio.Nursery,
) -> None:
    """``Expect: 100-continue``: the client waits; ``100 Continue`` comes when the app
    reads the body, then the body is read and answered on the same connection."""
    port = await _serve(nursery, ConnectionPolicy(), streaming_app())

    def expecting() -> tuple[bytes, bytes]:
        with socket.create_connection(("127.0.0.1", port)) as s:
            s.sendall(
                b"POST /echo HTTP/1.1\r\nHost: h\r\nContent-Length: 5\r\n"
                b"Expect: 100-continue\r\nConnection: close\r\n\r\n"
            )
            s.settimeout(5)
            first = s.recv(100)
            s.sendall(b"hello")
            rest = b""
            while chunk := s.recv(65536):
                rest += chunk
            return first, rest

    first, rest = await trio.to_thread.run_sync(expecting)
    assert first == b"HTTP/1.1 100 \r\n\r\n"
    assert rest.startswith(b"HTTP/1.1 200 ") and rest.endswith(b"hello")
