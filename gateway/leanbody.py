"""A lean reader of an upstream event stream: one item per socket read, not per chunk.

httpx hands a streaming body over one HTTP chunk at a time, through five nested async
generators (httpx's bound stream and transport stream, httpcore's pool stream and
HTTP/1.1 stream, its body reader) and one ``h11`` event each. A model server writes
one chunk per SSE event, so that was the gateway's largest cost per delta in the
relay benchmark (the relay then paid a read, a cancel scope and a stage step per
event as well).

:class:`LeanBody` takes the body over once httpx has parsed the response head: it
reads httpcore's connection socket itself and decodes the chunked framing in bulk
(:class:`gateway.chunked.ChunkedDecoder`), so one read of the socket becomes one item,
all the events it completed together. What it leaves behind is what httpcore would:
at the end of the body the connection's ``h11`` state is brought to the end of the
message (``0\\r\\n\\r\\n`` fed to it), so closing the response returns the connection
to the pool; a body left early is closed with the connection, as before.

It applies only where it recognises every layer (httpx 0.28's and httpcore 1.0's
classes, h11's chunked reader untouched, HTTP/1.1, ``Transfer-Encoding: chunked``);
anything else (a mock or custom transport, ``Content-Length`` or close-delimited
bodies, HTTP/2, compressed bodies) keeps httpx's own iterator
(:meth:`LeanBody.attach` returns None). Errors are raised as the httpx exceptions
httpx would raise (:func:`gateway.upstream.translate` maps them).
"""

from __future__ import annotations

import logging
from typing import Any

import h11
import httpx
import trio

from gateway.chunked import ChunkedDecoder, ChunkedError

__all__ = ["READ_BYTES", "LeanBody"]

log = logging.getLogger("gateway.upstream")

#: bytes asked of the socket per read (httpcore's own size)
READ_BYTES = 64 * 1024

try:  # the private layers this reader looks through (checked by type, never guessed)
    import httpcore
    from h11._readers import ChunkedReader
    from httpcore._async.connection_pool import PoolByteStream
    from httpcore._async.http11 import AsyncHTTP11Connection, HTTP11ConnectionByteStream
    from httpcore._backends.trio import TrioStream
    from httpx._client import BoundAsyncStream
    from httpx._transports.default import AsyncResponseStream

    _LAYERS: tuple[type[Any], ...] | None = (
        BoundAsyncStream,
        AsyncResponseStream,
        PoolByteStream,
        HTTP11ConnectionByteStream,
    )
except ImportError:  # pragma: no cover - another httpx/httpcore: httpx's own iterator
    _LAYERS = None


def _connection(resp: httpx.Response) -> Any:
    """httpcore's HTTP/1.1 connection under ``resp``'s stream, or None."""
    if _LAYERS is None or resp.is_stream_consumed or resp.is_closed:
        return None
    bound, transport, pool, http11 = _LAYERS
    s: Any = resp.stream
    if type(s) is not bound:
        return None
    s = s._stream
    if type(s) is not transport:
        return None
    s = s._httpcore_stream
    if type(s) is not pool:
        return None
    s = s._stream
    if type(s) is not http11 or s._closed:
        return None
    conn = s._connection
    return conn if type(conn) is AsyncHTTP11Connection else None


def _fresh_chunked(state: Any) -> bool:
    """Is ``state`` (an ``h11.Connection``) at the very start of a chunked body?"""
    reader = getattr(state, "_reader", None)
    return (
        type(state) is h11.Connection
        and state.their_state is h11.SEND_BODY
        and type(reader) is ChunkedReader
        and reader._bytes_in_chunk == 0
        and reader._bytes_to_discard == b""
        and not reader._reading_trailer
        and hasattr(state, "_receive_buffer")
    )


class LeanBody:
    """A chunked upstream body as an async iterator of payload bytes, one per read."""

    __slots__ = ("_closed", "_decoder", "_h11", "_net", "_pending", "_sock", "_timeout")

    def __init__(self, h11_state: Any, net: Any, pending: bytes, timeout: float | None) -> None:
        self._h11 = h11_state
        self._net = net
        self._decoder = ChunkedDecoder()
        self._pending: bytes | None = pending
        self._timeout = timeout
        self._closed = False
        # httpcore's trio stream adds an exception map and a cancel scope per read:
        # without a read timeout, the trio stream under it is read directly
        sock = getattr(net, "_stream", None) if type(net) is TrioStream else None
        self._sock: trio.abc.ReceiveStream | None = (
            sock if timeout is None and isinstance(sock, trio.abc.ReceiveStream) else None
        )

    @classmethod
    def attach(cls, resp: httpx.Response) -> LeanBody | None:
        """Take ``resp``'s body over, or None where httpx must keep reading it."""
        try:
            conn = _connection(resp)
            if conn is None:
                return None
            state = conn._h11_state
            if not _fresh_chunked(state):
                return None
            timeout = conn_read_timeout(resp)
            # the body bytes that came with the response head (h11 holds them)
            buffered = state._receive_buffer.maybe_extract_at_most(len(state._receive_buffer))
            return cls(state, conn._network_stream, bytes(buffered or b""), timeout)
        except Exception:  # pragma: no cover - an unforeseen layout: httpx's iterator
            log.debug("lean upstream reader not applicable", exc_info=True)
            return None

    def __aiter__(self) -> LeanBody:
        return self

    async def __anext__(self) -> bytes:
        decoder = self._decoder
        while True:
            if self._pending is not None:
                data, self._pending = self._pending, None
            elif decoder.done or self._closed:
                raise StopAsyncIteration
            elif decoder.error is not None:  # after the payload before it: raised now
                data = b""
            else:
                data = await self._read()
                if not data:
                    raise httpx.RemoteProtocolError(
                        "peer closed connection without sending complete message body"
                    )
            try:
                payload = decoder.feed(data)
            except ChunkedError as exc:
                raise httpx.RemoteProtocolError(str(exc)) from None
            if decoder.done:
                self._end_of_message()
            if payload:
                return payload

    async def _read(self) -> bytes:
        sock = self._sock
        if sock is not None:
            try:
                return bytes(await sock.receive_some(READ_BYTES))
            except (trio.BrokenResourceError, trio.ClosedResourceError) as exc:
                raise httpx.ReadError(str(exc)) from exc
        try:
            return bytes(await self._net.read(READ_BYTES, timeout=self._timeout))
        except httpcore.ReadTimeout as exc:
            raise httpx.ReadTimeout(str(exc)) from exc
        except httpcore.NetworkError as exc:
            raise httpx.ReadError(str(exc)) from exc

    def _end_of_message(self) -> None:
        """Tell h11 the body ended, so that the connection can serve another request."""
        state = self._h11
        try:
            state.receive_data(b"0\r\n\r\n" + self._decoder.leftover)
            event = state.next_event()
        except h11.ProtocolError:  # pragma: no cover - then httpcore closes the connection
            return
        if type(event) is not h11.EndOfMessage:  # pragma: no cover - as above
            log.debug("h11 did not end the message: %r", event)

    async def aclose(self) -> None:
        """Nothing to release here: closing the response closes (or recycles) the
        connection."""
        self._closed = True
        self._pending = None


def conn_read_timeout(resp: httpx.Response) -> float | None:
    """The read timeout httpcore would apply to ``resp``'s body."""
    timeouts = resp.request.extensions.get("timeout", {})
    value = timeouts.get("read") if isinstance(timeouts, dict) else None
    return float(value) if isinstance(value, int | float) else None
