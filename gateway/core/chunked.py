"""HTTP/1.1 chunked transfer coding, decoded in bulk (sans-IO).

:class:`ChunkedDecoder` turns the raw bytes of a ``Transfer-Encoding: chunked`` body
into its payload, whatever their boundaries: ``feed(data)`` returns all the payload
those bytes complete or continue (a chunk's data is passed on as it arrives, never
held until the chunk is whole), ``done`` says the last chunk and the trailer section
were read, ``leftover`` holds what came after them.

Why not h11 (which httpcore uses): h11 returns one event per chunk, and a streaming
model server writes one chunk per SSE event. Measured here: ~6.8 µs per chunk through
``h11.Connection.next_event`` against ~0.7 µs in this loop (one ``find``, one
``int(..., 16)``, one slice per chunk); with 64 events per socket read that was a
sixth of the gateway's whole cost per delta.

The grammar is h11's (RFC 9112 §7.1): a chunk-size line of 1-20 hex digits, an
optional chunk extension (``;`` up to the line end, ignored), optional trailing
spaces or tabs, CRLF; the chunk's data; exactly CRLF after it; a zero-size chunk;
trailer lines up to an empty line (their contents are ignored, as httpx ignores
them). A line longer than :data:`MAX_LINE` or any other deviation raises
:class:`ChunkedError`.
"""

from __future__ import annotations

import re

__all__ = ["MAX_LINE", "ChunkedDecoder", "ChunkedError"]

#: the longest chunk-size or trailer line accepted (bytes, CRLF excluded)
MAX_LINE = 64 * 1024
_SIZE = re.compile(rb"([0-9A-Fa-f]{1,20})(?:;[^\r\n]*)?[ \t]*")

_SIZE_LINE, _DATA, _DATA_END, _TRAILER, _DONE = range(5)


class ChunkedError(ValueError):
    """The bytes are not a valid chunked body."""


class ChunkedDecoder:
    """Incremental decoder of one chunked message body."""

    __slots__ = ("_buf", "_left", "_state", "error", "leftover")

    def __init__(self) -> None:
        self._buf = b""  # bytes not decoded yet (an incomplete line, at most)
        self._left = 0  # data bytes still to come in the current chunk
        self._state = _SIZE_LINE
        #: bytes received after the end of the body
        self.leftover = b""
        #: a deviation met after payload of the same ``feed``: that payload was returned,
        #: and the next ``feed`` raises this (so where the bytes of a read end cannot
        #: decide whether the text before a broken frame is relayed)
        self.error: ChunkedError | None = None

    @property
    def done(self) -> bool:
        return self._state == _DONE

    @property
    def in_chunk(self) -> bool:
        """The body stopped somewhere other than between two chunks."""
        return self._state != _SIZE_LINE or bool(self._buf)

    def feed(self, data: bytes) -> bytes:
        """The payload that ``data`` (the next bytes of the body) carries."""
        if self.error is not None:
            raise self.error
        if self._state == _DONE:
            self.leftover += data
            return b""
        out: list[bytes] = []
        try:
            return self._feed(data, out)
        except ChunkedError as exc:
            if not out:
                raise
            self.error = exc
            return b"".join(out)

    def _feed(self, data: bytes, out: list[bytes]) -> bytes:
        buf = self._buf + data if self._buf else data
        end = len(buf)
        pos = 0
        state = self._state
        left = self._left
        while pos < end:
            if state == _DATA:
                stop = pos + left
                if stop > end:  # the chunk goes on in the next read
                    out.append(buf[pos:] if pos else buf)
                    left -= end - pos
                    pos = end
                    break
                out.append(buf[pos:stop])
                pos = stop
                state = _DATA_END
            elif state == _SIZE_LINE:
                nl = buf.find(b"\r\n", pos)
                if nl < 0:
                    break
                m = _SIZE.fullmatch(buf, pos, nl)
                if m is None:
                    raise ChunkedError(f"illegal chunk header: {bytes(buf[pos:nl][:40])!r}")
                left = int(m.group(1), 16)
                pos = nl + 2
                if not left:
                    state = _TRAILER
                    continue
                stop = pos + left
                if stop + 2 <= end and buf[stop : stop + 2] == b"\r\n":
                    # the whole chunk and its CRLF are here: one turn of the loop
                    out.append(buf[pos:stop])
                    pos = stop + 2
                    left = 0
                    continue
                state = _DATA
            elif state == _DATA_END:
                if end - pos < 2:
                    if buf[pos : pos + 1] != b"\r":
                        raise ChunkedError("no CRLF after a chunk's data")
                    break
                if buf[pos : pos + 2] != b"\r\n":
                    raise ChunkedError("no CRLF after a chunk's data")
                pos += 2
                state = _SIZE_LINE
            else:  # _TRAILER: lines up to an empty one
                nl = buf.find(b"\r\n", pos)
                if nl < 0:
                    break
                empty = nl == pos
                pos = nl + 2
                if empty:
                    state = _DONE
                    self.leftover = buf[pos:]
                    pos = end
        rest = buf[pos:] if pos < end else b""
        if len(rest) > MAX_LINE and state != _DATA:
            raise ChunkedError("a chunk-size or trailer line is too long")
        self._buf = rest
        self._state = state
        self._left = left
        if not out:
            return b""
        return out[0] if len(out) == 1 else b"".join(out)
