"""Responses-API front: neutral events → OpenAI Responses stream events (sans-IO).

Sequence (every event carries ``sequence_number``): ``response.created``,
``response.in_progress``, ``response.output_item.added`` (the assistant message,
output_index 0), ``response.content_part.added``, ``response.output_text.delta``…,
then per tool call a ``function_call`` item (``output_item.added``,
``function_call_arguments.delta``…) and, when the agent ran the tool itself (an
agent's native Responses API), its ``function_call_output`` item once the result is
there (the call's ``.done`` events first), and at the end
``response.output_text.done``, ``response.content_part.done``,
``response.output_item.done``, the open function calls' ``.done`` events, and
``response.completed`` — or ``response.incomplete`` when the
model stopped at its token limit or a content filter, or ``response.failed``. The
done/completed events carry the rewritten text and the artifact manifest
(``response.gateway``), never a raw path.

The encoder builds event *objects* (:meth:`ResponsesEncoder.events`), which a
background response journals as they are, and :meth:`ResponsesEncoder.encode` writes
the same objects as SSE for a live stream. Also here: ``input`` → chat messages and
the body sent upstream.
"""

from __future__ import annotations

import secrets
import time
from collections.abc import Callable
from typing import Any

from gateway.core.errors import GatewayError, RequestError
from gateway.core.events import Event, Finish, Text, TextLog, ToolCall, ToolResult, Usage
from gateway.core.sse import encode_comment, encode_json

__all__ = [
    "ResponsesEncoder",
    "ResponsesJournalFront",
    "chat_messages_from_input",
    "check_options",
    "interrupted_response",
    "journal_response_sse",
    "new_response_id",
    "response_sse",
    "upstream_responses_body",
    "usage_from_chat",
]

_INCOMPLETE = {"length": "max_output_tokens", "content_filter": "content_filter"}


def new_response_id() -> str:
    return "resp_" + secrets.token_hex(16)


def chat_messages_from_input(value: Any) -> list[dict[str, Any]]:
    """Responses ``input`` (a string or a list of items) → chat ``messages``."""
    if isinstance(value, str):
        return [{"role": "user", "content": value}]
    if not isinstance(value, list):
        raise ValueError("'input' must be a string or a list of input items.")
    out: list[dict[str, Any]] = []
    for item in value:
        if not isinstance(item, dict):
            raise ValueError("every input item must be an object.")
        kind = item.get("type", "message")
        if kind == "message" or "role" in item:
            role = item.get("role", "user")
            if role == "developer":
                role = "system"
            if role not in ("user", "assistant", "system"):
                raise ValueError("an input item's role must be user, assistant or system.")
            out.append({"role": role, "content": _text_of(item.get("content"))})
        elif kind == "function_call_output":
            out.append({"role": "user", "content": f"[tool output] {_text_of(item.get('output'))}"})
        else:
            raise ValueError("input items must be messages or function_call_output.")
    if not out:
        raise ValueError("'input' must not be empty.")
    return out


def _text_of(content: Any) -> str:
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = []
        for part in content:
            if isinstance(part, dict) and isinstance(part.get("text"), str):
                parts.append(part["text"])
            elif isinstance(part, str):
                parts.append(part)
        return "".join(parts)
    raise ValueError("message content must be a string or a list of text parts.")


def upstream_responses_body(
    body: dict[str, Any], messages: list[dict[str, Any]], principal_id: str, *, stream: bool
) -> dict[str, Any]:
    """The chat-completions body sent upstream for a Responses request."""
    instructions = body.get("instructions")
    system = (
        [{"role": "system", "content": instructions}]
        if isinstance(instructions, str) and instructions
        else []
    )
    out: dict[str, Any] = {
        "model": body["model"],
        "messages": [*system, *messages],
        "stream": stream,
        "user": principal_id,
    }
    for key in ("temperature", "top_p"):
        if key in body:
            out[key] = body[key]
    max_out = body.get("max_output_tokens")
    if isinstance(max_out, int) and not isinstance(max_out, bool):
        out["max_tokens"] = max_out
    if stream:
        out["stream_options"] = {"include_usage": True}
    return out


#: the options of a Responses request or a run the gateway passes on: their ranges
_NUMBERS = {"temperature": (0.0, 2.0), "top_p": (0.0, 1.0)}
MAX_OUTPUT_TOKENS = 2**31 - 1


