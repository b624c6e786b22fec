"""A lean HTTP/1.1 client for the one request the gateway makes per stream.

Opening the upstream stream through httpx cost a chat request ≈ a quarter of its CPU
(`python -m harness.bench profile --requests`): the client's send chain (auth,
redirects, the transport, httpcore's pool and connection objects), ``h11`` building
and validating the request head, and the head and the body written in two
``send(2)``\\ s. :class:`LeanPool` makes the streaming chat request itself, on plain
``http://`` only, when nothing else would route it (no custom transport, no proxy):

* the request (the fixed head built once, the principal, the body) leaves in one write
  on a pooled keep-alive connection (idle ones checked for EOF before reuse, dropped
  after :data:`KEEPALIVE_EXPIRY` s, at most ``max_idle`` kept);
* a plain response head whole in the first read is parsed by
  :func:`gateway.h1lean.parse_response_head` (a strict subset of h11's grammar, with
  h11's results); any other by ``h11``'s own reader and validated as ``h11`` does
  (status line, header lines, ``Content-Length`` / ``Transfer-Encoding``, body framing,
  keep-alive): a head h11 refuses is an ``httpx.RemoteProtocolError`` here too;
* the body is decoded in bulk (:class:`gateway.chunked.ChunkedDecoder` for chunked
  bodies; ``Content-Length`` and close-delimited bodies as they come), one item per
  socket read, like :class:`gateway.leanbody.LeanBody`; a compressed body goes through
  httpx's decoders;
* every failure is the httpx exception httpx would raise (``ConnectError``,
  ``ConnectTimeout``, ``WriteError``, ``ReadError``, ``RemoteProtocolError``), so
  :func:`gateway.upstream.translate` maps them as before; no cookie is read or sent;
* closing a response returns its connection to the pool only when its body was read
  to the end and both sides keep the connection alive; a response left early (the
  client went away, a cancel) closes its connection.

Everything else (non-streaming calls, ``/models``, the probe, HTTPS, a proxy, a test
transport) keeps httpx.
"""

from __future__ import annotations

import logging
import math
import re
from collections.abc import AsyncIterator
from typing import Any

import httpx
import trio

from gateway.chunked import ChunkedDecoder, ChunkedError
from gateway.h1lean import ResponseHead, parse_response_head
from gateway.streamclock import clock

__all__ = ["KEEPALIVE_EXPIRY", "LeanPool", "LeanResponse", "available"]

log = logging.getLogger("gateway.upstream")

#: seconds an idle pooled connection is kept (httpx's default keep-alive expiry)
KEEPALIVE_EXPIRY = 5.0
#: bytes asked of the socket per read (httpcore's own size)
READ_BYTES = 64 * 1024
#: socket reads in a row that found bytes there before a read yields once
QUICK_READS = 8
#: the longest response head accepted (h11's default ``max_incomplete_event_size``)
MAX_HEAD = 16 * 1024
#: a header value the lean path writes as is (else the request goes through httpx)
SAFE_VALUE = re.compile(r"[\x21-\x7e]{1,256}")

try:  # h11's own head reader and framing rules (private: checked, never guessed)
    import h11
    from h11._connection import _body_framing, _keep_alive
    from h11._readers import maybe_read_from_SEND_RESPONSE_server
    from h11._receivebuffer import ReceiveBuffer
    from httpx._decoders import SUPPORTED_DECODERS

    _OK = True
except ImportError:  # pragma: no cover - another h11/httpx: httpx for every request
    _OK = False


def available() -> bool:
    return _OK


def _decoders(encoding: str) -> list[Any]:
    """httpx's decoders for a ``Content-Encoding`` (unknown codings pass, as in httpx)."""
    out: list[Any] = []
    for coding in reversed([c.strip().lower() for c in encoding.split(",")]):
        cls = SUPPORTED_DECODERS.get(coding) if coding not in ("", "identity") else None
        if cls is not None:
            out.append(cls())
    return out


