"""Connection-level robustness for hypercorn's trio worker (HTTP/1.1 over plain TCP).

hypercorn 0.18 runs one task per connection (the *reader*) plus one task per request
(the *app task*). What went wrong, measured here, and what this module does about it:

* **A failure in one connection ended the server.** ``trio.serve_listeners`` runs
  every connection handler in the server's nursery and hypercorn's handler only
  catches ``OSError``: anything else ended the listener and every other connection.
  :meth:`GatewayTCPServer.run` contains every per-connection failure to its connection
  (one warning line, rate-limited; the traceback at debug level).
* **quart-trio cancels hypercorn's bookkeeping.** hypercorn finishes a request (recycle
  the keep-alive connection, or close it) inside the app's last ``send``; quart-trio
  cancels the app task as soon as its message reader sees ``http.disconnect``, which
  hypercorn delivers *during* that bookkeeping. Cancelled half-way: (a) a request
  answered before its body arrived left the connection wedged forever (neither
  recycled nor closed); (b) after every keep-alive request the idle timer was never
  re-armed, so idle connections were held forever; (c) the close ran ``send_eof`` in
  the cancelled task while the reader was writing hypercorn's own 400 for a bad
  chunked body: trio's ``BusyResourceError`` escaped and, by the first point, killed
  the server. :class:`GatewayH11Protocol` runs that bookkeeping shielded,
  :meth:`GatewayTCPServer._close` waits for a write under way before its EOF (and
  never cuts that write), and :class:`GatewayTaskGroup` never lets the reader block on
  an app that has finished. Also: the reader no longer waits forever on pipelined
  bytes once the connection closes, and a closed connection's socket is released at
  once (hypercorn kept it in CLOSE-WAIT until the keep-alive timer fired).
* **Bytes the connection cannot use.** After a request that must be the connection's
  last (HTTP/1.0, ``Connection: close``), or a broken request body once the answer has
  started: that answer is finished, the rest of the input ignored, then the connection
  closes (hypercorn cut the answer short).
* **A response sent before the request body was read** (401, 404, 413...): if the
  declared body is small (``Content-Length`` <= :data:`DISCARD_LIMIT`) the rest is read
  and discarded and the connection stays usable; otherwise the response carries
  ``Connection: close`` and the connection is closed *cleanly*: FIN first, then what
  the client still sends is read and dropped for up to :data:`LINGER_SECONDS`, so the
  client reads the response instead of a reset.
* **Slow clients.** A request head must be complete within ``header_timeout``
  seconds of its first byte (of the connection, for the first request; idle
  keep-alive time is hypercorn's ``keep_alive_timeout``): else ``408`` and close.
  While a request body is being received, a silence longer than ``header_timeout``
  closes the connection too (``408`` if no response has started); the app's own
  ``BODY_TIMEOUT`` bounds the whole body.
* **Too many connections.** Beyond ``max_connections`` open connections, a new one gets
  an immediate ``503 gateway_overloaded`` with ``Retry-After: 1`` and is closed
  (never read; at most :data:`MAX_REFUSING` of them are being answered at a time,
  beyond that they are closed at once).
* **HTTP/1.1 only.** The HTTP/2 preface (``PRI * HTTP/2.0``) and any major version but
  1 get ``505``; ``Upgrade`` (``h2c``, ``websocket``) is ignored: the request is served
  as plain HTTP/1.1 (RFC 9110 §7.8), without the header.

* **The lean path.** A plain head for one of the app's lean routes
  (``ConnectionPolicy.lean_routes``), whole in one read at a request boundary, is served
  by a :class:`gateway.exchange.LeanExchange` instead of h11 and hypercorn's stream
  (about a quarter of a streamed request's CPU): same scope, same answers, same limits; h11 stays
  idle and takes every other head (:mod:`gateway.h1lean` decides, strictly).

:func:`install` swaps :class:`GatewayTCPServer` into hypercorn's trio worker once;
a server whose hypercorn config carries no :class:`ConnectionPolicy` (the demo
upstream, say) keeps hypercorn's behaviour apart from the containment and the fixes.
Everything here leans on hypercorn 0.18 internals; :func:`install` refuses a hypercorn
whose internals it does not recognise (and logs it).
"""

from __future__ import annotations

import contextlib
import functools
import logging
import math
import resource
import time
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import h11
import trio
from hypercorn.config import Config
from hypercorn.events import Closed, Event, RawData, Updated
from hypercorn.protocol.events import Body, Data, EndBody, Response, StreamClosed
from hypercorn.protocol.events import Event as StreamEvent
from hypercorn.protocol.h11 import STREAM_ID, H11Protocol, H11WSConnection
from hypercorn.protocol.http_stream import ASGIHTTPState, HTTPStream
from hypercorn.protocol.ws_stream import WSStream
from hypercorn.trio.task_group import TaskGroup, _handle
from hypercorn.trio.tcp_server import MAX_RECV, TCPServer
from hypercorn.trio.worker_context import EventWrapper, TrioSingleTask, WorkerContext
from hypercorn.typing import AppWrapper, ConnectionState, LifespanState
from hypercorn.typing import Event as IOEvent
from hypercorn.utils import parse_socket_addr
from quart import Quart

from gateway import accept
from gateway.exchange import (
    BODY_KEY,
    DISCARD_LIMIT,
    DISCONNECT_KEY,
    RELEASE_KEY,
    WRITES_KEY,
    Disconnect,
    LeanExchange,
    error_answer,
    error_body,
    unanswered,
)
from gateway.h1lean import parse_head
from gateway.handoff import Handoff
from gateway.streamclock import TimerHandle, clock

log = logging.getLogger("gateway.connections")

POLICY_ATTR = "gateway_connection_policy"
#: the most pieces a request body may arrive in (chunks of ``Transfer-Encoding: chunked``):
#: each costs ~25 µs to parse, so 200,000 one-byte chunks cost 5 s of CPU (a red-team
#: pass); an upload that streams 1 KiB chunks may still send 16 MiB
MAX_BODY_PIECES = 16_384
#: after deciding to close: read and drop what the client still sends, this long at most
LINGER_SECONDS = 2.0
LINGER_BYTES = 16 * 1024 * 1024
#: after a read deadline: how long to look for bytes that did arrive in time
GRACE_READ_SECONDS = 0.05
#: a read deadline met while a write waits for the socket is looked at again this much
#: later (waking the read would wake the write too: the write has its own bound)
WRITING_RECHECK_SECONDS = 0.05
#: reads in a row that found bytes waiting (no wait, so no scheduler round) before the
#: reader yields once anyway: a client that never stops sending cannot starve the rest
QUICK_READS = 8
#: connections beyond ``max_connections`` answered with a 503 at the same time, at most
MAX_REFUSING = 256
#: descriptors a relayed stream holds (client connection + upstream connection)
FDS_PER_STREAM = 2
FD_RESERVE = 64


# --------------------------------------------------------------------------- policy


