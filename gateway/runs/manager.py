"""Background runs: a stream that outlives the request that started it, journaled.

A run executes in the app's service-level nursery (quart-trio's lifespan nursery), not
in a request's. It is one :class:`~gateway.stream.relay.Relay` whose consumer, instead of a
client, is the run's **journal** in the store: every batch of run events is appended
(sequence numbers 1, 2, …) *before* anyone can read it, and the run bus
(:mod:`gateway.runs.bus`) wakes the followers. ``GET /v1/runs/{id}/events`` is another
relay over the journal (:class:`JournalSource`): it replays the events after
``Last-Event-ID`` and then follows live, so a client that reconnects — to any instance
sharing the store, also after the instance that ran the run restarted — loses
nothing and sees nothing twice. A background Response (``POST /v1/responses`` with
``background: true``) is the same machinery with the Responses front.

While it runs, this instance holds the run's lease and renews it
(:func:`gateway.runs.reaper.keep_lease`); an instance that dies stops renewing and the lease
watcher of any instance ends the run as ``interrupted`` within the documented bound. A
lost lease stops the run here without writing anything more. ``stop`` (asked on any
instance) cancels the run's relay: the upstream response is closed, held text is
flushed as file names and the run ends with ``run.cancelled``. A drain ends it with
``run.failed`` (``gateway_draining``, status ``interrupted``). A run that exceeds
``limits.run_log_max_events`` is stopped and fails with ``run_log_full``.

Quotas (:mod:`gateway.principals.quotas`): a principal has at most ``max_running`` runs (both
kinds) running and ``max_queued`` more waiting; :meth:`Runs.create` admits a run
atomically across instances or refuses it (429 ``run_quota_exceeded``). An admitted
run starts ``queued``: before it opens the upstream it claims a running slot
(:meth:`~gateway.store.Store.claim_run_slot`, first come first served across
instances), waking when a run of this process ends and every
:data:`SLOT_POLL_SECONDS` for runs ending elsewhere. A queued run holds its lease like
a running one; a stop ends it ``cancelled``, a drain ``interrupted``.
"""

from __future__ import annotations

import dataclasses
import logging
import math
import secrets
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

import trio

from gateway.clients.sources import SSESource
from gateway.clients.upstream import StreamResponse
from gateway.core.errors import Draining, GatewayError, Interrupted, NotFound, RunLogFull
from gateway.core.events import Event
from gateway.core.sse import encode_comment
from gateway.fronts.responses import journal_response_sse
from gateway.fronts.runs import run_sse
from gateway.principals.quotas import run_quota_exceeded
from gateway.runs.bus import RunBus, follow_events
from gateway.runs.reaper import keep_lease
from gateway.store import LeaseLost, RunRecord, Store, StoreError
from gateway.stream.pipeline import ChatPipeline
from gateway.stream.relay import CANCELLED, Relay, RelayOptions

__all__ = ["TERMINALS", "JournalSource", "Runs", "new_run_id"]

log = logging.getLogger("gateway.runs")

#: terminal event names of both journaled fronts (runs and background responses)
TERMINALS = frozenset(
    {
        "run.completed",
        "run.failed",
        "run.cancelled",
        "response.completed",
        "response.failed",
        "response.incomplete",
        "response.cancelled",
    }
)
#: how long a follower waits for news before it reads the journal again anyway
SAFETY_POLL_SECONDS = 5.0
#: how often a queued run looks for a running slot freed on another instance
SLOT_POLL_SECONDS = 1.0


def new_run_id() -> str:
    return "run_" + secrets.token_hex(16)


def event_name(ev: dict[str, Any]) -> str:
    name = ev.get("event") or ev.get("type")
    return name if isinstance(name, str) else ""


def _ends(batch: list[dict[str, Any]]) -> bool:
    return bool(batch) and event_name(batch[-1]) in TERMINALS