class ResponseHeaders:
    """The parts of ``httpx.Headers`` the gateway reads of an upstream's answer: a
    field by name, case-insensitive, several joined by ``", "``, the value decoded as
    httpx decodes it (ASCII, else UTF-8, else Latin-1). Made of the parsed head's
    fields as they are (an ``httpx.Headers`` cost a request ≈ 400 bytecodes)."""

    __slots__ = ("raw",)

    def __init__(self, raw: list[tuple[bytes, bytes]]) -> None:
        #: (lowercased name, value)
        self.raw = raw

    def get_list(self, name: str) -> list[str]:
        key = name.lower().encode("latin-1")
        return [_decoded(v) for n, v in self.raw if n == key]

    def get(self, name: str, default: Any = None) -> Any:
        values = self.get_list(name)
        return ", ".join(values) if values else default

    def __getitem__(self, name: str) -> str:
        values = self.get_list(name)
        if not values:
            raise KeyError(name)
        return ", ".join(values)

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and bool(self.get_list(name))

    def items(self) -> list[tuple[str, str]]:
        return [(n.decode("latin-1"), _decoded(v)) for n, v in self.raw]


def _decoded(value: bytes) -> str:
    for encoding in ("ascii", "utf-8"):
        try:
            return value.decode(encoding)
        except UnicodeDecodeError:
            pass
    return value.decode("iso-8859-1")


