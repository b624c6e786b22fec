"""One HTTP/1.1 request and its answer: the ASGI app called with a scope, ``receive``
and ``send``.

The connection (:mod:`gateway.http.connection`) reads the request and hands its body
to the exchange; the exchange's task calls the app, frames what it sends (:class:`Plain`
for heads :func:`gateway.http.h1.parse_head` read, :class:`H11` for the others) and
writes it through the connection. Invariants:

* ``http.response.start`` is held until the first body message (the ASGI rule), so a
  whole answer leaves in one write; an app may also ``cork`` its writes and ``flush``
  them (:data:`WRITES`), the answer's end flushes.
* ``receive`` gives the body, then waits: ``http.disconnect`` comes only once the
  client is gone (EOF, reset, a failed write, a read deadline) or the answer is
  complete. :data:`DISCONNECT` is the same moment as a callback.
* The answer's end (its last body message) hands the connection back at once, in the
  sending task and without a wait, so no cancellation can stop it half-way; an app that
  ends without an answer gets a JSON 500 (503 ``gateway_draining`` while the server
  stops); an answer cut short closes the connection.
* Only one party writes: the exchange once its answer started, the connection before
  (it may answer a broken request itself; then the app's sends go nowhere).

Scope extensions (``scope["extensions"]``): :data:`WRITES` (``cork()``, ``flush()``),
:data:`DISCONNECT` (:class:`Disconnect`), :data:`BODY` (a callable that takes the whole
body when it came with the head, else None: no wait, no queue).
"""

from __future__ import annotations

import contextlib
import enum
import json
import logging
import time
from collections.abc import Callable
from email.utils import formatdate
from typing import Any, Protocol

import h11
import trio

from gateway.http.h1 import LAST_CHUNK, chunk, response_head

__all__ = [
    "BODY",
    "DISCONNECT",
    "H11",
    "WRITES",
    "Answer",
    "Disconnect",
    "Exchange",
    "Link",
    "Plain",
    "error_answer",
    "error_body",
]

log = logging.getLogger("gateway.http")

WRITES = "gateway.writes"
DISCONNECT = "gateway.disconnect"
BODY = "gateway.body"
#: body messages queued for the app before the connection stops reading
QUEUE = 1
_DISCONNECTED = {"type": "http.disconnect"}


class Answer(enum.Enum):
    """Where the answer is."""

    WAITING = "waiting"  # nothing sent by the app yet
    HELD = "held"  # http.response.start received, held until the first body message
    SENDING = "sending"  # the head is written (or corked); the body goes on
    DONE = "done"  # complete
    DROPPED = "dropped"  # nobody will read it: the client left, or the connection answered


class Disconnect:
    """The moment the client of one request is gone, as a callback (:meth:`on`); and,
    for ``receive``, a wait until then or until the answer is complete (:meth:`wait`)."""

    __slots__ = ("_callback", "_event", "happened", "over")

    def __init__(self) -> None:
        #: the client is gone
        self.happened = False
        #: the client is gone, or the answer is complete
        self.over = False
        self._callback: Callable[[], object] | None = None
        self._event: trio.Event | None = None

    def on(self, callback: Callable[[], object] | None) -> None:
        """Call ``callback`` when the client leaves (at once if it has); None: forget it."""
        self._callback = callback
        if callback is not None and self.happened:
            self._callback = None
            callback()

    def set(self) -> None:
        """The client is gone."""
        if self.happened:
            return
        self.happened = True
        self.end()
        callback, self._callback = self._callback, None
        if callback is not None:
            callback()

    def end(self) -> None:
        """The answer is complete (or the client gone): waiters go on."""
        self.over = True
        if self._event is not None:
            self._event.set()

    async def wait(self) -> None:
        if self._event is None:
            self._event = trio.Event()
            if self.over:
                self._event.set()
        await self._event.wait()


def error_body(code: str, message: str) -> bytes:
    """The gateway's JSON error body."""
    return json.dumps({"error": {"message": message, "type": code, "code": code}}).encode()


def error_answer(code: str, message: str) -> tuple[list[tuple[bytes, bytes]], bytes]:
    """The fields and body of a JSON error answer after which the connection closes."""
    body = error_body(code, message)
    fields = [
        (b"content-type", b"application/json"),
        (b"content-length", b"%d" % len(body)),
        (b"connection", b"close"),
    ]
    return fields, body


_date: tuple[int, bytes] = (0, b"")


def date_field() -> tuple[bytes, bytes]:
    """The ``Date`` field (formatted once a second)."""
    global _date
    now = int(time.time())
    if _date[0] != now:
        _date = (now, formatdate(now, usegmt=True).encode("ascii"))
    return (b"date", _date[1])


