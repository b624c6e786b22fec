"""Background runs: a chat completion that outlives the request that started it.

A run executes in the app's service-level nursery (quart-trio's lifespan nursery),
not in a request's. Its events go to a bounded per-run log with sequence numbers
(1, 2, ...); ``GET /v1/runs/{id}/events`` replays the log after ``Last-Event-ID``
and then follows it live, so a client that reconnects loses nothing and sees
nothing twice. ``stop`` cancels the run's scope: the relay producer is cancelled,
its ``finally`` closes the upstream response, held text is flushed as file names
and the run ends with ``run.cancelled``. Finished runs are kept for
``limits.run_retention_seconds`` and then dropped by a reaper task.

Events: ``run.started``, ``message.delta``, ``tool.started``, ``tool.completed``,
``run.completed`` (output, usage, artifact manifest), ``run.failed``,
``run.cancelled``. A message delta is one event per upstream read (the batch), which
keeps the log short.
"""

from __future__ import annotations

import secrets
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import trio

from gateway.pipeline import ChatPipeline, Named, Out

TERMINAL = ("run.completed", "run.failed", "run.cancelled")
LOG_FULL_ERROR = {
    "code": "run_log_full",
    "message": "The run produced more events than the gateway keeps.",
}


def new_run_id() -> str:
    return "run_" + secrets.token_hex(16)


@dataclass
class Run:
    id: str
    owner: str
    model: str
    link_mode: str
    max_events: int
    created: float = field(default_factory=time.time)
    status: str = "queued"
    events: list[dict[str, Any]] = field(default_factory=list)
    output: list[str] = field(default_factory=list)
    usage: dict[str, Any] | None = None
    error: dict[str, Any] | None = None
    finished_at: float | None = None
    cancel_scope: trio.CancelScope = field(default_factory=trio.CancelScope)
    _changed: trio.Event = field(default_factory=trio.Event)
    first_seq: int = 1
    #: the log is full: nothing more is logged, the run is being stopped and its sink
    #: ends it with ``run.failed`` (``run_log_full``), output and manifest included
    overflowed: bool = False

    @property
    def done(self) -> bool:
        return self.status in ("completed", "failed", "cancelled", "interrupted")

    def append(self, event: str, **fields: Any) -> bool:
        """Log one event; False if it was not logged (run over, or log full)."""
        if self.done or self.overflowed:
            return False
        seq = self.first_seq + len(self.events)
        if len(self.events) >= self.max_events and event not in TERMINAL:
            self.overflowed = True
            self.cancel_scope.cancel()
            return False
        self.events.append({"event": event, "run_id": self.id, "seq": seq, **fields})
        self._wake()
        return True

    def _wake(self) -> None:
        self._changed.set()
        self._changed = trio.Event()

    def _finish(self, status: str, event: str, **fields: Any) -> None:
        if isinstance(fields.get("error"), dict):
            self.error = fields["error"]  # the summary says why, whoever ended the run
        seq = self.first_seq + len(self.events)
        self.events.append({"event": event, "run_id": self.id, "seq": seq, **fields})
        self.status = status
        self.finished_at = time.time()
        self._wake()

    def finish(self, status: str, event: str, **fields: Any) -> None:
        if not self.done:
            self._finish(status, event, **fields)

    def after(self, seq: int) -> list[dict[str, Any]]:
        start = max(0, seq - self.first_seq + 1)
        return self.events[start:]

    def changed_event(self) -> trio.Event:
        """Set at the next append; take it *before* reading the log to never miss one."""
        return self._changed

    async def wait_changed(self) -> None:
        await self._changed.wait()

    def summary(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "run_id": self.id,
            "object": "run",
            "status": self.status,
            "model": self.model,
            "created": int(self.created),
            "finished_at": int(self.finished_at) if self.finished_at else None,
            "output": "".join(self.output),
            "usage": self.usage,
            "error": self.error,
            "last_seq": self.first_seq + len(self.events) - 1,
            "download_link_mode": self.link_mode,
        }


class RunRegistry:
    """Runs by id (in memory; scoped by owner on every read)."""

    def __init__(self, retention_seconds: float) -> None:
        self._runs: dict[str, Run] = {}
        self.retention_seconds = retention_seconds

    def add(self, run: Run) -> None:
        self._runs[run.id] = run

    def get(self, run_id: str, owner: str) -> Run | None:
        run = self._runs.get(run_id)
        return run if run is not None and run.owner == owner else None

    def active(self) -> list[Run]:
        return [r for r in self._runs.values() if not r.done]

    def reap(self, now: float | None = None) -> int:
        now = time.time() if now is None else now
        old = [
            rid
            for rid, r in self._runs.items()
            if r.done and r.finished_at is not None and now - r.finished_at > self.retention_seconds
        ]
        for rid in old:
            del self._runs[rid]
        return len(old)

    async def reaper(self, interval: float = 30.0) -> None:
        while True:
            await trio.sleep(interval)
            self.reap()