class LeanResponse:
    """A streaming response of :class:`LeanPool` (the parts of ``httpx.Response`` the
    gateway reads: ``status_code``, ``headers``, ``aiter_raw``/``aiter_bytes``,
    ``is_closed``, ``aclose``)."""

    __slots__ = (
        "_decoder",
        "_done",
        "_interrupted",
        "_key",
        "_left",
        "_pending",
        "_pool",
        "_quick",
        "_reusable",
        "_stream",
        "headers",
        "is_closed",
        "status_code",
    )

    def __init__(
        self,
        pool: LeanPool,
        stream: trio.SocketStream,
        head: ResponseHead,
        pending: bytes,
        key: str = "",
    ) -> None:
        self._pool = pool
        self._stream = stream
        self._key = key
        self.status_code: int = head.status
        self.headers = ResponseHeaders(head.headers)
        self._decoder = ChunkedDecoder() if head.chunked else None
        self._left = -1 if head.chunked else head.length  # -1: until EOF
        self._reusable = head.keep_alive and (head.chunked or head.length >= 0)
        self._pending = pending
        self._quick = 0
        self._interrupted = False
        self._done = self._left == 0
        self.is_closed = False

    @property
    def content_encoded(self) -> bool:
        return self.headers.get("content-encoding", "identity").lower() not in ("", "identity")

    def aiter_raw(self) -> AsyncIterator[bytes]:
        """The body's payload, one item per socket read (framing removed)."""
        return self

    def __aiter__(self) -> LeanResponse:
        return self

    @property
    def _failed(self) -> bool:
        """The decoder met a broken frame after payload it returned: raise it next."""
        return self._decoder is not None and self._decoder.error is not None

    async def __anext__(self) -> bytes:
        while not self._done and not self.is_closed:
            data = self._pending or (b"" if self._failed else await self._read())
            self._pending = b""
            payload = self._take(data)
            if payload:
                return payload
        raise StopAsyncIteration

    def take_nowait(self) -> bytes:
        """What ``__anext__`` would return from bytes already received (with the head,
        or waiting in the socket: one non-blocking read), without a wait:
        :class:`trio.WouldBlock` when it would have to wait, ``StopAsyncIteration`` at
        the end of the body. (A short answer is usually all here once its head is: the
        relay sends it on without a task or a round.)"""
        while not self._done and not self.is_closed:
            data = self._pending or (b"" if self._failed else self._recv_nowait())
            self._pending = b""
            payload = self._take(data)
            if payload:
                return payload
        raise StopAsyncIteration

    def _recv_nowait(self) -> bytes:
        sock: Any = getattr(self._stream.socket, "_sock", None)
        if sock is None:
            raise trio.WouldBlock
        try:
            data: bytes = sock.recv(READ_BYTES)
        except (BlockingIOError, InterruptedError):
            raise trio.WouldBlock from None
        except OSError as exc:
            raise httpx.ReadError(str(exc)) from exc
        return self._received(data)

    async def aiter_bytes(self) -> AsyncIterator[bytes]:
        """The body decoded (``Content-Encoding``), as httpx's ``aiter_bytes``."""
        decoders = _decoders(self.headers.get("content-encoding", ""))
        try:
            async for raw in self:
                for d in decoders:
                    raw = d.decode(raw)
                if raw:
                    yield raw
            tail = b""
            for d in decoders:
                tail = d.decode(tail) + d.flush()
            if tail:
                yield tail
        except httpx.DecodingError:
            raise
        except (ValueError, OSError) as exc:  # pragma: no cover - decoders raise DecodingError
            raise httpx.DecodingError(str(exc)) from exc

    async def _read(self) -> bytes:
        """One socket read, waiting for it if nothing is there. trio's ``receive_some``
        costs four frames and a scheduler round per read; here the wait is the
        checkpoint, and every :data:`QUICK_READS` reads that found bytes there yield
        once (an upstream that never pauses cannot starve the rest). A cancel or an
        :meth:`interrupt` can only land in the wait or that yield: before any byte is
        taken (pull-safe)."""
        sock: Any = getattr(self._stream.socket, "_sock", None)
        if sock is None:  # not a plain socket: trio's own read
            try:
                data = bytes(await self._stream.receive_some(READ_BYTES))
            except (trio.BrokenResourceError, trio.ClosedResourceError, OSError) as exc:
                raise httpx.ReadError(str(exc)) from exc
            return self._received(data)
        if self._quick >= QUICK_READS:
            self._quick = 0
            await trio.lowlevel.checkpoint()
        while True:
            try:
                data = sock.recv(READ_BYTES)
                self._quick += 1
                self._interrupted = False  # the reader is back with bytes: done
                return self._received(data)
            except (BlockingIOError, InterruptedError):
                pass
            except OSError as exc:
                raise httpx.ReadError(str(exc)) from exc
            self._quick = 0  # (the wait is outside the except: no exception kept alive)
            if self._interrupted:
                self._interrupted = False
                raise trio.WouldBlock
            try:
                await trio.lowlevel.wait_readable(sock)
            except trio.ClosedResourceError as exc:
                if not self._interrupted:
                    raise httpx.ReadError(str(exc)) from exc

    @property
    def interruptible(self) -> bool:
        """Can :meth:`interrupt` wake a waiting read (a plain socket under the stream)?"""
        return getattr(self._stream.socket, "_sock", None) is not None

    def interrupt(self) -> None:
        """Wake the body read that waits (or the next one that would): it raises
        :class:`trio.WouldBlock` having taken nothing. A cancel scope around every read
        cost a paced event a fifth of its instructions; this wakes the wait with
        ``notify_closing`` (the socket stays open: the next wait registers it again)."""
        self._interrupted = True
        sock: Any = getattr(self._stream.socket, "_sock", None)
        if sock is not None and sock.fileno() != -1:
            trio.lowlevel.notify_closing(sock)

    def _received(self, data: bytes) -> bytes:
        """A read's bytes; at EOF, the end of a close-delimited body or an error."""
        if not data:
            if self._left < 0 and self._decoder is None:  # close-delimited: the end
                self._done = True
                self._reusable = False
                return b""
            raise httpx.RemoteProtocolError(
                "peer closed connection without sending complete message body"
            )
        return data

    def _take(self, data: bytes) -> bytes:
        """The payload ``data`` carries; marks the end of the body."""
        decoder = self._decoder
        if decoder is not None:
            try:
                payload = decoder.feed(data)
            except ChunkedError as exc:
                raise httpx.RemoteProtocolError(str(exc)) from None
            if decoder.done:
                self._done = True
                self._reusable = self._reusable and not decoder.leftover
            return payload
        if self._left < 0:
            return data
        if len(data) >= self._left:
            if len(data) > self._left:  # bytes after the body: never reuse the connection
                self._reusable = False
            data = data[: self._left]
            self._done = True
        self._left -= len(data)
        return data

    def _finish_nowait(self) -> None:
        """Read the rest of the body if it is already here (never waits): a relay stops
        at ``[DONE]``, and the chunked body's last chunk is usually in the socket
        already; with it the connection can be reused instead of closed."""
        sock: Any = getattr(self._stream.socket, "_sock", None)
        if sock is None or len(self._pending) > READ_BYTES:
            return
        try:
            for _ in range(4):  # a few reads at most: a long rest is not worth it
                data = self._pending or sock.recv(READ_BYTES)
                self._pending = b""
                if not data:
                    self._reusable = False
                    return
                self._take(data)
                if self._done:
                    return
        except (BlockingIOError, InterruptedError):
            return
        except (OSError, httpx.HTTPError):
            self._reusable = False

    def close_nowait(self) -> bool:
        """Recycle the connection if it can be (the body read to its end, at once if the
        rest is here already, and keep-alive): True; else False and nothing done."""
        if self.is_closed:
            return True
        if not self._done and self._reusable:
            self._finish_nowait()
        if not (self._done and self._reusable):
            return False
        self.is_closed = True
        self._pool.put(self._stream, self._key)
        return True

    async def aclose(self) -> None:
        """Recycle the connection (body read to the end, keep-alive) or close it."""
        if self.close_nowait():
            return
        self.is_closed = True
        await trio.aclose_forcefully(self._stream)


