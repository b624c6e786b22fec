"""A scripted raw HTTP/1.1 server on 127.0.0.1 for the upstream client's tests: each
scripted write is its own segment (so each is its own read at the client)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from itertools import pairwise

import trio

HEAD = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"


def chunk(data: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(data), data)


EVENTS = [b'data: {"n": %d, "text": "caf\xc3\xa9 \xe4\xb8\xad"}\n\n' % i for i in range(40)]
BODY = b"".join(chunk(e) for e in EVENTS) + b"0\r\n\r\n"
# cuts inside a size line, inside data, between CR and LF, inside the last chunk
CUTS = [(3,), (1, 2, 20, 21), (len(BODY) - 3,), tuple(range(7, len(BODY), 97))]


@dataclass
class Server:
    url: str
    connections: list[int] = field(default_factory=list)
    requests: list[bytes] = field(default_factory=list)


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
                server.requests.append(head + b"\r\n\r\n" + buf[:length])
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