def check_options(body: dict[str, Any]) -> None:
    """``instructions`` (a string), ``temperature`` (0–2), ``top_p`` (0–1) and
    ``max_output_tokens`` (a positive integer), where given (null: not given), as the
    upstream is sent them: anything else is a 400 ``invalid_request`` here, not the
    agent's error (or its traceback) later."""
    value = body.get("instructions")
    if value is not None and not isinstance(value, str):
        raise RequestError("'instructions' must be a string.", code="invalid_request")
    for key, (low, high) in _NUMBERS.items():
        value = body.get(key)
        if value is None:
            continue
        if (
            isinstance(value, bool)
            or not isinstance(value, int | float)
            or not low <= value <= high
        ):
            raise RequestError(
                f"'{key}' must be a number from {low:g} to {high:g}.", code="invalid_request"
            )
    value = body.get("max_output_tokens")
    if value is not None and (
        isinstance(value, bool) or not isinstance(value, int) or not 0 < value <= MAX_OUTPUT_TOKENS
    ):
        raise RequestError(
            "'max_output_tokens' must be a positive integer.", code="invalid_request"
        )


def validate_responses_body(body: dict[str, Any]) -> tuple[bool, bool, list[dict[str, Any]]]:
    """Check a ``POST /v1/responses`` body; return ``(stream, store, new messages)``."""
    model = body.get("model")
    if not isinstance(model, str) or not model:
        raise RequestError("'model' must be a non-empty string.", code="missing_model")
    stream = body.get("stream", False)
    store = body.get("store", True)
    if not isinstance(stream, bool) or not isinstance(store, bool):
        raise RequestError("'stream' and 'store' must be true or false.", code="invalid_request")
    check_options(body)
    if "input" not in body:
        raise RequestError(
            "'input' is required (a string or a list of items).", code="missing_input"
        )
    try:
        messages = chat_messages_from_input(body["input"])
    except ValueError as exc:
        raise RequestError(str(exc), code="invalid_input") from exc
    return stream, store, messages


def usage_from_chat(usage: dict[str, Any] | None) -> dict[str, Any] | None:
    if usage is None:
        return None
    i = int(usage.get("prompt_tokens", 0) or 0)
    o = int(usage.get("completion_tokens", 0) or 0)
    return {
        "input_tokens": i,
        "input_tokens_details": {"cached_tokens": 0},
        "output_tokens": o,
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": int(usage.get("total_tokens", i + o) or 0),
    }


class _Call:
    def __init__(self, output_index: int, call_id: str, name: str) -> None:
        self.output_index = output_index
        self.item_id = "fc_" + secrets.token_hex(12)
        self.call_id = call_id
        self.name = name
        self.arguments: list[str] = []
        self.closed = False

    def item(self, status: str) -> dict[str, Any]:
        return {
            "id": self.item_id,
            "type": "function_call",
            "status": status,
            "call_id": self.call_id,
            "name": self.name,
            "arguments": "".join(self.arguments),
        }


def response_sse(objs: list[dict[str, Any]]) -> bytes:
    """Responses event objects as SSE (``event: <type>`` + one-line JSON; a journal's
    ``seq`` is not part of the protocol and is left out)."""
    return b"".join(
        encode_json(
            {k: v for k, v in o.items() if k != "seq"} if "seq" in o else o, event=o["type"]
        )
        for o in objs
    )


def interrupted_response(
    response_id: str, model: str, created_at: int, error: dict[str, Any]
) -> dict[str, Any]:
    """The response object of a background response whose instance stopped (its lease
    expired): status ``failed`` with the interruption ``error`` (an OpenAI status; the
    journal's ``interrupted`` is the gateway's own word for it)."""
    env = ResponsesEncoder(response_id, model, created_at=created_at, background=True).envelope(
        "failed"
    )
    env["error"] = dict(error)
    return env


def journal_response_sse(
    response_id: str, model: str, created_at: int
) -> Callable[[list[dict[str, Any]]], bytes]:
    """:func:`response_sse` for a background response's journal. Every event in it is a
    Responses event, except the one terminal event the store writes itself when the
    instance running the response stopped: ``{"event": "run.failed", "seq", "error"}``
    (:meth:`~gateway.store.Store.interrupt_expired_runs`, the same for runs and
    responses). It goes out as ``response.failed`` with ``sequence_number`` = ``seq -
    1``, like every journaled Responses event."""

    def encode(objs: list[dict[str, Any]]) -> bytes:
        out = []
        for o in objs:
            if "type" not in o:
                error = o.get("error")
                env = interrupted_response(
                    response_id, model, created_at, error if isinstance(error, dict) else {}
                )
                o = {
                    "type": "response.failed",
                    "sequence_number": int(o["seq"]) - 1,
                    "response": env,
                }
            out.append(o)
        return response_sse(out)

    return encode


