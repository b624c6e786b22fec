"""Chat-completions front: neutral events → ``chat.completion.chunk`` SSE (sans-IO).

Wire shape (what Open WebUI and openai-python both accept): one-line JSON ``data``,
LF endings, keep-alives as bare ``:`` comment lines, a final chunk with
``finish_reason``, then ``data: [DONE]``. The *terminal* chunk (the last JSON chunk
before ``[DONE]``) carries the artifact manifest under ``"gateway"``: the encoder
keeps :class:`~gateway.core.events.Finish` and :class:`~gateway.core.events.Usage` events (they
carry no text) until the end, so it knows which chunk is last; text is never held.
On failure: a final chunk with ``finish_reason: "error"`` and an ``error`` object,
then ``[DONE]``. The encoder only encodes what it is handed; it never calls back
into the pipeline. Also here: the checks of a chat request and the body sent upstream.
"""

from __future__ import annotations

import json
from typing import Any

from gateway.core.errors import GatewayError, RequestError
from gateway.core.events import (
    BOUNDARY,
    Boundary,
    Event,
    Extra,
    Finish,
    Logprobs,
    Meta,
    Named,
    Role,
    Text,
    TextLog,
    ToolCall,
    ToolProgress,
    ToolResult,
    Usage,
)
from gateway.core.sse import DONE, UNPAIRED, encode_comment, encode_json

__all__ = [
    "GATEWAY_BODY_KEYS",
    "SAMPLING_KEYS",
    "ChatEncoder",
    "completion_object",
    "upstream_chat_body",
    "validate_chat_body",
]

#: sampling parameters passed on to the upstream as given (runs and the proxy too)
SAMPLING_KEYS = (
    "temperature",
    "top_p",
    "max_tokens",
    "max_completion_tokens",
    "stop",
    "seed",
    "presence_penalty",
    "frequency_penalty",
)
#: request-body keys that are the gateway's, not the upstream's
GATEWAY_BODY_KEYS = ("download_link_mode", "session_id")

_JSON = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"))
_FAST_TAIL = b'},"finish_reason":null}]}\n\n'


def validate_chat_body(body: dict[str, Any]) -> bool:
    """Check the fields the gateway relies on; return ``stream``."""
    model = body.get("model")
    if not isinstance(model, str) or not model:
        raise RequestError("'model' must be a non-empty string.", code="missing_model")
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise RequestError("'messages' must be a non-empty list.", code="missing_messages")
    if not all(isinstance(m, dict) for m in messages):
        raise RequestError("Every entry of 'messages' must be an object.", code="invalid_messages")
    stream = body.get("stream", False)
    if not isinstance(stream, bool):
        raise RequestError("'stream' must be true or false.", code="invalid_stream")
    return stream


def upstream_chat_body(body: dict[str, Any], principal_id: str) -> dict[str, Any]:
    """The body sent upstream: the client's, minus the gateway's own keys, plus ``user``."""
    out = {k: v for k, v in body.items() if k not in GATEWAY_BODY_KEYS}
    out["user"] = principal_id
    return out


class _Chunk:
    """Builds one ``chat.completion.chunk`` from consecutive events."""

    __slots__ = ("choices", "extra", "meta")

    def __init__(self, meta: Meta) -> None:
        self.meta = meta
        self.choices: dict[int, dict[str, Any]] = {}
        self.extra: dict[str, Any] = {}

    def choice(self, idx: int) -> dict[str, Any]:
        c = self.choices.get(idx)
        if c is None:
            c = self.choices[idx] = {"index": idx, "delta": {}, "finish_reason": None}
        return c

    def to_dict(self) -> dict[str, Any]:
        return chunk_dict(self.meta, list(self.choices.values()), self.extra)


def chunk_dict(meta: Meta, choices: list[dict[str, Any]], extra: dict[str, Any]) -> dict[str, Any]:
    obj: dict[str, Any] = {
        **extra,
        "id": meta.id,
        "object": "chat.completion.chunk",
        "created": meta.created,
        "model": meta.model,
    }
    if meta.system_fingerprint is not None:
        obj["system_fingerprint"] = meta.system_fingerprint
    obj["choices"] = choices
    return obj