def _send_nowait(stream: trio.SocketStream, data: bytes) -> bytes | memoryview:
    """What is left of ``data`` after one non-blocking ``send(2)``: a request fits the
    socket's buffer, so it leaves without a timeout scope or a trip through the
    scheduler (trio's ``send_all`` takes both); the rest, if any, goes the usual way."""
    sock: Any = getattr(stream.socket, "_sock", None)
    if sock is None:
        return data
    try:
        sent = sock.send(data)
    except (BlockingIOError, InterruptedError):
        return data
    return memoryview(data)[sent:] if sent < len(data) else b""


class _Wake:
    """A stream-clock entry that wakes the wait on a socket at its moment."""

    __slots__ = ("fired", "sock")

    def __init__(self, sock: Any) -> None:
        self.sock = sock
        self.fired = False

    def due(self, now: float) -> None:
        self.fired = True
        if self.sock.fileno() != -1:
            trio.lowlevel.notify_closing(self.sock)

    def drain(self) -> None:  # pragma: no cover - registered without a drain event
        pass


async def _receive_by(stream: trio.SocketStream, deadline: float) -> bytes:
    """One read of the response head, by ``deadline`` (then :class:`trio.TooSlowError`).
    A cancel scope with a deadline cost a request ≈ 57 k instructions; the wait is
    timed here by an entry in the run's stream clock, which wakes it at the deadline
    (``notify_closing``: the socket stays open; a later wait registers it again)."""
    sock: Any = getattr(stream.socket, "_sock", None)
    if sock is None:  # not a plain socket: trio's read under a scope
        with trio.fail_at(deadline):
            return await stream.receive_some(READ_BYTES)
    timer: _Wake | None = None
    handle = None
    try:
        while True:
            try:
                data: bytes = sock.recv(READ_BYTES)
                return data
            except (BlockingIOError, InterruptedError):
                pass
            if trio.current_time() >= deadline:
                raise trio.TooSlowError
            if timer is None:
                timer = _Wake(sock)
                if deadline < math.inf:
                    handle = clock().add(timer, deadline)
            try:
                await trio.lowlevel.wait_readable(sock)
            except trio.ClosedResourceError:
                if not timer.fired:
                    raise
                raise trio.TooSlowError from None
    finally:
        if handle is not None:
            handle.cancel()


