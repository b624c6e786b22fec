"""An agent's own Responses and runs APIs, relayed: capability detection and the stages.

Upstreams that speak only chat completions (vLLM, Ollama, LM Studio, llama.cpp) get
the gateway's ``/v1/responses`` and ``/v1/runs`` emulated over ``/chat/completions``.
The Hermes agent has its own (``POST /v1/responses``, ``POST /v1/runs`` + ``GET
/v1/runs/{id}/events``), which carry what chat does not: the tools it ran, their
results, the files they wrote. ``upstream.apis`` chooses: ``chat`` (emulate), ``native``
(relay the upstream's own), ``auto`` (native when ``GET {base_url}/capabilities``
answers the Hermes API server's capabilities document with those features).

Relayed natively, an upstream stream goes through the same machinery as a chat one:
a stage below turns its events into the neutral events (:mod:`gateway.core.events`, the
output allowlist), every string rewritten and every structural value checked by shape,
and the gateway's own fronts encode them (the client never sees an upstream id, an
upstream sequence number or a key the fronts do not write). Text is one streamed
channel (its paths held across events like a chat delta's), tool arguments and
results are rewritten whole as JSON text, and the files the agent reports writing
(:mod:`gateway.core.reports`) join the answer's manifest.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Awaitable, Callable
from typing import Any

import trio

from gateway.core.checks import JSONTooDeep, check_id, check_name, loads_bounded
from gateway.core.errors import GatewayError, UpstreamError
from gateway.core.events import Event, Finish, ToolCall, ToolProgress, ToolResult, Usage
from gateway.core.reports import paths_in, response_item_texts, run_event_texts
from gateway.core.sse import SSEEvent
from gateway.stream.pipeline import (
    MAX_TOOL_CALLS,
    STATUS_CHARS,
    ChatPipeline,
    LinkResolver,
    PipelineSettings,
    Step,
)

__all__ = [
    "NativeApis",
    "ResponsesEventsPipeline",
    "RunEventsPipeline",
    "chat_usage",
    "output_text",
]

log = logging.getLogger("gateway.native")

#: how long a capability answer is kept (a failed probe is tried again sooner)
CAPABILITIES_SECONDS = 300.0
RETRY_SECONDS = 30.0
#: how long the capabilities probe may take (every native request waits for it)
PROBE_SECONDS = 5.0
_RESPONSES = ("responses_api", "responses_streaming")
_RUNS = ("run_submission", "run_events_sse", "run_stop")


class NativeApis:
    """Which of the upstream's own APIs the gateway relays (``upstream.apis``)."""

    def __init__(
        self,
        mode: str,
        probe: Callable[[], Awaitable[dict[str, Any] | None]],
        clock: Callable[[], float] = trio.current_time,
    ) -> None:
        self.mode = mode
        self._probe = probe
        self._clock = clock
        self._known: tuple[float, frozenset[str]] | None = None
        self._lock = trio.Lock()

    async def responses(self) -> bool:
        """Relay ``/v1/responses`` to the upstream's own?"""
        return "responses" in await self._apis()

    async def runs(self) -> bool:
        """Relay ``/v1/runs`` to the upstream's own?"""
        return "runs" in await self._apis()

    async def agent(self) -> bool:
        """Is the upstream an agent whose chat streams report its tools (its own APIs are
        relayed)? Then a non-streamed chat answer is read from its stream."""
        return bool(await self._apis())

    async def _apis(self) -> frozenset[str]:
        if self.mode == "chat":
            return frozenset()
        if self.mode == "native":
            return frozenset({"responses", "runs"})
        known = self._known
        if known is not None and self._clock() < known[0]:
            return known[1]
        async with self._lock:
            known = self._known
            if known is not None and self._clock() < known[0]:
                return known[1]
            doc = None
            with trio.move_on_after(PROBE_SECONDS):  # (a document that never ends)
                doc = await self._probe()
            apis = _apis_of(doc)
            wait = CAPABILITIES_SECONDS if doc is not None else RETRY_SECONDS
            self._known = (self._clock() + wait, apis)
            if known is None or known[1] != apis:
                log.info(
                    "upstream APIs: %s",
                    "own Responses and runs relayed" if apis else "chat only (emulated)",
                )
            return apis


