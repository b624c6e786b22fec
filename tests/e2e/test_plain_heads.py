"""The connection handler's two ways to read a head, over raw sockets: plain heads
without h11 (:func:`gateway.http.h1.parse_head`) and every head by h11.

A real server (``serve_app``) serves a small app with direct routes: a JSON echo that
reads its body, one that answers before reading it, and an SSE stream. Every case runs
twice, once with plain heads on and once with them off (``policy.plain_heads``: h11
reads every head), and what the client sees must be the same: statuses, headers (but
``Date``), bodies and how the connection ends. The ``plain`` counter proves which way
was taken.
"""

from __future__ import annotations

import json
import struct
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from functools import partial
from typing import Any

import pytest
import trio

from gateway.http.asgi import ServiceApp, install_common
from gateway.http.connection import ConnectionPolicy
from gateway.http.direct import Incoming, JSONReply, Reply, StreamReply, direct_route
from gateway.http.replies import ChannelBody
from gateway.http.serve import serve_app
from tests.e2e.hostile import Case, Outcome, run_case
from tests.e2e.test_hostile_http import wait_until

BODY = json.dumps({"model": "m", "messages": [{"role": "user", "content": "hi"}]}).encode()


class _State:
    def __init__(self) -> None:
        self.cancelled = 0
        self.streams = 0


async def _echo(state: _State, req: Incoming) -> Reply:
    return JSONReply({"got": await req.json(max_depth=8)})


async def _refuse(state: _State, req: Incoming) -> Reply:
    return JSONReply({"error": "no"}, status=401)


async def _stream(state: _State, req: Incoming) -> Reply:
    n = int((await req.json(max_depth=8)).get("n", 3))

    @asynccontextmanager
    async def events() -> AsyncIterator[AsyncIterator[bytes]]:
        async def gen() -> AsyncIterator[bytes]:
            state.streams += 1
            try:
                for i in range(n):
                    yield b"data: %d\n\n" % i
                    await trio.sleep(0.001 if n < 100 else 10)
                yield b"data: [DONE]\n\n"
            except trio.Cancelled:
                state.cancelled += 1
                raise

        yield gen()

    return StreamReply(ChannelBody(events()))


def direct_app() -> ServiceApp:
    app = ServiceApp("plain")
    install_common(app, 1 << 20, "test server")
    app.gateway = _State()  # type: ignore[attr-defined]
    app.direct_routes = {
        ("POST", "/echo"): direct_route("echo", _echo),
        ("POST", "/refuse"): direct_route("refuse", _refuse),
        ("POST", "/stream"): direct_route("stream", _stream),
        ("GET", "/health"): direct_route("health", lambda s, r: _health()),
    }

    @app.get("/other")
    async def other() -> str:
        return "quart"

    return app


async def _health() -> Reply:
    return JSONReply({"status": "ok"})


async def _serve(nursery: trio.Nursery, plain: bool) -> tuple[int, ConnectionPolicy, ServiceApp]:
    app = direct_app()
    policy = ConnectionPolicy(header_timeout=1.0, plain_heads=plain)
    urls: list[str] = await nursery.start(
        partial(serve_app, app, "127.0.0.1:0", shutdown_trigger=trio.sleep_forever, policy=policy)
    )
    return int(urls[0].rsplit(":", 1)[1]), policy, app


def _req(path: str, body: bytes = b"", *headers: str, method: str = "POST") -> bytes:
    lines = [f"{method} {path} HTTP/1.1", "Host: h", *headers]
    if method == "POST":
        lines.append(f"Content-Length: {len(body)}")
    return ("\r\n".join(lines) + "\r\n\r\n").encode() + body


def _get(path: str, *headers: str) -> bytes:
    return _req(path, b"", *headers, method="GET")


def _seen(o: Outcome) -> tuple[Any, ...]:
    answers = [
        (r.status, sorted((k, v) for k, v in r.headers.items() if k != "date"), r.body)
        for r in o.responses
    ]
    return answers, o.end