class Plain:
    """Framing of an answer to a plain request (:func:`gateway.http.h1.response_head`)."""

    __slots__ = ("chunked",)

    def __init__(self) -> None:
        self.chunked = True

    def head(self, status: int, headers: list[tuple[bytes, bytes]], close: bool) -> bytes:
        data, self.chunked = response_head(status, headers, close=close)
        return data

    def data(self, body: bytes) -> bytes:
        return chunk(body) if self.chunked and body else body

    def end(self) -> bytes:
        return LAST_CHUNK if self.chunked else b""


class H11:
    """Framing of an answer by the request's :class:`h11.Connection`."""

    __slots__ = ("conn", "head_only", "no_body")

    def __init__(self, conn: h11.Connection, method: str) -> None:
        self.conn = conn
        self.head_only = method == "HEAD"
        self.no_body = False

    def head(self, status: int, headers: list[tuple[bytes, bytes]], close: bool) -> bytes:
        if close:
            headers.append((b"connection", b"close"))
        self.no_body = self.head_only or status in (204, 304)  # their bodies are not sent
        return self.conn.send(h11.Response(status_code=status, headers=headers)) or b""

    def data(self, body: bytes) -> bytes:
        if not body or self.no_body:
            return b""
        return self.conn.send(h11.Data(data=body)) or b""

    def end(self) -> bytes:
        return self.conn.send(h11.EndOfMessage()) or b""


class Link(Protocol):
    """What an exchange needs of its connection (:class:`gateway.http.connection.Connection`)."""

    @property
    def stopping(self) -> bool: ...

    async def write(self, data: bytes) -> bool:
        """Write ``data``; False if the connection is lost."""

    def write_now(self, data: bytes) -> bool:
        """Write ``data`` without a wait; False (the connection dropped) if it did not fit."""

    def answer_starts(self, exchange: Exchange) -> bool:
        """An answer begins: must the connection close after it?"""

    def answer_done(self, exchange: Exchange) -> None:
        """The answer's last byte is written."""

    def answer_cut(self, exchange: Exchange) -> None:
        """The answer stopped half-way: the connection is unusable."""

    def continue_body(self, exchange: Exchange) -> None:
        """The app reads a body the client waits to send (``100 Continue``)."""


