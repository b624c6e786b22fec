"""Reproductions of the stock hypercorn 0.18 + quart-trio 0.12 bugs in docs/upstream-bugs.md.

    python docs/upstream-bugs/reproduce.py [--gateway] [NAME ...]   (all by default)

Each case serves a few-line quart-trio app with stock ``hypercorn.trio.serve`` on
127.0.0.1 (a free port), drives it over raw sockets and prints ``REPRODUCED`` or
``not reproduced`` with what it saw. It imports hypercorn, quart-trio and trio only.
With ``--gateway`` the same app is served by ``gateway.http.serve.serve_app`` (the
gateway's connection handler behind hypercorn, run from a checkout): the control,
where none should reproduce. Tested with hypercorn 0.18.0, quart-trio 0.12.0, quart
0.22.0, trio 0.35.0.
"""

from __future__ import annotations

import os
import resource
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from functools import partial
from typing import Any

import trio
from hypercorn.config import Config
from hypercorn.trio import serve
from quart_trio import QuartTrio

CASES: dict[str, Callable[[], tuple[bool, str]]] = {}
GATEWAY = "--gateway" in sys.argv


def case(fn: Callable[[], tuple[bool, str]]) -> Callable[[], tuple[bool, str]]:
    CASES[fn.__name__.replace("_", "-")] = fn
    return fn


def app() -> QuartTrio:
    app = QuartTrio("repro")
    app.config["RESPONSE_TIMEOUT"] = None

    @app.route("/", methods=["GET", "POST"])
    async def index() -> str:
        return "ok"  # answers a POST without reading its body

    @app.get("/big")
    async def big() -> Any:
        async def chunks() -> Any:
            for _ in range(2000):
                yield b"x" * 65536

        return chunks()

    return app


async def running(
    check: Callable[[int], Any],
    *,
    graceful: float = 3.0,
    keep_alive: float = 5.0,
    release: Callable[[], None] = lambda: None,
) -> tuple[Any, BaseException | None, float | None]:
    """Serve :func:`app`, run ``check(port)`` in a thread; (its result, what ``serve``
    raised if it ended on its own, how long ``serve`` took to return after the stop,
    None if it had not within 6 s). ``release()`` then lets a stuck server go."""
    config = Config()
    config.bind = ["127.0.0.1:0"]
    config.keep_alive_timeout = keep_alive
    config.graceful_timeout = graceful
    stop = trio.Event()
    outcome: dict[str, Any] = {"error": None, "stopped_in": None}

    async def serving(task_status: Any) -> None:
        try:
            if GATEWAY:
                await _serve_gateway(config, stop.wait, task_status)
                return
            await serve(app(), config, shutdown_trigger=stop.wait, task_status=task_status)
        except BaseException as exc:  # the server ended by itself: the bug
            outcome["error"] = exc

    result = None
    with trio.move_on_after(30):
        async with trio.open_nursery() as nursery:
            urls = await nursery.start(serving)
            port = int(urls[0].rsplit(":", 1)[1])
            result = await trio.to_thread.run_sync(check, port)
            t0 = trio.current_time()
            stop.set()
            with trio.move_on_after(6):
                while outcome["stopped_in"] is None and nursery.child_tasks:
                    await trio.sleep(0.05)
                    if not nursery.child_tasks:
                        break
            outcome["stopped_in"] = trio.current_time() - t0 if not nursery.child_tasks else None
            release()
            nursery.cancel_scope.cancel()
    return result, outcome["error"], outcome["stopped_in"]


async def _serve_gateway(config: Config, trigger: Any, task_status: Any) -> None:
    """serve_app with the keep-alive and graceful times of ``config``."""
    sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", ".."))
    from gateway.http import serve as gw

    real = gw.hypercorn_config

    def configured(*args: Any, **kw: Any) -> Config:
        cfg = real(*args, **kw)
        cfg.keep_alive_timeout = config.keep_alive_timeout
        return cfg

    gw.hypercorn_config = configured  # type: ignore[assignment]
    await gw.serve_app(
        app(),
        "127.0.0.1:0",
        shutdown_trigger=trigger,
        graceful_timeout=config.graceful_timeout,
        max_connections=50,
        task_status=task_status,
    )


