"""Responses-API front: the pipeline's chunks as OpenAI Responses stream events.

Sequence (every event carries ``sequence_number``): ``response.created``,
``response.in_progress``, ``response.output_item.added`` (the assistant message,
output_index 0), ``response.content_part.added``, ``response.output_text.delta``…,
then per tool call a ``function_call`` item (``output_item.added``,
``function_call_arguments.delta``…, ``.done``, ``output_item.done``), and at the end
``response.output_text.done``, ``response.content_part.done``,
``response.output_item.done`` and ``response.completed`` (or ``response.failed``).
The done/completed events carry the rewritten text and the artifact manifest
(``response.gateway``), never a raw path.
"""

from __future__ import annotations

import secrets
import time
from typing import Any

from gateway.pipeline import ChatPipeline, Named, Out
from gateway.sse import encode_comment, encode_json


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
                raise ValueError(f"unsupported input role {role!r}.")
            out.append({"role": role, "content": _text_of(item.get("content"))})
        elif kind == "function_call_output":
            out.append({"role": "user", "content": f"[tool output] {_text_of(item.get('output'))}"})
        else:
            raise ValueError(f"unsupported input item type {kind!r}.")
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


def usage_from_chat(usage: Any) -> dict[str, Any] | None:
    if not isinstance(usage, dict):
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
        self.done = False

    def item(self, status: str) -> dict[str, Any]:
        return {
            "id": self.item_id,
            "type": "function_call",
            "status": status,
            "call_id": self.call_id,
            "name": self.name,
            "arguments": "".join(self.arguments),
        }


