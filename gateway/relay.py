"""Trio glue: relay one upstream SSE response through the pipeline to a sink.

``relay(...)`` is an async context manager; ``async with relay(...) as chunks:
async for data in chunks`` (that is how Quart sends a response body, see
:class:`gateway.app.ChannelBody`). Entering it opens a nursery in the task that sends
the body (see STACK-NOTES: never yield from inside a nursery in a plain body
generator; a context manager entered and exited by the sending task is safe). Inside:

* one producer task reads the upstream bytes, decodes them, feeds every complete
  event to the pipeline and puts **one** encoded write per upstream read into a
  small memory channel (batching is what keeps the cost per event low; the cost is
  per send, not per byte);
* the consumer side (the body iterator, in the sending task) takes the writes out;
  when the client is slower than the upstream, the writes already waiting are
  joined into one (never waiting for more, so nothing is delayed). It waits with a
  deadline (never holding a cancel scope across a yield) and writes a keep-alive
  comment when the upstream has sent nothing for ``keepalive_seconds``;
* an optional drain watcher, and the consumer's idle check, ask the producer to
  stop: a pending upstream read is cancelled at once (the upstream is abandoned
  anyway), pipeline work under way is never interrupted.

Every exit path ends with a terminal write from the sink: normal end, upstream
failure, idle timeout, oversized event, drain. Client disconnect cancels the
nursery; the upstream response is closed at once.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from types import TracebackType
from typing import Protocol

import httpx
import trio

from gateway.errors import SSEEventTooLarge, UpstreamError
from gateway.pipeline import ChatPipeline, Failure, Out
from gateway.sse import SSEDecoder
from gateway.upstream import translate


class Sink(Protocol):
    """Encodes pipeline output for one wire format (chat, Responses, runs...)."""

    def start(self) -> bytes: ...

    def batch(self, outs: list[Out]) -> bytes: ...

    def keepalive(self) -> bytes: ...

    async def end(self, pipeline: ChatPipeline) -> bytes: ...

    async def fail(self, pipeline: ChatPipeline, code: str, message: str) -> bytes: ...


@dataclass(frozen=True)
class RelayOptions:
    keepalive_seconds: float = 15.0
    idle_timeout_seconds: float = 300.0
    max_event_bytes: int = 1 << 20
    draining: trio.Event | None = None
    #: told the characters held by the rewriters after each batch (0 at the end)
    on_held: Callable[[int], None] | None = None


#: encoded writes the producer may run ahead of the client (backpressure beyond it)
OUT_BUFFER = 16

_IDLE = ("upstream_timeout", "The upstream model server sent nothing for too long.")
_DRAINING = (
    "gateway_draining",
    "The gateway is restarting; the response was cut short, please retry.",
)


async def close_quietly(resp: httpx.Response, limit_seconds: float = 2.0) -> None:
    """Close an upstream response even while being cancelled (bounded)."""
    with trio.move_on_after(limit_seconds) as scope:
        scope.shield = True
        with contextlib.suppress(Exception):
            await resp.aclose()


async def _abandon(chunks: AsyncIterator[bytes]) -> None:
    """Finish the upstream byte iterator the way a cancelled read does.

    httpx's iterator is a chain of async generators; one left suspended is finalized
    by the garbage collector with a ResourceWarning. A read in a cancelled scope
    ends them all (data already buffered comes back without a checkpoint first).
    """
    with trio.CancelScope() as scope:
        scope.cancel()
        with contextlib.suppress(Exception):
            while True:
                await chunks.__anext__()


def _raise_single(eg: BaseExceptionGroup[BaseException]) -> None:
    """Re-raise the one real error of a nursery's group (as ``as_safe_channel`` does)."""
    leaves: list[BaseException] = []
    stack: list[BaseException] = [eg]
    while stack:
        e = stack.pop()
        if isinstance(e, BaseExceptionGroup):
            stack.extend(reversed(e.exceptions))
        else:
            leaves.append(e)
    real = [e for e in leaves if not isinstance(e, trio.Cancelled)]
    if len(real) > 1:
        raise eg
    exc = (real or leaves)[0]
    context = exc.__context__
    try:
        raise exc
    finally:
        exc.__context__ = context  # keep the error's own context, not the group
        del exc, context


