"""``GatewayTCPServer.__init__`` is hypercorn's without two per-connection objects:
the send lock and the idle-timer task exist only once something uses them (TLS's own
loop, a canned answer); ``GatewayH11Protocol.__init__`` likewise without h11's
connection and the ``can_read`` event (made by the first request that takes h11's way).
A hypercorn whose ``__init__`` sets anything else is refused, as any other change to
the internals the gateway overrides."""

from __future__ import annotations

import contextlib
from typing import Any

import h11
import pytest
import trio
import trio.testing
from hypercorn.config import Config
from hypercorn.protocol.h11 import H11Protocol
from hypercorn.trio.tcp_server import TCPServer
from hypercorn.trio.worker_context import TrioSingleTask, WorkerContext
from hypercorn.typing import ConnectionState

from gateway import connections
from gateway.connections import GatewayH11Protocol, GatewayTCPServer


def _server() -> GatewayTCPServer:
    args: Any = (object(), object(), object(), object(), object())
    return GatewayTCPServer(*args)


def test_the_lock_and_the_idle_task_are_made_on_first_use_only() -> None:
    server = _server()
    assert "send_lock" not in vars(server) and "idle_task" not in vars(server)
    lock, task = server.send_lock, server.idle_task
    assert isinstance(lock, trio.Lock) and isinstance(task, TrioSingleTask)
    assert server.send_lock is lock and server.idle_task is task  # made once


def test_every_attribute_hypercorn_sets_is_set_or_made() -> None:
    server = _server()
    for name in connections._init_attributes(TCPServer):
        assert getattr(server, name) is not None, name
    assert connections._init_attributes(TCPServer) == connections._TCPSERVER_ATTRIBUTES


def _protocol(cls: type[Any] = GatewayH11Protocol) -> Any:
    args: Any = (object(), Config(), WorkerContext(None), object(), ConnectionState({}))
    return cls(*args, False, None, None, object())


def test_the_h11_connection_and_can_read_are_made_on_first_use_only() -> None:
    """A connection whose requests all take the lean path never makes h11's connection
    or hypercorn's ``can_read`` event; before they are made the protocol reads as a
    fresh one (awaiting a head, no body, no answer, nothing trailing)."""
    proto = _protocol()
    assert "connection" not in vars(proto) and "can_read" not in vars(proto)
    assert proto.awaiting_head and not proto.receiving_body and not proto.response_started
    assert proto.trailing == b""
    proto.wake_reader()  # nothing to wake: nothing made
    assert proto.stop_reading and "can_read" not in vars(proto)
    fresh = _protocol(H11Protocol)
    for name in connections._init_attributes(H11Protocol):  # every one hypercorn sets
        assert type(getattr(proto, name)) is type(getattr(fresh, name)), name
    assert connections._init_attributes(H11Protocol) == connections._H11PROTOCOL_ATTRIBUTES
    conn = proto.connection
    assert proto.connection is conn and conn.our_state is h11.IDLE  # made once
    conn.receive_data(b"GET / HTTP/1.1\r\nHost: h\r\n\r\n")
    assert proto.trailing.startswith(b"GET /")
    event = proto.can_read
    proto.wake_reader()
    assert proto.can_read is event and event._event.is_set()


