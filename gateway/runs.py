"""Background runs: a stream that outlives the request that started it, journaled.

A run executes in the app's service-level nursery (quart-trio's lifespan nursery), not
in a request's. It is one :class:`~gateway.relay.Relay` whose consumer, instead of a
client, is the run's **journal**: every batch of run events is appended (with sequence
numbers 1, 2, …) *before* anyone can read it. ``GET /v1/runs/{id}/events`` is another
relay over the journal (:class:`JournalSource`): it replays the events after
``Last-Event-ID`` and then follows live, woken by the run bus, so a client that
reconnects — to any instance sharing the journal — loses nothing and sees nothing
twice. A background Response (``POST /v1/responses`` with ``background: true``) is the
same machinery with the Responses front: its journal holds Responses events.

``stop`` cancels the run's relay: the upstream response is closed, held text is flushed
as file names and the run ends with ``run.cancelled``. A run that exceeds
``limits.run_log_max_events`` is stopped and fails with ``run_log_full``. While running,
the instance holds the run's lease and renews it; an instance that dies loses it and
another instance ends the run as ``interrupted`` (:mod:`gateway.reaper`).
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

import httpx
import trio

from gateway.errors import GatewayError, NotFound
from gateway.events import Event
from gateway.fronts.runs import TERMINAL, run_sse
from gateway.pipeline import ChatPipeline
from gateway.relay import CANCELLED, Relay, RelayOptions
from gateway.sources import SSESource

__all__ = ["LOG_FULL", "JournalSource", "RunRecord", "Runs", "new_run_id"]

log = logging.getLogger("gateway.runs")

#: terminal event names of both journaled fronts (runs and background responses)
TERMINALS = TERMINAL | {
    "response.completed",
    "response.failed",
    "response.incomplete",
    "response.cancelled",
}


FINISHED = frozenset({"completed", "failed", "cancelled", "interrupted", "incomplete"})


def LOG_FULL() -> GatewayError:
    return GatewayError(
        "The run produced more events than the gateway keeps (limits.run_log_max_events).",
        code="run_log_full",
        status=507,
    )


def new_run_id() -> str:
    return "run_" + secrets.token_hex(16)


def event_name(ev: dict[str, Any]) -> str:
    name = ev.get("event") or ev.get("type")
    return name if isinstance(name, str) else ""


@dataclass
class RunRecord:
    """What the journal keeps about a run besides its events."""

    id: str
    owner: str
    model: str
    link_mode: str
    kind: str = "run"  # "run" | "response"
    status: str = "queued"
    created: float = field(default_factory=time.time)
    finished_at: float | None = None
    summary: dict[str, Any] = field(default_factory=dict)

    @property
    def done(self) -> bool:
        return self.status in FINISHED


class Journal(Protocol):
    """The blocking journal interface of the store (called from worker threads)."""

    def create_run(self, rec: RunRecord) -> None: ...

    def get_run(self, run_id: str, owner: str) -> RunRecord | None: ...

    def append_run_events(self, run_id: str, events: list[dict[str, Any]]) -> None: ...

    def read_run_events(self, run_id: str, after_seq: int, limit: int) -> list[dict[str, Any]]: ...

    def finish_run(self, run_id: str, status: str, summary: dict[str, Any]) -> None: ...

    def run_status(self, run_id: str) -> str | None: ...


class MemoryJournal:
    """An in-process journal (one instance, lost on restart)."""

    def __init__(self) -> None:
        self._runs: dict[str, RunRecord] = {}
        self._events: dict[str, list[dict[str, Any]]] = {}

    def create_run(self, rec: RunRecord) -> None:
        self._runs[rec.id] = rec
        self._events[rec.id] = []

    def get_run(self, run_id: str, owner: str) -> RunRecord | None:
        rec = self._runs.get(run_id)
        return rec if rec is not None and rec.owner == owner else None

    def append_run_events(self, run_id: str, events: list[dict[str, Any]]) -> None:
        self._events[run_id].extend(events)

    def read_run_events(self, run_id: str, after_seq: int, limit: int) -> list[dict[str, Any]]:
        evs = self._events.get(run_id, [])
        return [e for e in evs if _seq(e) > after_seq][:limit]

    def finish_run(self, run_id: str, status: str, summary: dict[str, Any]) -> None:
        rec = self._runs[run_id]
        rec.status = status
        rec.finished_at = time.time()
        rec.summary = summary

    def run_status(self, run_id: str) -> str | None:
        rec = self._runs.get(run_id)
        return None if rec is None else rec.status

    def active(self) -> list[RunRecord]:
        return [r for r in self._runs.values() if not r.done]


def _seq(ev: dict[str, Any]) -> int:
    seq = ev.get("seq", ev.get("sequence_number"))
    return int(seq) if isinstance(seq, int) else -1


class Bus:
    """Wakes the followers of a run when its journal grows (in this process)."""

    def __init__(self) -> None:
        self._events: dict[str, trio.Event] = {}

    def published(self, run_id: str, seq: int) -> None:
        ev = self._events.pop(run_id, None)
        if ev is not None:
            ev.set()

    async def wait_beyond(self, run_id: str, seq: int, limit_seconds: float) -> bool:
        ev = self._events.get(run_id)
        if ev is None:
            ev = self._events[run_id] = trio.Event()
        with trio.move_on_after(limit_seconds):
            await ev.wait()
            return True
        return False


class JournalSource:
    """A run's journal as a relay source: replay after ``after_seq``, then follow."""

    def __init__(
        self,
        runs: Runs,
        run_id: str,
        after_seq: int,
        *,
        draining: trio.Event | None = None,
        batch: int = 500,
    ) -> None:
        self._runs = runs
        self._run_id = run_id
        self.after = after_seq
        self._draining = draining
        self._batch = batch
        self._ended = False

    async def read(self) -> list[dict[str, Any]] | None:
        runs = self._runs
        while not self._ended:
            events = await runs.read_events(self._run_id, self.after, self._batch)
            if events:
                self.after = _seq(events[-1])
                if event_name(events[-1]) in TERMINALS:
                    self._ended = True
                return events
            if await runs.finished(self._run_id):
                # finished after the read above? then its last events are there now
                events = await runs.read_events(self._run_id, self.after, self._batch)
                self._ended = True
                if events:
                    self.after = _seq(events[-1])
                    return events
                return None
            if self._draining is not None and self._draining.is_set():
                # the run ends through its own relay; give it a moment, then let the
                # client resume elsewhere (Last-Event-ID)
                if not await runs.bus.wait_beyond(self._run_id, self.after, 0.5):
                    return None
                continue
            await runs.bus.wait_beyond(self._run_id, self.after, runs.safety_poll_seconds)
        return None

    async def aclose(self) -> None:
        self._ended = True


