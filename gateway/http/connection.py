"""The HTTP/1.1 connection handler: one per accepted TCP connection, on h11's public API.

A connection is one task, the *reader*, plus one task per request (its
:class:`~gateway.http.exchange.Exchange`, which calls the ASGI app). The reader owns
the socket's input and an explicit state (:class:`Phase`):

``IDLE`` → (bytes of a head) ``HEAD`` → (the head) ``BODY`` → (the body's end)
``ANSWER`` → (the answer's end) ``IDLE`` again, or ``LINGER`` → ``CLOSED``;
an answer that ends while the body still comes → ``DISCARD`` (the rest of a small body
is read and dropped) → ``IDLE``.

A head whole in the buffer and plain (:func:`gateway.http.h1.parse_head`) is read
without h11; any other is read by a fresh :class:`h11.Connection`, which then reads that
request's body and frames its answer; bytes it holds beyond the request go back to the
buffer when the answer is done. Invariants:

* **One deadline, derived from the state** (:meth:`Connection._deadline`): the time to
  the next head (``keep_alive_timeout``; ``header_timeout`` from a head's first byte, and
  for a connection's first head from the connect), the silence allowed in a body
  (``header_timeout``), the linger after the FIN; none while an answer is under way.
  The reader waits for the socket in one cancel scope carrying it; a change that brings
  it closer moves the scope's deadline, a later one is armed when the earlier fires.
  Only the wait for the socket is under it. Bytes that were there in time are read
  even after it (a loaded loop wakes late). A slow head or body gets 408; an idle
  connection is closed without a word.
* **One writer at a time**: the exchange once its answer began, the reader before (a
  refusal, written without a wait: it fits the socket's buffer, else the connection is
  dropped). The FIN goes out only after the answer's last write.
* **Contained**: whatever fails in a connection closes that connection only
  (:meth:`Server.serve_connection`).
* **Bounded**: at most ``max_connections`` open (more get 503 ``gateway_overloaded``);
  a write the client does not take within ``write_timeout`` drops the connection;
  bodies in more than :data:`MAX_BODY_PIECES` chunks are refused; a reader that finds
  bytes waiting :data:`QUICK_READS` times in a row lets other tasks run once.
* **Clean closes**: after an answer the connection either takes the next request or
  sends ``Connection: close``, the FIN, then reads and drops what still comes for up to
  :data:`LINGER_SECONDS` (so the client reads the answer, not a reset). An answer that
  comes before a body larger than :data:`DISCARD_LIMIT` (or of unknown size) closes.
* HTTP/1.1 (and 1.0) only: another version gets 505; ``Upgrade`` is ignored (the header
  is dropped); a request with both ``Transfer-Encoding`` and ``Content-Length`` gets 400.
"""

from __future__ import annotations

import enum
import logging
import math
import socket
import time
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import unquote

import h11
import trio

from gateway.http.exchange import H11, Answer, Exchange, Plain, date_field, error_answer
from gateway.http.h1 import parse_head, response_head

__all__ = [
    "DISCARD_LIMIT",
    "LINGER_SECONDS",
    "MAX_BODY_PIECES",
    "QUICK_READS",
    "Connection",
    "ConnectionPolicy",
    "Phase",
    "Server",
]

log = logging.getLogger("gateway.http")

MAX_RECV = 65536
#: reads in a row that found bytes waiting before the reader lets other tasks run once
QUICK_READS = 8
#: after deciding to close: read and drop what the client still sends, this long at most
LINGER_SECONDS = 2.0
LINGER_BYTES = 16 * 1024 * 1024
#: after a read deadline: how long to look for bytes that did arrive in time
GRACE_READ_SECONDS = 0.05
#: an answer before the body: a body declared this size or smaller is read and dropped
DISCARD_LIMIT = 64 * 1024
#: the most pieces a chunked request body may come in (each costs parsing)
MAX_BODY_PIECES = 16_384
#: connections beyond ``max_connections`` answered with a 503 at the same time, at most
MAX_REFUSING = 256
_ASGI = {"spec_version": "2.3", "version": "3.0"}


class Phase(enum.Enum):
    """What the reader is reading (module docstring)."""

    IDLE = "idle"  # no request: waiting for a head's first byte
    HEAD = "head"  # a head is arriving (h11 reads it)
    BODY = "body"  # the request's body is arriving
    ANSWER = "answer"  # the request is read; its answer is under way
    DISCARD = "discard"  # answered before its small body came: the rest is dropped
    LINGER = "linger"  # FIN sent: what the client still sends is dropped
    CLOSED = "closed"


