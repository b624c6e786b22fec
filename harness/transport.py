"""An httpx transport that answers with scripted bytes in chosen chunks.

This is how the harness (and the chunking tests) feed the real API server an
upstream response with adversarial chunk boundaries: the gateway's httpx client
gets this transport instead of a socket, and every ``aiter_bytes`` step yields
exactly one scripted chunk. Nothing else of the gateway is replaced.
"""

from __future__ import annotations

import itertools
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass, field

import httpx
import trio


@dataclass
class Scripted:
    """One scripted upstream response."""

    chunks: Sequence[bytes]
    status: int = 200
    headers: dict[str, str] = field(default_factory=lambda: {"content-type": "text/event-stream"})
    delay: float = 0.0  #: seconds before each chunk
    fail_after: bool = False  #: raise RemoteProtocolError after the last chunk (a cut connection)
    gate: trio.Event | None = None  #: wait for this before the last chunk
    #: awaited after chunk i was handed over, before chunk i+1 is released
    after_chunk: Callable[[int], Awaitable[None]] | None = None
    gates: Sequence[trio.Event] | None = None  #: ``gates[i]`` is awaited before chunk ``i``
    #: called right before chunk ``i`` is handed over, and with ``len(chunks)`` after the
    #: last one (the harness's file-system timeline: :mod:`harness.timeline`)
    before_chunk: Callable[[int], None] | None = None


class _Stream(httpx.AsyncByteStream):
    def __init__(self, script: Scripted, closed: list[float]) -> None:
        self._script = script
        self._closed = closed

    async def __aiter__(self) -> AsyncIterator[bytes]:
        s = self._script
        for i, chunk in enumerate(s.chunks):
            if s.gate is not None and i == len(s.chunks) - 1:
                await s.gate.wait()
            if s.gates is not None and i < len(s.gates):
                await s.gates[i].wait()
            if s.delay:
                await trio.sleep(s.delay)
            else:
                await trio.lowlevel.checkpoint()
            if s.before_chunk is not None:
                s.before_chunk(i)
            yield chunk
            if s.after_chunk is not None:
                await s.after_chunk(i)
        if s.before_chunk is not None:
            s.before_chunk(len(s.chunks))
        if s.fail_after:
            raise httpx.RemoteProtocolError(
                "peer closed connection without sending complete message body"
            )

    async def aclose(self) -> None:
        self._closed.append(trio.current_time())


class ScriptedTransport(httpx.AsyncBaseTransport):
    """Answers each request with ``script_for(request)``; records requests and closes."""

    def __init__(self, script_for: Callable[[httpx.Request], Scripted]) -> None:
        self._script_for = script_for
        self.requests: list[httpx.Request] = []
        self.closed: list[float] = []

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        await request.aread()
        self.requests.append(request)
        script = self._script_for(request)
        return httpx.Response(
            script.status,
            headers=script.headers,
            stream=_Stream(script, self.closed),
            request=request,
        )


def split_every(data: bytes, size: int) -> list[bytes]:
    return [data[i : i + size] for i in range(0, len(data), size)] or [b""]


def split_at(data: bytes, points: Sequence[int]) -> list[bytes]:
    bounds = [0, *sorted(p for p in points if 0 < p < len(data)), len(data)]
    return [data[a:b] for a, b in itertools.pairwise(bounds) if b > a]