def _h11_head(buf: ReceiveBuffer) -> tuple[ResponseHead, bytes] | None:
    """The response head as h11's own reader reads it from ``buf`` (1xx answers
    skipped), and the bytes after it; None while incomplete. What h11 refuses is an
    ``httpx.RemoteProtocolError``."""
    while True:
        try:
            event = maybe_read_from_SEND_RESPONSE_server(buf)
        except h11.ProtocolError as exc:
            raise httpx.RemoteProtocolError(str(exc)) from None
        if event is None:
            return None
        if isinstance(event, h11.Response):
            break  # 100 Continue and the like: the response follows
    try:
        kind, args = _body_framing(b"POST", event)
    except (h11.ProtocolError, ValueError) as exc:  # pragma: no cover - h11 validated
        raise httpx.RemoteProtocolError(str(exc)) from None
    headers = [(bytes(name), bytes(value)) for name, value in event.headers]  # lowercased
    length = args[0] if kind == "content-length" and args else -1
    keep_alive = kind != "http/1.0" and _keep_alive(event)
    head = ResponseHead(event.status_code, headers, kind == "chunked", length, keep_alive, 0)
    return head, bytes(buf.maybe_extract_at_most(len(buf)) or b"")


class _Unanswered(Exception):
    """A reused connection failed before any byte of an answer (retried once)."""


