"""Sans-IO Server-Sent-Events codec: an incremental decoder and single-line encoders.

The decoder follows WHATWG HTML §9.2.5–9.2.6 (event stream interpretation) exactly;
the encoders emit only what every client we serve parses the same way (one ``data``
line per event, LF line ends, keep-alives as comments).
"""

# Decoding strategy
# -----------------
# Bytes go through one incremental UTF-8 decoder (errors="replace"), so a character
# split across chunks comes out whole and the output does not depend on chunking.
# The decoded text is split into lines in bulk: CRLF and lone CR are rewritten to LF
# with two str.replace calls, then str.split("\n"). A CR that ends a chunk ends its
# line at once and sets ``_skip_lf``, so an LF opening the next chunk is dropped
# instead of making an empty line (nothing ever waits for the next chunk).
# The unterminated last piece of every chunk is kept in ``_partial`` (a list of
# pieces, joined only when the line completes). Pieces never contain a line end, so
# each character is searched exactly once: O(n) overall, like h11's receive buffer
# remembering where it last searched. When many tiny pieces pile up they are joined
# so that the per-piece overhead stays a small fraction of the bound.
#
# Size bound: what the decoder holds for the incomplete event is the partial line
# plus the data buffer plus the event type, counted in decoded characters (never
# more than the bytes received). Every complete line is checked as if it were still
# partial, so whether SSEEventTooLarge is raised does not depend on chunk boundaries;
# the events dispatched before it are returned first (the error is raised by the next
# call), so neither do they.

from __future__ import annotations

import codecs
import contextlib
import json
from typing import NamedTuple, NoReturn

from gateway.core.errors import SSEEventTooLarge

__all__ = [
    "DONE",
    "UNPAIRED",
    "SSEDecoder",
    "SSEEvent",
    "encode_comment",
    "encode_event",
    "encode_json",
]

DONE: bytes = b"data: [DONE]\n\n"
"""The OpenAI stream terminator, as one complete event."""

_BOM = "\ufeff"


class SSEEvent(NamedTuple):
    """One dispatched event.

    ``id`` is the stream's last-event-id buffer at dispatch time (it persists across
    events, as WHATWG ``lastEventId`` does); ``retry`` is the most recent valid
    ``retry`` value seen on the stream so far, or ``None``. (A named tuple: one is
    made per upstream event, at half a frozen dataclass's cost.)
    """

    data: str
    event: str = "message"
    id: str = ""
    retry: int | None = None


class SSEDecoder:
    """Incremental ``text/event-stream`` decoder.

    Feed it byte chunks split anywhere; :meth:`feed` returns the events those bytes
    completed. :meth:`close` ends the stream and discards an unterminated event.
    If the incomplete event grows past ``max_event_bytes`` (decoded characters of
    the partial line, the data buffer and the event type), :class:`SSEEventTooLarge`
    is raised; the decoder is then unusable and keeps raising it. Events that chunk
    completed before the bound was crossed are returned first and the error comes
    with the next call (``feed`` or ``close``), so what is dispatched before the
    error does not depend on the chunking either.
    """

    __slots__ = (
        "_at_start",
        "_closed",
        "_data",
        "_data_len",
        "_event_type",
        "_failed",
        "_last_event_id",
        "_max",
        "_partial",
        "_partial_len",
        "_retry",
        "_skip_lf",
        "_utf8",
    )

    def __init__(self, *, max_event_bytes: int = 1 << 20) -> None:
        if max_event_bytes < 1:
            raise ValueError("max_event_bytes must be at least 1")
        self._max = max_event_bytes
        self._utf8 = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self._at_start = True
        self._skip_lf = False
        self._partial: list[str] = []
        self._partial_len = 0
        self._data: list[str] = []
        self._data_len = 0
        self._event_type = ""
        self._last_event_id = ""
        self._retry: int | None = None
        self._failed = False
        self._closed = False

    @property
    def last_event_id(self) -> str:
        """The last-event-id buffer: the latest ``id`` value without NUL, or ``""``."""
        return self._last_event_id

    @property
    def retry(self) -> int | None:
        """The latest valid ``retry`` value (milliseconds), or ``None``."""
        return self._retry

    def feed(self, data: bytes) -> list[SSEEvent]:
        """Consume a chunk of the stream and return the events it completed."""
        if self._failed:
            self._raise_too_large()
        if self._closed:
            raise RuntimeError("SSEDecoder.feed() called after close()")
        text = self._utf8.decode(data)
        if not text:
            return []
        if self._at_start:
            self._at_start = False
            if text[0] == _BOM:
                text = text[1:]
                if not text:
                    return []
        if self._skip_lf:
            self._skip_lf = False
            if text[0] == "\n":
                text = text[1:]
                if not text:
                    return []
        if "\r" in text:
            self._skip_lf = text[-1] == "\r"
            text = text.replace("\r\n", "\n").replace("\r", "\n")

        lines = text.split("\n")
        tail = lines.pop()
        events: list[SSEEvent] = []
        if lines:
            if self._partial:
                self._partial.append(lines[0])
                lines[0] = "".join(self._partial)
                self._partial = []
                self._partial_len = 0
            events = self._interpret(lines)
        if tail and not self._failed:
            partial = self._partial
            partial.append(tail)
            self._partial_len += len(tail)
            if self._data_len + len(self._event_type) + self._partial_len > self._max:
                self._fail()
            elif len(partial) > 16 + (self._partial_len >> 4):
                self._partial = ["".join(partial)]
        if self._failed and not events:
            self._raise_too_large()
        return events  # events completed before the bound was crossed: the error is next

    @property
    def cut_event(self) -> bool:
        """Whether the stream so far ends inside an event that carries data (a ``data``
        line without the blank line after it, or a ``data`` line cut short), other than
        a lone ``[DONE]``: what a stream cut in the middle looks like."""
        partial = "".join(self._partial)
        if self._data:
            return bool(partial) or self._data != ["[DONE]"]
        return partial.startswith("data") and partial.partition(":")[2].strip() != "[DONE]"

    def close(self) -> list[SSEEvent]:
        """End the stream. An unterminated event is discarded, so this returns ``[]``."""
        if self._failed:
            self._raise_too_large()
        self._utf8.decode(b"", final=True)
        self._closed = True
        self._partial = []
        self._partial_len = 0
        self._data = []
        self._data_len = 0
        self._event_type = ""
        return []

    def _interpret(self, lines: list[str]) -> list[SSEEvent]:
        events: list[SSEEvent] = []
        limit = self._max
        data = self._data
        data_len = self._data_len
        event_type = self._event_type
        try:
            for line in lines:
                if not line:
                    if data:
                        events.append(
                            SSEEvent(
                                "\n".join(data),
                                event_type or "message",
                                self._last_event_id,
                                self._retry,
                            )
                        )
                        data = []
                        data_len = 0
                    event_type = ""
                    continue
                if data_len + len(event_type) + len(line) > limit:
                    self._fail()
                    return events
                if line.startswith("data: "):  # fast path for the common line
                    value = line[6:]
                    data.append(value)
                    data_len += len(value) + 1
                    continue
                if line[0] == ":":
                    continue
                name, _, value = line.partition(":")
                if value and value[0] == " ":
                    value = value[1:]
                if name == "data":
                    data.append(value)
                    data_len += len(value) + 1
                elif name == "event":
                    event_type = value
                elif name == "id":
                    if "\0" not in value:
                        self._last_event_id = value
                elif name == "retry" and value.isascii() and value.isdigit():
                    # More digits than int() accepts (sys.int_info) is no usable delay.
                    with contextlib.suppress(ValueError):
                        self._retry = int(value)
        finally:
            if not self._failed:
                self._data = data
                self._data_len = data_len
                self._event_type = event_type
        return events

    def _fail(self) -> None:
        """The bound is crossed: drop what is held; every later call raises."""
        self._failed = True
        self._partial = []
        self._partial_len = 0
        self._data = []
        self._data_len = 0
        self._event_type = ""

    def _raise_too_large(self) -> NoReturn:
        self._fail()
        raise SSEEventTooLarge(
            f"An SSE event exceeded the limit of {self._max} characters before it was complete."
        )


