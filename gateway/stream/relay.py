"""The one relay: a source, a stage, a front; every stream of both services runs through it.

``async with Relay(source, stage, front, opts) as outputs: async for out in outputs``
is how a response body is sent (Quart sends a body as ``async with body as it: async
for chunk in it``, see :class:`gateway.http.replies.ChannelBody`) and how a background
run is journaled. The parts:

* a **source** yields what one read brought (:mod:`gateway.clients.sources`: the upstream's
  SSE events, a run's journal, the gateway's run events seen from the proxy), ``None``
  at its end, or raises a :class:`~gateway.core.errors.GatewayError`;
* a **stage** turns items into neutral events (:class:`gateway.stream.pipeline.ChatPipeline`)
  and says when the stream is done; at the end the relay calls its ``finish()`` and
  ``manifest()`` itself;
* a **front** is a synchronous encoder (:mod:`gateway.fronts`): ``start``,
  ``encode(events)``, ``keepalive``, and exactly one terminal call, ``end``, ``fail``
  or ``cancel``, whose output is the stream's last write.

Entering the relay first does, in the consuming task, what needs no wait: the front's
start and every item a source with a ``read_nowait`` already holds. A stream that ends
there (a short answer) is queued whole, with no task or nursery.

A **pull-safe** source (``pull_safe``, ``interrupt()``: a waiting read can be woken
having taken nothing) is then read by the consumer itself, one read each time its
queue is empty: read, feed, encode, return; no producer task, and no cancel scope per
read: :meth:`Relay.stop`, the timeouts and a keep-alive interrupt the read only while
it waits (the stream then goes on, or its terminal is written); what one read brought
is one output, as with the producer.

Any other source: entering opens a nursery in the task that consumes it (see
STACK-NOTES: never yield from inside a nursery in a body generator; a context manager
entered and exited by the sending task is safe). One producer task reads, feeds the
stage, encodes and queues the output without a checkpoint while there is room, so
everything that arrived in one socket read leaves in one write; the consumer joins
what is already queued and never waits for more, so nothing is delayed.

The stream's one timer (an entry in the run's :mod:`gateway.stream.clock`, which also
watches the drain) queues a keep-alive only after ``keepalive_seconds`` of real
silence; silence longer than ``idle_timeout_seconds`` (``first_byte_seconds`` before
the first item) ends the stream with ``upstream_timeout``; the consumer waits without
a deadline. A drain, an idle timeout or :meth:`Relay.stop` cancels a pending read at
once; stage work under way is never interrupted. Every exit path writes a terminal
output; the consumer leaving (client gone) cancels the producer and closes the source.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any, Generic, Protocol, TypeVar

import trio

from gateway.core.errors import Draining, GatewayError, UpstreamError
from gateway.stream.clock import TimerHandle, clock

__all__ = ["CANCELLED", "Front", "Relay", "RelayOptions", "Source", "Stage", "StageStep"]

log = logging.getLogger("gateway.relay")

In = TypeVar("In")
Ev = TypeVar("Ev")
Out = TypeVar("Out")
In_co = TypeVar("In_co", covariant=True)
In_contra = TypeVar("In_contra", contravariant=True)
Out_co = TypeVar("Out_co", covariant=True)


class Source(Protocol[In_co]):
    """``read`` waits for the next item (None at the end). A source may also have
    ``read_nowait()``: the same from what it holds already, or :class:`trio.WouldBlock`;
    ``close_nowait()``: close at once if that needs no wait (True), else False; and
    ``pull_safe`` (True) with ``interrupt()``: a read waiting when ``interrupt`` is
    called raises :class:`trio.WouldBlock` having taken nothing, and the next ``read``
    goes on where it was (the relay then reads in the consuming task)."""

    async def read(self) -> In_co | None: ...

    async def aclose(self) -> None: ...


class StageStep(Protocol[Ev]):
    @property
    def events(self) -> list[Ev]: ...

    @property
    def done(self) -> bool: ...


def step_error(step: object) -> GatewayError | None:
    """The error a stage reported with its last events (a step may carry one)."""
    error = getattr(step, "error", None)
    return error if isinstance(error, GatewayError) else None


class Stage(Protocol[In_contra, Ev]):
    async def feed(self, item: In_contra) -> StageStep[Ev]: ...

    async def finish(self, *, failed: bool = False) -> list[Ev]: ...

    def manifest(self) -> dict[str, Any]: ...


class Front(Protocol[Ev, Out_co]):
    def start(self) -> Out_co: ...

    def keepalive(self) -> Out_co: ...

    def encode(self, events: list[Ev]) -> Out_co: ...

    def end(self, events: list[Ev], manifest: dict[str, Any]) -> Out_co: ...

    def fail(self, events: list[Ev], error: GatewayError, manifest: dict[str, Any]) -> Out_co: ...


#: the stop reason of :meth:`Relay.stop` without an error: end with the front's ``cancel``
CANCELLED = None

Outcome = GatewayError | None | str  # an error, CANCELLED, or "completed"
OnOutcome = Callable[[Outcome], Awaitable[None]]


@dataclass(frozen=True)
class RelayOptions:
    keepalive_seconds: float = 15.0
    idle_timeout_seconds: float = 300.0
    #: silence allowed before the first item (the upstream's first byte)
    first_byte_seconds: float | None = None
    draining: trio.Event | None = None
    #: told the characters held by the stage after each batch (0 at the end)
    on_held: Callable[[int], None] | None = None
    #: awaited with the outcome after the terminal output is encoded, before it is sent
    on_outcome: OnOutcome | None = None
    #: joins outputs that are queued together (bytes by default)
    join: Callable[[list[Any]], Any] = field(default=b"".join)
    #: asked after every encoded batch: an error ends the stream with it at once (a run's
    #: full log), before the producer reads on
    check: Callable[[], GatewayError | None] | None = None


class _Nothing:
    """No item read (yet)."""


_NOTHING = _Nothing()

#: outputs the producer may run ahead of the consumer (backpressure beyond it)
OUT_BUFFER = 16
#: items the relay's entry takes without a wait before a producer task goes on (each
#: may be a socket read: a bound on the work done without a checkpoint)
INLINE_READS = 4


def _timeout() -> UpstreamError:
    return UpstreamError(
        "The upstream model server sent nothing for too long.", code="upstream_timeout", status=504
    )


class Relay(Generic[In, Ev, Out]):
    """One relayed stream: an async context manager whose value iterates the outputs."""

    def __init__(
        self,
        source: Source[In],
        stage: Stage[In, Ev],
        front: Front[Ev, Out],
        opts: RelayOptions | None = None,
    ) -> None:
        self._source = source
        self._stage = stage
        self._front = front
        self._opts = opts or RelayOptions()
        self._send: trio.MemorySendChannel[Out]
        self._recv: trio.MemoryReceiveChannel[Out]
        self._send, self._recv = trio.open_memory_channel(OUT_BUFFER)
        self._queued = 0  # outputs in the channel
        self._ended = False  # the producer closed its side (the terminal is queued)
        self._nursery_cm: AbstractAsyncContextManager[trio.Nursery] | None = None
        self._nursery: trio.Nursery | None = None
        self._read_scope: trio.CancelScope | None = None
        self._reading = False
        self._stop: tuple[GatewayError | None] | None = None
        self._last_data = 0.0
        self._last_tick = 0.0
        self._got_data = False
        self._terminated = False
        self._started = False  # the front's start is queued
        self._failure: Exception | None = None  # raised in the inline start (a bug)
        self._timer: TimerHandle | None = None
        #: read in the consuming task, no producer (a source whose reads are pull-safe)
        self._pull = getattr(source, "pull_safe", False) is True
        #: set once the producer has done what it could without waiting (first_step)
        self._begun: trio.Event | None = None if self._pull else trio.Event()
        self.outcome: Outcome | None = None

    # -- context manager (runs in the consuming task) ------------------------------

    async def __aenter__(self) -> Relay[In, Ev, Out]:
        self._last_data = self._last_tick = trio.current_time()
        self._timer = clock().add(self, self._next(), self._opts.draining)
        try:
            if await self._inline():
                return self  # the whole stream is queued: no task, no nursery
            if self._pull:  # __anext__ reads when the queue is empty: no task either
                await self._start()
                return self
            self._nursery_cm = trio.open_nursery()
            nursery = self._nursery = await self._nursery_cm.__aenter__()
        except BaseException:
            await self._release()
            raise
        nursery.start_soon(self._produce)
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> bool:
        try:
            if self._nursery_cm is None:  # done inline or pulled: no producer to wait for
                failure, self._failure = self._failure, None
                if failure is not None and exc is None:
                    raise failure
                return False
            assert self._nursery is not None
            if not self._ended:  # the producer has more: abandon it (trio's
                # cancel formats the current task's repr for its reason: not for nothing)
                self._nursery.cancel_scope.cancel()
            try:
                return bool(await self._nursery_cm.__aexit__(exc_type, exc, tb))
            except BaseExceptionGroup as eg:
                _raise_single(eg)
                raise  # pragma: no cover - _raise_single always raises
        finally:
            await self._release()

    async def _release(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
        self._recv.close()
        if self._opts.on_held is not None:
            self._opts.on_held(0)
        close_nowait = getattr(self._source, "close_nowait", None)
        if close_nowait is not None and close_nowait():
            return  # closed without a wait: no shielded scope needed
        with trio.CancelScope(shield=True):
            await self._source.aclose()

    async def _inline(self) -> bool:
        """The producer's first part, in the consumer's task: when the source holds
        items already (its ``read_nowait``, if it has one), the front's start and those
        items. True if the stream ended there (its terminal queued): a short answer that
        came whole with the upstream's head needs no producer task, nursery or round.

        It stops after :data:`INLINE_READS` items, and while the queue still has room
        for one item's output and a terminal, so no push here ever waits (the consumer
        is this task)."""
        read_nowait: Callable[[], In | None] | None = getattr(self._source, "read_nowait", None)
        if read_nowait is None or self._stop is not None:
            return False
        reads = 0
        try:
            try:
                item = read_nowait()
            except trio.WouldBlock:
                return False  # nothing held: the producer starts the stream
            await self._start()
            while not await self._handle(item):
                if self._stop is not None:
                    await self._terminal(self._stop[0])
                    break
                reads += 1
                if reads >= INLINE_READS or self._queued > OUT_BUFFER - 2:
                    return False
                try:
                    item = read_nowait()
                except trio.WouldBlock:
                    return False
        except GatewayError as exc:
            await self._start()
            await self._terminal(exc)
        except Exception as exc:  # a bug: raised on exit, after what is queued (as the
            self._failure = exc  # producer's would be), not from the entry: the body's
            # exit (its on_close) still runs and the client gets what was queued
        self._end()
        self._begin()
        return True

    async def _start(self) -> None:
        if not self._started:
            self._started = True
            await self._push(self._front.start())

    # -- consumer ------------------------------------------------------------------

    def __aiter__(self) -> Relay[In, Ev, Out]:
        return self

    async def __anext__(self) -> Out:
        recv = self._recv
        while True:  # the next output, waited for (never inside an ``except``: the
            # exception and its frames would stay alive for as long as the stream waits)
            try:
                first = recv.receive_nowait()
                break
            except trio.WouldBlock:
                pass
            except trio.EndOfChannel:
                raise StopAsyncIteration from None
            if self._pull:  # read here: the queue is empty, so no push can wait
                await self._pull_once()
                continue
            try:  # no deadline here: the stream clock keeps the time
                first = await recv.receive()
                break
            except trio.EndOfChannel:
                raise StopAsyncIteration from None
        self._queued -= 1
        parts: list[Out] | None = None
        while self._queued:  # outputs already queued go out together (never wait for more)
            more = recv.receive_nowait()
            self._queued -= 1
            if parts is None:
                parts = [first]
            parts.append(more)
        if parts is None:
            return first
        joined: Out = self._opts.join(parts)
        return joined

    def _end(self) -> None:
        """The producer is done: the consumer gets the end once the queue is empty."""
        self._ended = True
        self._send.close()

    async def first_step(self) -> None:
        """Wait until the producer has done what it could without waiting: it began a
        read that may wait, or it ended. What the upstream had already sent is encoded
        and queued by then (the answer's head can leave with it, in one write). With
        no producer (done inline, or pulled) there is nothing to wait for."""
        begun = self._begun
        if begun is not None:
            await begun.wait()

    async def _pull_once(self) -> None:
        """The producer's loop, one read at a time, in the consuming task (pull mode):
        read, feed, queue; or the terminal. No cancel scope per read: :meth:`stop` and
        a keep-alive wake a read that waits with
        the source's ``interrupt()``, and that read raises :class:`trio.WouldBlock`
        having taken nothing."""
        try:
            if self._stop is None:
                item: In | _Nothing | None = _NOTHING
                self._reading = True
                try:
                    item = await self._source.read()
                except trio.WouldBlock:
                    pass  # interrupted while it waited (a stop, a ping): nothing read
                finally:
                    self._reading = False
                if not isinstance(item, _Nothing) and await self._handle(item):
                    self._end()
                    return
            if self._stop is not None:
                await self._terminal(self._stop[0])
                self._end()
        except GatewayError as exc:
            await self._terminal(exc)
            self._end()

    def _begin(self) -> None:
        begun = self._begun
        if begun is not None:
            self._begun = None
            begun.set()

    def ready(self) -> bool:
        """Would ``__anext__`` return without waiting (output queued, or the end)?"""
        return self._queued > 0 or self._ended

    def _limit(self) -> float:
        """The silence allowed now: before the first item the first-byte bound."""
        if not self._got_data and self._opts.first_byte_seconds is not None:
            return self._opts.first_byte_seconds
        return self._opts.idle_timeout_seconds

    def _next(self) -> float:
        """When the clock should look at this stream next: the keep-alive tick, or the
        end of the silence allowed if that comes first (while not stopping)."""
        tick = max(self._last_data, self._last_tick) + self._opts.keepalive_seconds
        if self._stop is None:
            return min(tick, self._last_data + self._limit())
        return tick

    def due(self, now: float) -> float | None:
        """The stream's one timer (:mod:`gateway.stream.clock`): a keep-alive after
        ``keepalive_seconds`` of real silence (queued only while nothing else is), and
        silence past the bound ends the stream, at its own time. Called only at the
        moments :meth:`_next` asked for; it then looks at what arrived meanwhile: no
        deadline is set or moved per item."""
        if self._terminated:
            return None
        self._on_time(self._opts.keepalive_seconds, self._stop is None)
        return None if self._terminated else self._next()

    def drain(self) -> None:
        self.stop(Draining())

    def _on_time(self, keepalive: float, timing_out: bool) -> None:
        now = trio.current_time()
        if self._terminated:
            return
        # the same sum as _next's (now - last >= limit can be false at that moment)
        if timing_out and self._stop is None and now >= self._last_data + self._limit():
            self._last_tick = now  # no keep-alive right before the terminal
            self.stop(_timeout())
            return
        if max(self._last_data, self._last_tick) + keepalive > now:
            return  # data arrived meanwhile (or the bound is not reached): wait on
        self._last_tick = now
        if self._queued:
            return  # output is waiting to be sent: no ping needed
        ping = self._front.keepalive()
        if ping:
            with contextlib.suppress(
                trio.WouldBlock, trio.BrokenResourceError, trio.ClosedResourceError
            ):
                self._send.send_nowait(ping)
                self._queued += 1
                if self._pull:  # the consumer waits in the read: let it send the ping
                    self._cancel_read()

    def stop(self, reason: GatewayError | None = CANCELLED) -> None:
        """End the stream early: with ``reason`` (``fail``), or :data:`CANCELLED` (``cancel``)."""
        if self._stop is None:
            self._stop = (reason,)
        self._cancel_read()

    def _cancel_read(self) -> None:
        if not self._reading:
            return
        if self._pull:
            self._source.interrupt()  # type: ignore[attr-defined]
        elif self._read_scope is not None:
            self._read_scope.cancel()

    # -- producer ------------------------------------------------------------------

    async def _push(self, out: Out) -> None:
        if not out:
            return
        try:
            self._send.send_nowait(out)
            self._queued += 1
            return
        except trio.WouldBlock:
            pass
        self._queued += 1  # counted before: a consumer can take it before this task resumes
        try:
            await self._send.send(out)  # (outside the except: the exception would live on)
        except BaseException:
            self._queued -= 1
            raise

    async def _produce(self) -> None:
        try:
            await self._start()
            await self._loop()
        except GatewayError as exc:
            await self._terminal(exc)
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            pass  # the consumer left
        finally:
            self._end()
            self._begin()

    async def _loop(self) -> None:
        # One cancel scope for many reads (not one per read: docs/benchmarks.md, round
        # 6): stop() cancels it only while a read is pending (``_reading``), so
        # stage work is never interrupted; an item that came back from a read the
        # scope was cancelled under is handled outside it.
        while True:
            item: In | _Nothing | None = _NOTHING
            with trio.CancelScope() as scope:
                self._read_scope = scope
                while self._stop is None:
                    self._begin()  # the consumer runs once this task waits (or yields)
                    self._reading = True
                    try:
                        item = await self._source.read()
                    finally:
                        self._reading = False
                    if scope.cancel_called:
                        break
                    if await self._handle(item):
                        return
                    item = _NOTHING
            self._read_scope = None
            if not isinstance(item, _Nothing) and await self._handle(item):
                return
            if self._stop is not None:
                await self._terminal(self._stop[0])
                return

    async def _handle(self, item: In | None) -> bool:
        """Feed one item through the stage and queue its output; True at the end."""
        if item is None:
            await self._terminal("completed")
            return True
        self._last_data = trio.current_time()
        if not self._got_data:  # the bound is the idle one now: sooner, if it is shorter
            self._got_data = True
            if self._timer is not None:
                self._timer.sooner(self._next())
        stage = self._stage
        step = await stage.feed(item)
        on_held = self._opts.on_held
        if on_held is not None:
            on_held(getattr(stage, "held_chars", 0))
        if step.events:
            await self._push(self._front.encode(step.events))
            if self._opts.check is not None:
                error = self._opts.check()
                if error is not None:
                    self.stop(error)
        error = step_error(step)
        if error is not None:
            await self._terminal(error)
            return True
        if step.done:
            await self._terminal("completed")
            return True
        return False

    async def _terminal(self, outcome: Outcome) -> None:
        """Flush the stage and write the front's terminal output (once, whatever fails)."""
        if self._terminated:
            return
        self._terminated = True
        stage, front = self._stage, self._front
        try:
            events = await stage.finish(failed=outcome != "completed")
        except GatewayError as exc:  # the final flush failed (a link could not be minted)
            outcome, events = exc, []
        self.outcome = outcome
        manifest = stage.manifest()
        if outcome == "completed":
            out = front.end(events, manifest)
        elif isinstance(outcome, GatewayError):
            out = front.fail(events, outcome, manifest)
        else:
            cancel = getattr(front, "cancel", None)
            out = cancel(events, manifest) if cancel is not None else front.end(events, manifest)
        try:
            if self._opts.on_outcome is not None:
                await self._opts.on_outcome(outcome)
        except GatewayError:
            # the answer is complete and encoded: the client still gets its end
            log.exception("a stream's outcome hook failed; its terminal event is sent")
        finally:
            with contextlib.suppress(trio.BrokenResourceError, trio.ClosedResourceError):
                await self._push(out)


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


async def drain_outputs(outputs: AsyncIterator[Any]) -> None:
    """Consume a relay whose outputs are not needed (the stage's side effects are)."""
    async for _ in outputs:
        pass