def test_a_hypercorn_that_sets_other_protocol_attributes_is_refused(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(connections, "_H11PROTOCOL_ATTRIBUTES", frozenset({"app"}))
    assert "H11Protocol.__init__" in connections._unknown_hypercorn(TCPServer)


def test_an_init_that_sets_more_is_seen() -> None:
    class Other:
        def __init__(self, a: int) -> None:
            self.a = a
            self.extra: list[int] = []  # annotated assignments count too
            self.declared: int  # a declaration alone does not
            b: int = 2
            self.c = self.d = b

    assert connections._init_attributes(Other) == {"a", "extra", "c", "d"}


async def test_a_canned_answer_leaves_before_any_checkpoint() -> None:
    """A refusal (400, 408, ...) is written at once when the socket takes it whole:
    no lock, no scope, no scheduler round first, so neither a loaded loop (its 1 s bound
    spent before the write began) nor a cancel can drop it."""
    import socket

    a, b = socket.socketpair()
    server = _server()
    server.stream = trio.SocketStream(trio.socket.from_stdlib_socket(a))  # type: ignore[assignment]
    try:
        with trio.CancelScope() as scope:
            scope.cancel()  # every checkpoint in here raises: only a direct write works
            await server._write_canned(b"HTTP/1.1 400 Bad Request\r\n\r\n")
        b.settimeout(1)
        assert b.recv(100) == b"HTTP/1.1 400 Bad Request\r\n\r\n"
        assert "send_lock" not in vars(server)  # nothing waited for it
    finally:
        b.close()
        a.close()


async def test_a_read_deadline_never_wakes_a_waiting_write() -> None:
    """The waiting read is woken at its deadline by ``notify_closing`` on the socket,
    which would wake a write waiting on the same socket too: while one is under way (the
    send lock held) the deadline is looked at again a little later (the write has its
    own bound), and the read is woken once it is done."""
    import socket

    a, b = socket.socketpair()
    server = _server()
    server.stream = trio.SocketStream(trio.socket.from_stdlib_socket(a))  # type: ignore[assignment]
    try:
        server._read_waiting, server._read_until = True, 10.0
        assert server.due(5.0) == 10.0 and not server._read_woken  # not yet: asked again
        async with server.send_lock:
            again = server.due(10.0)
            assert again == 10.0 + connections.WRITING_RECHECK_SECONDS
            assert not server._read_woken
        assert server.due(again) is None and server._read_woken
        server._read_waiting = False
        assert server.due(20.0) is None  # a read that no longer waits is left alone
    finally:
        a.close()
        b.close()


async def test_a_deadline_moved_to_now_wakes_the_read_at_once() -> None:
    """The server stops and an idle connection's deadline becomes now: its read is woken
    there and then, not through the clock, which does not call an entry twice at one
    moment (under a frozen test clock the stop can come at the moment it was called)."""
    import math
    import socket

    from gateway.streamclock import clock

    a, b = socket.socketpair()
    server = _server()
    raw = trio.socket.from_stdlib_socket(a)
    server.stream = trio.SocketStream(raw)  # type: ignore[assignment]
    server._timer = clock().add(server, None)
    woken = trio.Event()

    async def read() -> None:
        with contextlib.suppress(trio.ClosedResourceError):
            await trio.lowlevel.wait_readable(raw)
        woken.set()

    try:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(read)
            await trio.testing.wait_all_tasks_blocked()
            server._timer.fired = now = trio.current_time()  # called at this moment
            server._read_waiting, server._read_until = True, math.inf
            server._deadline_moved(now)
            with trio.fail_after(1):
                await woken.wait()
            assert server._read_woken
    finally:
        server._timer.cancel()
        a.close()
        b.close()


async def test_a_deadline_that_comes_while_the_read_yields_is_not_lost(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """After QUICK_READS reads that found bytes, the read yields once before it looks
    again; a deadline that fires during that yield finds no wait to wake. It must still
    end the read (red team, round 11: the flag was set, the wake went nowhere, and the
    read then waited with nothing left to wake it, the server's stop included)."""
    import socket

    from gateway.streamclock import clock

    a, b = socket.socketpair()
    server = _server()
    server.stream = trio.SocketStream(trio.socket.from_stdlib_socket(a))  # type: ignore[assignment]
    server._timer = clock().add(server, None)
    real = trio.lowlevel.checkpoint

    async def deadline_during_the_yield() -> None:
        if server._read_waiting and not server._read_woken:
            assert server.due(server._read_until) is None  # fired: nothing waits yet
        await real()

    monkeypatch.setattr(trio.lowlevel, "checkpoint", deadline_during_the_yield)
    try:
        server._quick_reads = connections.QUICK_READS
        deadline = trio.current_time() + 30
        with trio.fail_after(2):
            data, came = await server._wait_read(deadline)
        assert (data, came) == (None, deadline)
        # bytes there after a yield are read, not taken for a timeout
        b.send(b"x")
        server._quick_reads = connections.QUICK_READS
        monkeypatch.setattr(trio.lowlevel, "checkpoint", real)
        with trio.fail_after(2):
            assert await server._wait_read(trio.current_time() + 30) == (b"x", None)
    finally:
        server._timer.cancel()
        a.close()
        b.close()


def test_plain_asgi_is_quart_own_entry_only() -> None:
    from quart import Quart

    from gateway.connections import plain_asgi
    from gateway.web import ServiceApp

    assert plain_asgi(ServiceApp("a")) and plain_asgi(Quart("q"))
    wrapped = ServiceApp("w")
    wrapped.asgi_app = wrapped.asgi_app  # type: ignore[method-assign]  # middleware's way
    assert not plain_asgi(wrapped)

    class OwnEntry(ServiceApp):
        async def asgi_app(self, scope: Any, receive: Any, send: Any) -> None:
            await super().asgi_app(scope, receive, send)

    class OwnCall(ServiceApp):
        async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
            await super().__call__(scope, receive, send)

    assert not plain_asgi(OwnEntry("e")) and not plain_asgi(OwnCall("c"))
    assert not plain_asgi(object())