class WriteBounds:
    """Deadlines for socket writes, shared by the servers of one process."""

    def __init__(self, write_timeout: float | None = None) -> None:
        self.write_timeout = write_timeout
        self.drain_deadline = math.inf
        self.aborted = 0
        self._active: set[trio.CancelScope] = set()

    @contextlib.contextmanager
    def scope(self) -> Iterator[trio.CancelScope]:
        """A cancel scope for one write (enter it *inside* hypercorn's shield)."""
        deadline = self.drain_deadline
        if self.write_timeout is not None:
            deadline = min(deadline, trio.current_time() + self.write_timeout)
        cs = trio.CancelScope(deadline=deadline)
        self._active.add(cs)
        try:
            with cs:
                yield cs
        finally:
            self._active.discard(cs)

    def begin_drain(self, deadline: float) -> None:
        """No write may outlast ``deadline`` (trio time), including those under way."""
        self.drain_deadline = min(self.drain_deadline, deadline)
        for cs in self._active:
            cs.deadline = min(cs.deadline, deadline)

    @property
    def blocked(self) -> int:
        """Writes under way right now."""
        return len(self._active)


class _RateLimited:
    """At most one log line per ``interval`` seconds; the rest are counted."""

    def __init__(self, interval: float = 10.0) -> None:
        self.interval = interval
        self._last = -math.inf
        self._skipped = 0

    def __call__(self, logger: logging.Logger, level: int, msg: str, *args: object) -> None:
        now = time.monotonic()
        if now - self._last < self.interval:
            self._skipped += 1
            return
        if self._skipped:
            msg += " (and %d more like it in the last %.0f s)"
            args = (*args, self._skipped, now - self._last)
        self._last, self._skipped = now, 0
        logger.log(level, msg, *args)


@dataclass
class ConnectionPolicy:
    """The connection-level limits of one server, and what they did (counters)."""

    header_timeout: float = 10.0
    max_connections: int = 16384
    write_bounds: WriteBounds | None = None
    #: ``(method, path)`` served on the lean path when a plain head asks for them
    #: (:mod:`gateway.exchange`); empty: every request takes h11's way
    lean_routes: frozenset[tuple[bytes, bytes]] = frozenset()
    open: int = 0
    refusing: int = 0
    refused: int = 0
    timed_out: int = 0
    contained: int = 0
    #: requests served on the lean path (gateway.exchange)
    lean: int = 0
    #: the quart app a lean request is handed to directly (:func:`plain_asgi`), or None:
    #: through hypercorn's wrapper and the app's ``__call__`` and ``asgi_app``
    http_app: Any = None
    _warn_refused: _RateLimited = field(default_factory=_RateLimited, repr=False)
    _warn_failed: _RateLimited = field(default_factory=_RateLimited, repr=False)
    _warn_timeout: _RateLimited = field(default_factory=_RateLimited, repr=False)


_DEFAULT_POLICY = ConnectionPolicy(header_timeout=math.inf, max_connections=2**62)


def plain_asgi(app: Any) -> bool:
    """Is ``app`` a quart app whose ASGI entry is quart's own (no middleware wrapped
    around ``asgi_app``, neither overridden)? Then an HTTP request may go straight to
    its ``asgi_http_class``: what ``__call__`` and ``asgi_app`` would do, without their
    two calls (and hypercorn's wrapper's), which every request paid for, and every
    open stream held as three coroutines (≈ 0.7 KiB)."""
    cls = type(app)
    return (
        isinstance(app, Quart)
        and cls.__call__ is Quart.__call__
        and cls.asgi_app is Quart.asgi_app
        and "asgi_app" not in vars(app)
        and "__call__" not in vars(app)
    )


def policy_of(config: Any) -> ConnectionPolicy | None:
    policy: ConnectionPolicy | None = getattr(config, POLICY_ATTR, None)
    return policy


# --------------------------------------------------------------------------- canned answers


