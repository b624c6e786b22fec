"""Runs front: neutral events → background-run events (sans-IO).

A run's events are JSON objects ``{"event", "run_id", "seq", ...}`` with sequence
numbers 1, 2, …: ``run.started``, ``message.delta`` (one per upstream read: the text
of the batch), ``tool.started``, ``tool.completed`` (a tool call the model asks the
client to make: with the whole arguments; the agent's own tool: ``preview`` when it
starts, ``duration`` and ``error`` when it is done),
``run.completed`` (output, usage, artifact manifest), ``run.failed`` (error, output,
manifest) and ``run.cancelled``. The run executor journals them and followers read
them back as SSE (:func:`run_sse`: ``id: <seq>`` + one-line JSON), so a client that
reconnects with ``Last-Event-ID`` loses nothing and sees nothing twice. Also here: the
checks of a ``POST /v1/runs`` body and the body sent upstream.
"""

from __future__ import annotations

from typing import Any

from gateway.core.errors import GatewayError, Interrupted, RequestError, RunLogFull
from gateway.core.events import Event, Finish, Text, ToolCall, ToolProgress, Usage
from gateway.core.sse import encode_json
from gateway.fronts.chat import SAMPLING_KEYS

__all__ = ["TERMINAL", "RunEncoder", "run_messages", "run_sse", "upstream_run_body"]

TERMINAL = frozenset({"run.completed", "run.failed", "run.cancelled"})


def run_messages(body: dict[str, Any]) -> list[dict[str, Any]]:
    """The new messages of a run: ``messages`` (a list of objects) or ``input`` (a string)."""
    if "messages" in body:
        messages = body["messages"]
        if (
            not isinstance(messages, list)
            or not messages
            or not all(isinstance(m, dict) for m in messages)
        ):
            raise RequestError(
                "'messages' must be a non-empty list of objects.", code="invalid_messages"
            )
        return list(messages)
    if isinstance(body.get("input"), str) and body["input"]:
        return [{"role": "user", "content": body["input"]}]
    raise RequestError(
        "A run needs 'input' (a string) or 'messages' (a list).", code="missing_input"
    )


def upstream_run_body(
    body: dict[str, Any], model: str, messages: list[dict[str, Any]], principal_id: str
) -> dict[str, Any]:
    out: dict[str, Any] = {
        "model": model,
        "messages": messages,
        "stream": True,
        "user": principal_id,
        "stream_options": {"include_usage": True},
    }
    for key in SAMPLING_KEYS:
        if key in body:
            out[key] = body[key]
    return out


def run_sse(events: list[dict[str, Any]]) -> bytes:
    """Journaled run events as SSE, each with ``id: <seq>``."""
    return b"".join(encode_json(e, id=str(e["seq"])) for e in events)


class RunEncoder:
    """Encodes one run's neutral events into run events; ``output`` is the text so far."""

    def __init__(
        self, run_id: str, model: str, *, first_seq: int = 1, max_events: int | None = None
    ) -> None:
        self.run_id = run_id
        self.model = model
        self.seq = first_seq
        self.max_events = max_events
        #: an event was dropped because the log is full (``output`` has only what was kept)
        self.overflowed = False
        self.output: list[str] = []
        self.usage: dict[str, Any] | None = None
        self._tools: dict[int, dict[str, Any]] = {}

    def _room(self) -> bool:
        if self.max_events is not None and self.seq > self.max_events:
            self.overflowed = True
        return not self.overflowed

    def _ev(self, event: str, **fields: Any) -> dict[str, Any]:
        obj = {"event": event, "run_id": self.run_id, "seq": self.seq, **fields}
        self.seq += 1
        return obj

    def start(self) -> list[dict[str, Any]]:
        return [self._ev("run.started", model=self.model)]

    def keepalive(self) -> list[dict[str, Any]]:
        return []

    def encode(self, events: list[Event]) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = []
        text: list[str] = []
        for ev in events:
            if type(ev) is Text and ev.choice == 0 and ev.channel == "content":
                text.append(ev.text)
            elif type(ev) is ToolCall and ev.choice == 0:
                self._flush(text, out)
                self._tool(ev, out)
            elif type(ev) is ToolProgress:
                self._flush(text, out)
                self._progress(ev, out)
            elif type(ev) is Usage:
                self.usage = ev.usage
            elif type(ev) is Finish and ev.choice == 0:
                self._flush(text, out)
                self._complete_tools(out)
        self._flush(text, out)
        return out

    def _flush(self, text: list[str], out: list[dict[str, Any]]) -> None:
        if text and self._room():
            joined = "".join(text)
            self.output.append(joined)
            out.append(self._ev("message.delta", delta=joined))
        text.clear()

    def _tool(self, ev: ToolCall, out: list[dict[str, Any]]) -> None:
        state = self._tools.get(ev.index)
        if state is None:
            if not self._room():
                return
            call_id = ev.id or f"call_{ev.index}"
            state = {"id": call_id, "name": ev.name or "", "arguments": [], "done": False}
            self._tools[ev.index] = state
            out.append(self._ev("tool.started", tool_call_id=call_id, name=state["name"]))
        if ev.arguments:
            state["arguments"].append(ev.arguments)

    def _progress(self, ev: ToolProgress, out: list[dict[str, Any]]) -> None:
        """The agent's own tool: ``tool.started`` (with its preview), then
        ``tool.completed`` (its duration, and whether it failed)."""
        if not self._room():
            return
        call_id = f"tool_{ev.index}"
        if ev.status == "started":
            out.append(
                self._ev("tool.started", tool_call_id=call_id, name=ev.name, preview=ev.preview)
            )
            return
        fields: dict[str, Any] = {"error": ev.status == "failed"}
        if ev.duration is not None:
            fields["duration"] = ev.duration
        out.append(self._ev("tool.completed", tool_call_id=call_id, name=ev.name, **fields))

    def _complete_tools(self, out: list[dict[str, Any]]) -> None:
        for state in self._tools.values():
            if not state["done"] and self._room():
                state["done"] = True
                out.append(
                    self._ev(
                        "tool.completed",
                        tool_call_id=state["id"],
                        name=state["name"],
                        arguments="".join(state["arguments"]),
                    )
                )

    def _closing(self, events: list[Event]) -> list[dict[str, Any]]:
        out = self.encode(events)
        self._complete_tools(out)
        return out

    def end(self, events: list[Event], manifest: dict[str, Any]) -> list[dict[str, Any]]:
        if self.overflowed:  # the log filled up in the stream's last read
            return self.fail(events, RunLogFull(), manifest)
        out = self._closing(events)
        out.append(
            self._ev(
                "run.completed",
                output="".join(self.output),
                usage=self.usage,
                gateway=manifest,
            )
        )
        return out

    def fail(
        self, events: list[Event], error: GatewayError, manifest: dict[str, Any]
    ) -> list[dict[str, Any]]:
        out = self._closing(events)
        out.append(
            self._ev(
                "run.failed",
                error={"code": error.code, "message": error.message},
                output="".join(self.output),
                gateway=manifest,
            )
        )
        return out

    def cancel(self, events: list[Event], manifest: dict[str, Any]) -> list[dict[str, Any]]:
        out = self._closing(events)
        out.append(self._ev("run.cancelled", output="".join(self.output), gateway=manifest))
        return out

    @staticmethod
    def status_of(terminal: dict[str, Any], error: GatewayError | None = None) -> str:
        """The run status a terminal event stands for."""
        kind = terminal["event"]
        if kind == "run.completed":
            return "completed"
        if kind == "run.cancelled":
            return "cancelled"
        return "interrupted" if isinstance(error, Interrupted) else "failed"