class ResponsesEncoder:
    """Encodes one Responses stream; ``final`` is the response object once it ended."""

    def __init__(
        self,
        response_id: str,
        model: str,
        *,
        created_at: int | None = None,
        background: bool = False,
    ) -> None:
        self.response_id = response_id
        self.model = model
        self.created_at = created_at if created_at is not None else int(time.time())
        self.background = background
        self.msg_id = "msg_" + secrets.token_hex(12)
        self.seq = 0
        self._text = TextLog()
        self._calls: dict[int, _Call] = {}
        #: items closed before the end (calls with their result, the results), in order
        self._items: list[tuple[int, dict[str, Any]]] = []
        self._next_index = 1
        self._reason: str | None = None
        self.usage: dict[str, Any] | None = None
        self.final: dict[str, Any] | None = None

    def _ev(self, kind: str, **fields: Any) -> dict[str, Any]:
        obj = {"type": kind, "sequence_number": self.seq, **fields}
        self.seq += 1
        return obj

    def envelope(self, status: str, output: list[dict[str, Any]] | None = None) -> dict[str, Any]:
        return {
            "id": self.response_id,
            "object": "response",
            "created_at": self.created_at,
            "status": status,
            "background": self.background,
            "model": self.model,
            "output": output or [],
            "parallel_tool_calls": True,
            "tool_choice": "auto",
            "tools": [],
            "error": None,
            "incomplete_details": None,
            "usage": None,
        }

    def _message(self, status: str) -> dict[str, Any]:
        content = (
            [{"type": "output_text", "text": self._text.text(), "annotations": []}]
            if status != "in_progress"
            else []
        )
        return {
            "id": self.msg_id,
            "type": "message",
            "status": status,
            "role": "assistant",
            "content": content,
        }

    # -- event objects -------------------------------------------------------------

    def start_events(self) -> list[dict[str, Any]]:
        env = self.envelope("queued" if self.background else "in_progress")
        part = {"type": "output_text", "text": "", "annotations": []}
        return [
            self._ev("response.created", response=env),
            self._ev("response.in_progress", response=self.envelope("in_progress")),
            self._ev(
                "response.output_item.added", output_index=0, item=self._message("in_progress")
            ),
            self._ev(
                "response.content_part.added",
                item_id=self.msg_id,
                output_index=0,
                content_index=0,
                part=part,
            ),
        ]

    def events(self, events: list[Event]) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = []
        for ev in events:
            if type(ev) is Text and ev.choice == 0 and ev.channel == "content":
                self._text.append(ev.text)
                out.append(
                    self._ev(
                        "response.output_text.delta",
                        item_id=self.msg_id,
                        output_index=0,
                        content_index=0,
                        delta=ev.text,
                    )
                )
            elif type(ev) is ToolCall and ev.choice == 0:
                out.extend(self._tool(ev))
            elif type(ev) is ToolResult:
                out.extend(self._result(ev))
            elif type(ev) is Usage:
                self.usage = usage_from_chat(ev.usage)
            elif type(ev) is Finish and ev.choice == 0:
                self._reason = ev.reason
        return out

    def _tool(self, ev: ToolCall) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = []
        state = self._calls.get(ev.index)
        if state is None:
            call_id = ev.id or "call_" + secrets.token_hex(8)
            state = self._calls[ev.index] = _Call(self._next_index, call_id, ev.name or "")
            self._next_index += 1
            out.append(
                self._ev(
                    "response.output_item.added",
                    output_index=state.output_index,
                    item=state.item("in_progress"),
                )
            )
        if ev.arguments:
            state.arguments.append(ev.arguments)
            out.append(
                self._ev(
                    "response.function_call_arguments.delta",
                    item_id=state.item_id,
                    output_index=state.output_index,
                    delta=ev.arguments,
                )
            )
        return out

    def _close_call(self, call: _Call) -> list[dict[str, Any]]:
        call.closed = True
        item = call.item("completed")
        self._items.append((call.output_index, item))
        return [
            self._ev(
                "response.function_call_arguments.done",
                item_id=call.item_id,
                output_index=call.output_index,
                arguments="".join(call.arguments),
            ),
            self._ev("response.output_item.done", output_index=call.output_index, item=item),
        ]

    def _result(self, ev: ToolResult) -> list[dict[str, Any]]:
        """A tool's output: its call's ``.done`` events, then the output item."""
        out: list[dict[str, Any]] = []
        for call in self._calls.values():
            if call.call_id == ev.call_id and not call.closed:
                out += self._close_call(call)
        index = self._next_index
        self._next_index += 1
        item = {
            "id": "fco_" + secrets.token_hex(12),
            "type": "function_call_output",
            "call_id": ev.call_id,
            "output": ev.output,
            "status": "completed",
        }
        self._items.append((index, item))
        out.append(self._ev("response.output_item.added", output_index=index, item=item))
        out.append(self._ev("response.output_item.done", output_index=index, item=item))
        return out

    def _close_items(self, status: str) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
        text = self._text.text()
        part = {"type": "output_text", "text": text, "annotations": []}
        ids = {"item_id": self.msg_id, "output_index": 0, "content_index": 0}
        message = self._message(status)
        out = [
            self._ev("response.output_text.done", **ids, text=text),
            self._ev("response.content_part.done", **ids, part=part),
            self._ev("response.output_item.done", output_index=0, item=message),
        ]
        for call in sorted(self._calls.values(), key=lambda c: c.output_index):
            if not call.closed:
                out += self._close_call(call)
        output = [message, *(item for _, item in sorted(self._items, key=lambda x: x[0]))]
        return out, output

    def end_events(self, events: list[Event], manifest: dict[str, Any]) -> list[dict[str, Any]]:
        out = self.events(events)
        incomplete = _INCOMPLETE.get(self._reason or "")
        status = "incomplete" if incomplete else "completed"
        closing, output = self._close_items(status)
        env = self.envelope(status, output)
        env["usage"] = self.usage
        env["output_text"] = self._text.text()
        env["gateway"] = manifest
        if incomplete:
            env["incomplete_details"] = {"reason": incomplete}
        self.final = env
        return [*out, *closing, self._ev(f"response.{status}", response=env)]

    def fail_events(
        self, events: list[Event], error: GatewayError, manifest: dict[str, Any]
    ) -> list[dict[str, Any]]:
        out = self.events(events)
        env = self.envelope("failed", [self._message("incomplete")])
        env["error"] = {"code": error.code, "message": error.message}
        env["output_text"] = self._text.text()
        env["gateway"] = manifest
        self.final = env
        return [*out, self._ev("response.failed", response=env)]

    def cancel_events(self, events: list[Event], manifest: dict[str, Any]) -> list[dict[str, Any]]:
        out = self.events(events)
        env = self.envelope("cancelled", [self._message("incomplete")])
        env["output_text"] = self._text.text()
        env["gateway"] = manifest
        self.final = env
        return [*out, self._ev("response.cancelled", response=env)]

    # -- SSE (a live stream) -------------------------------------------------------

    def start(self) -> bytes:
        return response_sse(self.start_events())

    def keepalive(self) -> bytes:
        return encode_comment()

    def encode(self, events: list[Event]) -> bytes:
        return response_sse(self.events(events))

    def end(self, events: list[Event], manifest: dict[str, Any]) -> bytes:
        return response_sse(self.end_events(events, manifest))

    def fail(self, events: list[Event], error: GatewayError, manifest: dict[str, Any]) -> bytes:
        return response_sse(self.fail_events(events, error, manifest))

    def text(self) -> str:
        return self._text.text()


