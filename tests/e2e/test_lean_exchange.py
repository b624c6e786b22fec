"""The lean request path (gateway.exchange) against h11's way, over raw sockets.

A real hypercorn (``serve_app``) serves a small app with lean routes: a JSON echo that
reads its body, one that answers before reading it, and an SSE stream. Every case runs
twice, once with the lean path on and once with it off (``policy.lean_routes`` empty:
every request takes h11's way, as before the lean path existed), and what the client
sees must be the same: statuses, headers (but ``Date``), bodies and how the connection
ends. The lean counter proves which way was taken.
"""

from __future__ import annotations

import json
import struct
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from functools import partial
from typing import Any

import h11
import pytest
import trio

from gateway.connections import ConnectionPolicy
from gateway.lean import Incoming, JSONReply, Reply, StreamReply, lean_route
from gateway.server import serve_app
from gateway.web import ChannelBody, ServiceApp, install_common
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


def lean_app() -> ServiceApp:
    app = ServiceApp("lean")
    install_common(app, 1 << 20, "test server")
    app.gateway = _State()  # type: ignore[attr-defined]
    app.lean_routes = {
        ("POST", "/echo"): lean_route("echo", _echo),
        ("POST", "/refuse"): lean_route("refuse", _refuse),
        ("POST", "/stream"): lean_route("stream", _stream),
        ("GET", "/health"): lean_route("health", lambda s, r: _health()),
    }

    @app.get("/other")
    async def other() -> str:
        return "quart"

    return app


async def _health() -> Reply:
    return JSONReply({"status": "ok"})


async def _serve(nursery: trio.Nursery, lean: bool) -> tuple[int, ConnectionPolicy, ServiceApp]:
    app = lean_app()
    policy = ConnectionPolicy(header_timeout=1.0)
    urls: list[str] = await nursery.start(
        partial(serve_app, app, "127.0.0.1:0", shutdown_trigger=trio.sleep_forever, policy=policy)
    )
    if not lean:
        policy.lean_routes = frozenset()
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
    # h11 refuses a body cut short (400, JSON); the lean path answers it alike
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
    return await trio.to_thread.run_sync(partial(run_case, Case("lean", "t", parts, **kw), port))


@pytest.mark.parametrize("name", list(CASES))
async def test_lean_and_h11_answer_alike(nursery: trio.Nursery, name: str) -> None:
    parts, kw, statuses = CASES[name]
    lean_port, lean_policy, _ = await _serve(nursery, lean=True)
    h11_port, h11_policy, _ = await _serve(nursery, lean=False)
    lean = await _run(lean_port, parts, kw)
    old = await _run(h11_port, parts, kw)
    assert lean.statuses == statuses, lean.raw
    assert _seen(lean) == _seen(old)
    assert h11_policy.lean == 0
    if name not in ("head split", "unreadable head"):  # those take h11's way both times
        assert lean_policy.lean >= 1


async def test_every_split_of_a_request_is_answered_alike(nursery: trio.Nursery) -> None:
    port, policy, _ = await _serve(nursery, lean=True)
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
    assert policy.lean >= len(data) - STREAM.index(b"\r\n\r\n")


async def test_a_client_leaving_mid_stream_cancels_the_request(nursery: trio.Nursery) -> None:
    port, policy, app = await _serve(nursery, lean=True)
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
    assert policy.lean == 1
    with trio.fail_after(5):
        while policy.open:  # noqa: ASYNC110
            await trio.sleep(0.01)


@pytest.mark.parametrize("when", ["mid-body", "streaming"])
async def test_a_client_that_resets_is_gone_at_once(nursery: trio.Nursery, when: str) -> None:
    """A reset (not a FIN) ends the reader with an error: the lean request is told too,
    as h11's way tells its stream (red team: the request ran on until its timeouts)."""
    port, policy, app = await _serve(nursery, lean=True)
    state: _State = app.gateway  # type: ignore[attr-defined]
    data = _req("/stream", b'{"n": 1000}')
    sock = trio.socket.socket()
    await sock.connect(("127.0.0.1", port))
    await sock.send(data[:-3] if when == "mid-body" else data)
    if when == "streaming":
        assert (await sock.recv(65536)).startswith(b"HTTP/1.1 200 ")
    else:
        await wait_until(lambda: policy.lean == 1)
    sock.setsockopt(trio.socket.SOL_SOCKET, trio.socket.SO_LINGER, struct.pack("ii", 1, 0))
    sock.close()  # an RST
    await wait_until(lambda: policy.open == 0, limit=2.0)  # not the body timeout (60 s)
    if when == "streaming":
        assert state.cancelled == 1


