"""gateway.accept: hypercorn's accept loop without a scheduler round per connection.

Every connection waiting is taken and handled, the loop yields at least once per
ACCEPT_BATCH connections (a flood of connects cannot starve the process), a
connection's stream is closed after its handler whether or not the handler closed
it, and the listeners are closed when serving ends.
"""

from __future__ import annotations

import contextlib
import socket

import trio

from gateway import accept
from tests.helpers import tick_forever


def _clients(port: int, n: int) -> list[socket.socket]:
    out = []
    for _ in range(n):
        s = socket.create_connection(("127.0.0.1", port), timeout=10)
        s.sendall(b"hi")
        out.append(s)
    return out


async def test_a_burst_is_taken_whole_and_never_starves_the_rest() -> None:
    listeners = await trio.open_tcp_listeners(0, host="127.0.0.1", backlog=256)
    port = listeners[0].socket.getsockname()[1]
    clients = _clients(port, 5 * accept.ACCEPT_BATCH)  # all waiting before serving starts
    log: list[str] = []
    streams: list[trio.SocketStream] = []

    all_in = trio.Event()

    async def handler(stream: trio.SocketStream) -> None:
        streams.append(stream)
        log.append("h")
        if len(streams) == len(clients):
            all_in.set()
        if len(streams) % 2:
            await stream.aclose()  # the other half is closed by the loop

    async with trio.open_nursery() as nursery:
        nursery.start_soon(tick_forever, log)
        await nursery.start(accept.serve_listeners, handler, listeners)
        await all_in.wait()
        nursery.cancel_scope.cancel()
    for c in clients:  # every connection was closed after its handler ("hi" unread: a reset)
        with contextlib.suppress(ConnectionResetError):
            assert c.recv(10) == b""
        c.close()
    assert all(s.socket.fileno() == -1 for s in streams)
    runs = "".join(log).split(".")
    # a spawned handler runs in the batch after its accept: count the accepts' batches
    assert max(len(r) for r in runs) <= 2 * accept.ACCEPT_BATCH
    assert listeners[0].socket.fileno() == -1  # closed when serving ended


async def test_a_closed_listener_ends_its_loop() -> None:
    listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
    listeners[0].socket.close()

    async def handler(stream: trio.SocketStream) -> None:  # pragma: no cover - none comes
        await stream.aclose()

    try:
        await accept.serve_listeners(handler, listeners)
    except BaseExceptionGroup as group:
        assert group.subgroup(trio.ClosedResourceError) is not None
    else:  # pragma: no cover
        raise AssertionError("a closed listener must end serving")


def test_install_touches_only_a_trio_worker_module() -> None:
    import types

    other = types.ModuleType("x")
    assert accept.install(other) is False  # no trio, no worker_serve
    import hypercorn.trio.run as hyper_run

    assert accept.install(hyper_run) is True
    assert hyper_run.trio.serve_listeners is accept.serve_listeners
    assert hyper_run.trio.SocketListener is trio.SocketListener  # the rest is trio's