class Exchange:
    """One request and its answer (module docstring). The connection reads the body
    into it (:meth:`put_nowait`, :meth:`put`, :meth:`client_gone`); its task runs
    :meth:`run`."""

    def __init__(
        self,
        conn: Link,
        scope: dict[str, Any],
        framing: Plain | H11,
        *,
        whole: bytes | None,
        close: bool,
    ) -> None:
        self.conn = conn
        self.scope = scope
        self.framing = framing
        #: the connection closes after this answer
        self.close = close
        self.answer = Answer.WAITING
        self.status = 0
        self.gone = Disconnect()
        self._whole = whole  # the body, when it came with the head
        self._queue: tuple[trio.MemorySendChannel[Any], trio.MemoryReceiveChannel[Any]] | None
        self._queue = None if whole is not None else trio.open_memory_channel(QUEUE)
        self._head: list[tuple[bytes, bytes]] | None = None
        self._corked: list[bytes] | None = None
        self._finished: trio.Event | None = None
        #: 100-continue owed before the app reads the body (h11's way only)
        self.expects_continue = False
        extensions = scope["extensions"]
        extensions[WRITES] = self
        extensions[DISCONNECT] = self.gone
        extensions[BODY] = self.take_body

    # -- the connection's side

    @property
    def finished(self) -> bool:
        """Is the answer over (complete, or dropped)?"""
        return self.answer is Answer.DONE or self.answer is Answer.DROPPED

    def put_nowait(self, data: bytes, more: bool) -> None:
        """Queue a piece of the body (:class:`trio.WouldBlock` when the app is behind);
        dropped once the app no longer reads."""
        if self._queue is not None:
            self._queue[0].send_nowait({"type": "http.request", "body": data, "more_body": more})

    async def put(self, data: bytes, more: bool) -> None:
        """:meth:`put_nowait`, waiting for room."""
        if self._queue is not None:
            message = {"type": "http.request", "body": data, "more_body": more}
            with contextlib.suppress(trio.BrokenResourceError, trio.ClosedResourceError):
                await self._queue[0].send(message)

    def client_gone(self) -> None:
        """The client left (or half-closed): ``receive`` says so once the body queued is
        read, and :data:`DISCONNECT` fires; the answer goes on until a write fails."""
        if self._queue is not None:
            self._queue[0].close()
        self.gone.set()

    def drop(self) -> None:
        """Nobody will read the answer: what the app still sends goes nowhere."""
        if not self.finished:
            self.answer = Answer.DROPPED
        self._set_finished()
        self.client_gone()

    async def wait_finished(self) -> None:
        if self._finished is None:
            self._finished = trio.Event()
            if self.finished:
                self._finished.set()
        await self._finished.wait()

    def _set_finished(self) -> None:
        if self._finished is not None:
            self._finished.set()

    # -- the app's side

    def take_body(self) -> bytes | None:
        """The whole body if it came with the head (then ``receive`` gives an empty
        one); None: read it with ``receive``."""
        whole, self._whole = self._whole, (b"" if self._whole is not None else None)
        return whole

    async def receive(self) -> dict[str, Any]:
        if self._whole is not None:
            body, self._whole = self._whole, None
            return {"type": "http.request", "body": body, "more_body": False}
        if self._queue is not None:
            if self.expects_continue:
                self.expects_continue = False
                self.conn.continue_body(self)
            try:
                message: dict[str, Any] = await self._queue[1].receive()
                return message
            except (trio.EndOfChannel, trio.ClosedResourceError):
                pass
        await self.gone.wait()
        return _DISCONNECTED

    async def send(self, message: dict[str, Any]) -> None:
        if self.answer is Answer.DROPPED:
            return
        kind = message["type"]
        if kind == "http.response.start" and self.answer is Answer.WAITING:
            status = int(message["status"])
            if not 200 <= status <= 999:
                raise ValueError(f"HTTP status {status} cannot start an answer")
            self.status = status
            self._head = [*message.get("headers", ()), date_field()]
            self.answer = Answer.HELD
            self.close = self.conn.answer_starts(self) or self.close
        elif kind == "http.response.body" and self.answer in (Answer.HELD, Answer.SENDING):
            await self._body(message.get("body", b""), message.get("more_body", False))
        else:
            raise RuntimeError(f"unexpected ASGI message {kind!r} (answer {self.answer.value})")

    async def _body(self, body: bytes, more: bool) -> None:
        framing = self.framing
        if self._head is not None:  # (a head that cannot be sent leaves it held: a 500)
            data = framing.head(self.status, self._head, self.close) + framing.data(body)
            self._head = None
            self.answer = Answer.SENDING
        else:
            data = framing.data(body)
        if not more:
            data += framing.end()
            self.answer = Answer.DONE
        corked = self._corked
        if corked is not None:
            if data:
                corked.append(data)
            if more:
                return
            self._corked = None
            data = b"".join(corked)
        if data and not await self.conn.write(data):
            self.drop()
            return
        if not more:
            self._done()

    def cork(self) -> None:
        """Keep what the app sends until :meth:`flush` (or the answer's end)."""
        if self._corked is None:
            self._corked = []

    async def flush(self) -> None:
        """Write what was kept (the head too, if held: the client sees the answer begin)."""
        if self.answer is Answer.HELD and self._head is not None:
            head, self._head = self._head, None
            self.answer = Answer.SENDING
            data = self.framing.head(self.status, head, self.close)
            if self._corked is None:
                self._corked = []
            self._corked.insert(0, data)
        corked = self._corked
        if corked and self.answer is Answer.SENDING:
            self._corked = []
            if not await self.conn.write(b"".join(corked)):
                self.drop()

    def _done(self) -> None:
        self.gone.end()  # the answer is complete: a receive now says so
        self._set_finished()
        self.conn.answer_done(self)

    async def run(self, app: Any) -> None:
        """Call the ASGI ``app``, then finish: an error answer if it gave none, the
        connection closed if it stopped half-way (never raises but ``Cancelled``)."""
        try:
            await app(self.scope, self.receive, self.send)
        except* Exception as group:
            log.error("unhandled error in the app", exc_info=group)
        finally:
            self._app_returned()

    def _app_returned(self) -> None:
        if self._queue is not None:
            self._queue[1].close()  # a body still arriving is dropped
        if self.answer is Answer.WAITING or self.answer is Answer.HELD:
            if not self.gone.happened:
                self._answer_error()
        elif self.answer is Answer.SENDING:
            self.answer = Answer.DROPPED
            self.conn.answer_cut(self)
        self._set_finished()

    def _answer_error(self) -> None:
        """The app ended without an answer: a JSON 500 (503 ``gateway_draining`` while
        the server stops), written without a wait; the connection closes after it."""
        if self.conn.stopping:
            status, code = 503, "gateway_draining"
            message = "The server is restarting and did not serve this request; please retry."
        else:
            status, code = 500, "internal_error"
            message = "The server failed to answer this request; it was logged."
        fields, body = error_answer(code, message)
        self.close = True
        self._head = self._corked = None
        framing = self.framing
        try:
            data = framing.head(status, [*fields, date_field()], True) + framing.data(body)
            data += framing.end()
        except h11.LocalProtocolError:  # the app's half-framed answer broke h11's state
            self.answer = Answer.DROPPED
            self.conn.answer_cut(self)
            return
        self.status = status
        self.answer = Answer.DONE
        if self.conn.write_now(data):
            self._done()