def _read_until(sock: socket.socket, marker: bytes, timeout: float) -> bytes:
    sock.settimeout(timeout)
    data = b""
    try:
        while marker not in data:
            chunk = sock.recv(65536)
            if not chunk:
                break
            data += chunk
    except TimeoutError:
        pass
    return data


@case
def idle_timer() -> tuple[bool, str]:
    """After one request on a kept-alive connection, keep_alive_timeout (1 s here) no
    longer closes it: quart-trio cancels hypercorn's recycle half-way."""

    def check(port: int) -> float | None:
        with socket.create_connection(("127.0.0.1", port)) as s:
            s.sendall(b"GET / HTTP/1.1\r\nHost: h\r\n\r\n")
            _read_until(s, b"ok", 5)
            t0 = time.monotonic()
            s.settimeout(5)
            try:
                if s.recv(100) == b"":
                    return time.monotonic() - t0
            except TimeoutError:
                return None
        return None

    closed_after, _, _ = trio.run(partial(running, check, keep_alive=1.0))
    if closed_after is None:
        return True, "the idle connection was still open 5 s after its answer"
    return False, f"closed {closed_after:.1f} s after the answer"


@case
def answered_before_body() -> tuple[bool, str]:
    """A POST answered before its body arrived wedges the keep-alive connection: the
    body and a next request sent after the answer get nothing."""

    def check(port: int) -> bytes:
        with socket.create_connection(("127.0.0.1", port)) as s:
            s.sendall(b"POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 10\r\n\r\n")
            first = _read_until(s, b"ok", 5)
            time.sleep(0.3)
            s.sendall(b"0123456789GET / HTTP/1.1\r\nHost: h\r\nConnection: close\r\n\r\n")
            return first + b"|" + _read_until(s, b"ok", 3)

    got, _, _ = trio.run(running, check)
    first, _, second = got.partition(b"|")
    if first.startswith(b"HTTP/1.1 200") and not second:
        return True, "the answer came; the next request on the connection got nothing in 3 s"
    return False, f"second answer: {second[:40]!r}"


@case
def send_eof_race() -> tuple[bool, str]:
    """An invalid chunked body: hypercorn writes its 400 while the app's answer goes out
    and closes the connection with ``send_eof`` outside its send lock; the write that
    runs into it raises trio.BusyResourceError, and since ``TCPServer.run`` contains
    only OSError, that ends the whole server (``serve()`` raises)."""
    bad = (
        b"POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n"
        b"zz\r\nabc\r\n0\r\n\r\n"
    )

    def check(port: int) -> int:
        for n in range(1, 301):
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=2) as s:
                    s.sendall(bad)
                    _read_until(s, b"\r\n\r\n", 1)
            except OSError:
                return n  # refused: the server is gone
        return 0

    tries, error, _ = trio.run(running, check)
    if error is not None:
        return True, f"serve() ended after {tries} tries: {_leaf(error)}"
    return False, "300 tries, the server survived"


@case
def unbounded_write() -> tuple[bool, str]:
    """A client that stops reading holds the graceful shutdown forever: hypercorn
    shields its socket writes, so graceful_timeout (1 s here) cannot end them."""

    def check(port: int) -> None:
        s = socket.create_connection(("127.0.0.1", port))
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        s.sendall(b"GET /big HTTP/1.1\r\nHost: h\r\n\r\n")
        time.sleep(1)  # reads nothing: the server's write blocks
        CASES_OPEN.append(s)

    def release() -> None:  # the client goes: the shielded write fails, the server ends
        for s in CASES_OPEN:
            s.close()

    _, _, stopped_in = trio.run(partial(running, check, graceful=1.0, release=release))
    if stopped_in is None:
        return True, "serve() had not returned 6 s after the stop (graceful_timeout 1 s)"
    return False, f"serve() returned {stopped_in:.1f} s after the stop"