class Relay:
    """One relayed response: an async context manager whose value iterates the writes."""

    def __init__(
        self, resp: httpx.Response, pipeline: ChatPipeline, sink: Sink, opts: RelayOptions
    ) -> None:
        self._resp = resp
        self._pipeline = pipeline
        self._sink = sink
        self._opts = opts
        self._send, self._recv = trio.open_memory_channel[bytes](OUT_BUFFER)
        self._nursery_cm: AbstractAsyncContextManager[trio.Nursery] | None = None
        self._nursery: trio.Nursery | None = None
        #: the cancel scope of the upstream read under way (None while not reading)
        self._read_scope: trio.CancelScope | None = None
        #: why the producer must stop early (idle timeout, drain), once asked
        self._stop: tuple[str, str] | None = None
        self._last_data = 0.0  # trio time of the last upstream bytes
        self._last_tick = 0.0  # trio time the consumer last started a keep-alive period

    # -- context manager (runs in the task that sends the body) -----------------------

    async def __aenter__(self) -> Relay:
        self._last_data = self._last_tick = trio.current_time()
        self._nursery_cm = trio.open_nursery()
        nursery = self._nursery = await self._nursery_cm.__aenter__()
        nursery.start_soon(self._produce)
        if self._opts.draining is not None:
            nursery.start_soon(self._watch_drain, self._opts.draining)
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> bool:
        assert self._nursery is not None and self._nursery_cm is not None
        try:
            # the consumer is done (the stream ended, the client left, or an error):
            # whatever still runs in the nursery is abandoned
            self._nursery.cancel_scope.cancel()
            try:
                return bool(await self._nursery_cm.__aexit__(exc_type, exc, tb))
            except BaseExceptionGroup as eg:
                _raise_single(eg)
                raise  # pragma: no cover - _raise_single always raises
        finally:
            self._recv.close()
            if self._opts.on_held is not None:
                self._opts.on_held(0)
            await close_quietly(self._resp)

    # -- consumer --------------------------------------------------------------------

    def __aiter__(self) -> Relay:
        return self

    async def __anext__(self) -> bytes:
        recv = self._recv
        keepalive = self._opts.keepalive_seconds
        while True:
            try:
                data = recv.receive_nowait()
            except trio.WouldBlock:
                got = False
                with trio.move_on_at(max(self._last_data, self._last_tick) + keepalive):
                    try:
                        data = await recv.receive()
                    except trio.EndOfChannel:
                        raise StopAsyncIteration from None
                    got = True
                if not got:
                    now = trio.current_time()
                    if max(self._last_data, self._last_tick) + keepalive > now:
                        continue  # the upstream sent something meanwhile (nothing to write)
                    self._last_tick = now
                    if now - self._last_data >= self._opts.idle_timeout_seconds:
                        self._request_stop(_IDLE)
                        continue
                    ping = self._sink.keepalive()
                    if ping:
                        return ping
                    continue
            except trio.EndOfChannel:
                raise StopAsyncIteration from None
            # writes that are already waiting go out together (never wait for more)
            parts: list[bytes] | None = None
            while True:
                try:
                    more = recv.receive_nowait()
                except (trio.WouldBlock, trio.EndOfChannel):
                    break
                if parts is None:
                    parts = [data]
                parts.append(more)
            return data if parts is None else b"".join(parts)

    def _request_stop(self, reason: tuple[str, str]) -> None:
        if self._stop is None:
            self._stop = reason
        if self._read_scope is not None:
            self._read_scope.cancel()

    async def _watch_drain(self, draining: trio.Event) -> None:
        await draining.wait()
        self._request_stop(_DRAINING)

    # -- producer --------------------------------------------------------------------

    async def _produce(self) -> None:
        pipeline, sink, opts = self._pipeline, self._sink, self._opts
        on_held = opts.on_held
        decoder = SSEDecoder(max_event_bytes=opts.max_event_bytes)
        send = self._send
        chunks = self._resp.aiter_bytes()
        with send:
            try:
                first = sink.start()
                if first:
                    await send.send(first)
                while True:
                    if self._stop is not None:
                        await self._send_final(await sink.fail(pipeline, *self._stop))
                        return
                    chunk: bytes | None = b""
                    failed: UpstreamError | None = None
                    with trio.CancelScope() as scope:
                        self._read_scope = scope  # _request_stop cancels a pending read
                        try:
                            chunk = await chunks.__anext__()
                        except StopAsyncIteration:
                            chunk = None
                        except Exception as exc:
                            failed = translate(exc)
                    self._read_scope = None
                    if chunk is None:
                        await self._send_final(await sink.end(pipeline))
                        return
                    if failed is not None:
                        await self._send_final(
                            await sink.fail(pipeline, failed.code, failed.message)
                        )
                        return
                    if not chunk:
                        continue  # an empty read, or one cancelled by _request_stop
                    self._last_data = trio.current_time()
                    try:
                        events = decoder.feed(chunk)
                    except SSEEventTooLarge as exc:
                        await self._send_final(await sink.fail(pipeline, exc.code, exc.message))
                        return
                    outs: list[Out] = []
                    ending: Failure | bool | None = False
                    for ev in events:
                        res = await pipeline.feed_event(ev)
                        if res is None or isinstance(res, Failure):
                            ending = res
                            break
                        outs.extend(res)
                    if on_held is not None:
                        on_held(pipeline.held_chars)
                    if outs:
                        data = sink.batch(outs)
                        if data:
                            await send.send(data)
                    if ending is None:
                        await self._send_final(await sink.end(pipeline))
                        return
                    if isinstance(ending, Failure):
                        await self._send_final(
                            await sink.fail(pipeline, ending.code, ending.message)
                        )
                        return
            finally:
                self._read_scope = None
                try:
                    await _abandon(chunks)
                finally:
                    await close_quietly(self._resp)

    async def _send_final(self, data: bytes) -> None:
        if data:
            with contextlib.suppress(trio.BrokenResourceError, trio.ClosedResourceError):
                await self._send.send(data)


def relay(resp: httpx.Response, pipeline: ChatPipeline, sink: Sink, opts: RelayOptions) -> Relay:
    """The encoded stream for one upstream response (see module docstring)."""
    return Relay(resp, pipeline, sink, opts)


class HookedSink:
    """A sink that runs ``after_end`` once the stream ended normally (e.g. to store it)."""

    def __init__(self, inner: Sink, after_end: Callable[[ChatPipeline], Awaitable[None]]) -> None:
        self.inner = inner
        self.after_end = after_end

    def start(self) -> bytes:
        return self.inner.start()

    def batch(self, outs: list[Out]) -> bytes:
        return self.inner.batch(outs)

    def keepalive(self) -> bytes:
        return self.inner.keepalive()

    async def end(self, pipeline: ChatPipeline) -> bytes:
        data = await self.inner.end(pipeline)
        await self.after_end(pipeline)
        return data

    async def fail(self, pipeline: ChatPipeline, code: str, message: str) -> bytes:
        return await self.inner.fail(pipeline, code, message)
