"""Wake run followers when a run's journal grows, on this instance or any other.

Strategy
--------
The journal (:class:`~gateway.store.Store`) is the truth; the bus only says "read it
again". A follower reads the events after the last seq it sent, and when there are
none it awaits :meth:`RunBus.wait_beyond`, which returns True as soon as a newer seq
is known (or the bus may have missed one) and False after ``timeout`` (send a
keep-alive, re-read anyway: the slow safety net, never the only way to wake).

* **Local** appends: whoever journaled events calls :meth:`RunBus.published` right
  after the append committed; local followers wake at once (no database round trip).
* **Other instances** (PostgreSQL): every append sends ``NOTIFY gateway_runs,
  '<run_id>:<seq>'`` in its transaction. A dedicated thread holds its own connection
  (never one of the pool's), ``LISTEN``\\s, and hands each notification to trio with
  ``TrioToken.run_sync_soon`` (thread-safe, never blocks the listener on trio). When
  the connection breaks it reconnects with exponential backoff (0.1 s doubling to 5 s,
  jittered); after every (re)connect it wakes *all* followers, because notifications
  sent while it was away are lost, and they re-read the journal.
* **SQLite**: one instance; local wake-ups are all there is (no thread).
* **Stops**: ``'<run_id>:stop'`` notifications (:meth:`Store.request_run_stop`, asked on
  any instance) wake the holder's :meth:`RunBus.wait_stop`.

The latest seq seen per run is remembered (a bounded LRU), so a follower that
registers just after a notification arrived still returns at once: read, then wait,
with no lost wake-up in between.

Bounds: a follower on another instance wakes within the NOTIFY delivery time
(milliseconds); while the listener is disconnected, within its ``timeout``.
:meth:`RunBus.aclose` (or cancelling :meth:`RunBus.run`) stops the thread within
``poll_seconds`` (0.5 s) when it is connected, or once its current connection
attempt gives up (``connect_timeout``) when the database is unreachable; the thread
is a daemon, so it never holds the process.

Use::

    bus = RunBus(store)
    await nursery.start(bus.run)            # the app's service nursery
    ...
    await trio.to_thread.run_sync(store.append_run_events, run_id, events, holder)
    bus.published(run_id, events[-1]["seq"])
    ...
    async for batch in follow_events(store, bus, run_id, after_seq, idle=15):
        ...                                 # [] after `idle` s of silence: keep-alive
"""

from __future__ import annotations

import logging
import random
import threading
import time
from collections import OrderedDict
from collections.abc import Sequence
from typing import Any

import trio

from gateway.store import RUNS_CHANNEL, Notification, Store, StoreError

__all__ = ["EventFollower", "RunBus", "follow_events"]

log = logging.getLogger("gateway.runbus")


class _Waiter:
    __slots__ = ("event", "seq")

    def __init__(self, seq: int) -> None:
        self.seq = seq
        self.event = trio.Event()


