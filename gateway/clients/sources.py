"""Sources for :class:`gateway.stream.relay.Relay`: what one read of a stream brings.

* :class:`SSESource` — an upstream answer (:class:`gateway.clients.httpclient.Response`)
  decoded into SSE events with a size bound; one read is everything one socket read
  brought (all the events it completed);
* :class:`JournalSource` — a background run's journal, replayed after a sequence
  number and then followed live (:mod:`gateway.runs.manager`);
* the proxy's remote run source lives in :mod:`gateway.proxy.stream`.

Every source raises only :class:`~gateway.core.errors.GatewayError` (the upstream client
translates at its boundary) and has an idempotent ``aclose`` that works while cancelled.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import trio

from gateway.clients.httpclient import Response, abandon
from gateway.clients.upstream import close_quietly
from gateway.core.errors import GatewayError, UpstreamError
from gateway.core.sse import SSEDecoder, SSEEvent

__all__ = ["SSESource", "abandon"]


class SSESource:
    """An upstream answer's body → lists of SSE events (``[]`` when a read completed
    none); ``None`` at its end. Pull-safe (:class:`gateway.stream.relay.Source`) when the
    answer is read from a plain socket."""

    __slots__ = ("_closed", "_decoder", "_response")

    def __init__(
        self, response: Response | AsyncIterator[bytes], *, max_event_bytes: int = 1 << 20
    ) -> None:
        self._response: Response | _Chunks = (
            response if isinstance(response, Response) else _Chunks(response)
        )
        self._decoder = SSEDecoder(max_event_bytes=max_event_bytes)
        self._closed = False

    @classmethod
    def from_response(cls, resp: Response, *, max_event_bytes: int) -> SSESource:
        return cls(resp, max_event_bytes=max_event_bytes)

    @property
    def pull_safe(self) -> bool:
        """A waiting read can be woken having taken nothing (:meth:`interrupt`)."""
        return self._response.pull_safe

    def interrupt(self) -> None:
        """Wake a read that waits: it raises :class:`trio.WouldBlock` (pull-safe only)."""
        self._response.interrupt()

    async def read(self) -> list[SSEEvent] | None:
        data = await self._response.receive_some()
        if data:
            return self._decoder.feed(data)
        self._end()
        return None

    def read_nowait(self) -> list[SSEEvent] | None:
        """What :meth:`read` would return from bytes already received, or
        :class:`trio.WouldBlock` when it would have to wait."""
        data = self._response.receive_nowait()
        if data:
            return self._decoder.feed(data)
        self._end()
        return None

    def _end(self) -> None:
        """The body ended: an error if it ended inside an event."""
        if self._decoder.cut_event:  # the body ended inside an event: a cut, not an end
            raise UpstreamError(
                "The upstream stream ended in the middle of an event.",
                code="upstream_disconnected",
            )
        self._decoder.close()

    def close_nowait(self) -> bool:
        """Close at once if that needs no wait (the connection recycled): True; else
        False, and :meth:`aclose` does it."""
        if self._closed:
            return True
        self._closed = self._response.close_nowait()
        return self._closed

    async def aclose(self) -> None:
        if not self._closed:
            self._closed = True
            response = self._response
            if isinstance(response, Response):
                await close_quietly(response)
            else:
                await response.aclose()


class _Chunks:
    """Any async iterator of bytes (a scripted body) read as an answer's body is."""

    __slots__ = ("_chunks", "is_closed")

    pull_safe = False

    def __init__(self, chunks: AsyncIterator[bytes]) -> None:
        self._chunks = chunks
        self.is_closed = False

    async def receive_some(self) -> bytes:
        while True:
            try:
                data = await self._chunks.__anext__()
            except StopAsyncIteration:
                return b""
            except GatewayError:
                raise
            except Exception as exc:  # whatever the iterator's transport raises
                raise UpstreamError(
                    "The upstream closed the connection in the middle of the response.",
                    code="upstream_disconnected",
                ) from exc
            if data:
                return data

    def receive_nowait(self) -> bytes:
        raise trio.WouldBlock

    def interrupt(self) -> None:  # pragma: no cover - never pull-safe
        pass

    def close_nowait(self) -> bool:
        return False

    async def aclose(self) -> None:
        if not self.is_closed:
            self.is_closed = True
            await abandon(self._chunks)