class _RateLimited:
    """At most one log line per ``interval`` seconds; the rest are counted."""

    def __init__(self, interval: float = 10.0) -> None:
        self.interval = interval
        self._last = -math.inf
        self._skipped = 0

    def __call__(self, level: int, msg: str, *args: object) -> None:
        now = time.monotonic()
        if now - self._last < self.interval:
            self._skipped += 1
            return
        if self._skipped:
            msg += " (and %d more like it in the last %.0f s)"
            args = (*args, self._skipped, now - self._last)
        self._last, self._skipped = now, 0
        log.log(level, msg, *args)


@dataclass
class ConnectionPolicy:
    """The connection limits of one server, and what they did (counters)."""

    header_timeout: float = 10.0
    max_connections: int = 16384
    #: seconds a write may wait for the client to take it (None: no bound but the drain's)
    write_timeout: float | None = None
    #: heads read without h11 when plain (False: h11 reads every one)
    plain_heads: bool = True
    open: int = 0
    refusing: int = 0
    refused: int = 0
    timed_out: int = 0
    contained: int = 0
    #: requests whose head was read without h11
    plain: int = 0
    #: connections dropped because a write missed its deadline or was cut
    aborted: int = 0
    warn_refused: _RateLimited = field(default_factory=_RateLimited, repr=False)
    warn_failed: _RateLimited = field(default_factory=_RateLimited, repr=False)
    warn_timeout: _RateLimited = field(default_factory=_RateLimited, repr=False)


def canned_response(
    status: int, code: str, message: str, *, retry_after: int | None = None
) -> bytes:
    """A complete HTTP/1.1 error answer with the gateway's JSON error body, closing."""
    fields, body = error_answer(code, message)
    if retry_after is not None:
        fields.append((b"retry-after", b"%d" % retry_after))
    head, _ = response_head(status, [*fields, date_field()], close=True)
    return head + body


def unreadable_response(status: int) -> bytes:
    """The answer to a request h11 refused (``status``: its ``error_status_hint``)."""
    if status == 431:
        code, message = (
            "request_head_too_large",
            "The request head is larger than this server reads.",
        )
    elif status == 501:
        code = "transfer_coding_not_supported"
        message = "This server reads request bodies with Content-Length or chunked framing only."
    else:
        status, code = 400, "bad_request"
        message = (
            "The request is not valid HTTP/1.1 (its request line, a header or its body's "
            "framing); it was not read."
        )
    return canned_response(status, code, message)


def overloaded_response() -> bytes:
    return canned_response(
        503,
        "gateway_overloaded",
        "The server has too many open connections (server.max_connections); retry shortly.",
        retry_after=1,
    )


def _address(addr: Any) -> tuple[str, int] | None:
    """An ASGI ``client``/``server`` from a socket address (None for a Unix socket's)."""
    if isinstance(addr, tuple) and len(addr) >= 2:
        return (str(addr[0]), int(addr[1]))
    return None