def _add(chunk: _Chunk, ev: Event) -> bool:
    """Put ``ev`` into ``chunk``; False when it needs a chunk of its own (start a new one)."""
    if type(ev) is Text:
        delta = chunk.choice(ev.choice)["delta"]
        delta[ev.channel] = delta.get(ev.channel, "") + ev.text
    elif type(ev) is Role:
        delta = chunk.choice(ev.choice)["delta"]
        if "role" in delta or len(delta) > 0:
            return False
        delta["role"] = ev.role
    elif type(ev) is ToolCall:
        return _add_tool(chunk.choice(ev.choice)["delta"], ev)
    elif type(ev) is Logprobs:
        c = chunk.choice(ev.choice)
        raw = ev.text.encode("utf-8", UNPAIRED)  # as the text goes on the wire
        entry = {"token": ev.text, "logprob": ev.logprob, "bytes": list(raw)}
        entry["top_logprobs"] = []
        c.setdefault("logprobs", {"content": []})["content"].append(entry)
    elif type(ev) is Extra:
        if any(k in chunk.extra for k in ev.data):
            return False
        chunk.extra.update(ev.data)
    return True


def _add_tool(delta: dict[str, Any], ev: ToolCall) -> bool:
    if ev.legacy:
        fc = delta.get("function_call")
        if fc is None:
            fc = delta["function_call"] = {"arguments": ""}
            if ev.name is not None:
                fc["name"] = ev.name
        elif ev.name is not None:
            return False
        fc["arguments"] += ev.arguments
        return True
    calls = delta.setdefault("tool_calls", [])
    for call in calls:
        if call["index"] == ev.index:
            if ev.id is not None:
                return False  # a new call with the same index starts a new chunk
            call["function"]["arguments"] += ev.arguments
            return True
    call = {"index": ev.index, "function": {"arguments": ev.arguments}}
    if ev.id is not None:
        call["id"] = ev.id
        call["type"] = "function"
    if ev.name is not None:
        call["function"]["name"] = ev.name
    calls.append(call)
    return True


def _plain_run(events: list[Event], i: int) -> int:
    """Where the run of plain content deltas (``Text`` of choice 0's content, and
    boundaries) from ``i`` ends, cut after its last boundary unless it reaches the end:
    a delta not closed by a boundary shares its chunk with the event after it."""
    last = i
    for j in range(i, len(events)):
        e = events[j]
        if type(e) is Boundary:
            last = j + 1
        elif type(e) is not Text or e.choice != 0 or e.channel != "content":
            return last
    return len(events)