def status_of(terminal: dict[str, Any], error: GatewayError | None) -> str:
    """The final status a terminal event stands for."""
    name = event_name(terminal)
    if name in ("run.completed", "response.completed"):
        return "completed"
    if name == "response.incomplete":
        return "incomplete"
    if name in ("run.cancelled", "response.cancelled"):
        return "cancelled"
    return "interrupted" if isinstance(error, Interrupted) else "failed"


class JournalSource:
    """A run's journal as a relay source: replay after ``after_seq``, then follow."""

    def __init__(self, store: Store, bus: RunBus, rec: RunRecord, after_seq: int) -> None:
        self._events = follow_events(
            store, bus, rec.id, rec.owner, after_seq, idle=SAFETY_POLL_SECONDS
        )

    async def read(self) -> list[dict[str, Any]] | None:
        while True:
            try:
                batch = await self._events.__anext__()
            except StopAsyncIteration:
                return None
            if batch:
                return batch

    async def aclose(self) -> None:
        return None


@dataclass
class FollowStep:
    events: list[dict[str, Any]]
    done: bool


class FollowStage:
    """Journaled events pass as they are; done at the terminal event."""

    held_chars = 0

    async def feed(self, item: list[dict[str, Any]]) -> FollowStep:
        return FollowStep(item, _ends(item))

    async def finish(self, *, failed: bool = False) -> list[dict[str, Any]]:
        return []

    def manifest(self) -> dict[str, Any]:
        return {}


class SSEFollowFront:
    """Journaled events → SSE with ``encode`` (:func:`run_sse` or
    :func:`~gateway.fronts.responses.journal_response_sse`)."""

    def __init__(self, encode: Callable[[list[dict[str, Any]]], bytes]) -> None:
        self._encode = encode

    def start(self) -> bytes:
        return b""

    def keepalive(self) -> bytes:
        return encode_comment()

    def encode(self, events: list[dict[str, Any]]) -> bytes:
        return self._encode(events)

    def end(self, events: list[dict[str, Any]], manifest: dict[str, Any]) -> bytes:
        return self._encode(events) if events else b""

    def fail(
        self, events: list[dict[str, Any]], error: GatewayError, manifest: dict[str, Any]
    ) -> bytes:
        return b""  # a follower cut short just ends: the client resumes with Last-Event-ID


class JournalFront(Protocol):
    """A front whose outputs are lists of journal events (runs, background responses)."""

    def start(self) -> list[dict[str, Any]]: ...

    def keepalive(self) -> list[dict[str, Any]]: ...

    def encode(self, events: list[Event]) -> list[dict[str, Any]]: ...

    def end(self, events: list[Event], manifest: dict[str, Any]) -> list[dict[str, Any]]: ...

    def fail(
        self, events: list[Event], error: GatewayError, manifest: dict[str, Any]
    ) -> list[dict[str, Any]]: ...

    def cancel(self, events: list[Event], manifest: dict[str, Any]) -> list[dict[str, Any]]: ...


async def _first_of(a: trio.Event, b: trio.Event | None) -> None:
    """Wait until ``a`` or ``b`` is set."""
    if b is None:
        await a.wait()
        return
    async with trio.open_nursery() as nursery:
        for event in (a, b):
            nursery.start_soon(_set_then_cancel, event, nursery.cancel_scope)


async def _set_then_cancel(event: trio.Event, scope: trio.CancelScope) -> None:
    await event.wait()
    scope.cancel()


def _concat(parts: list[list[dict[str, Any]]]) -> list[dict[str, Any]]:
    return [e for part in parts for e in part]


@dataclass
class _Local:
    """A run executing in this process."""

    #: everything the run does here; cancelled when the lease is lost
    scope: trio.CancelScope = field(default_factory=trio.CancelScope)
    #: waiting for the upstream's answer; cancelled by a stop before the relay exists
    opening: trio.CancelScope = field(default_factory=trio.CancelScope)
    relay: Relay[Any, Any, Any] | None = None
    stop_requested: bool = False
    lost: bool = False
    logged: int = 0

    def stop(self) -> None:
        self.stop_requested = True
        if self.relay is not None:
            self.relay.stop(CANCELLED)
        else:
            self.opening.cancel()

    def lose(self) -> None:
        self.lost = True
        self.scope.cancel()