def _replace_unpaired(exc: UnicodeError) -> tuple[str | bytes, int]:
    if isinstance(exc, UnicodeEncodeError):  # bytes: the UTF-8 codec takes no other str
        return "\ufffd".encode() * (exc.end - exc.start), exc.end
    raise exc


#: the codec error handler for output: a lone surrogate (from a JSON ``"\ud800"``
#: upstream) becomes U+FFFD, as a UTF-8 decoder shows a broken sequence, instead of
#: killing the stream with UnicodeEncodeError (its escape text ``\ud800`` again is
#: rejected by strict JSON parsers)
UNPAIRED = "gateway.unpaired"
codecs.register_error(UNPAIRED, _replace_unpaired)


def _require_one_line(what: str, value: str) -> None:
    if "\r" in value or "\n" in value:
        raise ValueError(f"SSE {what} must be a single line without CR or LF")


def encode_event(data: str, *, event: str | None = None, id: str | None = None) -> bytes:
    """Encode one event as UTF-8 with LF line ends, ending with a blank line.

    ``data`` must be a single line: multi-line ``data`` events are dropped by clients
    that parse ``data:`` lines one at a time. ``event`` and ``id`` must not contain CR
    or LF, and ``id`` must not contain NUL (decoders ignore such an id).
    """
    _require_one_line("data", data)
    head = ""
    if event is not None:
        _require_one_line("event", event)
        head = f"event: {event}\n"
    if id is not None:
        _require_one_line("id", id)
        if "\0" in id:
            raise ValueError("SSE id must not contain NUL")
        head += f"id: {id}\n"
    return f"{head}data: {data}\n\n".encode("utf-8", UNPAIRED)


#: ``json.dumps(obj, ensure_ascii=False, separators=(",", ":"))`` without building an
#: encoder per call
_JSON = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"))


def encode_json(obj: object, *, event: str | None = None, id: str | None = None) -> bytes:
    """Encode ``obj`` as compact JSON on one ``data`` line (JSON escapes newlines)."""
    data = _JSON.encode(obj)
    if event is None and id is None:
        # compact JSON never contains a raw CR or LF (strings escape every control
        # character), so the one-line check of encode_event is not needed here
        return f"data: {data}\n\n".encode("utf-8", UNPAIRED)
    return encode_event(data, event=event, id=id)


def encode_comment(text: str = "keepalive") -> bytes:
    """Encode a comment line, e.g. ``b": keepalive\n"``, written between events.

    Use comments, never data-less events, as keep-alives: openai-python raises on an
    event without data. No blank line follows the comment on purpose: once a stream
    has carried an ``id`` field, openai-python dispatches a data-less event at every
    blank line (and then fails on ``json.loads("")``), whereas a lone comment line is
    ignored by it, by the WHATWG parser and by Open WebUI's line-by-line reader.
    """
    _require_one_line("comment", text)
    return f": {text}\n".encode()