class Refused(Exception):
    """Raised in the reader when a request must be answered by the connection layer."""

    def __init__(self, status: int, code: str, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message


_REASONS = {
    400: "Bad Request",
    408: "Request Timeout",
    431: "Request Header Fields Too Large",
    501: "Not Implemented",
    503: "Service Unavailable",
    505: "HTTP Version Not Supported",
}


def canned_response(
    status: int, code: str, message: str, *, retry_after: int | None = None
) -> bytes:
    """A complete HTTP/1.1 error response with the gateway's JSON error body, closing."""
    body = error_body(code, message)
    head = [
        f"HTTP/1.1 {status} {_REASONS.get(status, '')}",
        "content-type: application/json",
        f"content-length: {len(body)}",
        "connection: close",
    ]
    if retry_after is not None:
        head.append(f"retry-after: {retry_after}")
    return ("\r\n".join(head) + "\r\n\r\n").encode() + body


OVERLOADED = canned_response(
    503,
    "gateway_overloaded",
    "The server has too many open connections (server.max_connections); retry shortly.",
    retry_after=1,
)


def unreadable_response(status: int) -> bytes:
    """The answer to a request h11 refused (``status``: its ``error_status_hint``), or
    that the lean path saw cut short, as the gateway's JSON error; the connection closes."""
    if status == 431:
        code, message = (
            "request_head_too_large",
            "The request head is larger than this server reads.",
        )
    elif status == 501:
        code, message = (
            "transfer_coding_not_supported",
            "This server reads request bodies with Content-Length or chunked framing only.",
        )
    else:
        status = 400
        code, message = (
            "bad_request",
            "The request is not valid HTTP/1.1 (its request line, a header or its body's "
            "framing); it was not read.",
        )
    return canned_response(status, code, message)


# --------------------------------------------------------------------------- app tasks


class GatewayTaskGroup(TaskGroup):
    """hypercorn's per-connection task group, with an app queue that cannot wedge.

    Once the app has finished, nothing reads its queue: the receive side is closed, so
    a reader blocked on a full queue returns at once and later puts are dropped. A
    disconnect is queued even when the queue is full, without waiting (the protocol may
    be running shielded). The request's :class:`Disconnect` (``scope[DISCONNECT_KEY]``)
    fires as the disconnect is queued. The queue is a :class:`gateway.handoff.Handoff`
    (one putter, the connection's reader; one receiver, the app).
    """

    async def spawn_app(
        self, app: Any, config: Any, scope: Any, send: Callable[[Any], Awaitable[None]]
    ) -> Callable[[Any], Awaitable[None]]:
        nursery = self._nursery
        assert nursery is not None
        queue: Handoff[Any] = Handoff(config.max_app_queue_size)
        gone = scope[DISCONNECT_KEY] = Disconnect()

        async def app_send(message: Any) -> None:
            if message is None:  # the app is done: nobody reads the queue any more
                queue.close_receive()
            await send(message)

        nursery.start_soon(
            _handle,
            app,
            config,
            scope,
            queue.receive,
            app_send,
            trio.to_thread.run_sync,
            trio.from_thread.run,
        )

        async def app_put(message: Any) -> None:
            if message.get("type") == "http.disconnect":
                gone.set()
                queue.send_past_limit(message)  # never waits: the protocol may be shielded
                return
            with contextlib.suppress(trio.BrokenResourceError, trio.ClosedResourceError):
                await queue.send(message)

        return app_put


# --------------------------------------------------------------------------- HTTP/1.1


class _DiscardBody:
    """Stands in for the request's stream after the app has answered: drops the rest
    of a (small) request body, then lets the connection be recycled."""

    def __init__(self, protocol: GatewayH11Protocol) -> None:
        self.protocol = protocol

    async def handle(self, event: StreamEvent) -> None:
        if isinstance(event, EndBody):
            self.protocol.stream = None
            await self.protocol._maybe_recycle()


#: hypercorn's 404 (a wrong Host under ``server_names``), as the gateway's JSON error
_NO_ROUTE = ("not_found", "No such route on this server; see docs/api.md.")


class GatewayHTTPStream(HTTPStream):
    """hypercorn's HTTP stream whose own error answers (an app that ended without a
    response: 500; cancelled because the server stops: 503 ``gateway_draining``) carry
    the gateway's JSON error body instead of an empty one."""

    async def _send_error_response(self, status_code: int) -> None:
        if status_code == 404:
            status, (code, message) = 404, _NO_ROUTE
        else:  # 500: the app ended without an answer (the lean path answers alike)
            status, code, message = unanswered(self.context.terminated.is_set())
        headers, body = error_answer(code, message)
        await self.send(Response(stream_id=self.stream_id, headers=headers, status_code=status))
        await self.send(Body(stream_id=self.stream_id, data=body))
        await self.send(EndBody(stream_id=self.stream_id))
        self.state = ASGIHTTPState.CLOSED
        await self.config.log.access(
            self.scope, {"status": status, "headers": []}, time.time() - self.start_time
        )


def _declared_length(headers: list[tuple[bytes, bytes]]) -> int | None:
    for name, value in headers:
        if name.lower() == b"content-length":
            try:
                return int(value)
            except ValueError:
                return None
    return None


class GatewayH11Protocol(H11Protocol):
    """hypercorn's HTTP/1.1 protocol with the fixes of the module docstring."""

    declared_length: int | None = 0
    #: the connection layer answered by itself: the app's sends go nowhere
    closing = False
    #: the connection is being closed: stop parsing what the client sends
    stop_reading = False
    #: the current request is the connection's last: drop whatever the client sends
    ignore_input = False
    #: chunks of the current request's chunked body so far
    body_pieces = 0

    def __init__(
        self,
        app: AppWrapper,
        config: Config,
        context: Any,
        task_group: Any,
        connection_state: ConnectionState,
        ssl: bool,
        client: tuple[str, int] | None,
        server: tuple[str, int] | None,
        send: Callable[[Event], Awaitable[None]],
    ) -> None:
        # hypercorn's, without its h11 connection and ``can_read`` event until one is
        # used: requests on the lean path (gateway.exchange) use neither, and an open
        # stream held both (≈ 1.2 KiB, and ≈ 150 bytecodes a new connection)
        self.app = app
        self.client = client
        self.config = config
        self.context = context
        self.keep_alive_requests = 0
        self.send = send
        self.server = server
        self.ssl = ssl
        self.stream: HTTPStream | WSStream | None = None
        self.task_group = task_group
        self.connection_state = connection_state

    @functools.cached_property
    def connection(self) -> h11.Connection | H11WSConnection:  # type: ignore[override]
        return h11.Connection(
            h11.SERVER, max_incomplete_event_size=self.config.h11_max_incomplete_size
        )

    @functools.cached_property
    def can_read(self) -> IOEvent:  # type: ignore[override]
        return self.context.event_class()

    @property
    def _h11_made(self) -> h11.Connection | H11WSConnection | None:
        """The h11 connection if a request took h11's way already (else None)."""
        made: h11.Connection | H11WSConnection | None = self.__dict__.get("connection")
        return made

    @property
    def trailing(self) -> bytes:
        """What h11 holds of the client's bytes, unparsed (b"" before h11 is used)."""
        conn = self._h11_made
        return conn.trailing_data[0] if conn is not None else b""

    def wake_reader(self) -> None:
        """Stop reading, and wake a reader paused on ``can_read`` (none if never made;
        hypercorn's ``EventWrapper.set`` never waits)."""
        self.stop_reading = True
        event: Any = self.__dict__.get("can_read")
        if event is not None:
            event._event.set()  # (install checked it is hypercorn's trio EventWrapper)

    async def handle(self, event: Event) -> None:
        if isinstance(event, Closed):
            # the connection is gone (a write failed, the client left, it is closing):
            # a reader paused until the answer ends, with the client's next request
            # already queued, would wait for ``can_read`` forever and keep the socket
            self.wake_reader()
        await super().handle(event)

    async def _check_protocol(self, event: h11.Request) -> None:
        # HTTP/1.1 only: no HTTP/2 preface, no h2c upgrade (ignored, RFC 9110 §7.8)
        if not event.http_version.startswith(b"1."):
            raise Refused(
                505,
                "http_version_not_supported",
                "This server speaks HTTP/1.1 only.",
            )
        # both framings (RFC 9112 §6.1): a front that trusts the other one would read a
        # request hidden in this body (request smuggling); refused, and closed
        names = {name.lower() for name, _ in event.headers}
        if b"transfer-encoding" in names and b"content-length" in names:
            raise Refused(
                400,
                "bad_request",
                "A request may not carry both Transfer-Encoding and Content-Length.",
            )

    async def _create_stream(self, request: h11.Request) -> None:
        headers = list(request.headers)
        self.declared_length = _declared_length(headers)
        kept = [(name, value) for name, value in headers if name.lower() != b"upgrade"]
        if len(kept) != len(headers):  # no WebSocket either: served as plain HTTP/1.1
            request = h11.Request(
                method=request.method,
                target=request.target,
                headers=kept,
                http_version=request.http_version,
            )
        await super()._create_stream(request)
        if type(self.stream) is HTTPStream:  # its own error answers are the gateway's JSON
            self.stream.__class__ = GatewayHTTPStream
        # the app (spawned, not yet run) may join its writes (see GatewayTCPServer.cork)
        server = getattr(self.send, "__self__", None)
        scope = getattr(self.stream, "scope", None)
        if isinstance(server, GatewayTCPServer) and isinstance(scope, dict):
            scope[WRITES_KEY] = server

    async def stream_send(self, event: StreamEvent) -> None:
        if isinstance(event, StreamClosed):
            # runs in the app's task, which quart-trio cancels on disconnect: recycling
            # or closing the connection must not stop half-way (see module docstring)
            with trio.CancelScope(shield=True):
                await super().stream_send(event)
            return
        if isinstance(event, Response) and event.status_code >= 200 and self._close_after():
            event = Response(
                stream_id=event.stream_id,
                headers=[*event.headers, (b"connection", b"close")],
                status_code=event.status_code,
            )
        await super().stream_send(event)

    def _close_after(self) -> bool:
        """A response is starting: will the connection have to close after it?"""
        if self.connection.their_state is not h11.SEND_BODY:
            return False
        n = self.declared_length
        return n is None or n > DISCARD_LIMIT

    async def _maybe_recycle(self) -> None:
        conn = self.connection
        if (
            not self.context.terminated.is_set()
            and conn.our_state is h11.DONE
            and conn.their_state is h11.SEND_BODY
        ):
            # answered before the (small) body arrived: drop the rest, then recycle
            await self._close_stream()
            # closing the stream yields (the access line, the app's disconnect): the
            # reader may have taken the body's end meanwhile and now waits, paused,
            # for a new cycle that only the recycle below starts
            if conn.their_state is h11.SEND_BODY:
                self.stream = _DiscardBody(self)  # type: ignore[assignment]
                await self.can_read.set()
                return
        await super()._maybe_recycle()

    async def _handle_events(self) -> None:
        # hypercorn's loop, except that a connection being closed stops it (hypercorn's
        # waits forever on ``can_read`` when pipelined bytes follow a closing response)
        while True:
            conn = self.connection
            if conn.they_are_waiting_for_100_continue:
                await self._send_h11_event(
                    h11.InformationalResponse(
                        status_code=100, headers=self.config.response_headers("h11")
                    )
                )
            before = conn.their_state
            try:
                event = conn.next_event()
            except h11.RemoteProtocolError as error:
                answering = before in (h11.DONE, h11.MUST_CLOSE) or conn.our_state is h11.SEND_BODY
                if answering and self.stream is not None:
                    # bytes after a complete request that must be the last one (HTTP/1.0,
                    # Connection: close), or a broken body while the answer is already
                    # going out: finish the answer, ignore the rest, then close
                    self.ignore_input = True
                    break
                if conn.our_state in {h11.IDLE, h11.SEND_RESPONSE}:
                    await self._send_error_response(error.error_status_hint)
                await self.send(Closed())
                break
            if isinstance(event, h11.Request):
                self.body_pieces = 0
                await self.send(Updated(idle=False))
                await self._check_protocol(event)
                await self._create_stream(event)
            elif event is h11.PAUSED:
                if self.stop_reading:
                    break
                await self.can_read.clear()
                await self.can_read.wait()
                if self.stop_reading:
                    break
            elif (
                isinstance(event, h11.ConnectionClosed)
                or event is h11.NEED_DATA
                or self.stream is None
            ):
                break
            elif isinstance(event, h11.Data):
                self.body_pieces += event.chunk_start  # a new chunk, not a new read
                if self.body_pieces > MAX_BODY_PIECES:
                    raise Refused(
                        400,
                        "bad_request",
                        f"The request body arrived in more than {MAX_BODY_PIECES} chunks; "
                        "send it in fewer, larger ones.",
                    )
                await self.stream.handle(Body(stream_id=STREAM_ID, data=event.data))
            elif isinstance(event, h11.EndOfMessage):
                await self.stream.handle(EndBody(stream_id=STREAM_ID))
            elif isinstance(event, Data):  # WebSocket pass-through
                await self.stream.handle(event)

    async def _send_h11_event(self, event: Any) -> None:
        if self.closing:  # the connection layer already answered and is closing
            return
        await super()._send_h11_event(event)

    async def _send_error_response(self, status_code: int) -> None:
        # h11 refused the request: the gateway's JSON error instead of hypercorn's
        # empty body (the connection closes right after, whatever h11's state)
        if self.closing:
            return
        self.closing = True
        await self.send(RawData(unreadable_response(status_code)))

    @property
    def awaiting_head(self) -> bool:
        conn = self._h11_made
        return conn is None or bool(conn.our_state is h11.IDLE and conn.their_state is h11.IDLE)

    @property
    def receiving_body(self) -> bool:
        conn = self._h11_made
        return conn is not None and conn.their_state is h11.SEND_BODY

    @property
    def response_started(self) -> bool:
        conn = self._h11_made
        return conn is not None and conn.our_state not in (h11.IDLE, h11.SEND_RESPONSE)


# --------------------------------------------------------------------------- TCP


class GatewayTCPServer(TCPServer):
    """hypercorn's trio connection handler, contained and bounded (module docstring)."""

    _policy: ConnectionPolicy = _DEFAULT_POLICY
    _head_started: float | None = None
    _lingering = False
    _linger_until = math.inf
    _linger_bytes = 0
    _read_scope: trio.CancelScope | None = None  # the timed wait of a TLS / test stream
    #: the connection's stream-clock entry (the server's stop; the waiting read's deadline)
    _timer: TimerHandle | None = None
    #: a read waits for the socket, until ``_read_until`` (then ``due`` wakes it)
    _read_waiting = False
    _read_until = math.inf
    _read_woken = False
    _aborted = False
    _idle_until = math.inf
    #: the request being served on the lean path (gateway.exchange), if any
    _exchange: LeanExchange | None = None
    _quick_reads = 0
    #: the read deadline a grace read was given for (once per deadline)
    _graced_deadline = -math.inf

    def __init__(
        self,
        app: AppWrapper,
        config: Config,
        context: WorkerContext,
        state: LifespanState,
        stream: trio.SSLStream[trio.SocketStream],
    ) -> None:
        # hypercorn's, without its send lock and idle-timer task (two locks, three
        # parking lots per connection, ≈ 0.3 KiB an open stream): made on first use
        # (TLS's own loop, a write the socket does not take at once; see _writing)
        self.app = app
        self.config = config
        self.context = context
        self.stream = stream
        self.state = state

    @functools.cached_property
    def send_lock(self) -> trio.Lock:  # type: ignore[override]
        return trio.Lock()

    @functools.cached_property
    def idle_task(self) -> TrioSingleTask:  # type: ignore[override]
        return TrioSingleTask()

    @property
    def _writing(self) -> bool:
        """Is a write under way (the send lock held)? Asked without making the lock:
        a lock never made is not held."""
        lock: trio.Lock | None = self.__dict__.get("send_lock")
        return lock is not None and lock.locked()

    async def run(self) -> None:
        # one coroutine from the accept to the reader's loop (an open stream holds each
        # level's frame): the policy's bounds, the containment, the plain-TCP serve
        policy = policy_of(self.config)
        self._policy = policy or _DEFAULT_POLICY
        try:
            if policy is not None and policy.open >= policy.max_connections:
                await self._refuse_overloaded(policy)
                return
            self._policy.open += 1
            try:
                if hasattr(self.stream, "do_handshake"):  # TLS: hypercorn's own handler
                    await super().run()
                    return
                self._head_started = trio.current_time()
                try:
                    async with GatewayTaskGroup() as task_group:
                        await self._start_protocol(task_group)
                        self._timer = clock().add(self, None, self.context.terminated)
                        try:
                            await self._read_data()
                        finally:
                            self._timer.cancel()
                except OSError:
                    pass
                finally:
                    await self._close(final=True)
            finally:
                self._policy.open -= 1
        except* Exception as group:
            self._contained(group)

    async def _start_protocol(self, task_group: TaskGroup) -> None:
        """The connection's HTTP/1.1 protocol (h11 made on first use), and its idle
        deadline (raises OSError when the client is gone already)."""
        self._task_group = task_group
        sock = self.stream.socket
        client = parse_socket_addr(sock.family, sock.getpeername())
        server = parse_socket_addr(sock.family, sock.getsockname())
        self.protocol = GatewayH11Protocol(  # type: ignore[assignment]
            self.app,
            self.config,
            self.context,
            task_group,
            ConnectionState(self.state),
            False,
            client,
            server,
            self.protocol_send,
        )
        await self.protocol.initiate()
        self._idle_until = trio.current_time() + self.config.keep_alive_timeout

    def _contained(self, group: BaseExceptionGroup[Exception]) -> None:
        """A connection's failure stays in it: counted, logged (rate-limited)."""
        self._policy.contained += 1
        first = group.exceptions[0]
        self._policy._warn_failed(
            log,
            logging.WARNING,
            "a connection failed and was closed (contained: %s: %s)",
            type(first).__name__,
            first,
        )
        log.debug("contained connection failure", exc_info=group)

    # hypercorn's keep-alive timer is a task started anew for every request (a lock, a
    # nursery.start, two cancels); here the reader's own deadline is the idle timer:
    # idle -> now + keep_alive_timeout (now once the server stops), busy -> never. The
    # stop is seen through the run's stream clock (one waiter for every connection),
    # and the waiting read's deadline is kept by the same entry (_wait_read).

    def _idle_set(self, idle: bool) -> None:
        until = math.inf
        if idle:
            now = trio.current_time()
            stopping = self.context.terminated.is_set()
            until = now if stopping else now + self.config.keep_alive_timeout
        self._idle_until = until
        self._deadline_moved(self._read_deadline())

    def _deadline_moved(self, until: float) -> None:
        """The waiting read's deadline is now ``until``."""
        scope = self._read_scope
        if scope is not None:
            scope.deadline = until
        elif self._read_waiting:
            self._read_until = until
            timer = self._timer
            if until == math.inf or timer is None:
                return
            now = trio.current_time()
            if until > now:
                timer.sooner(until)
                return
            # due now (the server stops): woken here, not through the clock, which may
            # have called this entry at this very moment already (and not again)
            again = self.due(now)
            if again is not None:
                timer.sooner(again)

    def due(self, now: float) -> float | None:
        """The stream clock: the waiting read's deadline came (wake it), or moved."""
        if not self._read_waiting or self._read_woken:
            return None
        until = self._read_until
        if now < until:
            return None if until == math.inf else until
        if self._writing:  # waking the read would fail the write: it has its own bound
            return now + WRITING_RECHECK_SECONDS
        sock = _readable_socket(self.stream)
        if sock is not None and sock.fileno() != -1:
            self._read_woken = True
            trio.lowlevel.notify_closing(sock)  # the socket stays open
        return None

    def drain(self) -> None:
        """The server stops (``context.terminated`` is set): an idle connection closes
        now, a busy one once idle (:meth:`_idle_set`)."""
        if self._idle_until != math.inf:
            self._idle_set(True)

    @property
    def _h11(self) -> GatewayH11Protocol | None:
        proto = getattr(self, "protocol", None)
        return proto if isinstance(proto, GatewayH11Protocol) else None

    def _read_deadline(self) -> float:
        if self._lingering:
            return self._linger_until
        proto = self._h11
        if proto is None:
            return math.inf
        timeout = self._policy.header_timeout
        exchange = self._exchange
        if exchange is not None:  # h11 is idle: the lean request's body is what may come
            return trio.current_time() + timeout if exchange.receiving else math.inf
        if proto.awaiting_head:
            if self._head_started is None:
                return self._idle_until
            return min(self._idle_until, self._head_started + timeout)
        if proto.receiving_body:
            return trio.current_time() + timeout
        return math.inf

    async def _read_data(self) -> None:
        proto = self._h11
        if proto is None:  # TLS: hypercorn's own loop
            await super()._read_data()
            return
        while True:
            data: bytes | bytearray | None = None  # not kept while the next read waits
            data = await self._read_once(proto)
            if data is None:
                break
            if self._lingering:
                self._linger_bytes += len(data)
                if not data or self._linger_bytes > LINGER_BYTES:
                    break
                continue
            if proto.ignore_input and data:
                continue
            if self._exchange is not None or self._policy.lean_routes:
                if data:
                    rest = await self._serve_lean(proto, bytes(data))
                    if rest is None:
                        continue
                    data = rest
                elif self._exchange is not None:
                    await self._lean_eof(proto, self._exchange)
            if not data and proto._h11_made is None:
                break  # the client's EOF, h11 never used: it would only read the end
            if data and self._head_started is None and proto.awaiting_head:
                self._head_started = trio.current_time()
            try:
                await proto.handle(RawData(bytes(data)))
            except Refused as refusal:
                await self._answer_and_close(
                    canned_response(refusal.status, refusal.code, refusal.message)
                )
                continue
            if data == b"":
                break
        if self._exchange is not None:  # EOF, a reset, a timeout: the client is gone
            self._exchange.client_left()
        await proto.handle(Closed())

    async def _read_once(self, proto: GatewayH11Protocol) -> bytes | bytearray | None:
        """The reader's next bytes; None when it must stop (closed, reset, timed out).

        Bytes (or the FIN) already here are taken without a wait; a read that waits is
        timed by the connection's stream-clock entry, which wakes it at its deadline (a
        cancel scope, entered and moved twice a request, cost ≈ 600 bytecodes)."""
        try:
            return self._receive_nowait()
        except trio.WouldBlock:
            pass
        except trio.BrokenResourceError:
            return None
        if _readable_socket(self.stream) is None or self._timer is None:
            data, deadline = await self._read_scoped(self._read_deadline())
        else:
            data, deadline = await self._wait_read(self._read_deadline())
        if deadline is None:
            return data
        if self._lingering:
            return None
        # trio checks the deadline before it tries the socket: on a loop that lags
        # (measured: 10,000 streams on 2 busy cores) bytes that arrived in time were
        # never looked at. Only bytes not there yet are "too slow". The grace is given
        # once per deadline: a head trickled a byte per grace period must not outlive
        # its deadline read after read (round 9's red team: one byte every 30 ms held a
        # connection without a 408 for as long as the head's size cap allowed).
        if deadline != self._graced_deadline:
            self._graced_deadline = deadline
            with trio.move_on_after(GRACE_READ_SECONDS) as grace:
                try:
                    data = await self._receive()
                except (trio.ClosedResourceError, trio.BrokenResourceError):
                    return None
            if not grace.cancelled_caught:
                return data
        if not self._idle_over(proto):
            await self._read_timed_out(proto)
        return None

    async def _wait_read(self, deadline: float) -> tuple[bytes | bytearray | None, float | None]:
        """Wait for the next bytes until ``deadline`` (moved meanwhile by
        :meth:`_deadline_moved`): (the bytes, or None when the socket was closed or
        reset; None, or the deadline that came first). The deadline's wake is a flag
        that :meth:`_receive` looks at before every wait (one that comes while the read
        yields is not lost) and ``notify_closing`` for the wait under way."""
        if deadline <= trio.current_time():
            return None, deadline  # (the clock calls no entry twice at one moment)
        self._read_until = deadline
        self._read_woken = False
        self._read_waiting = True
        try:
            if deadline != math.inf:
                assert self._timer is not None
                self._timer.sooner(deadline)
            return await self._receive(waiting=True), None
        except (trio.ClosedResourceError, trio.BrokenResourceError):
            # woken at the deadline, or closed (or reset) under the read
            return None, self._read_until if self._read_woken else None
        finally:
            self._read_waiting = False

    async def _read_scoped(self, deadline: float) -> tuple[bytes | bytearray | None, float | None]:
        """:meth:`_wait_read` for a stream that is not a plain socket's (TLS, tests)."""
        with trio.CancelScope(deadline=deadline) as scope:
            self._read_scope = scope
            try:
                data = await self._receive(waiting=True)
            except (trio.ClosedResourceError, trio.BrokenResourceError):
                return None, None
            finally:
                self._read_scope = None
        return (None, scope.deadline) if scope.cancelled_caught else (data, None)

    def _receive_nowait(self) -> bytes:
        """What :meth:`_receive` returns when the bytes (or the FIN) are here already;
        :class:`trio.WouldBlock` when it would wait, or yield (every :data:`QUICK_READS`
        reads), or the stream is not a plain socket's."""
        sock = _readable_socket(self.stream)
        if sock is None or self._quick_reads >= QUICK_READS:
            raise trio.WouldBlock
        try:
            data: bytes = sock.recv(MAX_RECV)
        except BlockingIOError:
            self._quick_reads = 0
            raise trio.WouldBlock from None
        except OSError as exc:  # a reset, or closed under us: as trio reports them
            raise trio.BrokenResourceError(str(exc)) from exc
        self._quick_reads += 1
        return data

    async def _receive(self, waiting: bool = False) -> bytes | bytearray:
        """The next bytes from the client (b"" at EOF), as ``stream.receive_some`` reads
        them but without its scheduler round when they are already there: trio yields
        after every successful socket call, and a read that found bytes or the client's
        FIN waiting cost a round (measured: one ``epoll_wait`` fewer per new connection).
        Bytes waiting are taken even after the read's deadline (only bytes not there yet
        are too slow); every :data:`QUICK_READS` reads without a wait yield once.
        ``waiting``: a read just found nothing (wait before reading again)."""
        sock = _readable_socket(self.stream)
        if sock is None:  # TLS or a test's stream: trio's own read
            return await self.stream.receive_some(MAX_RECV)
        if self._quick_reads >= QUICK_READS:
            self._quick_reads = 0
            await trio.lowlevel.checkpoint()
            waiting = False
        while True:
            if not waiting:
                try:
                    return self._receive_nowait()
                except trio.WouldBlock:  # (the yield bound is not reached here: reset above)
                    pass
            # the wait is outside the except: a caught exception is alive, with its
            # traceback's frames, for as long as its handler runs (a stream's length)
            waiting = False
            # the waiting read's deadline may have come already (the clock's wake found
            # no wait: it came while the read yielded)
            if self._read_waiting and self._read_woken:
                raise trio.ClosedResourceError("the read's deadline came")
            await trio.lowlevel.wait_readable(sock)  # the checkpoint: cancel, deadline

    # The lean path (gateway.exchange): a plain head for a lean route, whole in one read
    # at a request boundary, is served without h11 (which stays IDLE) and hypercorn's
    # stream; anything else is fed to h11 as before. What the client sends after the
    # body waits, unread, until the answer is over (h11 pauses the same way).

    async def _serve_lean(self, proto: GatewayH11Protocol, data: bytes) -> bytes | None:
        """Serve what ``data`` holds on the lean path; return what h11 must read (None:
        nothing)."""
        exchange = self._exchange
        if exchange is not None:
            data = await exchange.feed(data)
            if not data:
                return None
            await exchange.wait_finished()
        routes = self._policy.lean_routes
        while data:
            if proto.stop_reading or self._lingering:
                return None  # closing: what the client still sends is dropped
            if not routes or not proto.awaiting_head or proto.trailing:
                return data
            head = parse_head(data, routes, self.config.h11_max_incomplete_size)
            if head is None:
                return data
            end = head.size + head.length
            exchange = LeanExchange(self, head, data[head.size : end])
            self._exchange = exchange
            self._policy.lean += 1
            self._head_started = None
            self._idle_set(False)
            await self.context.mark_request()
            assert self._task_group._nursery is not None
            direct = self._policy.http_app
            if direct is not None and getattr(self.app, "app", None) is not direct:
                direct = None  # (another app than the policy's: its whole way)
            self._task_group._nursery.start_soon(exchange.run, self.app, direct)
            data = data[end:]  # a request after this one (none when its body is owed)
            if not data:
                return None
            await exchange.wait_finished()
        return None

    async def _lean_eof(self, proto: GatewayH11Protocol, exchange: LeanExchange) -> None:
        """The client closed its side: a body still owed is a request h11 would refuse
        (400, as its way answers it), else a client that left (or half-closed)."""
        if exchange.receiving and not exchange.started and not proto.closing:
            await self._write_canned(unreadable_response(400))
            exchange.abandon()
        else:
            exchange.client_left()

    def recycle(self, exchange: LeanExchange) -> None:
        """A lean request is over and the connection stays: idle until the next head."""
        if self._exchange is exchange:
            self._exchange = None
        self._idle_set(True)

    async def close_exchange(self, exchange: LeanExchange) -> None:
        """A lean request is over and the connection closes (FIN, then linger)."""
        if self._exchange is exchange:
            self._exchange = None
        await self._close()

    def close_exchange_nowait(self, exchange: LeanExchange) -> bool:
        """:meth:`close_exchange` if it needs no wait (True), else nothing (False)."""
        if not self.close_nowait():
            return False
        if self._exchange is exchange:
            self._exchange = None
        return True

    async def write(self, data: bytes) -> None:
        """Write an answer's bytes (joined while corked)."""
        if self._corked is not None:
            self._corked.append(data)
            return
        await self._send_raw(data)

    async def _lost(self) -> None:
        """A write failed: the connection is gone."""
        if self._exchange is not None:
            self._exchange.abandon()
        await self.protocol.handle(Closed())

    def _idle_over(self, proto: GatewayH11Protocol) -> bool:
        """The deadline that fired is the idle one (keep-alive over, or the server
        stops) rather than a slow head's: the connection closes without a word."""
        if self._exchange is not None:
            return False
        if not proto.awaiting_head or trio.current_time() < self._idle_until:
            return False
        head = self._head_started
        return head is None or trio.current_time() < head + self._policy.header_timeout

    async def _read_timed_out(self, proto: GatewayH11Protocol) -> None:
        policy = self._policy
        policy.timed_out += 1
        exchange = self._exchange
        if exchange is not None:
            what = "a request body"
        elif proto.awaiting_head:
            what = "a request head"
        elif proto.receiving_body:
            what = "a request body"
        else:  # pragma: no cover - no read deadline in any other state
            return
        policy._warn_timeout(
            log,
            logging.INFO,
            "closing a connection that sent %s too slowly (server.header_timeout_seconds = %g)",
            what,
            policy.header_timeout,
        )
        head = exchange is None and proto.awaiting_head
        got_bytes = not head or bool(proto.trailing)
        started = exchange.started if exchange is not None else proto.response_started
        if not started and got_bytes:
            message = (
                f"The request {'head' if head else 'body'} did not arrive "
                f"within {policy.header_timeout:g} s."
            )
            await self._write_canned(canned_response(408, "request_timeout", message))
        proto.closing = True
        if exchange is not None:
            exchange.abandon()

    async def _write_canned(self, data: bytes) -> None:
        """Write a complete response the protocol did not produce (bounded: 1 s). It
        usually fits the socket's buffer: written at once, before any checkpoint, so a
        loaded loop cannot spend the bound before the write begins."""
        proto = self._h11
        if proto is not None:
            proto.closing = True
        rest = self._send_now(data)
        if not rest:
            return  # all written, or the client is gone: nobody to answer
        with trio.move_on_after(1.0):
            async with self.send_lock:
                with contextlib.suppress(
                    trio.BrokenResourceError, trio.ClosedResourceError, trio.BusyResourceError
                ):
                    await self.stream.send_all(rest)

    async def _answer_and_close(self, data: bytes) -> None:
        proto = self._h11
        if proto is not None and not proto.response_started:
            await self._write_canned(data)
        await self._close()

    async def _refuse_overloaded(self, policy: ConnectionPolicy) -> None:
        policy.refused += 1
        policy._warn_refused(
            log,
            logging.WARNING,
            "refusing connections: server.max_connections (%d) are open",
            policy.max_connections,
        )
        if policy.refusing >= MAX_REFUSING:
            await trio.aclose_forcefully(self.stream)
            return
        policy.refusing += 1
        try:
            with trio.move_on_after(1.0):
                with contextlib.suppress(trio.BrokenResourceError, trio.ClosedResourceError):
                    await self.stream.send_all(OVERLOADED)
                    await self.stream.send_eof()
                    with trio.move_on_after(LINGER_SECONDS / 2):
                        while await self.stream.receive_some(MAX_RECV):
                            pass
        except OSError:
            pass
        finally:
            policy.refusing -= 1
            await trio.aclose_forcefully(self.stream)

    # Joined writes: while an app has corked the connection (``scope[WRITES_KEY]``), the
    # bytes of its events are kept and leave in one write at ``flush``; any other event
    # (recycle, close) flushes first, so the order on the wire is unchanged. The SSE
    # response path uses it so that what is ready together (head, events, the body's
    # end) leaves in one ``send(2)`` (gateway.web.GatewayHTTPConnection).

    _corked: list[bytes] | None = None

    def cork(self) -> None:
        if self._corked is None:
            self._corked = []

    async def flush(self, *, uncork: bool = False) -> None:
        held = self._corked
        if uncork:
            self._corked = None
        elif held is not None:
            self._corked = []
        if held:
            await self._send_raw(held[0] if len(held) == 1 else b"".join(held))

    async def protocol_send(self, event: Event) -> None:
        if isinstance(event, RawData):
            if self._corked is not None:
                self._corked.append(event.data)
                return
            await self._send_raw(event.data)
            return
        if self._corked:
            await self.flush()
        if isinstance(event, Updated):
            if event.idle:  # recycled: the next head's clock starts with its first byte
                proto = self._h11
                trailing = proto is not None and bool(proto.trailing)
                self._head_started = trio.current_time() if trailing else None
            else:
                self._head_started = None
            if self._h11 is not None:  # plain TCP: the reader's deadline (see _idle_set)
                self._idle_set(event.idle)
                return
        await super().protocol_send(event)

    def _send_now(self, data: bytes | memoryview) -> bytes | memoryview | None:
        """What is left of ``data`` after one non-blocking ``send(2)`` when no write is
        under way (the common case, a write the socket takes whole at once: no lock,
        no cancel scope, no scheduler round trip); all of it when one is, or the stream
        is not a plain socket's; None: the connection is lost."""
        raw = _raw_socket(self.stream)
        if raw is None or self._writing:
            return data
        if not data:
            return b""  # the end of a body with a length: nothing to write
        try:
            sent = raw.send(data)
        except BlockingIOError:
            return data
        except OSError:
            return None
        return b"" if sent == len(data) else memoryview(data)[sent:]

    async def _send_raw(self, data: bytes | memoryview) -> None:
        rest = self._send_now(data)
        if rest is None:
            await self._lost()
        elif rest:
            await self._send_bounded(rest)  # the rest waits for the socket, bounded

    async def _send_bounded(self, data: bytes | memoryview) -> None:
        bounds = self._policy.write_bounds
        timed_out = False
        async with self.send_lock:
            try:
                with trio.CancelScope(shield=True):
                    if bounds is None:
                        await self.stream.send_all(data)
                    else:
                        # the inner deadline still fires under the outer shield
                        with bounds.scope() as cs:
                            await self.stream.send_all(data)
                        timed_out = cs.cancelled_caught
            except (trio.BrokenResourceError, trio.ClosedResourceError, trio.BusyResourceError):
                await self._lost()
                return
            if timed_out:
                assert bounds is not None
                # a half-written stream is unusable: close it without a goodbye; a later
                # write on the same connection times out too: count it once
                if not self._aborted:
                    self._aborted = True
                    bounds.aborted += 1
                    log.warning("closing a connection whose client stopped reading")
                await trio.aclose_forcefully(self.stream)
        if timed_out:
            await self._lost()

    async def _close(self, final: bool = False) -> None:
        """Begin closing: FIN once a write under way has finished, then the reader reads
        and drops what still arrives for up to :data:`LINGER_SECONDS` (``final``: close
        now)."""
        proto = self._h11
        if proto is None:  # TLS: hypercorn's own close
            await super()._close()
            return
        proto.wake_reader()
        if final or self._lingering:
            if final:
                await self.stream.aclose()
            return
        lock: trio.Lock | None = self.__dict__.get("send_lock")  # (not made here)
        if lock is not None and lock.statistics().owner is trio.lowlevel.current_task():
            await self.stream.aclose()  # pragma: no cover - not reached from hypercorn's h11
            return
        if self._writing or _raw_socket(self.stream) is None:
            self._lingering = True
            if await self._fin_after_write():
                self._linger()
            return
        self._fin_now()

    def close_nowait(self) -> bool:
        """:meth:`_close` when it needs no wait (the common end of a connection): no
        write under way, a plain socket. True if done; False, and nothing done, if
        :meth:`_close` must run instead."""
        proto = self._h11
        if proto is None or self._lingering or self._writing or _raw_socket(self.stream) is None:
            return False
        proto.wake_reader()
        self._fin_now()
        return True

    def _fin_now(self) -> None:
        # no write under way (the common case): the FIN now, without the lock's and
        # send_eof's round trips through the scheduler
        self._lingering = True
        with contextlib.suppress(OSError):
            self.stream.socket.shutdown(trio.socket.SHUT_WR)
        self._linger()

    def _linger(self) -> None:
        self._linger_until = until = trio.current_time() + LINGER_SECONDS
        scope = self._read_scope
        if scope is not None:
            self._deadline_moved(min(scope.deadline, until))
        elif self._read_waiting:
            self._deadline_moved(min(self._read_until, until))

    async def _fin_after_write(self) -> bool:
        """The other task may be writing the last response (the app's, or hypercorn's
        400): let it finish, then FIN (EOF during a write raised BusyResourceError).
        False if the write was stuck and the connection is closed instead."""
        with trio.move_on_after(LINGER_SECONDS) as waited:
            async with self.send_lock:
                with contextlib.suppress(
                    trio.BrokenResourceError,
                    trio.ClosedResourceError,
                    trio.BusyResourceError,
                    OSError,
                ):
                    await self.stream.send_eof()
        if waited.cancelled_caught:  # a write that long is stuck: give up on it
            await self.stream.aclose()
            return False
        return True


def _readable_socket(stream: object) -> Any:
    """The OS socket under a plain trio TCP stream (reads after ``send_eof`` too), or
    None (TLS, anything else)."""
    if type(stream) is not trio.SocketStream:
        return None
    return getattr(stream.socket, "_sock", None)


def _raw_socket(stream: object) -> Any:
    """The OS socket under a plain trio TCP stream that may be written to now, or None
    (TLS, a stream after ``send_eof``, anything else: the bounded path)."""
    if type(stream) is not trio.SocketStream or stream.socket.did_shutdown_SHUT_WR:
        return None
    return _readable_socket(stream)


# --------------------------------------------------------------------------- process level


def install() -> bool:
    """Make hypercorn's trio worker build :class:`GatewayTCPServer` connections."""
    import hypercorn.trio.run as hyper_run

    current = getattr(hyper_run, "TCPServer", None)
    if current is GatewayTCPServer:
        return True
    problem = _unknown_hypercorn(current)
    if problem:
        log.warning(
            "connection hardening is off (%s): a connection failure can end the server, "
            "writes are unbounded, no header timeout, no connection limit; the drain "
            "backstop still applies",
            problem,
        )
        return False
    hyper_run.TCPServer = GatewayTCPServer  # type: ignore[attr-defined]
    if not accept.install(hyper_run):  # pragma: no cover - a hypercorn we do not know
        log.warning("hypercorn's trio worker serves its listeners with trio's own loop")
    _quiet_accept_errors()
    return True


#: the hypercorn this module was written against (it overrides private methods)
HYPERCORN_SERIES = "0.18."
_HOOKS = {
    H11Protocol: (
        "_check_protocol",
        "_create_stream",
        "_handle_events",
        "_maybe_recycle",
        "_send_h11_event",
        "_send_error_response",
        "_close_stream",
        "stream_send",
    ),
    TCPServer: ("run", "_read_data", "_close", "_idle_timeout", "protocol_send"),
    TaskGroup: ("spawn_app",),
    HTTPStream: ("_send_error_response",),
}


def _unknown_hypercorn(current: object) -> str:
    """Why hypercorn's internals are not the ones overridden here ("" if they are)."""
    from importlib.metadata import version

    found = version("hypercorn")
    if not found.startswith(HYPERCORN_SERIES):
        return f"hypercorn {found}, written for {HYPERCORN_SERIES}x"
    if current is not TCPServer:
        return "hypercorn.trio.run.TCPServer was replaced by someone else"
    for cls, names in _HOOKS.items():
        missing = [n for n in names if not hasattr(cls, n)]
        if missing:
            return f"{cls.__name__} lacks {', '.join(missing)}"
    if _init_attributes(TCPServer) != _TCPSERVER_ATTRIBUTES:
        return "TCPServer.__init__ sets other attributes than GatewayTCPServer's"
    if _init_attributes(H11Protocol) != _H11PROTOCOL_ATTRIBUTES:
        return "H11Protocol.__init__ sets other attributes than GatewayH11Protocol's"
    if "_event" not in _init_attributes(EventWrapper):
        return "hypercorn's trio EventWrapper keeps no trio.Event"
    return ""


#: what hypercorn's ``TCPServer.__init__`` sets (GatewayTCPServer.__init__ sets the
#: same, two of them lazily)
_TCPSERVER_ATTRIBUTES = frozenset(
    ("app", "config", "context", "send_lock", "idle_task", "stream", "state")
)


#: what hypercorn's ``H11Protocol.__init__`` sets (GatewayH11Protocol.__init__ sets the
#: same, two of them lazily)
_H11PROTOCOL_ATTRIBUTES = frozenset(
    (
        "app",
        "can_read",
        "client",
        "config",
        "connection",
        "context",
        "keep_alive_requests",
        "send",
        "server",
        "ssl",
        "stream",
        "task_group",
        "connection_state",
    )
)


def _init_attributes(cls: type) -> frozenset[str]:
    """The ``self.x = ...`` names of ``cls.__init__`` (``self.x: T = ...`` too; a
    declaration alone is none)."""
    import ast
    import inspect
    import textwrap

    tree = ast.parse(textwrap.dedent(inspect.getsource(cls.__init__)))  # type: ignore[misc]
    targets: list[ast.expr] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign):
            targets.extend(node.targets)
        elif isinstance(node, ast.AnnAssign) and node.value is not None:
            targets.append(node.target)
    return frozenset(
        t.attr
        for t in targets
        if isinstance(t, ast.Attribute) and isinstance(t.value, ast.Name) and t.value.id == "self"
    )