def _apis_of(doc: dict[str, Any] | None) -> frozenset[str]:
    """The relayable APIs a capabilities document announces (Hermes's API server)."""
    if not isinstance(doc, dict) or doc.get("object") != "hermes.api_server.capabilities":
        return frozenset()
    features = doc.get("features")
    if not isinstance(features, dict):
        return frozenset()
    apis = set()
    if all(features.get(f) is True for f in _RESPONSES):
        apis.add("responses")
    if all(features.get(f) is True for f in _RUNS):
        apis.add("runs")
    return frozenset(apis)


def chat_usage(value: object) -> dict[str, Any] | None:
    """A Responses/runs ``usage`` (``input_tokens``...) as the chat usage the neutral
    :class:`~gateway.core.events.Usage` carries (integers only)."""
    if not isinstance(value, dict):
        return None
    out: dict[str, Any] = {}
    for theirs, ours in (
        ("input_tokens", "prompt_tokens"),
        ("output_tokens", "completion_tokens"),
        ("total_tokens", "total_tokens"),
    ):
        v = value.get(theirs)
        if isinstance(v, int) and not isinstance(v, bool) and 0 <= v < 2**53:
            out[ours] = v
    return out or None


def output_text(value: object) -> str:
    """A ``function_call_output``'s ``output``: a string, or a list of text parts."""
    if isinstance(value, str):
        return value
    if isinstance(value, list):
        return "".join(
            p["text"] for p in value if isinstance(p, dict) and isinstance(p.get("text"), str)
        )
    return ""


class _NativePipeline(ChatPipeline):
    """What both native stages share: one event at a time, the first failure ending
    the step after the events before it, the reports of written files."""

    def __init__(
        self,
        resolver: LinkResolver,
        settings: PipelineSettings | None = None,
        *,
        pause: Callable[[], Awaitable[None]] | None = None,
    ) -> None:
        super().__init__(resolver, settings, pause=pause)
        self.ended = False  #: the upstream said the answer is complete
        #: the agent's own ids of this answer, never shown: masked in what it reports
        self.hidden: list[str] = []
        self._tools = 0

    async def feed(self, events: list[SSEEvent]) -> Step:
        out: list[Event] = []
        for ev in events:
            try:
                obj = loads_bounded(ev.data, self.settings.max_json_depth)
            except (JSONTooDeep, ValueError):
                obj = None
            if not isinstance(obj, dict):
                if ev.data.strip() == "[DONE]":
                    continue
                return Step(out, error=_bad("an event that is not a JSON object"))
            try:
                done = await self._event(obj, ev.event, out)
            except GatewayError as exc:
                return Step(out, error=exc)
            if self.failure is not None:
                return Step(out, error=self.failure)
            if done:
                self.ended = True
                return Step(out, done=True)
        return Step(out)

    async def _event(self, obj: dict[str, Any], name: str, out: list[Event]) -> bool:
        raise NotImplementedError

    def _report(self, texts: list[str]) -> None:
        if texts:
            self.resolver.report(paths_in(texts, self.settings.detector))

    async def _text(self, text: object, out: list[Event]) -> None:
        """A piece of the answer's text (streamed: a path may span two events)."""
        if isinstance(text, str) and text:
            await self._delta(0, self._state(0), {"content": text}, None, out)

    async def _json_text(self, text: str) -> str:
        """Tool arguments or results (JSON text) rewritten whole."""
        rw = self.rewriter(json_text=True)
        pieces = await self.feed_pieces(rw, text) + rw.flush_pieces()
        return await self.render(pieces, json_text=True)

    def _next_tool(self) -> int | None:
        if self._tools >= MAX_TOOL_CALLS:
            return None
        self._tools += 1
        return self._tools - 1

    async def _reported_error(self, message: object, code: str) -> UpstreamError:
        text = message if isinstance(message, str) and message else "the agent failed"
        text = await self.text(text, name_only=True)
        for uid in self.hidden:
            text = text.replace(uid, "<the agent's id>")
        text = text[:500]
        return UpstreamError(f"The upstream agent reported: {text}", code=code)


