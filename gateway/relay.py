"""Trio glue: relay one upstream SSE response through the pipeline to a sink.

One producer per request, written as a ``@trio.as_safe_channel`` generator so its
nursery lives in the task that sends the response body (see STACK-NOTES: never
yield from inside a nursery in a plain body generator). Inside it:

* a reader task copies upstream byte chunks into a small memory channel (reading
  cannot be cancelled mid-``__anext__`` without killing httpx's iterator, so a
  separate task owns it);
* an optional drain watcher puts a sentinel into the same channel;
* the main loop waits with ``move_on_after(keepalive)`` (never yielding inside the
  cancel scope), decodes the bytes, feeds every complete event to the pipeline and
  yields **one** write per upstream read (batching is what keeps the cost per
  event low).

Every exit path ends with a terminal write from the sink: normal end, upstream
failure, idle timeout, oversized event, drain. Client disconnect cancels the
producer; its ``finally`` closes the upstream response at once.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncGenerator, Awaitable, Callable
from dataclasses import dataclass
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


class _Eof:
    pass


class _Drain:
    pass


_EOF = _Eof()
_DRAIN = _Drain()
Item = bytes | _Eof | _Drain | UpstreamError


async def _read_upstream(resp: httpx.Response, send: trio.MemorySendChannel[Item]) -> None:
    async with send:
        try:
            async for chunk in resp.aiter_bytes():
                if chunk:
                    await send.send(chunk)
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            return
        except Exception as exc:
            err = translate(exc)
            with contextlib.suppress(trio.BrokenResourceError, trio.ClosedResourceError):
                await send.send(err)
            return
        with contextlib.suppress(trio.BrokenResourceError, trio.ClosedResourceError):
            await send.send(_EOF)


async def _watch_drain(draining: trio.Event, send: trio.MemorySendChannel[Item]) -> None:
    async with send:
        await draining.wait()
        with contextlib.suppress(trio.BrokenResourceError, trio.ClosedResourceError):
            await send.send(_DRAIN)


async def close_quietly(resp: httpx.Response, limit_seconds: float = 2.0) -> None:
    """Close an upstream response even while being cancelled (bounded)."""
    with trio.move_on_after(limit_seconds) as scope:
        scope.shield = True
        with contextlib.suppress(Exception):
            await resp.aclose()


@trio.as_safe_channel
async def relay(
    resp: httpx.Response, pipeline: ChatPipeline, sink: Sink, opts: RelayOptions
) -> AsyncGenerator[bytes, None]:
    """Yield the encoded stream for one upstream response (see module docstring)."""
    send, recv = trio.open_memory_channel[Item](16)
    decoder = SSEDecoder(max_event_bytes=opts.max_event_bytes)
    try:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(_read_upstream, resp, send.clone())
            if opts.draining is not None:
                nursery.start_soon(_watch_drain, opts.draining, send.clone())
            send.close()
            first = sink.start()
            if first:
                yield first
            last_data = trio.current_time()
            while True:
                item: Item | None = None
                with trio.move_on_after(opts.keepalive_seconds):
                    item = await recv.receive()
                if item is None:
                    if trio.current_time() - last_data >= opts.idle_timeout_seconds:
                        yield await sink.fail(
                            pipeline,
                            "upstream_timeout",
                            "The upstream model server sent nothing for too long.",
                        )
                        break
                    yield sink.keepalive()
                    continue
                if isinstance(item, _Drain):
                    yield await sink.fail(
                        pipeline,
                        "gateway_draining",
                        "The gateway is restarting; the response was cut short, please retry.",
                    )
                    break
                if isinstance(item, _Eof):
                    yield await sink.end(pipeline)
                    break
                if isinstance(item, UpstreamError):
                    yield await sink.fail(pipeline, item.code, item.message)
                    break
                last_data = trio.current_time()
                try:
                    events = decoder.feed(item)
                except SSEEventTooLarge as exc:
                    yield await sink.fail(pipeline, exc.code, exc.message)
                    break
                outs: list[Out] = []
                ending: Failure | bool | None = False
                for ev in events:
                    res = await pipeline.feed_event(ev)
                    if res is None or isinstance(res, Failure):
                        ending = res
                        break
                    outs.extend(res)
                if opts.on_held is not None:
                    opts.on_held(pipeline.held_chars)
                if outs:
                    yield sink.batch(outs)
                if ending is None:
                    yield await sink.end(pipeline)
                    break
                if isinstance(ending, Failure):
                    yield await sink.fail(pipeline, ending.code, ending.message)
                    break
            nursery.cancel_scope.cancel()
    finally:
        if opts.on_held is not None:
            opts.on_held(0)
        await close_quietly(resp)


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