CHAT = _req("/echo", BODY)
STREAM = _req("/stream", b'{"n": 3}')
#: name -> (what the client sends, run_case's options, the statuses it must get)
CASES: dict[str, tuple[list[bytes], dict[str, Any], list[int]]] = {
    "one": ([CHAT], {}, [200]),
    "stream": ([STREAM], {}, [200]),
    "two kept alive": (
        [CHAT + _get("/health") + _get("/health", "Connection: close")],
        {},
        [200, 200, 200],
    ),
    "pipelined streams": (
        [STREAM + STREAM + _req("/echo", BODY, "Connection: close")],
        {},
        [200, 200, 200],
    ),
    "connection close": ([_req("/echo", BODY, "Connection: close")], {}, [200]),
    "body in a later write": (
        [CHAT[: CHAT.index(b"\r\n\r\n") + 4], CHAT[CHAT.index(b"\r\n\r\n") + 4 :]],
        {"pause": 0.05},
        [200],
    ),
    "body in pieces": ([CHAT[:-20], CHAT[-20:-5], CHAT[-5:]], {"pause": 0.02}, [200]),
    "head split": ([CHAT[:10], CHAT[10:]], {"pause": 0.05}, [200]),
    "refused, small body owed": (
        [_req("/refuse", b"x" * 5000)[:-4000], b"x" * 4000 + _get("/health", "Connection: close")],
        {"pause": 0.05},
        [401, 200],
    ),
    "refused, large body owed": ([_req("/refuse", b"x" * 100_000)[:-99_000]], {}, [401]),
    "not JSON": ([_req("/echo", b"{nope") + _get("/health", "Connection: close")], {}, [400, 200]),
    "empty body": ([_req("/echo") + _get("/health", "Connection: close")], {}, [400, 200]),
    "then quart": ([CHAT + _get("/other", "Connection: close")], {}, [200, 200]),
    "half-closed after the request": ([_get("/health")], {"finish": "shut_wr"}, [200]),
    "stalled body": ([CHAT[:-5]], {"read_timeout": 4.0}, [408]),
    # h11 refuses a body cut short (400, JSON); the plain way answers it alike
    "half-closed mid-body": ([CHAT[:-10]], {"finish": "shut_wr"}, [400]),
    "half-closed after the head": (
        [CHAT[: CHAT.index(b"\r\n\r\n") + 4]],
        {"finish": "shut_wr"},
        [400],
    ),
    "unreadable head": (
        [b"POST /echo HTTP/1.1\r\nHost: h\r\nContent-Length: 1, 2\r\n\r\nx"],
        {},
        [400],
    ),
}


async def _run(port: int, parts: list[bytes], kw: dict[str, Any]) -> Outcome:
    kw = {"read_timeout": 1.0, **kw}
    return await trio.to_thread.run_sync(partial(run_case, Case("plain", "t", parts, **kw), port))


@pytest.mark.parametrize("name", list(CASES))
async def test_plain_and_h11_answer_alike(nursery: trio.Nursery, name: str) -> None:
    parts, kw, statuses = CASES[name]
    plain_port, plain_policy, _ = await _serve(nursery, plain=True)
    h11_port, h11_policy, _ = await _serve(nursery, plain=False)
    plain = await _run(plain_port, parts, kw)
    old = await _run(h11_port, parts, kw)
    assert plain.statuses == statuses, plain.raw
    assert _seen(plain) == _seen(old)
    assert h11_policy.plain == 0
    if name not in ("head split", "unreadable head"):  # those take h11's way both times
        assert plain_policy.plain >= 1


async def test_every_split_of_a_request_is_answered_alike(nursery: trio.Nursery) -> None:
    port, policy, _ = await _serve(nursery, plain=True)
    whole = await _run(port, [STREAM], {})
    data = STREAM + _get("/health", "Connection: close")
    cuts = range(1, len(data))
    outcomes = await trio.to_thread.run_sync(
        lambda: [run_case(Case("s", "t", [data[:c], data[c:]], pause=0.002), port) for c in cuts]
    )
    for cut, o in zip(cuts, outcomes, strict=True):
        assert o.statuses == [200, 200], (cut, o.raw)
        assert o.responses[0].body == whole.responses[0].body, cut
        assert o.end == "eof"
    assert policy.plain >= len(data) - STREAM.index(b"\r\n\r\n")


async def test_a_client_leaving_mid_stream_cancels_the_request(nursery: trio.Nursery) -> None:
    port, policy, app = await _serve(nursery, plain=True)
    state: _State = app.gateway  # type: ignore[attr-defined]
    sock = trio.socket.socket()
    await sock.connect(("127.0.0.1", port))
    await sock.send(_req("/stream", b'{"n": 1000}'))
    got = await sock.recv(65536)
    assert got.startswith(b"HTTP/1.1 200 ")
    sock.close()
    with trio.fail_after(5):
        while state.cancelled == 0:  # noqa: ASYNC110
            await trio.sleep(0.01)
    assert policy.plain == 1
    with trio.fail_after(5):
        while policy.open:  # noqa: ASYNC110
            await trio.sleep(0.01)