class _AcceptErrorFilter(logging.Filter):
    """trio logs every failed ``accept()`` (EMFILE...) at ERROR with a traceback, ten
    times a second while it lasts: one warning per 10 s instead, without traceback."""

    def __init__(self) -> None:
        super().__init__()
        self._limit = _RateLimited()

    def filter(self, record: logging.LogRecord) -> bool:
        if not record.getMessage().startswith("accept returned"):
            return True
        self._limit(
            log,
            logging.WARNING,
            "%s; out of file descriptors? see docs/operations.md",
            record.getMessage(),
        )
        return False


def _quiet_accept_errors() -> None:
    trio_log = logging.getLogger("trio.serve_listeners")
    if not any(isinstance(f, _AcceptErrorFilter) for f in trio_log.filters):
        trio_log.addFilter(_AcceptErrorFilter())


@dataclass(frozen=True)
class FdLimit:
    before: int
    soft: int
    hard: int

    def streams(self) -> int:
        """Relayed streams that fit (2 descriptors each, a reserve kept)."""
        return max(0, (self.soft - FD_RESERVE) // FDS_PER_STREAM)


def raise_fd_limit() -> FdLimit:
    """Raise the soft ``RLIMIT_NOFILE`` as far as the hard limit allows."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    before = soft
    target = hard if hard != resource.RLIM_INFINITY else 1 << 20
    while target > soft:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
        except (ValueError, OSError):  # macOS refuses more than kern.maxfilesperproc
            target //= 2
            continue
        soft = target
        break
    return FdLimit(before, soft, hard)


def log_fd_limit(limit: FdLimit, max_connections: int) -> None:
    hard = "unlimited" if limit.hard == resource.RLIM_INFINITY else str(limit.hard)
    if limit.streams() < max_connections:
        log.warning(
            "file descriptors: limit %d (was %d, hard %s) fits about %d relayed streams, "
            "fewer than server.max_connections (%d); beyond that, clients get 503 "
            "gateway_overloaded. Raise LimitNOFILE (systemd) / NumberOfFiles (launchd).",
            limit.soft,
            limit.before,
            hard,
            limit.streams(),
            max_connections,
        )
    else:
        log.info(
            "file descriptors: limit %d (was %d, hard %s), room for %d relayed streams",
            limit.soft,
            limit.before,
            hard,
            limit.streams(),
        )


__all__ = [
    "BODY_KEY",
    "DISCARD_LIMIT",
    "DISCONNECT_KEY",
    "LINGER_SECONDS",
    "RELEASE_KEY",
    "WRITES_KEY",
    "ConnectionPolicy",
    "Disconnect",
    "FdLimit",
    "GatewayH11Protocol",
    "GatewayTCPServer",
    "GatewayTaskGroup",
    "WriteBounds",
    "install",
    "log_fd_limit",
    "raise_fd_limit",
]
