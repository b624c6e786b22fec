"""Sources for :class:`gateway.relay.Relay`: what one read of a stream brings.

* :class:`SSESource` — an upstream HTTP response (httpx) or any async iterator of
  bytes, decoded into SSE events with a size bound; one read of a chunked upstream
  body is everything one socket read brought (:class:`gateway.leanbody.LeanBody`),
  elsewhere what httpx hands over (one HTTP chunk at a time);
* :class:`JournalSource` — a background run's journal, replayed after a sequence
  number and then followed live (:mod:`gateway.runs`);
* the proxy's remote run source lives in :mod:`gateway.proxy.stream`.

Every source translates its failures into :class:`~gateway.errors.GatewayError` and
has an idempotent ``aclose`` that works while cancelled.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator

import trio

from gateway.errors import UpstreamError
from gateway.leanbody import LeanBody
from gateway.leanclient import LeanResponse
from gateway.sse import SSEDecoder, SSEEvent
from gateway.upstream import StreamResponse, close_quietly, translate

__all__ = ["SSESource", "abandon"]


class SSESource:
    """Upstream bytes → lists of SSE events (``[]`` when a read completed none)."""

    def __init__(
        self,
        chunks: AsyncIterator[bytes],
        *,
        max_event_bytes: int = 1 << 20,
        response: StreamResponse | None = None,
    ) -> None:
        self._chunks = chunks
        self._decoder = SSEDecoder(max_event_bytes=max_event_bytes)
        self._response = response
        self._closed = False

    @classmethod
    def from_response(cls, resp: StreamResponse, *, max_event_bytes: int) -> SSESource:
        chunks: AsyncIterator[bytes]
        if isinstance(resp, LeanResponse):  # read in bulk already (gateway.leanclient)
            chunks = resp.aiter_bytes() if resp.content_encoded else resp.aiter_raw()
            return cls(chunks, max_event_bytes=max_event_bytes, response=resp)
        encoded = resp.headers.get("content-encoding", "identity").lower() not in ("", "identity")
        # a compressed body needs httpx's decoders; a plain one is read in bulk
        chunks = resp.aiter_bytes() if encoded else LeanBody.attach(resp) or resp.aiter_raw()
        return cls(chunks, max_event_bytes=max_event_bytes, response=resp)

    @property
    def pull_safe(self) -> bool:
        """A waiting read can be woken having taken nothing (:meth:`interrupt`,
        :class:`gateway.relay.Source`): the lean client's body read raw (one socket
        read, then the decoders). httpx's iterators and a decoding generator cannot."""
        chunks = self._chunks
        return type(chunks) is LeanResponse and chunks.interruptible

    def interrupt(self) -> None:
        """Wake a read that waits: it raises :class:`trio.WouldBlock` (pull-safe only)."""
        chunks = self._chunks
        if type(chunks) is LeanResponse:
            chunks.interrupt()

    async def read(self) -> list[SSEEvent] | None:
        try:
            data = await self._chunks.__anext__()
        except StopAsyncIteration:
            self._end()
            return None
        except trio.WouldBlock:  # interrupted while it waited: nothing taken
            raise
        except Exception as exc:  # httpx and OS errors: translated at this boundary
            raise translate(exc) from exc
        return self._decoder.feed(data) if data else []

    def read_nowait(self) -> list[SSEEvent] | None:
        """What :meth:`read` would return from bytes already received (the lean
        client's), or :class:`trio.WouldBlock` when it would have to wait."""
        take = getattr(self._chunks, "take_nowait", None)
        if take is None:
            raise trio.WouldBlock
        try:
            data = take()
        except StopAsyncIteration:
            self._end()
            return None
        except trio.WouldBlock:
            raise
        except Exception as exc:
            raise translate(exc) from exc
        return self._decoder.feed(data) if data else []

    def _end(self) -> None:
        """The body ended: an error if it ended inside an event."""
        if self._decoder.cut_event:  # the body ended inside an event: a cut, not an end
            raise UpstreamError(
                "The upstream stream ended in the middle of an event.",
                code="upstream_disconnected",
            ) from None
        self._decoder.close()

    def close_nowait(self) -> bool:
        """Close at once if that needs no wait (the lean client's connection recycled):
        True; else False, and :meth:`aclose` does it."""
        if self._closed:
            return True
        chunks = self._chunks
        if not isinstance(chunks, LeanResponse) or not chunks.close_nowait():
            return False
        self._closed = True
        return True

    async def aclose(self) -> None:
        if self._closed:
            return
        self._closed = True
        if isinstance(self._chunks, LeanBody | LeanResponse):
            await self._chunks.aclose()
        else:
            await abandon(self._chunks)
        if self._response is not None:
            await close_quietly(self._response)


async def abandon(chunks: AsyncIterator[bytes]) -> None:
    """Finish a byte iterator the way a cancelled read does.

    httpx's iterator is a chain of async generators; one left suspended is finalized
    by the garbage collector with a ResourceWarning. A read in a cancelled scope ends
    them all (data already buffered comes back without a checkpoint first).
    """
    with trio.CancelScope() as scope:
        scope.cancel()
        with contextlib.suppress(Exception):
            while True:
                await chunks.__anext__()
    aclose = getattr(chunks, "aclose", None)
    if aclose is not None:
        with trio.CancelScope(shield=True), contextlib.suppress(Exception):
            await aclose()