class LeanPool:
    """Keep-alive connections to one ``http://`` origin, for streaming POSTs.

    An idle connection is kept for the principal whose request it served and reused
    only for that principal's (``key``): bytes a misbehaving upstream sends after a
    complete answer, arriving once the next request is on its way, cannot be told
    from that request's answer, and must not reach another user (HTTP/1.1 has no
    request id). ``max_idle`` bounds them all together."""

    def __init__(
        self,
        url: httpx.URL,
        headers: list[tuple[str, str]],
        *,
        connect_timeout: float,
        max_idle: int = 100,
    ) -> None:
        self.host = url.host
        self.port = url.port or 80
        self.connect_timeout = connect_timeout
        self.max_idle = max_idle
        #: (key, connection, since), oldest first
        self._idle: list[tuple[str, trio.SocketStream, float]] = []
        fixed = [
            f"POST {url.raw_path.decode('ascii')} HTTP/1.1",
            f"Host: {url.netloc.decode('ascii')}",
            *(f"{k}: {v}" for k, v in headers),
        ]
        self._head = ("\r\n".join(fixed) + "\r\n").encode("latin-1")
        self._closed = False

    def request_bytes(self, body: bytes, extra: list[tuple[str, str]]) -> bytes:
        """The whole request: the fixed head, ``extra`` headers, the length, the body."""
        tail = "".join(f"{k}: {v}\r\n" for k, v in extra)
        return b"".join(
            (self._head, f"{tail}Content-Length: {len(body)}\r\n\r\n".encode("latin-1"), body)
        )

    async def _connect(self, deadline: float = math.inf) -> trio.SocketStream:
        connect_by = trio.current_time() + self.connect_timeout
        try:
            with trio.fail_at(min(connect_by, deadline)):
                return await trio.open_tcp_stream(self.host, self.port)
        except trio.TooSlowError:
            if deadline <= connect_by:  # the answer's bound came first
                raise
            raise httpx.ConnectTimeout("timed out connecting to the upstream") from None
        except OSError as exc:
            raise httpx.ConnectError(str(exc)) from exc

    def _take_idle(self, key: str) -> trio.SocketStream | None:
        """The latest pooled connection of ``key`` still usable (not expired, nothing
        to read: no EOF); expired ones met on the way are closed."""
        now = trio.current_time()
        idle = self._idle
        for i in range(len(idle) - 1, -1, -1):
            k, stream, since = idle[i]
            expired = now - since >= KEEPALIVE_EXPIRY
            if k != key and not expired:
                continue
            del idle[i]
            if not expired and not stream.socket.is_readable():
                return stream
            stream.socket.close()
        return None

    def put(self, stream: trio.SocketStream, key: str = "") -> None:
        if self._closed or self.max_idle <= 0:
            stream.socket.close()
            return
        if len(self._idle) >= self.max_idle:  # the oldest goes (an expired one first)
            self._idle.pop(0)[1].socket.close()
        self._idle.append((key, stream, trio.current_time()))

    async def post(
        self,
        body: bytes,
        extra: list[tuple[str, str]],
        key: str = "",
        *,
        deadline: float = math.inf,
    ) -> LeanResponse:
        """Send the request in one write and read the response head; the body is left
        for the caller (who must ``aclose()`` the response). ``key``: whose request it
        is (a connection is reused only for the same key). ``deadline`` (trio time): the
        head must have come by then, else :class:`trio.TooSlowError` (the wait for it is
        timed by the run's stream clock, not a cancel scope: :func:`_receive_by`).

        A pooled connection the server closed while we reused it (its FIN or reset
        crossed our request: nothing of a response came back) is retried once on a
        new connection: the server never read that request."""
        data = self.request_bytes(body, extra)
        stream = self._take_idle(key)
        if stream is not None:
            try:
                return await self._exchange(stream, data, key, deadline)
            except _Unanswered:
                pass
        return await self._exchange(await self._connect(deadline), data, key, deadline, fresh=True)

    async def _exchange(
        self,
        stream: trio.SocketStream,
        data: bytes,
        key: str,
        deadline: float,
        *,
        fresh: bool = False,
    ) -> LeanResponse:
        try:
            try:
                rest = _send_nowait(stream, data)
                if rest:
                    write_by = trio.current_time() + self.connect_timeout  # httpx's
                    with trio.fail_at(min(write_by, deadline)):  # write timeout
                        await stream.send_all(rest)
            except trio.TooSlowError:
                if trio.current_time() >= deadline:
                    raise
                raise httpx.WriteTimeout("timed out writing to the upstream") from None
            except (trio.BrokenResourceError, trio.ClosedResourceError, OSError) as exc:
                raise (httpx.WriteError if fresh else _Unanswered)(str(exc)) from exc
            return await self._response(stream, fresh, key, deadline)
        except BaseException:
            await trio.aclose_forcefully(stream)
            raise

    async def _response(
        self, stream: trio.SocketStream, fresh: bool, key: str, deadline: float
    ) -> LeanResponse:
        """The answer's head: a plain one whole in the first read without h11 (sans-IO,
        :func:`~gateway.h1lean.parse_response_head`), any other by h11's reader."""
        buf: ReceiveBuffer | None = None  # h11's, once the first read was not enough
        while True:
            try:
                data = await _receive_by(stream, deadline)
            except (trio.BrokenResourceError, trio.ClosedResourceError, OSError) as exc:
                if not fresh and buf is None:
                    raise _Unanswered(str(exc)) from exc
                raise httpx.ReadError(str(exc)) from exc
            if not data:
                if not fresh and buf is None:
                    raise _Unanswered("closed before answering")
                raise httpx.RemoteProtocolError("Server disconnected without sending a response.")
            fresh = True  # an answer began: no retry from here on
            if buf is None:
                head = parse_response_head(data, MAX_HEAD)
                if head is not None:
                    return LeanResponse(self, stream, head, data[head.size :], key)
                buf = ReceiveBuffer()
            buf += data
            found = _h11_head(buf)
            if found is not None:
                return LeanResponse(self, stream, *found, key)
            if len(buf) > MAX_HEAD:
                raise httpx.RemoteProtocolError("the response head is too long")

    async def aclose(self) -> None:
        self._closed = True
        while self._idle:
            self._idle.pop()[1].socket.close()