@pytest.mark.parametrize("when", ["mid-body", "streaming"])
async def test_a_client_that_resets_is_gone_at_once(nursery: trio.Nursery, when: str) -> None:
    """A reset (not a FIN) ends the reader with an error: the request is told too,
    as h11's way tells its stream (red team: the request ran on until its timeouts)."""
    port, policy, app = await _serve(nursery, plain=True)
    state: _State = app.gateway  # type: ignore[attr-defined]
    data = _req("/stream", b'{"n": 1000}')
    sock = trio.socket.socket()
    await sock.connect(("127.0.0.1", port))
    await sock.send(data[:-3] if when == "mid-body" else data)
    if when == "streaming":
        assert (await sock.recv(65536)).startswith(b"HTTP/1.1 200 ")
    else:
        await wait_until(lambda: policy.plain == 1)
    sock.setsockopt(trio.socket.SOL_SOCKET, trio.socket.SO_LINGER, struct.pack("ii", 1, 0))
    sock.close()  # an RST
    await wait_until(lambda: policy.open == 0, limit=2.0)  # not the body timeout (60 s)
    if when == "streaming":
        assert state.cancelled == 1


async def test_keep_alive_max_requests_closes_the_last_answer(nursery: trio.Nursery) -> None:
    port, policy, _ = await _serve(nursery, plain=True)
    n = 1000  # hypercorn's keep_alive_max_requests
    o = await _run(port, [_get("/health") * n], {"read_timeout": 20.0})
    assert o.statuses == [200] * n
    assert [r.closes for r in o.responses] == [False] * (n - 1) + [True]
    assert o.end == "eof" and policy.plain == n


async def test_idle_connections_close_at_once_when_the_server_stops(nursery: trio.Nursery) -> None:
    """A kept-alive connection waiting for its next request is closed when the server
    stops, not after its keep-alive time (75 s): the stop moves the waiting read's
    deadline to now through the stream clock."""
    app = direct_app()
    stop = trio.Event()
    policy = ConnectionPolicy(header_timeout=1.0)
    urls: list[str] = await nursery.start(
        partial(serve_app, app, "127.0.0.1:0", shutdown_trigger=stop.wait, policy=policy)
    )
    port = int(urls[0].rsplit(":", 1)[1])
    socks = []
    for _ in range(3):
        sock = trio.socket.socket()
        await sock.connect(("127.0.0.1", port))
        await sock.send(_get("/health"))
        assert (await sock.recv(65536)).startswith(b"HTTP/1.1 200 ")
        socks.append(sock)
    await trio.sleep(0.2)  # all three wait for a next request
    start = trio.current_time()
    stop.set()
    with trio.fail_after(5):
        for sock in socks:
            assert await sock.recv(65536) == b""  # closed without a word
            sock.close()
    assert trio.current_time() - start < 2.0


async def test_middleware_around_the_app_sees_every_request(nursery: trio.Nursery) -> None:
    """ASGI middleware wrapped around the app (quart's ``asgi_app``) sees every
    request, direct routes included, and what it changes reaches the client."""
    port, _, _ = await _serve(nursery, plain=True)
    plain = await _run(port, [CHAT + _get("/health", "Connection: close")], {})
    assert plain.statuses == [200, 200]

    wrapped = direct_app()
    seen: list[str] = []
    inner = wrapped.asgi_app

    async def middleware(scope: Any, receive: Any, send: Any) -> None:
        seen.append(scope["path"])

        async def tagged(message: Any) -> None:
            if message["type"] == "http.response.start":
                message = {**message, "headers": [*message["headers"], (b"x-mw", b"1")]}
            await send(message)

        await inner(scope, receive, tagged)

    wrapped.asgi_app = middleware  # type: ignore[method-assign]
    wpolicy = ConnectionPolicy(header_timeout=1.0)
    urls: list[str] = await nursery.start(
        partial(
            serve_app, wrapped, "127.0.0.1:0", shutdown_trigger=trio.sleep_forever, policy=wpolicy
        )
    )
    out = await _run(
        int(urls[0].rsplit(":", 1)[1]), [CHAT + _get("/health", "Connection: close")], {}
    )
    assert out.statuses == [200, 200]
    assert wpolicy.plain == 2 and seen == ["/echo", "/health"]
    assert all(r.headers.get("x-mw") == "1" for r in out.responses)
    assert [r.body for r in out.responses] == [r.body for r in plain.responses]


async def test_plain_and_h11_heads_mix_on_one_connection(nursery: trio.Nursery) -> None:
    """A head h11 must read (a chunked body) between plain ones: each is read its way,
    the bytes h11 held beyond its request go back to the plain parser."""
    port, policy, _ = await _serve(nursery, plain=True)
    body = b"%x\r\n%s\r\n0\r\n\r\n" % (len(BODY), BODY)
    chunked = b"POST /echo HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n" + body
    o = await _run(port, [CHAT + chunked + CHAT + _get("/health", "Connection: close")], {})
    assert o.statuses == [200, 200, 200, 200], o.raw
    assert o.responses[0].body == o.responses[1].body == o.responses[2].body
    assert policy.plain == 3