class Server:
    """What the connections of one served app share: the app, hypercorn's config (its
    ``keep_alive_timeout``, ``keep_alive_max_requests``, ``h11_max_incomplete_size``,
    ``root_path``, ``server_names``), the policy, the open connections, the stop."""

    def __init__(self, app: Any, config: Any, policy: ConnectionPolicy) -> None:
        self.app = app
        self.config = config
        self.policy = policy
        self.stopping = False
        self.connections: set[Connection] = set()

    def stop(self) -> None:
        """The server stops: idle connections close now, busy ones after their answer."""
        self.stopping = True
        for conn in list(self.connections):
            conn.rearm()

    async def serve_connection(self, stream: Any, state: Any) -> None:
        """Serve one accepted connection (trio's ``SocketStream``; its socket is taken
        over) until it closes; nothing it raises but ``Cancelled`` leaves."""
        policy = self.policy
        try:
            if type(stream) is not trio.SocketStream:
                raise TypeError(f"cannot serve a {type(stream).__name__} (plain TCP only)")
            sock = socket.socket(fileno=stream.socket.detach())
            sock.setblocking(False)
            if policy.open >= policy.max_connections:
                await self._refuse(sock)
                return
            policy.open += 1
            try:
                await self._serve(sock, state)
            finally:
                policy.open -= 1
        except* Exception as group:
            policy.contained += 1
            first = group.exceptions[0]
            policy.warn_failed(
                logging.WARNING,
                "a connection failed and was closed (contained: %s: %s)",
                type(first).__name__,
                first,
            )
            log.debug("contained connection failure", exc_info=group)

    async def _serve(self, sock: socket.socket, state: Any) -> None:
        """One connection, its socket closed at the end whatever happened (a client that
        reset before it was served, e.g. a port scan, is no failure: its socket has no
        peer any more)."""
        try:
            try:
                conn = Connection(self, sock, state)
            except OSError:  # (getpeername: ENOTCONN)
                return
            self.connections.add(conn)
            try:
                await conn.serve()
            finally:
                self.connections.discard(conn)
        finally:
            if sock.fileno() != -1:
                trio.lowlevel.notify_closing(sock)
                sock.close()

    async def _refuse(self, sock: socket.socket) -> None:
        """503 ``gateway_overloaded``, the FIN, then what the client sends is dropped for
        a moment (so it reads the answer); at most :data:`MAX_REFUSING` at a time."""
        policy = self.policy
        policy.refused += 1
        policy.warn_refused(
            logging.WARNING,
            "refusing connections: server.max_connections (%d) are open",
            policy.max_connections,
        )
        if policy.refusing >= MAX_REFUSING:
            sock.close()
            return
        policy.refusing += 1
        try:
            with trio.move_on_after(LINGER_SECONDS / 2):
                sock.send(overloaded_response())
                sock.shutdown(socket.SHUT_WR)
                while True:
                    try:
                        if not sock.recv(MAX_RECV):
                            break
                        continue
                    except BlockingIOError:
                        pass
                    await trio.lowlevel.wait_readable(sock)
        except OSError:
            pass
        finally:
            policy.refusing -= 1
            trio.lowlevel.notify_closing(sock)
            sock.close()


