"""One timer task for every relayed stream of a trio run, instead of one task each.

A stream needs a timer for two things: a keep-alive after ``keepalive_seconds`` of
silence and the end of a stream silent past its bound (:mod:`gateway.stream.relay`);
here a stream is an entry in one heap (why not a task per stream: docs/benchmarks.md,
round 6). The clock's task sleeps until the
earliest entry is due and calls its ``due(now)``, which says when it is due next
(or ``None``: done). A stream that got data meanwhile is not touched: its ``due``
looks at the time itself and sets its next moment (no heap work per item).

A stream that ends before its entry is due leaves a dead entry (the handle drops the
stream at once, so nothing big is kept); dead entries are swept when they are the
majority. A drain (``draining`` event) stops every stream registered with it, through
one waiter task per event.

The clock belongs to the trio run (a :class:`trio.lowlevel.RunVar`); its tasks are
system tasks, started on first use and cancelled when the run ends. Nothing they
call may raise into trio: a failing callback is logged (a failing ``due`` is no
longer timed; a drain still reaches it).
"""

from __future__ import annotations

import heapq
import itertools
import logging
import math
from typing import Protocol

import trio

__all__ = ["Timed", "TimerHandle", "Waitable", "clock"]

log = logging.getLogger("gateway.streamclock")

#: dead entries tolerated before a sweep (and only when they are the majority)
SWEEP_AT = 64


class Waitable(Protocol):
    """A :class:`trio.Event`, or hypercorn's wrapper of one (``context.terminated``)."""

    async def wait(self) -> object: ...


class Timed(Protocol):
    def due(self, now: float) -> float | None:
        """Called at (or after) the moment it asked for: the next one, or None."""

    def drain(self) -> None:
        """The ``draining`` event it was registered with was set."""


class TimerHandle:
    """A stream's place in the clock; :meth:`cancel` when the stream ends."""

    __slots__ = ("_clock", "_draining", "at", "fired", "seq", "target", "timed")

    def __init__(self, clock: StreamClock, target: Timed, draining: Waitable | None) -> None:
        self._clock = clock
        self.target: Timed | None = target
        self._draining = draining
        #: in the heap (a handle registered for its event only is not), due at ``at``
        self.timed = True
        self.at = math.inf
        self.seq = -1  # of its live entry (the others are stale)
        #: the moment ``due`` was last called (it is not called twice at one moment)
        self.fired = -math.inf

    def sooner(self, at: float) -> None:
        """Be due at ``at`` if that is before the moment asked for (the entry for the
        later one is left behind, stale); not again at a moment ``due`` was called at
        (it just looked: the moment it asked for next stands)."""
        if self.target is None or (self.timed and at >= self.at) or at <= self.fired:
            return
        if self.timed:
            self._clock._dead += 1
        self.timed = True
        self._clock._push(at, self)

    def cancel(self) -> None:
        if self.target is None:
            return
        self.target = None
        if self.timed:
            self._clock._dead += 1
        if self._draining is not None:
            members = self._clock._drain_sets.get(self._draining)
            if members is not None:
                members.discard(self)


class StreamClock:
    def __init__(self) -> None:
        self._heap: list[tuple[float, int, TimerHandle]] = []
        self._seq = itertools.count()
        self._dead = 0
        self._scope: trio.CancelScope | None = None
        self._drain_sets: dict[Waitable, set[TimerHandle]] = {}
        self._started = False

    def add(self, target: Timed, at: float | None, draining: Waitable | None = None) -> TimerHandle:
        """Call ``target.due`` at ``at`` (and when it asks again; ``None``: never) and
        ``target.drain`` once ``draining`` is set."""
        if not self._started:
            self._started = True
            trio.lowlevel.spawn_system_task(self._run, name="gateway.streamclock")
        handle = TimerHandle(self, target, draining)
        if draining is not None:
            members = self._drain_sets.get(draining)
            if members is None:
                members = self._drain_sets[draining] = set()
                trio.lowlevel.spawn_system_task(self._drain_watch, draining)
            members.add(handle)
        if at is None:
            handle.timed = False
        else:
            self._push(at, handle)
        return handle

    def _push(self, at: float, handle: TimerHandle) -> None:
        handle.at, handle.seq = at, next(self._seq)
        heapq.heappush(self._heap, (at, handle.seq, handle))
        scope = self._scope
        if scope is not None and at < scope.deadline:
            scope.deadline = at

    async def _run(self) -> None:
        heap = self._heap
        while True:
            with trio.CancelScope(deadline=heap[0][0] if heap else math.inf) as scope:
                self._scope = scope
                await trio.sleep_forever()
            self._scope = None
            now = trio.current_time()
            due: list[tuple[float, int, TimerHandle]] = []
            while heap and heap[0][0] <= now:
                due.append(heapq.heappop(heap))
            for _, seq, handle in due:  # one asking for ``now`` again waits a round
                self._fire(handle, seq, now)
            self._sweep()

    def _fire(self, handle: TimerHandle, seq: int, now: float) -> None:
        # every entry not live is counted in _dead once: cancel() counts the live one,
        # sooner() the one it leaves behind
        target = handle.target
        if target is None or seq != handle.seq:  # ended, or stale
            self._dead -= 1
            return
        handle.fired = now
        try:
            next_at = target.due(now)
        except Exception:
            log.exception("a stream's timer failed; the stream is no longer timed")
            next_at = None
        if handle.target is None or handle.seq != seq:  # its callback ended or moved it
            self._dead -= 1
        elif next_at is None:
            handle.timed = False  # out of the heap; a drain still reaches it
        else:
            self._push(max(next_at, now), handle)

    def _sweep(self) -> None:
        if self._dead < SWEEP_AT or self._dead * 2 < len(self._heap):
            return
        self._heap[:] = [
            entry
            for entry in self._heap
            if entry[2].target is not None and entry[2].seq == entry[1]
        ]
        heapq.heapify(self._heap)
        self._dead = 0

    async def _drain_watch(self, draining: Waitable) -> None:
        await draining.wait()
        members = self._drain_sets.pop(draining, set())
        for handle in list(members):
            target = handle.target
            if target is None:
                continue
            handle._draining = None
            try:
                target.drain()
            except Exception:
                log.exception("a stream failed to stop for a drain")

    def statistics(self) -> dict[str, int]:
        """Entries in the heap, dead among them, streams waiting for a drain."""
        return {
            "entries": len(self._heap),
            "dead": self._dead,
            "draining_watched": sum(len(s) for s in self._drain_sets.values()),
        }


_CLOCK: trio.lowlevel.RunVar[StreamClock] = trio.lowlevel.RunVar("gateway.streamclock")


def clock() -> StreamClock:
    """The current trio run's clock (created on first use)."""
    try:
        return _CLOCK.get()
    except LookupError:
        found = StreamClock()
        _CLOCK.set(found)
        return found