class RunSink:
    """The runs "encoder": writes events into the run's log instead of bytes.

    ``before_complete`` (e.g. saving the turn in its session) is awaited after the
    output is final and *before* ``run.completed`` is published, so a client that
    sees ``run.completed`` and goes on at once finds everything the run wrote.
    """

    def __init__(
        self, run: Run, before_complete: Callable[[], Awaitable[None]] | None = None
    ) -> None:
        self.run = run
        self.before_complete = before_complete
        self._tools: dict[int, dict[str, Any]] = {}

    def start(self) -> bytes:
        self.run.status = "running"
        self.run.append("run.started", model=self.run.model)
        return b""

    def keepalive(self) -> bytes:
        return b""

    def batch(self, outs: list[Out]) -> bytes:
        text: list[str] = []
        for out in outs:
            if isinstance(out, Named):
                continue
            if isinstance(out.get("usage"), dict):
                self.run.usage = out["usage"]
            for choice in out.get("choices") or ():
                if not isinstance(choice, dict) or choice.get("index", 0) != 0:
                    continue
                delta = choice.get("delta") or {}
                content = delta.get("content")
                if isinstance(content, str) and content:
                    text.append(content)
                for call in delta.get("tool_calls") or ():
                    if isinstance(call, dict):
                        self._flush_text(text)
                        self._tool(call)
                if choice.get("finish_reason") is not None:
                    self._flush_text(text)
                    self._complete_tools()
        self._flush_text(text)
        return b""

    def _flush_text(self, text: list[str]) -> None:
        if text:
            joined = "".join(text)
            text.clear()
            if self.run.append("message.delta", delta=joined):
                self.run.output.append(joined)  # the output is exactly the logged deltas

    def _tool(self, call: dict[str, Any]) -> None:
        idx = call.get("index", 0)
        fn = call.get("function") or {}
        state = self._tools.get(idx)
        if state is None:
            state = {
                "tool_call_id": call.get("id") or f"call_{idx}",
                "name": fn.get("name") or "",
                "arguments": [],
                "done": False,
            }
            self._tools[idx] = state
            self.run.append("tool.started", tool_call_id=state["tool_call_id"], name=state["name"])
        if isinstance(fn.get("arguments"), str):
            state["arguments"].append(fn["arguments"])

    def _complete_tools(self) -> None:
        for state in self._tools.values():
            if not state["done"]:
                state["done"] = True
                self.run.append(
                    "tool.completed",
                    tool_call_id=state["tool_call_id"],
                    name=state["name"],
                    arguments="".join(state["arguments"]),
                )

    def _log_full(self, pipeline: ChatPipeline) -> None:
        self.run.finish(
            "failed",
            "run.failed",
            error=LOG_FULL_ERROR,
            output="".join(self.run.output),
            gateway=pipeline.resolver.manifest(),
        )

    async def end(self, pipeline: ChatPipeline) -> bytes:
        self.batch(list(await pipeline.finish()))
        self._complete_tools()
        if self.run.overflowed:
            self._log_full(pipeline)
            return b""
        if self.before_complete is not None and not self.run.done:
            await self.before_complete()
        self.run.finish(
            "completed",
            "run.completed",
            output="".join(self.run.output),
            usage=self.run.usage,
            gateway=pipeline.resolver.manifest(),
        )
        return b""

    async def fail(self, pipeline: ChatPipeline, code: str, message: str) -> bytes:
        self.batch(list(await pipeline.finish(failed=True)))
        if self.run.overflowed:
            self._log_full(pipeline)
            return b""
        status = "interrupted" if code == "gateway_draining" else "failed"
        self.run.error = {"code": code, "message": message}
        self.run.finish(
            status,
            "run.failed",
            error=self.run.error,
            output="".join(self.run.output),
            gateway=pipeline.resolver.manifest(),
        )
        return b""

    async def cancelled(self, pipeline: ChatPipeline) -> None:
        self.batch(list(await pipeline.finish(failed=True)))
        if self.run.overflowed:  # cancelled by the full log, not by a stop
            self._log_full(pipeline)
            return
        self.run.finish(
            "cancelled",
            "run.cancelled",
            output="".join(self.run.output),
            gateway=pipeline.resolver.manifest(),
        )