class Connection:
    """One client connection (module docstring)."""

    def __init__(self, server: Server, sock: socket.socket, state: Any) -> None:
        self.server = server
        self.policy = server.policy
        self.config = server.config
        self.sock = sock
        self.state = state
        self.client = _address(sock.getpeername())
        self.local = _address(sock.getsockname())
        self.phase = Phase.IDLE
        #: bytes read and not yet parsed (a head, a plain body, the next request)
        self.buffer = b""
        #: the request's h11 connection while h11 reads it (and frames its answer)
        self.h11: h11.Connection | None = None
        self.exchange: Exchange | None = None
        self.requests = 0
        self.body_left = 0  # of a plain body
        self.declared: int | None = 0  # the request's Content-Length (None: unknown)
        self.pieces = 0  # of a chunked body
        now = trio.current_time()
        #: when the head being read began (its header deadline); the connect for the first
        self.head_started: float | None = now
        self.idle_since = now
        self.last_read = now
        self.linger_until = math.inf
        self.linger_bytes = 0
        #: the client's EOF or reset was read: nothing more comes
        self.client_done = False
        self.fin_sent = False
        self.closed = False
        self._ignore_input = False
        self._put: tuple[bytes, bool] | None = None  # a body piece the app has no room for
        self._scope: trio.CancelScope | None = None
        self._graced = -math.inf
        self._quick = 0
        self._nursery: trio.Nursery | None = None

    @property
    def stopping(self) -> bool:
        return self.server.stopping

    # ------------------------------------------------------------------ the reader

    async def serve(self) -> None:
        try:
            async with trio.open_nursery() as nursery:
                self._nursery = nursery
                await self._read()
        finally:
            self._close_now()

    async def _read(self) -> None:
        while not self.closed and not self.client_done:
            self._process()
            if self.closed:
                return
            exchange = self.exchange
            if self._put is not None:
                (data, more), self._put = self._put, None
                if exchange is not None:  # (none: answered meanwhile, the piece is dropped)
                    await exchange.put(data, more)  # the app is behind: no read deadline
                continue
            if self.phase is Phase.ANSWER and self._pending():
                if exchange is None or exchange.finished:  # (an answer's end moves on)
                    self._close_now()
                    return
                await exchange.wait_finished()  # a request queued behind the answer
                continue
            with trio.CancelScope(deadline=self._deadline()) as scope:
                self._scope = scope
                await self._read_some()
            self._scope = None
            if scope.cancelled_caught:
                await self._deadline_came()

    def _pending(self) -> bool:
        """Input waiting to be parsed once the answer is done."""
        return bool(self.buffer) or (self.h11 is not None and bool(self.h11.trailing_data[0]))

    def _reading(self) -> bool:
        if self.closed or self.client_done or self._put is not None:
            return False
        return self.phase is not Phase.ANSWER or not self._pending()

    async def _read_some(self) -> None:
        """Read and take what comes until the reader must wait elsewhere (the only
        wait here is the socket's, under the deadline)."""
        while self._reading():
            try:
                data: bytes | None = self.sock.recv(MAX_RECV)
            except BlockingIOError:
                data = None
            except OSError:  # reset (or closed under the read)
                self._reset()
                return
            if data is None:
                self._quick = 0
                try:
                    await trio.lowlevel.wait_readable(self.sock)
                except trio.ClosedResourceError:
                    return
                continue
            self._take(data)
            self._quick += 1
            if self._quick >= QUICK_READS:
                self._quick = 0
                await trio.lowlevel.checkpoint()

    def _take(self, data: bytes) -> None:
        self.last_read = trio.current_time()
        if self.phase is Phase.LINGER:
            self.linger_bytes += len(data)
            if not data or self.linger_bytes > LINGER_BYTES:
                self._close_now()
            return
        if not data:
            self._eof()
        elif self._ignore_input:
            pass
        elif self.h11 is not None and self.phase is not Phase.ANSWER:
            self.h11.receive_data(data)
            self._process()
        else:
            self.buffer = self.buffer + data if self.buffer else data
            self._process()

    def _process(self) -> None:
        """Parse what the reader holds, as far as the phase allows (no wait)."""
        while not self.closed and self._put is None:
            phase = self.phase
            if phase is Phase.IDLE:
                if not self.buffer:
                    return
                self._begin()
            elif self.h11 is not None and phase in (Phase.HEAD, Phase.BODY, Phase.DISCARD):
                if not self._h11_event():
                    return
            elif phase is Phase.BODY or phase is Phase.DISCARD:
                if not self._plain_body():
                    return
            else:
                return

    # ------------------------------------------------------------------ requests

    def _begin(self) -> None:
        """A request's first bytes are in the buffer: a plain head, or h11's to read."""
        max_size = self.config.h11_max_incomplete_size
        head = parse_head(self.buffer, max_size) if self.policy.plain_heads else None
        if head is None:
            conn = h11.Connection(h11.SERVER, max_incomplete_event_size=max_size)
            conn.receive_data(self.buffer)
            self.buffer = b""
            self.h11 = conn
            if self.head_started is None:
                self.head_started = trio.current_time()
            self._set_phase(Phase.HEAD)
            return
        self.policy.plain += 1
        data, end = self.buffer, head.size + head.length
        body = data[head.size : end]
        self.buffer = data[end:]
        self.body_left = head.length - len(body)
        self.declared = head.length
        raw_path = head.path.encode("ascii")
        scope = self._scope_for(head.method, head.path, raw_path, head.query, head.headers, "1.1")
        whole = body if not self.body_left else None
        exchange = self._start(scope, Plain(), whole, close=not head.keep_alive)
        if self.body_left:
            if body:
                exchange.put_nowait(body, True)  # (an empty queue: it fits)
            self._set_phase(Phase.BODY)
        else:
            self._set_phase(Phase.ANSWER)

    def _scope_for(
        self,
        method: str,
        path: str,
        raw_path: bytes,
        query: bytes,
        headers: list[tuple[bytes, bytes]],
        version: str,
    ) -> dict[str, Any]:
        return {
            "type": "http",
            "asgi": _ASGI,
            "http_version": version,
            "method": method,
            "scheme": "http",
            "path": path,
            "raw_path": raw_path,
            "query_string": query,
            "root_path": self.config.root_path,
            "headers": headers,
            "client": self.client,
            "server": self.local,
            "state": self.state.copy(),
            "extensions": {},
        }

    def _start(
        self, scope: dict[str, Any], framing: Plain | H11, whole: bytes | None, *, close: bool
    ) -> Exchange:
        self.requests += 1
        close = close or self.requests >= self.config.keep_alive_max_requests
        exchange = Exchange(self, scope, framing, whole=whole, close=close)
        self.exchange = exchange
        self.head_started = None
        self.pieces = 0
        assert self._nursery is not None
        self._nursery.start_soon(exchange.run, self.server.app)
        return exchange

    def _h11_event(self) -> bool:
        """Take h11's next event; False when it needs more bytes (or the reader stops)."""
        conn = self.h11
        assert conn is not None
        try:
            event = conn.next_event()
        except h11.RemoteProtocolError as exc:
            self._unreadable(exc.error_status_hint)
            return False
        if event is h11.NEED_DATA:
            return False
        if type(event) is h11.Request:
            return self._h11_request(conn, event)
        if type(event) is h11.Data:
            self.pieces += event.chunk_start
            if self.pieces > MAX_BODY_PIECES:
                self._refuse(
                    400,
                    "bad_request",
                    f"The request body arrived in more than {MAX_BODY_PIECES} chunks; "
                    "send it in fewer, larger ones.",
                )
                return False
            self._body_part(event.data, True)
            return True
        if type(event) is h11.EndOfMessage:
            self._body_part(b"", False)
            self._body_end()
            return True
        return False  # (PAUSED or ConnectionClosed: not reached while a request is read)

    def _h11_request(self, conn: h11.Connection, event: h11.Request) -> bool:
        if not event.http_version.startswith(b"1."):
            self._refuse(505, "http_version_not_supported", "This server speaks HTTP/1.1 only.")
            return False
        headers: list[tuple[bytes, bytes]] = []
        length: int | None = 0
        chunked = has_length = False
        for name, value in event.headers:
            if name == b"content-length":
                length = int(value)
                has_length = True
            elif name == b"transfer-encoding":
                chunked = True
            if name != b"upgrade":  # served as plain HTTP/1.1 (RFC 9110 §7.8)
                headers.append((name, value))
        if chunked and length is not None and has_length:
            # both framings (``Content-Length: 0`` too): a front that trusts the other
            # one would read a request hidden in this body (smuggling, RFC 9112 §6.1)
            self._refuse(
                400,
                "bad_request",
                "A request may not carry both Transfer-Encoding and Content-Length.",
            )
            return False
        raw_path, _, query = event.target.partition(b"?")
        try:
            path = unquote(raw_path.decode("ascii"), errors="strict")
        except UnicodeDecodeError:
            self._refuse(400, "bad_request", "The request target is not ASCII or not UTF-8.")
            return False
        names = self.config.server_names
        if names and dict(headers).get(b"host", b"").decode("latin-1") not in names:
            self._refuse(404, "not_found", "No such route on this server; see docs/api.md.")
            return False
        self.declared = None if chunked else length
        method, version = event.method.decode("ascii"), event.http_version.decode("ascii")
        scope = self._scope_for(method, path, raw_path, query, headers, version)
        whole = b"" if not chunked and not length else None
        exchange = self._start(scope, H11(conn, method), whole, close=False)
        exchange.expects_continue = conn.they_are_waiting_for_100_continue
        self._set_phase(Phase.BODY)
        return True

    def _plain_body(self) -> bool:
        data = self.buffer
        if not data:
            return False
        left = self.body_left
        part, self.buffer = (data, b"") if len(data) <= left else (data[:left], data[left:])
        self.body_left = left = left - len(part)
        self._body_part(part, left > 0)
        if not left:
            self._body_end()
        return True

    def _body_part(self, data: bytes, more: bool) -> None:
        exchange = self.exchange
        if exchange is None or self.phase is not Phase.BODY:
            return  # answered already: dropped
        try:
            exchange.put_nowait(data, more)
        except trio.WouldBlock:
            self._put = (data, more)
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            pass  # the app no longer reads

    def _body_end(self) -> None:
        if self.phase is Phase.DISCARD:
            self._recycle()
        else:
            self._set_phase(Phase.ANSWER)

    # ------------------------------------------------------------------ the answer's side

    def answer_starts(self, exchange: Exchange) -> bool:
        """An answer begins: must the connection close after it? (the server stops, or
        a body too large to read and drop, or of unknown size, is still owed)"""
        if self.stopping:
            return True
        if exchange is self.exchange and self.phase is Phase.BODY:
            return self.declared is None or self.declared > DISCARD_LIMIT
        return False

    def answer_done(self, exchange: Exchange) -> None:
        """The answer's last byte is written: the next request, or the close."""
        if exchange is not self.exchange or self.closed:
            return
        conn = self.h11
        close = exchange.close or self.stopping or self.client_done
        if conn is not None and conn.our_state is h11.MUST_CLOSE:
            close = True
        if close or self._ignore_input:
            self._fin_and_linger()
        elif self.phase is Phase.BODY:
            self.exchange = None
            self._set_phase(Phase.DISCARD)  # the rest of a small body is dropped
        else:
            self._recycle()

    def answer_cut(self, exchange: Exchange) -> None:
        """The app ended (or failed) half-way through its answer: the connection is
        unusable."""
        if exchange is self.exchange:
            self._close_now()

    def continue_body(self, exchange: Exchange) -> None:
        """The app reads a body the client waits to send (``Expect: 100-continue``)."""
        framing = exchange.framing
        if (
            exchange is self.exchange
            and isinstance(framing, H11)
            and framing.conn.they_are_waiting_for_100_continue
        ):
            data = framing.conn.send(h11.InformationalResponse(status_code=100, headers=[]))
            if data:
                self.write_now(data)

    def _recycle(self) -> None:
        conn = self.h11
        if conn is not None:
            rest = conn.trailing_data[0]
            self.buffer = rest + self.buffer if rest else self.buffer
            self.h11 = None
        self.exchange = None
        self.idle_since = trio.current_time()
        self.head_started = self.idle_since if self.buffer else None
        self._set_phase(Phase.IDLE)

    # ------------------------------------------------------------------ writes

    def _send_now(self, data: bytes | memoryview) -> bytes | memoryview | None:
        """What is left of ``data`` after one ``send(2)`` that does not wait; None: the
        connection is lost."""
        if self.closed or self.fin_sent:
            return None
        try:
            sent = self.sock.send(data)
        except BlockingIOError:
            return data
        except OSError:
            return None
        return b"" if sent == len(data) else memoryview(data)[sent:]

    def write_now(self, data: bytes) -> bool:
        """Write ``data`` without a wait; False (and the connection dropped) if it does
        not fit the socket's buffer."""
        if self._send_now(data) == b"":
            return True
        self._close_now()
        return False

    async def write(self, data: bytes) -> bool:
        """Write ``data``; False if the connection is lost (then it is closed). A write
        that waits is bounded by ``write_timeout``; one cut by a cancel (the drain's
        deadline) leaves the connection unusable, so it is closed too."""
        rest = self._send_now(data)
        if rest == b"":
            return True
        if rest is None:
            self._lost()
            return False
        timeout = self.policy.write_timeout
        with trio.move_on_after(math.inf if timeout is None else timeout) as bound:
            try:
                while rest:
                    await trio.lowlevel.wait_writable(self.sock)
                    rest = self._send_now(rest)
                    if rest is None:
                        self._lost()
                        return False
                return True
            except trio.ClosedResourceError:
                return False
            except trio.Cancelled:
                self._aborted()
                raise
        if bound.cancelled_caught:
            self._aborted()
        return False

    def _aborted(self) -> None:
        if not self.closed:
            self.policy.aborted += 1
            log.warning("closing a connection whose client stopped reading")
        self._close_now()

    # ------------------------------------------------------------------ ends

    def _eof(self) -> None:
        """The client closed its side."""
        self.client_done = True
        phase, exchange = self.phase, self.exchange
        unanswered = exchange is None or exchange.answer in (Answer.WAITING, Answer.HELD)
        if (phase is Phase.HEAD or phase is Phase.BODY) and unanswered:
            # a request cut short: h11 refuses it (400), and so does the plain way
            self._answer_and_close(unreadable_response(400))
            return
        if exchange is not None and phase in (Phase.BODY, Phase.ANSWER):
            exchange.client_gone()  # its answer goes on; the connection closes after it
            return
        self._close_now()

    def _reset(self) -> None:
        self.client_done = True
        self._close_now()

    def _lost(self) -> None:
        """A write failed: the client is gone."""
        self.client_done = True
        self._close_now()

    def _unreadable(self, status: int) -> None:
        """h11 refused what the client sent."""
        if self.phase is Phase.DISCARD:
            self._close_now()  # answered already; the rest was to be dropped anyway
        elif not self._end_the_answer():
            self._answer_and_close(unreadable_response(status))

    def _refuse(self, status: int, code: str, message: str, *, linger: bool = True) -> None:
        """Refuse the request: answered with the error, then closed; or, when its answer
        is already going out (one writer: no second status line inside it), that answer
        ends, the rest of the input is ignored, and the connection closes."""
        if not self._end_the_answer():
            self._answer_and_close(canned_response(status, code, message), linger=linger)

    def _end_the_answer(self) -> bool:
        """If an answer is going out: let it end, ignore the input, close after it."""
        exchange = self.exchange
        if exchange is None or exchange.answer in (Answer.WAITING, Answer.HELD):
            return False
        self._ignore_input = True
        exchange.close = True
        self._set_phase(Phase.ANSWER)
        return True

    def _answer_and_close(self, data: bytes, *, linger: bool = True) -> None:
        """The connection answers by itself (the app's sends then go nowhere), then
        closes: after a linger, or at once (a client too slow to be waited for; what it
        sent is read, so the close is a FIN, not a reset)."""
        if self.exchange is not None:
            self.exchange.drop()
        if self.write_now(data):
            if linger:
                self._fin_and_linger()
            else:
                self._close_now()

    def _fin_and_linger(self) -> None:
        self.exchange = None
        self.h11 = None
        self.buffer = b""
        if self.client_done or self.closed:
            self._close_now()
            return
        try:
            self.sock.shutdown(socket.SHUT_WR)
        except OSError:
            self._close_now()
            return
        self.fin_sent = True
        self.linger_until = trio.current_time() + LINGER_SECONDS
        self._set_phase(Phase.LINGER)

    def _close_now(self) -> None:
        if self.closed:
            return
        self.closed = True
        self.phase = Phase.CLOSED
        exchange, self.exchange = self.exchange, None
        if exchange is not None:
            exchange.drop()
        trio.lowlevel.notify_closing(self.sock)
        self.sock.close()

    # ------------------------------------------------------------------ the deadline

    def _deadline(self) -> float:
        phase = self.phase
        if phase is Phase.IDLE:
            if self.stopping:
                return -math.inf
            if self.head_started is not None:
                return self.head_started + self.policy.header_timeout
            return self.idle_since + float(self.config.keep_alive_timeout)
        if phase is Phase.HEAD:
            assert self.head_started is not None
            return self.head_started + self.policy.header_timeout
        if phase is Phase.BODY or phase is Phase.DISCARD:
            return self.last_read + self.policy.header_timeout
        if phase is Phase.LINGER:
            return self.linger_until
        return math.inf

    def _set_phase(self, phase: Phase) -> None:
        self.phase = phase
        self.rearm()

    def rearm(self) -> None:
        """Bring the waiting read's deadline closer if the state's came closer (a later
        one is armed when the earlier fires: no move for it)."""
        scope = self._scope
        if scope is not None:
            deadline = self._deadline()
            if deadline < scope.deadline:
                scope.deadline = deadline

    async def _deadline_came(self) -> None:
        deadline = self._deadline()
        if trio.current_time() < deadline:
            return  # it moved later meanwhile: armed again by the loop
        if deadline != self._graced:
            # a loop that lags looks at the deadline before the socket: bytes that
            # arrived in time are read (once per deadline: a trickle cannot live on it)
            self._graced = deadline
            data = await self._grace_read()
            if data is not None:
                self._take(data)
                return
        self._timed_out()

    async def _grace_read(self) -> bytes | None:
        with trio.move_on_after(GRACE_READ_SECONDS):
            while not self.closed:
                try:
                    return self.sock.recv(MAX_RECV)
                except BlockingIOError:
                    pass
                except OSError:
                    self._reset()
                    return None
                try:
                    await trio.lowlevel.wait_readable(self.sock)
                except trio.ClosedResourceError:
                    return None
        return None

    def _timed_out(self) -> None:
        phase, exchange = self.phase, self.exchange
        if self.closed or phase is Phase.ANSWER:
            return
        first_head = phase is Phase.IDLE and not self.requests and not self.stopping
        if phase is Phase.HEAD or phase is Phase.BODY or first_head:
            policy = self.policy
            policy.timed_out += 1
            what = "a request body" if phase is Phase.BODY else "a request head"
            policy.warn_timeout(
                logging.INFO,
                "closing a connection that sent %s too slowly (server.header_timeout_seconds = %g)",
                what,
                policy.header_timeout,
            )
            answered = exchange is not None and exchange.answer not in (Answer.WAITING, Answer.HELD)
            if not first_head and not answered:
                part = "body" if phase is Phase.BODY else "head"
                message = f"The request {part} did not arrive within {policy.header_timeout:g} s."
                self._refuse(408, "request_timeout", message, linger=False)
                return
        self._close_now()