CASES_OPEN: list[socket.socket] = []


@case
def no_head_deadline() -> tuple[bool, str]:
    """A request head has no deadline of its own: after one request (the idle timer is
    gone, first case) a head sent a byte every 0.5 s is still being read 10 s later."""

    def check(port: int) -> bool:
        with socket.create_connection(("127.0.0.1", port)) as s:
            s.sendall(b"GET / HTTP/1.1\r\nHost: h\r\n\r\n")
            _read_until(s, b"ok", 5)
            try:
                for byte in b"GET / HTTP/1.1\r\nX-Slow: aaaaa":
                    s.sendall(bytes([byte]))
                    time.sleep(0.5)
            except OSError:
                return False  # closed on it
            s.settimeout(0.1)
            try:
                return s.recv(100) != b""
            except TimeoutError:
                return True  # open and silent

    open_still, _, _ = trio.run(partial(running, check, keep_alive=1.0))
    if open_still:
        return True, "a head trickled over 14 s was still being read (keep_alive_timeout 1 s)"
    return False, "the slow head's connection was closed"


@case
def no_connection_cap() -> tuple[bool, str]:
    """No bound on open connections: beyond the descriptor limit (100 here) accept()
    fails, trio logs an ERROR traceback ten times a second, and a new client waits in
    the listen queue with no answer, where a 503 would tell it to come back."""
    if __name__ != "__main__":
        return False, "run as a script"
    server = subprocess.Popen(
        [sys.executable, __file__, "--serve-limited", *(["--gateway"] if GATEWAY else [])],
        stdout=subprocess.PIPE,
        text=True,
        stderr=subprocess.PIPE,
    )
    assert server.stdout is not None
    port = int(server.stdout.readline())
    held = [socket.create_connection(("127.0.0.1", port)) for _ in range(150)]
    time.sleep(0.5)
    with socket.create_connection(("127.0.0.1", port)) as s:
        s.sendall(b"GET / HTTP/1.1\r\nHost: h\r\nConnection: close\r\n\r\n")
        got = _read_until(s, b"ok", 3)
    for h in held:
        h.close()
    server.terminate()
    _, err = server.communicate(timeout=10)
    errors = err.count("accept returned EMFILE")
    if not got:
        return True, f"no answer in 3 s; the server logged {errors} accept errors meanwhile"
    return False, f"answered: {got[:30]!r}"


def _serve_limited() -> None:
    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (100, hard))
    config = Config()
    config.bind = ["127.0.0.1:0"]
    config.keep_alive_timeout = 60

    async def main() -> None:
        async with trio.open_nursery() as nursery:
            if GATEWAY:
                serving = partial(_serve_gateway, config, trio.sleep_forever)
            else:
                serving = partial(serve, app(), config, shutdown_trigger=trio.sleep_forever)
            urls = await nursery.start(serving)
            print(urls[0].rsplit(":", 1)[1], flush=True)

    trio.run(main)


def _leaf(exc: BaseException) -> str:
    while isinstance(exc, BaseExceptionGroup):
        exc = exc.exceptions[0]
    return f"{type(exc).__module__}.{type(exc).__name__}: {exc}"


def main(names: list[str]) -> int:
    names = [n for n in names if n != "--gateway"]
    if names == ["--serve-limited"]:
        _serve_limited()
        return 0
    import importlib.metadata as md

    versions = ", ".join(f"{p} {md.version(p)}" for p in ("hypercorn", "quart-trio", "quart", "trio"))
    how = "the gateway's connection handler" if GATEWAY else "stock hypercorn"
    print(f"{how}: {versions}; python {sys.version.split()[0]}; {sys.platform}")
    for name in names or list(CASES):
        reproduced, what = CASES[name]()
        print(f"{name}: {'REPRODUCED' if reproduced else 'not reproduced'} ({what})", flush=True)
    return 0


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    raise SystemExit(main(sys.argv[1:]))