async def test_keep_alive_max_requests_closes_the_last_answer(nursery: trio.Nursery) -> None:
    port, policy, _ = await _serve(nursery, lean=True)
    n = 1000  # hypercorn's keep_alive_max_requests
    o = await _run(port, [_get("/health") * n], {"read_timeout": 20.0})
    assert o.statuses == [200] * n
    assert [r.closes for r in o.responses] == [False] * (n - 1) + [True]
    assert o.end == "eof" and policy.lean == n


async def test_a_waiting_read_takes_no_cancel_scope(
    nursery: trio.Nursery, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The connection's reader waits between requests (and while one is answered) with
    its deadline kept by the run's stream clock, not a cancel scope entered per read and
    moved twice a request (≈ 600 bytecodes): over 30 kept-alive requests its task enters
    no scope after the connection's own (the old reader entered 30 and more)."""
    port, policy, _ = await _serve(nursery, lean=True)
    entered: list[str] = []
    real_enter = trio.CancelScope.__enter__

    def counting_enter(self: trio.CancelScope) -> trio.CancelScope:
        entered.append(trio.lowlevel.current_task().name)
        return real_enter(self)

    monkeypatch.setattr(trio.CancelScope, "__enter__", counting_enter)
    n = 30
    o = await _run(
        port, [_get("/health")] * (n - 1) + [_get("/health", "Connection: close")], {"pause": 0.01}
    )
    assert o.statuses == [200] * n and o.end == "eof" and policy.lean == n
    readers = [name for name in entered if name.endswith("_run_handler")]
    assert len(readers) <= 2, readers  # the connection's task group (and a grace read)


async def test_idle_connections_close_at_once_when_the_server_stops(nursery: trio.Nursery) -> None:
    """A kept-alive connection waiting for its next request is closed when the server
    stops, not after its keep-alive time (75 s): the stop moves the waiting read's
    deadline to now through the stream clock."""
    app = lean_app()
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


async def test_the_app_is_called_directly_unless_wrapped(nursery: trio.Nursery) -> None:
    """A lean request goes straight to the app's ASGI connection class, skipping
    hypercorn's wrapper and quart's ``__call__`` and ``asgi_app``, only when those are
    quart's own: middleware wrapped around ``asgi_app`` still sees every request."""
    port, policy, app = await _serve(nursery, lean=True)
    assert policy.http_app is app
    plain = await _run(port, [CHAT + _get("/health", "Connection: close")], {})
    assert plain.statuses == [200, 200]

    wrapped = lean_app()
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
    assert wpolicy.http_app is None
    out = await _run(
        int(urls[0].rsplit(":", 1)[1]), [CHAT + _get("/health", "Connection: close")], {}
    )
    assert out.statuses == [200, 200]
    assert wpolicy.lean == 2 and seen == ["/echo", "/health"]
    assert all(r.headers.get("x-mw") == "1" for r in out.responses)
    assert [r.body for r in out.responses] == [r.body for r in plain.responses]


async def test_lean_requests_make_no_h11_connection(
    nursery: trio.Nursery, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Requests on the lean path never make h11's connection (nor hypercorn's
    ``can_read``): made per connection, an open stream held them for nothing. The
    first request that takes h11's way makes it, on the same connection."""
    made: list[object] = []
    real = h11.Connection

    class Counted(real):  # type: ignore[misc, valid-type]
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            made.append(self)
            super().__init__(*args, **kwargs)

    monkeypatch.setattr(h11, "Connection", Counted)
    port, policy, _ = await _serve(nursery, lean=True)
    o = await _run(port, [CHAT + STREAM + _get("/health", "Connection: close")], {})
    assert o.statuses == [200, 200, 200] and policy.lean == 3
    assert made == []
    o = await _run(port, [CHAT + _get("/other") + _get("/health", "Connection: close")], {})
    # (the request after the quart route came with it: h11 holds it and answers it)
    assert o.statuses == [200, 200, 200] and policy.lean == 4
    assert len(made) == 1  # the quart route's connection