class ResponsesEventsPipeline(_NativePipeline):
    """An agent's own ``/v1/responses`` stream → neutral events.

    ``response.output_text.delta`` → text; a ``function_call`` item → a tool call (its
    arguments whole, or from ``function_call_arguments.delta`` events); a
    ``function_call_output`` item → a tool result; ``response.completed`` → usage and
    the end; ``response.incomplete`` → the end at the token limit; ``response.failed``
    or ``error`` → the error. ``upstream_id`` is the upstream's response id (for
    ``previous_response_id``; never sent to the client). Anything else is dropped.
    """

    def __init__(self, *args: Any, **kw: Any) -> None:
        super().__init__(*args, **kw)
        self.upstream_id: str | None = None
        self._calls: dict[str, int] = {}  # upstream item id → tool index
        self._whole: set[str] = set()  # calls whose arguments came whole
        self._results: set[str] = set()  # output items relayed
        self._streamed = False

    async def _event(self, obj: dict[str, Any], name: str, out: list[Event]) -> bool:
        kind = obj.get("type") if isinstance(obj.get("type"), str) else name
        if kind in ("response.created", "response.in_progress"):
            resp = obj.get("response")
            if self.upstream_id is None and isinstance(resp, dict):
                self.upstream_id = check_id(resp.get("id"))
                if self.upstream_id is not None:
                    self.hidden.append(self.upstream_id)
        elif kind in ("response.output_item.added", "response.output_item.done"):
            item = obj.get("item")
            if isinstance(item, dict):
                await self._item(item, out)
        elif kind == "response.output_text.delta":
            self._streamed = True
            await self._text(obj.get("delta"), out)
        elif kind == "response.function_call_arguments.delta":
            await self._arguments(obj, out)
        elif kind in ("response.completed", "response.incomplete"):
            return await self._end(obj, kind, out)
        elif kind in ("response.failed", "error"):
            resp = obj.get("response")
            err = resp.get("error") if isinstance(resp, dict) else obj.get("error", obj)
            message = err.get("message") if isinstance(err, dict) else err
            raise await self._reported_error(message, "upstream_error")
        return False

    async def _item(self, item: dict[str, Any], out: list[Event]) -> None:
        kind = item.get("type")
        item_id = item.get("id") if isinstance(item.get("id"), str) else None
        if kind == "function_call":
            await self._call(item, item_id, out)
        elif kind == "function_call_output" and item_id not in self._results:
            if item_id is not None:
                self._results.add(item_id)
            self._report(response_item_texts(item))
            call_id = check_id(item.get("call_id")) or "call_unknown"
            out.append(ToolResult(call_id, await self._json_text(output_text(item.get("output")))))

    async def _call(self, item: dict[str, Any], item_id: str | None, out: list[Event]) -> None:
        key = item_id or str(item.get("call_id"))
        index = self._calls.get(key)
        if index is None:
            index = self._next_tool()
            if index is None:
                return
            self._calls[key] = index
            self._report(response_item_texts(item))
            name = check_name(item.get("name")) or "tool"
            call_id = check_id(item.get("call_id")) or f"call_{index}"
            out.append(ToolCall(0, index, "", call_id, name))
        args = item.get("arguments")
        if key not in self._whole and isinstance(args, str) and args:
            self._whole.add(key)
            out.append(ToolCall(0, index, await self._json_text(args)))

    async def _arguments(self, obj: dict[str, Any], out: list[Event]) -> None:
        key = obj.get("item_id")
        index = self._calls.get(key) if isinstance(key, str) else None
        delta = obj.get("delta")
        if index is None or key in self._whole or not isinstance(delta, str) or not delta:
            return
        call = {"index": index, "function": {"arguments": delta}}
        await self._tool_call(0, self._state(0), call, out)

    async def _end(self, obj: dict[str, Any], kind: str, out: list[Event]) -> bool:
        resp = obj.get("response")
        resp = resp if isinstance(resp, dict) else {}
        if not self._streamed:  # a stream without deltas: the text of the final object
            for item in resp.get("output") or ():
                if isinstance(item, dict) and item.get("type") == "message":
                    for part in item.get("content") or ():
                        if isinstance(part, dict) and part.get("type") == "output_text":
                            await self._text(part.get("text"), out)
        usage = chat_usage(resp.get("usage"))
        if usage is not None:
            out.append(Usage(usage))
        reason = "length" if kind == "response.incomplete" else "stop"
        await self._flush_choice(0, self._state(0), out, name_only=False)
        out.append(Finish(0, reason))
        return True