class RunBus:
    """Wake-ups for run followers; see the module docstring."""

    def __init__(
        self,
        store: Store,
        *,
        poll_seconds: float = 0.5,
        backoff_min: float = 0.1,
        backoff_max: float = 5.0,
        remember: int = 4096,
    ) -> None:
        self.store = store
        self._poll = poll_seconds
        self._backoff = (backoff_min, backoff_max)
        self._remember = remember
        self._latest: OrderedDict[str, int] = OrderedDict()
        self._waiters: dict[str, set[_Waiter]] = {}
        self._stops: dict[str, trio.Event] = {}
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        #: listener state, for tests and health: connections made so far
        self.connects = 0
        self.connected = False

    # -- trio side ------------------------------------------------------------------------

    def published(self, run_id: str, seq: int | None = None) -> None:
        """Events up to ``seq`` are journaled (None: something changed, re-read). Call
        from the trio thread after the append committed."""
        if seq is not None:
            if seq <= self._latest.get(run_id, 0):
                return
            self._latest[run_id] = seq
            self._latest.move_to_end(run_id)
            while len(self._latest) > self._remember:
                self._latest.popitem(last=False)
        for waiter in list(self._waiters.get(run_id, ())):
            if seq is None or waiter.seq < seq:
                waiter.event.set()

    def stop_requested(self, run_id: str) -> None:
        """A stop of ``run_id`` was asked (:meth:`Store.request_run_stop`): wake its
        holder's :meth:`wait_stop`. PostgreSQL delivers it to every instance by NOTIFY;
        call it yourself after a local request (SQLite, or for a prompt local stop)."""
        event = self._stops.get(run_id)
        if event is not None:
            event.set()

    async def wait_stop(self, run_id: str) -> None:
        """Return when a stop of ``run_id`` is requested (run it beside the run, in the
        holder). A request made before this was awaited is caught by
        :func:`gateway.runs.reaper.keep_lease` at its next renewal."""
        event = self._stops.setdefault(run_id, trio.Event())
        try:
            await event.wait()
        finally:
            if self._stops.get(run_id) is event:
                del self._stops[run_id]

    def _wake_all(self) -> None:
        for waiters in self._waiters.values():
            for waiter in waiters:
                waiter.event.set()

    async def wait_beyond(self, run_id: str, seq: int, timeout: float) -> bool:  # noqa: ASYNC109
        """True once an event after ``seq`` may be journaled (re-read the journal);
        False after ``timeout`` seconds without news (the caller's keep-alive moment, so
        a result rather than a ``fail_after`` exception)."""
        if self._latest.get(run_id, 0) > seq:
            return True
        waiter = _Waiter(seq)
        self._waiters.setdefault(run_id, set()).add(waiter)
        try:
            with trio.move_on_after(timeout):
                await waiter.event.wait()
                return True
            return False
        finally:
            waiters = self._waiters.get(run_id)
            if waiters is not None:
                waiters.discard(waiter)
                if not waiters:
                    del self._waiters[run_id]

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Listen (PostgreSQL) until cancelled or :meth:`aclose`; start in a nursery."""
        probe = self.store.open_notifications([RUNS_CHANNEL])
        if probe is None:  # SQLite: nothing to listen to
            task_status.started()
            await trio.sleep_forever()
        probe.close()
        token = trio.lowlevel.current_trio_token()
        self._stop.clear()
        self._thread = threading.Thread(
            target=self._listen, args=(token,), name="gateway-runbus", daemon=True
        )
        self._thread.start()
        task_status.started()
        try:
            await trio.sleep_forever()
        finally:
            with trio.CancelScope(shield=True):
                await self.aclose()

    async def aclose(self) -> None:
        """Stop the listener thread (see the bound in the module docstring); idempotent."""
        self._stop.set()
        thread, self._thread = self._thread, None
        if thread is not None:
            await trio.to_thread.run_sync(thread.join, 30.0)
        self._wake_all()

    # -- listener thread ------------------------------------------------------------------

    def _deliver(self, batch: list[Notification]) -> None:
        for note in batch:
            run_id, sep, seq_text = note.payload.rpartition(":")
            if not sep or not run_id:
                continue
            if seq_text == "stop":
                self.stop_requested(run_id)
            elif seq_text.isascii() and seq_text.isdigit():
                self.published(run_id, int(seq_text))

    def _on_connect(self) -> None:
        self.connects += 1
        self.connected = True
        self._wake_all()  # whatever was sent while we were away is lost: everyone re-reads

    def _on_disconnect(self) -> None:
        self.connected = False

    def _listen(self, token: trio.lowlevel.TrioToken) -> None:
        delay = self._backoff[0]
        failures = 0
        while not self._stop.is_set():
            source = self.store.open_notifications([RUNS_CHANNEL])
            if source is None:
                return
            try:
                source.wait(0.0)  # connect and LISTEN
                token.run_sync_soon(self._on_connect)
                if failures:
                    log.info("run notifications: listening again after %d failed tries", failures)
                delay, failures = self._backoff[0], 0
                while not self._stop.is_set():
                    batch = source.wait(self._poll)
                    if batch:
                        token.run_sync_soon(self._deliver, batch)
            except StoreError as exc:
                failures += 1
                if failures == 1 or failures % 20 == 0:
                    log.warning(
                        "run notifications: %s; followers on this instance fall back to "
                        "their safety re-read until it reconnects (try %d)",
                        exc.message,
                        failures,
                    )
            except trio.RunFinishedError:
                return
            finally:
                source.close()
            try:
                token.run_sync_soon(self._on_disconnect)
            except trio.RunFinishedError:
                return
            self._stop.wait(delay * (0.5 + random.random()))
            delay = min(delay * 2, self._backoff[1])


def follow_events(
    store: Store,
    bus: RunBus,
    run_id: str,
    owner: str,
    after_seq: int,
    *,
    idle: float,
    batch: int = 1000,
) -> EventFollower:
    """``async for batch in follow_events(...)``: see :class:`EventFollower`."""
    return EventFollower(store, bus, run_id, owner, after_seq, idle=idle, batch=batch)


class EventFollower:
    """Batches of a run's journaled events after ``after_seq``, until the run is finished
    and every event was yielded. An empty batch means ``idle`` seconds passed without
    one (send a keep-alive). A class, not an async generator: nothing to finalize when
    the consumer stops early.

    Another owner's (or an unknown) run yields nothing: the owner is checked before the
    first read (the route still answers 404 itself, before it starts a stream).
    """

    def __init__(
        self,
        store: Store,
        bus: RunBus,
        run_id: str,
        owner: str,
        after_seq: int,
        *,
        idle: float,
        batch: int = 1000,
    ) -> None:
        self._store = store
        self._bus = bus
        self._run_id = run_id
        self._owner = owner
        self._seq = after_seq
        self._idle = idle
        self._batch = batch
        self._done = False
        self._checked = False

    def __aiter__(self) -> EventFollower:
        return self

    async def __anext__(self) -> list[dict[str, Any]]:
        if self._done:
            raise StopAsyncIteration
        deadline = time.monotonic() + self._idle
        if not self._checked:
            mine = await trio.to_thread.run_sync(self._store.get_run, self._run_id, self._owner)
            if mine is None:
                self._done = True
                raise StopAsyncIteration
            self._checked = True
        while True:
            events: Sequence[dict[str, Any]] = await trio.to_thread.run_sync(
                self._store.read_run_events, self._run_id, self._seq, self._batch
            )
            if events:
                self._seq = int(events[-1]["seq"])
                return list(events)
            run = await trio.to_thread.run_sync(self._store.get_run, self._run_id, self._owner)
            if run is None or (run.finished and run.last_seq <= self._seq):
                self._done = True
                raise StopAsyncIteration
            left = deadline - time.monotonic()
            if left <= 0 or not await self._bus.wait_beyond(self._run_id, self._seq, left):
                return []