class ResponsesJournalFront:
    """:class:`ResponsesEncoder` for a background response: event objects for the journal,
    each with the journal's ``seq`` (``sequence_number`` + 1, so that ``starting_after=N``
    is the journal position ``N + 1``)."""

    def __init__(self, enc: ResponsesEncoder) -> None:
        self.enc = enc

    @staticmethod
    def _journaled(objs: list[dict[str, Any]]) -> list[dict[str, Any]]:
        for o in objs:
            o["seq"] = o["sequence_number"] + 1
        return objs

    def start(self) -> list[dict[str, Any]]:
        return self._journaled(self.enc.start_events())

    def keepalive(self) -> list[dict[str, Any]]:
        return []

    def encode(self, events: list[Event]) -> list[dict[str, Any]]:
        return self._journaled(self.enc.events(events))

    def end(self, events: list[Event], manifest: dict[str, Any]) -> list[dict[str, Any]]:
        return self._journaled(self.enc.end_events(events, manifest))

    def fail(
        self, events: list[Event], error: GatewayError, manifest: dict[str, Any]
    ) -> list[dict[str, Any]]:
        return self._journaled(self.enc.fail_events(events, error, manifest))

    def cancel(self, events: list[Event], manifest: dict[str, Any]) -> list[dict[str, Any]]:
        return self._journaled(self.enc.cancel_events(events, manifest))