Summarize = Callable[[list[dict[str, Any]]], dict[str, Any]]


class Runs:
    """Starts, stops and journals background runs; streams journals to followers."""

    def __init__(
        self,
        store: Store,
        bus: RunBus,
        *,
        holder: str,
        lease_seconds: float = 15.0,
        max_events: int = 10_000,
        max_event_bytes: int = 1 << 20,
        max_running: int | None = None,
        max_queued: int = 0,
    ) -> None:
        self.store = store
        self.bus = bus
        self.holder = holder
        self.lease_seconds = lease_seconds
        self.max_events = max_events
        self._max_event_bytes = max_event_bytes
        #: per principal (None: no quota); see the module docstring
        self.max_running = max_running
        self.max_queued = max_queued
        self._local: dict[str, _Local] = {}
        #: set (and replaced) whenever a run of this process ends: queued runs look again
        self._ended = trio.Event()

    # -- reading -------------------------------------------------------------------

    async def get(self, run_id: str, owner: str, *, kind: str) -> RunRecord:
        rec = await trio.to_thread.run_sync(self.store.get_run, run_id, owner)
        if rec is None or rec.kind != kind:
            what = "response" if kind == "response" else "run"
            raise NotFound(f"No such {what}, or it is not yours.", code=f"{what}_not_found")
        return rec

    async def read_events(self, run_id: str, after: int, limit: int) -> list[dict[str, Any]]:
        return await trio.to_thread.run_sync(self.store.read_run_events, run_id, after, limit)

    def follow(self, rec: RunRecord, after: int, opts: RelayOptions) -> Relay[Any, Any, bytes]:
        """The relay that streams a run's journal to a client (SSE)."""
        encode = (
            journal_response_sse(rec.id, rec.model, int(rec.created))
            if rec.kind == "response"
            else run_sse
        )
        source = JournalSource(self.store, self.bus, rec, after)
        # the run's own relay bounds the upstream's silence; a follower only waits
        opts = dataclasses.replace(opts, first_byte_seconds=None, idle_timeout_seconds=math.inf)
        return Relay(source, FollowStage(), SSEFollowFront(encode), opts)

    def running_here(self) -> list[str]:
        return list(self._local)

    # -- lifecycle -----------------------------------------------------------------

    def record(self, run_id: str, owner: str, kind: str, model: str, mode: str) -> RunRecord:
        now = time.time()
        return RunRecord(
            run_id,
            owner,
            kind,
            model,
            mode,
            "queued",
            now,
            holder=self.holder,
            lease_expires=now + self.lease_seconds,
        )

    async def create(self, rec: RunRecord) -> None:
        """Journal a new run, or refuse it when its owner has as many running and
        queued as the quota allows (QuotaExceeded, 429)."""
        if self.max_running is None:
            await trio.to_thread.run_sync(self.store.create_run, rec)
            return
        limit = self.max_running + self.max_queued
        if not await trio.to_thread.run_sync(lambda: self.store.create_run(rec, max_active=limit)):
            raise run_quota_exceeded(self.max_running, self.max_queued)

    async def wait_slot(self, rec: RunRecord, draining: trio.Event | None) -> None:
        """Until ``rec`` may run (its owner's running quota); Draining if this instance
        stops first. A store that fails meanwhile is tried again (the lease keeper
        gives the run up if it stays down)."""
        if self.max_running is None:
            return
        while True:
            if draining is not None and draining.is_set():
                raise Draining()
            try:
                if await trio.to_thread.run_sync(
                    self.store.claim_run_slot, rec.id, self.holder, self.max_running
                ):
                    return
            except StoreError as exc:
                log.warning("run %s: cannot claim a running slot yet (%s)", rec.id, exc.message)
            with trio.move_on_after(SLOT_POLL_SECONDS):
                await _first_of(self._ended, draining)

    def _ended_here(self) -> None:
        self._ended.set()
        self._ended = trio.Event()

    async def stop(self, rec: RunRecord) -> None:
        """Ask the run to stop (whichever instance runs it) and wait a little for its end."""
        await trio.to_thread.run_sync(self.store.request_run_stop, rec.id, rec.owner)
        self.bus.stop_requested(rec.id)
        local = self._local.get(rec.id)
        if local is not None:
            local.stop()
        with trio.move_on_after(5):
            while True:
                now = await trio.to_thread.run_sync(self.store.get_run, rec.id, rec.owner)
                if now is None or now.finished:
                    return
                await self.bus.wait_beyond(rec.id, now.last_seq, 0.25)

    async def execute(
        self,
        rec: RunRecord,
        open_stream: Callable[[], Awaitable[StreamResponse]],
        stage: ChatPipeline,
        front: JournalFront,
        summarize: Summarize,
        opts: RelayOptions,
        before_complete: Callable[[], Awaitable[None]] | None = None,
        after: Callable[[object], Awaitable[None]] | None = None,
    ) -> None:
        """Run ``rec`` to its end; every batch is journaled before it can be read.
        ``after(outcome)`` runs once the run has ended here (not when another instance
        took it over): an agent's own run is stopped upstream unless it completed."""
        local = self._local[rec.id] = _Local()
        job = _Job(self, rec, local, stage, front, summarize)
        try:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(self._guard, rec, local)
                with local.scope:
                    await job.run(open_stream, opts, before_complete)
                nursery.cancel_scope.cancel()
            if after is not None and not local.lost:
                with trio.CancelScope(shield=True):
                    await after(job.outcome)
        except* LeaseLost:  # (the nursery raises it in a group)
            log.warning("run %s: lease lost; another instance ended it", rec.id)
        except* Exception:
            log.exception("run %s failed unexpectedly", rec.id)
            await job.crashed()
        finally:
            self._local.pop(rec.id, None)
            self._ended_here()

    async def note_upstream(self, rec: RunRecord, upstream_id: str) -> None:
        """Record the upstream's own id of a run it runs itself: if this instance stops,
        another one adopts the run and follows it there (:meth:`follow_adopted`)."""
        summary = {"upstream_run_id": upstream_id}
        await trio.to_thread.run_sync(
            lambda: self.store.update_run(rec.id, self.holder, summary=summary)
        )

    async def follow_adopted(
        self,
        rec: RunRecord,
        watch: Callable[[RunRecord, _Local], Awaitable[tuple[list[dict[str, Any]], Any]]],
        summarize: Summarize,
    ) -> None:
        """Hold the lease of a run adopted from a stopped instance while ``watch`` waits
        for the upstream's end (it sees stops through the :class:`_Local`) and encodes
        the run's last events; journal them."""
        local = self._local[rec.id] = _Local()
        try:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(self._guard, rec, local)
                with local.scope:
                    events, error = await watch(rec, local)
                    status = status_of(events[-1] if events else {}, error)
                    with trio.CancelScope(shield=True):
                        await self.finish(rec, events, status, summarize(events))
                nursery.cancel_scope.cancel()
        except* LeaseLost:  # (the nursery raises it in a group)
            log.warning("run %s: lease lost; another instance ended it", rec.id)
        except* Exception:
            log.exception("run %s: following it upstream failed", rec.id)
        finally:
            self._local.pop(rec.id, None)
            self._ended_here()

    async def _guard(self, rec: RunRecord, local: _Local) -> None:
        """The lease, and stops asked on any instance, beside the run."""
        async with trio.open_nursery() as nursery:
            nursery.start_soon(
                lambda: keep_lease(
                    self.store,
                    rec.id,
                    self.holder,
                    lease_seconds=self.lease_seconds,
                    on_lost=local.lose,
                    on_stop=local.stop,
                )
            )
            await self.bus.wait_stop(rec.id)
            local.stop()
            await trio.sleep_forever()  # keep the lease until the run has ended

    async def append(self, rec: RunRecord, events: list[dict[str, Any]]) -> None:
        if events:
            await trio.to_thread.run_sync(self.store.append_run_events, rec.id, events, self.holder)
            self.bus.published(rec.id, int(events[-1]["seq"]))

    async def finish(
        self, rec: RunRecord, events: list[dict[str, Any]], status: str, summary: dict[str, Any]
    ) -> None:
        await trio.to_thread.run_sync(
            lambda: self.store.finish_run(rec.id, status, summary, self.holder, events)
        )
        self.bus.published(rec.id, int(events[-1]["seq"]) if events else None)