class ChatEncoder:
    """Encodes one chat-completions stream; ``content`` keeps the emitted text per choice."""

    def __init__(
        self, *, relay_named: bool = True, usage_on_finish: bool = False, keep_text: bool = True
    ) -> None:
        self.meta = Meta()
        self.relay_named = relay_named
        #: usage on the finish chunk (Open WebUI) instead of a chunk of its own (OpenAI)
        self.usage_on_finish = usage_on_finish
        #: the content emitted per choice, kept only with ``keep_text`` (a session's answer)
        self.content: dict[int, TextLog] | None = {} if keep_text else None
        self._held: list[Finish | Usage] = []
        #: the choices seen (a list: one or two, and an open stream holds it)
        self._seen: list[int] = []
        self._prefix: bytes | None = None

    # -- the stream ---------------------------------------------------------------

    def start(self) -> bytes:
        return b""

    def keepalive(self) -> bytes:
        return encode_comment()

    def encode(self, events: list[Event]) -> bytes:
        """The SSE bytes of one batch of events: each run of plain content deltas (the
        common events) from a template (:meth:`_fast`), the rest chunk by chunk. The
        first and last batches of a stream hold the role and the finish besides many
        deltas: those deltas take the template too (a 300-delta stream spent 40 % of
        its deltas in the chunk builder and ``json.dumps`` before)."""
        parts: list[bytes] = []
        chunk: _Chunk | None = None
        i, n = 0, len(events)
        while i < n:
            if chunk is None:  # a chunk starts here: a run of plain deltas may follow
                end = _plain_run(events, i)
                if end > i:
                    parts.append(self._fast(events[i:end]))
                    i = end
                    continue
            chunk = self._general(events[i], chunk, parts)
            i += 1
        self._flush(chunk, parts)
        return b"".join(parts)

    def encode_general(self, events: list[Event]) -> bytes:
        """:meth:`encode` without the template: the reference it must equal (tests)."""
        parts: list[bytes] = []
        chunk: _Chunk | None = None
        for ev in events:
            chunk = self._general(ev, chunk, parts)
        self._flush(chunk, parts)
        return b"".join(parts)

    def _general(self, ev: Event, chunk: _Chunk | None, parts: list[bytes]) -> _Chunk | None:
        """One event into the chunk being built (flushed into ``parts`` at its end)."""
        if type(ev) is Boundary:
            return self._flush(chunk, parts)
        if type(ev) is ToolProgress or type(ev) is ToolResult:
            return chunk  # the agent's own tools: relayed as its named events, if at all
        if type(ev) is Meta:
            self.meta = ev
            self._prefix = None
            return self._flush(chunk, parts)
        if type(ev) is Finish or type(ev) is Usage:
            self._held.append(ev)
            return chunk
        if type(ev) is Named:
            self._flush(chunk, parts)
            if self.relay_named:
                parts.append(encode_json({**ev.data, "choices": []}, event=ev.name))
            return None
        self._note(ev)
        if chunk is None:
            chunk = _Chunk(self.meta)
        if not _add(chunk, ev):
            self._flush(chunk, parts)
            chunk = _Chunk(self.meta)
            _add(chunk, ev)
        return chunk

    def _note(self, ev: Event) -> None:
        if type(ev) is Text:
            self._saw(ev.choice)
            if ev.channel == "content" and self.content is not None:
                self.content.setdefault(ev.choice, TextLog()).append(ev.text)
        elif type(ev) is Role or type(ev) is ToolCall:
            self._saw(ev.choice)

    def _saw(self, choice: int) -> None:
        if choice not in self._seen:
            self._seen.append(choice)

    @staticmethod
    def _flush(chunk: _Chunk | None, parts: list[bytes]) -> None:
        if chunk is not None and (chunk.choices or chunk.extra):
            parts.append(encode_json(chunk.to_dict()))

    def _fast(self, events: list[Event]) -> bytes:
        """Content deltas of choice 0: one chunk per upstream chunk, from a template."""
        if self._prefix is None:
            head = _JSON.encode(chunk_dict(self.meta, [], {}))[:-3]  # without `[]}`
            head = "data: " + head + '[{"index":0,"delta":{"content":'
            # as in encode_json: a lone surrogate (a model name from a JSON "\\ud800")
            # becomes U+FFFD instead of failing the stream
            self._prefix = head.encode("utf-8", UNPAIRED)
        parts: list[bytes] = []
        texts: list[str] = []
        for ev in (*events, BOUNDARY):
            if type(ev) is Text:
                texts.append(ev.text)
            elif texts:
                text = texts[0] if len(texts) == 1 else "".join(texts)
                texts.clear()
                if self.content is not None:
                    self.content.setdefault(0, TextLog()).append(text)
                body = _JSON.encode(text).encode("utf-8", UNPAIRED)
                parts.append(self._prefix + body + _FAST_TAIL)
        if parts:
            self._saw(0)
        return parts[0] if len(parts) == 1 else b"".join(parts)

    # -- the end ---------------------------------------------------------------------

    def end(self, events: list[Event], manifest: dict[str, Any]) -> bytes:
        """Normal end: the text still held, the finish chunk(s), usage, manifest, ``[DONE]``."""
        head = self.encode(events)
        finishes = {e.choice: e.reason for e in self._held if type(e) is Finish}
        usage = [e.usage for e in self._held if type(e) is Usage]
        for idx in sorted(self._seen or [0]):
            finishes.setdefault(idx, "stop")
        chunks = [self._finish_chunk(finishes)]
        if usage and self.usage_on_finish:
            chunks[0]["usage"] = usage[-1]
        elif usage:
            chunks.append({**chunk_dict(self.meta, [], {}), "usage": usage[-1]})
        chunks[-1]["gateway"] = manifest
        return head + b"".join(encode_json(c) for c in chunks) + DONE

    def fail(self, events: list[Event], error: GatewayError, manifest: dict[str, Any]) -> bytes:
        """Failure: held text (names only), one final chunk with the error, ``[DONE]``."""
        text = [e for e in events if type(e) is Text]
        head = self.encode([e for e in events if type(e) is not Text])
        for ev in text:
            self._note(ev)
        finishes = {e.choice: e.reason for e in self._held if type(e) is Finish}
        reasons = {idx: finishes.get(idx, "error") for idx in sorted({*self._seen, 0})}
        final = self._finish_chunk(reasons)
        for ev in text:  # what was held goes out in the final chunk (file names only)
            delta = final["choices"][sorted(reasons).index(ev.choice)]["delta"]
            delta[ev.channel] = delta.get(ev.channel, "") + ev.text
        final["error"] = error.error_object()
        final["gateway"] = manifest
        return head + encode_json(final) + DONE

    def _finish_chunk(self, reasons: dict[int, str]) -> dict[str, Any]:
        choices = [
            {"index": i, "delta": {}, "finish_reason": r} for i, r in sorted(reasons.items())
        ]
        return chunk_dict(self.meta, choices, {})

    def text(self, choice: int = 0) -> str:
        """The content emitted for one choice (what a session stores)."""
        if self.content is None:
            raise ValueError("this encoder keeps no text (keep_text=False)")
        log = self.content.get(choice)
        return log.text() if log is not None else ""