@dataclass
class FollowStep:
    events: list[dict[str, Any]]
    done: bool


class FollowStage:
    """Journaled events pass as they are; done at the terminal event."""

    held_chars = 0

    async def feed(self, item: list[dict[str, Any]]) -> FollowStep:
        return FollowStep(item, bool(item) and event_name(item[-1]) in TERMINALS)

    async def finish(self, *, failed: bool = False) -> list[dict[str, Any]]:
        return []

    def manifest(self) -> dict[str, Any]:
        return {}


class SSEFollowFront:
    """Journaled events → SSE; ``encode`` is ``run_sse`` or the Responses serializer."""

    def __init__(self, encode: Callable[[list[dict[str, Any]]], bytes]) -> None:
        self._encode = encode

    def start(self) -> bytes:
        return b""

    def keepalive(self) -> bytes:
        from gateway.sse import encode_comment

        return encode_comment()

    def encode(self, events: list[dict[str, Any]]) -> bytes:
        return self._encode(events)

    def end(self, events: list[dict[str, Any]], manifest: dict[str, Any]) -> bytes:
        return self._encode(events) if events else b""

    def fail(
        self, events: list[dict[str, Any]], error: GatewayError, manifest: dict[str, Any]
    ) -> bytes:
        return b""  # a follower that stops early just ends: the client resumes


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


def _concat(parts: list[list[dict[str, Any]]]) -> list[dict[str, Any]]:
    return [e for part in parts for e in part]


@dataclass
class _Local:
    """A run executing in this process."""

    scope: trio.CancelScope = field(default_factory=trio.CancelScope)
    relay: Relay[Any, Any, Any] | None = None
    stop_requested: bool = False
    logged: int = 0


Summarize = Callable[[RunRecord, list[dict[str, Any]]], dict[str, Any]]