class _Job:
    """One run's execution: open the upstream, relay into the journal, finish."""

    def __init__(
        self,
        runs: Runs,
        rec: RunRecord,
        local: _Local,
        stage: ChatPipeline,
        front: JournalFront,
        summarize: Summarize,
    ) -> None:
        self.runs = runs
        self.rec = rec
        self.local = local
        self.stage = stage
        self.front = front
        self.summarize = summarize
        self.finished = False
        #: how the run ended here: "completed", the error, CANCELLED (or None)
        self.outcome: object = None

    async def _end(self, events: list[dict[str, Any]], error: GatewayError | None) -> None:
        if self.finished or self.local.lost:
            return
        self.finished = True
        status = status_of(events[-1] if events else {}, error)
        with trio.CancelScope(shield=True):
            await self.runs.finish(self.rec, events, status, self.summarize(events))

    async def crashed(self) -> None:
        err = GatewayError(
            "The run failed unexpectedly; the error was logged.", code="internal_error"
        )
        with trio.CancelScope(shield=True):
            try:
                await self._end(self.front.fail([], err, self.stage.manifest()), err)
            except (StoreError, LeaseLost, ValueError):
                log.exception("run %s: could not journal its failure", self.rec.id)

    async def run(
        self,
        open_stream: Callable[[], Awaitable[StreamResponse]],
        opts: RelayOptions,
        before_complete: Callable[[], Awaitable[None]] | None,
    ) -> None:
        front, stage, local = self.front, self.stage, self.local
        resp: StreamResponse | None = None
        with local.opening:
            try:
                await self.runs.wait_slot(self.rec, opts.draining)
                resp = await open_stream()
            except GatewayError as exc:
                self.outcome = exc
                await self._end(front.start() + front.fail([], exc, stage.manifest()), exc)
                return
        if resp is None:
            self.outcome = CANCELLED
            if not local.lost:
                await self._end(front.start() + front.cancel([], stage.manifest()), None)
            return
        await trio.to_thread.run_sync(
            lambda: self.runs.store.update_run(self.rec.id, self.runs.holder, status="running")
        )
        await self._relay(resp, opts, before_complete)

    async def _relay(
        self,
        resp: StreamResponse,
        opts: RelayOptions,
        before_complete: Callable[[], Awaitable[None]] | None,
    ) -> None:
        async def on_outcome(outcome: object) -> None:
            if outcome == "completed" and before_complete is not None:
                await before_complete()

        def full() -> GatewayError | None:
            return RunLogFull() if getattr(self.front, "overflowed", False) else None

        opts = dataclasses.replace(opts, on_outcome=on_outcome, join=_concat, check=full)
        source = SSESource.from_response(resp, max_event_bytes=self.runs._max_event_bytes)
        relay: Relay[Any, Event, list[dict[str, Any]]] = Relay(source, self.stage, self.front, opts)
        self.local.relay = relay
        if self.local.stop_requested:
            relay.stop(CANCELLED)
        terminal: list[dict[str, Any]] = []
        async with relay as batches:
            async for batch in batches:
                if _ends(batch):
                    terminal = batch
                    break
                await self.runs.append(self.rec, batch)
                self.local.logged += len(batch)
                if self.local.logged > self.runs.max_events:  # fronts without a bound
                    relay.stop(RunLogFull())
        outcome = self.outcome = relay.outcome
        await self._end(terminal, outcome if isinstance(outcome, GatewayError) else None)
