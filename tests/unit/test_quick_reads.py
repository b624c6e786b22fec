"""The connection reader takes bytes already there without a scheduler round, but
never reads more than QUICK_READS times in a row without letting other tasks run (a
client that never stops sending cannot starve the process); closed and reset
sockets end the read as trio's own read does."""

from __future__ import annotations

import socket

import pytest
import trio

from gateway import connections
from gateway.connections import QUICK_READS, GatewayTCPServer
from tests.helpers import tick_forever


def _reader(stream: trio.SocketStream) -> GatewayTCPServer:
    server = GatewayTCPServer.__new__(GatewayTCPServer)
    server.stream = stream  # type: ignore[assignment]
    return server


@pytest.mark.parametrize("way", ["_receive", "_read_once"])
async def test_a_flood_never_starves_the_other_tasks(
    monkeypatch: pytest.MonkeyPatch, way: str
) -> None:
    """Every read finds bytes waiting (one byte per read of 400 sent at once), read
    by ``_receive`` or by the reader loop's ``_read_once`` (no cancel scope when the
    bytes are there: ``_receive_nowait``)."""
    monkeypatch.setattr(connections, "MAX_RECV", 1)
    a, b = socket.socketpair()
    a.setblocking(False)
    reader = _reader(trio.SocketStream(trio.socket.from_stdlib_socket(a)))
    b.sendall(b"x" * 400)
    b.close()
    log: list[str] = []

    async with trio.open_nursery() as nursery:
        nursery.start_soon(tick_forever, log)
        await trio.lowlevel.checkpoint()
        read = reader._receive if way == "_receive" else lambda: reader._read_once(None)  # type: ignore[arg-type]
        while await read():
            log.append("r")
        nursery.cancel_scope.cancel()
    a.close()
    runs = "".join(log).split(".")
    assert sum(len(r) for r in runs) == 400
    # the reader yields after QUICK_READS reads; trio may run it first in one batch
    # and last in the one before, hence two runs between two ticks at most
    assert max(len(r) for r in runs) <= 2 * QUICK_READS
    assert max(len(r) for r in runs) >= QUICK_READS  # no round per read either


@pytest.mark.parametrize("how", ["reset", "closed"])
async def test_a_reset_or_closed_socket_ends_the_read(how: str) -> None:
    a, b = socket.socketpair()
    a.setblocking(False)
    stream = trio.SocketStream(trio.socket.from_stdlib_socket(a))
    reader = _reader(stream)
    if how == "reset":
        b.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
        b.send(b"unread")
        a.send(b"x")  # b never reads it: its close resets
        b.close()
        with pytest.raises((trio.BrokenResourceError, trio.ClosedResourceError)):
            while await reader._receive():
                pass
        await stream.aclose()
    else:
        async with trio.open_nursery() as nursery:

            async def close_soon() -> None:
                await trio.sleep(0.01)
                await stream.aclose()

            nursery.start_soon(close_soon)
            with pytest.raises((trio.BrokenResourceError, trio.ClosedResourceError)):
                await reader._receive()  # waiting when another task closes it
        b.close()