class Runs:
    """Starts, stops and journals background runs; reads journals for followers."""

    def __init__(
        self,
        journal: Journal,
        *,
        max_events: int = 10_000,
        max_event_bytes: int = 1 << 20,
        safety_poll_seconds: float = 5.0,
    ) -> None:
        self.journal = journal
        self.bus = Bus()
        self.max_events = max_events
        self._max_event_bytes = max_event_bytes
        self.safety_poll_seconds = safety_poll_seconds
        self._local: dict[str, _Local] = {}

    # -- journal access (worker threads) ------------------------------------------

    async def get(self, run_id: str, owner: str, *, kind: str | None = None) -> RunRecord:
        rec = await trio.to_thread.run_sync(self.journal.get_run, run_id, owner)
        if rec is None or (kind is not None and rec.kind != kind):
            what = "response" if kind == "response" else "run"
            raise NotFound(f"No such {what}, or it is not yours.", code=f"{what}_not_found")
        return rec

    async def finished(self, run_id: str) -> bool:
        rec = await trio.to_thread.run_sync(self.journal.run_status, run_id)
        return rec is None or rec in FINISHED

    async def read_events(self, run_id: str, after: int, limit: int) -> list[dict[str, Any]]:
        return await trio.to_thread.run_sync(self.journal.read_run_events, run_id, after, limit)

    async def _append(self, rec: RunRecord, events: list[dict[str, Any]]) -> None:
        if not events:
            return
        await trio.to_thread.run_sync(self.journal.append_run_events, rec.id, events)
        self.bus.published(rec.id, _seq(events[-1]))

    # -- lifecycle -----------------------------------------------------------------

    async def create(self, rec: RunRecord) -> None:
        await trio.to_thread.run_sync(self.journal.create_run, rec)

    def running_here(self) -> list[str]:
        return list(self._local)

    async def execute(
        self,
        rec: RunRecord,
        open_stream: Callable[[], Awaitable[httpx.Response]],
        stage: ChatPipeline,
        front: JournalFront,
        summarize: Summarize,
        opts: RelayOptions,
        before_complete: Callable[[], Awaitable[None]] | None = None,
    ) -> None:
        """Run ``rec`` to its end; every batch is journaled before it can be read."""
        local = self._local[rec.id] = _Local()
        try:
            await self._execute(
                rec, local, open_stream, stage, front, summarize, opts, before_complete
            )
        except Exception:
            log.exception("run failed unexpectedly")
            err = GatewayError(
                "The run failed unexpectedly; the error was logged.", code="internal_error"
            )
            with trio.CancelScope(shield=True):
                await self._finish(rec, front.fail([], err, stage.manifest()), summarize, err)
        finally:
            self._local.pop(rec.id, None)

    async def _execute(
        self,
        rec: RunRecord,
        local: _Local,
        open_stream: Callable[[], Awaitable[httpx.Response]],
        stage: ChatPipeline,
        front: JournalFront,
        summarize: Summarize,
        opts: RelayOptions,
        before_complete: Callable[[], Awaitable[None]] | None,
    ) -> None:
        resp: httpx.Response | None = None
        with local.scope:
            try:
                resp = await open_stream()
            except GatewayError as exc:
                await self._finish(
                    rec, front.start() + front.fail([], exc, stage.manifest()), summarize, exc
                )
                return
        if resp is None:  # stopped while waiting for the upstream
            await self._finish(rec, front.start() + front.cancel([], stage.manifest()), summarize)
            return

        async def on_outcome(outcome: object) -> None:
            if outcome == "completed" and before_complete is not None:
                await before_complete()

        opts = dataclasses.replace(opts, on_outcome=on_outcome, join=_concat)
        source = SSESource.from_response(resp, max_event_bytes=self._max_event_bytes)
        relay: Relay[Any, Event, list[dict[str, Any]]] = Relay(source, stage, front, opts)
        local.relay = relay
        if local.stop_requested:
            relay.stop(CANCELLED)
        terminal: list[dict[str, Any]] = []
        async with relay as batches:
            async for batch in batches:
                if _ends(batch):
                    terminal = batch
                    break
                await self._append(rec, batch)
                local.logged += len(batch)
                if local.logged >= self.max_events:
                    relay.stop(LOG_FULL())  # the journal keeps at most one batch more
        outcome = relay.outcome
        await self._finish(
            rec, terminal, summarize, outcome if isinstance(outcome, GatewayError) else None
        )

    async def _finish(
        self,
        rec: RunRecord,
        events: list[dict[str, Any]],
        summarize: Summarize,
        error: GatewayError | None = None,
    ) -> None:
        """Journal the last events and the run's final status (status from the terminal)."""
        await self._append(rec, events)
        status = _status(events[-1] if events else {}, error)
        summary = summarize(rec, events)
        await trio.to_thread.run_sync(self.journal.finish_run, rec.id, status, summary)
        rec.status = status
        if events:
            self.bus.published(rec.id, _seq(events[-1]))

    async def stop(self, rec: RunRecord) -> None:
        """Ask the run to stop (this process) and wait a little for its end."""
        local = self._local.get(rec.id)
        if local is None:
            return
        local.stop_requested = True
        if local.relay is not None:
            local.relay.stop(CANCELLED)
        else:
            local.scope.cancel()
        with trio.move_on_after(5):
            while rec.id in self._local:
                await self.bus.wait_beyond(rec.id, -1, 0.05)

    def follow(
        self, rec: RunRecord, after: int, opts: RelayOptions, draining: trio.Event | None
    ) -> Relay[Any, Any, bytes]:
        """The relay that streams a run's journal to a client (SSE)."""
        from gateway.fronts.responses import response_sse

        encode = response_sse if rec.kind == "response" else run_sse
        source = JournalSource(self, rec.id, after, draining=draining)
        # the run's own relay bounds the upstream's silence; a follower only waits
        opts = dataclasses.replace(
            opts, draining=None, first_byte_seconds=None, idle_timeout_seconds=math.inf
        )
        return Relay(source, FollowStage(), SSEFollowFront(encode), opts)


def _ends(batch: list[dict[str, Any]]) -> bool:
    return bool(batch) and event_name(batch[-1]) in TERMINALS


def _status(terminal: dict[str, Any], error: GatewayError | None) -> str:
    from gateway.errors import Interrupted

    name = event_name(terminal)
    if name in ("run.completed", "response.completed"):
        return "completed"
    if name == "response.incomplete":
        return "incomplete"
    if name in ("run.cancelled", "response.cancelled"):
        return "cancelled"
    return "interrupted" if isinstance(error, Interrupted) else "failed"