class RunEventsPipeline(_NativePipeline):
    """An agent's own run events (Hermes's ``GET /v1/runs/{id}/events``) → neutral events.

    ``message.delta`` → text; ``tool.started`` / ``tool.completed`` → the agent's tool
    progress (a completed tool matched to the earliest started one of its name);
    ``run.completed`` → usage and the end (a ``tool.started`` preview keeps every path
    as its name: a status line, not a link); ``run.failed`` → the error; ``run.cancelled``
    → the error ``upstream_cancelled`` (a stop asked through the gateway ends the run
    as cancelled before it comes). ``reasoning.available`` (Hermes: the final text
    again) and anything else are dropped.
    """

    def __init__(self, *args: Any, **kw: Any) -> None:
        super().__init__(*args, **kw)
        self._open: list[tuple[str, int]] = []  # started tools not done yet
        self._streamed = False

    async def _event(self, obj: dict[str, Any], name: str, out: list[Event]) -> bool:
        kind = obj.get("event")
        if kind == "message.delta":
            self._streamed = True
            await self._text(obj.get("delta"), out)
        elif kind == "tool.started":
            await self._started(obj, out)
        elif kind == "tool.completed":
            self._completed(obj, out)
        elif kind == "run.completed":
            if not self._streamed:
                await self._text(obj.get("output"), out)
            usage = chat_usage(obj.get("usage"))
            if usage is not None:
                out.append(Usage(usage))
            await self._flush_choice(0, self._state(0), out, name_only=False)
            out.append(Finish(0, "stop"))
            return True
        elif kind == "run.failed":
            raise await self._reported_error(obj.get("error"), "upstream_error")
        elif kind == "run.cancelled":
            raise UpstreamError("The upstream agent cancelled the run.", code="upstream_cancelled")
        return False

    async def _started(self, obj: dict[str, Any], out: list[Event]) -> None:
        name = check_name(obj.get("tool"))
        index = self._next_tool() if name is not None else None
        if name is None or index is None:
            return
        self._report(run_event_texts(obj))
        preview = obj.get("preview")  # a status line: every path its name, never a link
        text = self.names(preview, STATUS_CHARS) if isinstance(preview, str) else ""
        self._open.append((name, index))
        out.append(ToolProgress(index, name, "started", text))

    def _completed(self, obj: dict[str, Any], out: list[Event]) -> None:
        name = check_name(obj.get("tool"))
        match = next((i for i, (n, _) in enumerate(self._open) if n == name), None)
        if name is None or match is None:
            return
        _, index = self._open.pop(match)
        seconds = _seconds(obj.get("duration"))
        status = "failed" if obj.get("error") is True else "completed"
        out.append(ToolProgress(index, name, status, duration=seconds))


def _seconds(value: object) -> float | None:
    """A duration in seconds: a finite, non-negative number, else None."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value) if math.isfinite(value) and value >= 0 else None


def _bad(what: str) -> UpstreamError:
    return UpstreamError(
        f"The upstream agent sent {what} in its event stream.", code="upstream_bad_response"
    )