class ResponsesSink:
    """Encodes one Responses stream; also builds the final response object."""

    def __init__(self, response_id: str, model: str, *, created_at: int | None = None) -> None:
        self.response_id = response_id
        self.model = model
        self.created_at = created_at if created_at is not None else int(time.time())
        self.msg_id = "msg_" + secrets.token_hex(12)
        self._seq = 0
        self._text: list[str] = []
        self._calls: dict[int, _Call] = {}
        self._next_index = 1
        self.usage: dict[str, Any] | None = None
        self.final: dict[str, Any] | None = None  # the completed/failed response object

    def _ev(self, kind: str, **fields: Any) -> bytes:
        obj = {"type": kind, "sequence_number": self._seq, **fields}
        self._seq += 1
        return encode_json(obj, event=kind)

    def envelope(self, status: str, output: list[dict[str, Any]] | None = None) -> dict[str, Any]:
        return {
            "id": self.response_id,
            "object": "response",
            "created_at": self.created_at,
            "status": status,
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
            [{"type": "output_text", "text": "".join(self._text), "annotations": []}]
            if status == "completed"
            else []
        )
        return {
            "id": self.msg_id,
            "type": "message",
            "status": status,
            "role": "assistant",
            "content": content,
        }

    def start(self) -> bytes:
        env = self.envelope("in_progress")
        return b"".join(
            [
                self._ev("response.created", response=env),
                self._ev("response.in_progress", response=env),
                self._ev(
                    "response.output_item.added", output_index=0, item=self._message("in_progress")
                ),
                self._ev(
                    "response.content_part.added",
                    item_id=self.msg_id,
                    output_index=0,
                    content_index=0,
                    part={"type": "output_text", "text": "", "annotations": []},
                ),
            ]
        )

    def keepalive(self) -> bytes:
        return encode_comment()

    def batch(self, outs: list[Out]) -> bytes:
        parts: list[bytes] = []
        for out in outs:
            if isinstance(out, Named):
                continue  # unknown upstream events are not part of the Responses protocol
            if isinstance(out.get("usage"), dict):
                self.usage = usage_from_chat(out["usage"])
            for choice in out.get("choices") or ():
                if not isinstance(choice, dict) or choice.get("index", 0) != 0:
                    continue
                delta = choice.get("delta") or {}
                text = delta.get("content")
                if isinstance(text, str) and text:
                    self._text.append(text)
                    parts.append(
                        self._ev(
                            "response.output_text.delta",
                            item_id=self.msg_id,
                            output_index=0,
                            content_index=0,
                            delta=text,
                        )
                    )
                for call in delta.get("tool_calls") or ():
                    if isinstance(call, dict):
                        parts.extend(self._tool_delta(call))
        return b"".join(parts)

    def _tool_delta(self, call: dict[str, Any]) -> list[bytes]:
        idx = call.get("index", 0)
        fn = call.get("function") or {}
        out: list[bytes] = []
        state = self._calls.get(idx)
        if state is None:
            state = _Call(
                self._next_index,
                call.get("id") or "call_" + secrets.token_hex(8),
                fn.get("name") or "",
            )
            self._next_index += 1
            self._calls[idx] = state
            out.append(
                self._ev(
                    "response.output_item.added",
                    output_index=state.output_index,
                    item=state.item("in_progress"),
                )
            )
        args = fn.get("arguments")
        if isinstance(args, str) and args:
            state.arguments.append(args)
            out.append(
                self._ev(
                    "response.function_call_arguments.delta",
                    item_id=state.item_id,
                    output_index=state.output_index,
                    delta=args,
                )
            )
        return out

    def _close_items(self) -> tuple[list[bytes], list[dict[str, Any]]]:
        parts: list[bytes] = []
        text = "".join(self._text)
        part = {"type": "output_text", "text": text, "annotations": []}
        parts.append(
            self._ev(
                "response.output_text.done",
                item_id=self.msg_id,
                output_index=0,
                content_index=0,
                text=text,
            )
        )
        parts.append(
            self._ev(
                "response.content_part.done",
                item_id=self.msg_id,
                output_index=0,
                content_index=0,
                part=part,
            )
        )
        message = self._message("completed")
        parts.append(self._ev("response.output_item.done", output_index=0, item=message))
        output = [message]
        for call in sorted(self._calls.values(), key=lambda c: c.output_index):
            args = "".join(call.arguments)
            parts.append(
                self._ev(
                    "response.function_call_arguments.done",
                    item_id=call.item_id,
                    output_index=call.output_index,
                    arguments=args,
                )
            )
            item = call.item("completed")
            parts.append(
                self._ev("response.output_item.done", output_index=call.output_index, item=item)
            )
            output.append(item)
        return parts, output

    async def end(self, pipeline: ChatPipeline) -> bytes:
        flushed = self.batch(list(await pipeline.finish()))
        parts, output = self._close_items()
        env = self.envelope("completed", output)
        env["usage"] = self.usage
        env["output_text"] = "".join(self._text)
        env["gateway"] = pipeline.resolver.manifest()
        self.final = env
        return flushed + b"".join(parts) + self._ev("response.completed", response=env)

    async def fail(self, pipeline: ChatPipeline, code: str, message: str) -> bytes:
        flushed = self.batch(list(await pipeline.finish(failed=True)))
        env = self.envelope("failed", [self._message("incomplete")])
        env["error"] = {"code": code, "message": message}
        env["output_text"] = "".join(self._text)
        env["gateway"] = pipeline.resolver.manifest()
        self.final = env
        return flushed + self._ev("response.failed", response=env)

    def text(self) -> str:
        return "".join(self._text)


def response_from_completion(
    sink: ResponsesSink, completion: dict[str, Any], manifest: dict[str, Any]
) -> dict[str, Any]:
    """A non-streaming Responses object from a (rewritten) chat completion."""
    text = ""
    output: list[dict[str, Any]] = []
    for choice in completion.get("choices") or ():
        if isinstance(choice, dict) and choice.get("index", 0) == 0:
            msg = choice.get("message") or {}
            text = msg.get("content") or ""
            for i, call in enumerate(msg.get("tool_calls") or ()):
                fn = call.get("function") or {}
                output.append(
                    {
                        "id": f"fc_{i}_{sink.response_id[-8:]}",
                        "type": "function_call",
                        "status": "completed",
                        "call_id": call.get("id") or f"call_{i}",
                        "name": fn.get("name") or "",
                        "arguments": fn.get("arguments") or "",
                    }
                )
    sink._text = [text]
    message = sink._message("completed")
    env = sink.envelope("completed", [message, *output])
    env["usage"] = usage_from_chat(completion.get("usage"))
    env["output_text"] = text
    env["gateway"] = manifest
    sink.final = env
    return env