#: the most characters of text a collected answer keeps (a non-streamed upstream answer
#: is read up to 64 MiB too); beyond it the answer is refused, memory stays bounded
MAX_COLLECTED_CHARS = 64 * 1024 * 1024


class ChatCollector:
    """A front that sends nothing: it keeps the answer's events, and ``final`` is the
    non-streamed ``chat.completion`` built from them once the stream ended (an agent's
    chat stream read whole, so the files its tools report reach the manifest). An
    answer of more than :data:`MAX_COLLECTED_CHARS` is not kept: ``too_large``."""

    def __init__(self, encoder: ChatEncoder) -> None:
        self.encoder = encoder
        self.events: list[Event] = []
        self.final: dict[str, Any] | None = None
        self.chars = 0
        self.too_large = False

    def start(self) -> bytes:
        return b""

    def keepalive(self) -> bytes:
        return b""

    def encode(self, events: list[Event]) -> bytes:
        if not self.too_large:
            self.chars += sum(len(e.text) for e in events if type(e) is Text)
            self.too_large = self.chars > MAX_COLLECTED_CHARS
            if self.too_large:
                self.events = []
            else:
                self.events.extend(events)
        return b""

    def end(self, events: list[Event], manifest: dict[str, Any]) -> bytes:
        self.encode(events)
        if not self.too_large:
            self.final = completion_object(self.encoder, self.events, manifest)
        self.events = []
        return b""

    def fail(self, events: list[Event], error: GatewayError, manifest: dict[str, Any]) -> bytes:
        self.events = []
        return b""


def completion_object(
    encoder: ChatEncoder, events: list[Event], manifest: dict[str, Any]
) -> dict[str, Any]:
    """A non-streaming ``chat.completion`` built from the events of the whole answer."""
    messages: dict[int, dict[str, Any]] = {}
    reasons: dict[int, str] = {}
    usage: dict[str, Any] | None = None
    for ev in events:
        if type(ev) is Meta:
            encoder.meta = ev
        elif type(ev) is Usage:
            usage = ev.usage
        elif type(ev) is Finish:
            reasons[ev.choice] = ev.reason
        elif type(ev) is Text or type(ev) is ToolCall or type(ev) is Role:
            _message_add(messages.setdefault(ev.choice, {"role": "assistant"}), ev)
            encoder._note(ev)
    for msg in messages.values():
        for call in msg.get("tool_calls", ()):
            del call["_index"]
    choices = [
        {
            "index": i,
            "message": {"content": None, **messages.get(i, {"role": "assistant"})},
            "finish_reason": reasons.get(i, "stop"),
        }
        for i in sorted(set(messages) | set(reasons) | {0})
    ]
    meta = encoder.meta
    body: dict[str, Any] = {
        "id": meta.id,
        "object": "chat.completion",
        "created": meta.created,
        "model": meta.model,
        "choices": choices,
        "gateway": manifest,
    }
    if usage is not None:  # not invented when the upstream sent none
        body["usage"] = usage
    if meta.system_fingerprint is not None:
        body["system_fingerprint"] = meta.system_fingerprint
    return body


def _message_add(msg: dict[str, Any], ev: Text | ToolCall | Role) -> None:
    if type(ev) is Role:
        msg["role"] = ev.role
    elif type(ev) is Text:
        msg[ev.channel] = (msg.get(ev.channel) or "") + ev.text
    elif type(ev) is ToolCall:
        if ev.legacy:
            fc = msg.setdefault("function_call", {"name": ev.name or "", "arguments": ""})
            fc["arguments"] += ev.arguments
            return
        calls = msg.setdefault("tool_calls", [])
        for call in calls:
            if call["_index"] == ev.index and ev.id is None:
                call["function"]["arguments"] += ev.arguments
                return
        calls.append(
            {
                "_index": ev.index,
                "id": ev.id,
                "type": "function",
                "function": {"name": ev.name or "", "arguments": ev.arguments},
            }
        )
