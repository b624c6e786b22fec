"""HTTP/1.1 heads without h11, for the requests and answers that need nothing more.

Sans-IO. :func:`parse_head` reads a *plain* request head, whole at the start of a
buffer: ``GET`` or ``POST``, an origin-form target without percent-escapes in its
path, ``HTTP/1.1``, CRLF line ends, every field in h11's grammar, exactly one
``Host``, at most one ``Content-Length`` of digits, and no ``Transfer-Encoding``,
``Expect``, ``Upgrade``, ``TE`` or ``Trailer``. What it accepts, h11 accepts and reads
to the same method, target, fields, body length and keep-alive (a subset, never more;
``tests/unit/test_h1.py`` holds it to that with generated heads); anything else gets
``None`` and is h11's to read and to refuse. The connection handler
(:mod:`gateway.http.connection`) uses it as a front for h11.

:func:`response_head` and :func:`chunk` frame an answer to such a request byte for byte
as h11 frames it. :func:`parse_response_head` does for an upstream's answer what
:func:`parse_head` does for a request (used by the upstream client).

The grammar is h11's (``h11/_abnf.py``): a field line is ``token ":" OWS value OWS``,
the value runs of bytes that are neither NUL nor whitespace separated by spaces or tabs.
Names are lowercased and values stripped as h11 does, so the ASGI scope's ``headers``
are what h11 would have given.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

__all__ = [
    "LAST_CHUNK",
    "Head",
    "ResponseHead",
    "chunk",
    "parse_head",
    "parse_response_head",
    "response_head",
]

#: h11's ``header_field`` (h11/_abnf.py), compiled for bytes
_HEADER_LINE = re.compile(
    rb"([-!#$%&'*+.^_`|~0-9a-zA-Z]+):[ \t]*((?:[^\x00\s]+(?:[ \t]+[^\x00\s]+)*)?)[ \t]*"
)
#: h11's ``status_line`` (h11/_abnf.py) for HTTP/1.1 only, compiled for bytes
_STATUS_LINE = re.compile(rb"HTTP/1\.1 ([0-9]{3})(?: (?:[ \t]|[^\x00\s])*)?")
#: an origin-form target whose path needs no unescaping (RFC 3986 pchar without
#: pct-encoded), and its query (anything h11 accepts but ``#``)
_PLAIN_TARGET = re.compile(rb"(/[-A-Za-z0-9._~!$&'()*+,;=:@/]*)(?:\?([\x21-\x22\x24-\x7e]*))?")
_PLAIN_METHODS = frozenset((b"GET", b"POST"))
#: header fields that are h11's to read (framing, upgrades, expectations)
_LEFT_TO_H11 = frozenset((b"transfer-encoding", b"expect", b"upgrade", b"te", b"trailer"))
_COMMON_NAMES = (
    b"accept",
    b"accept-encoding",
    b"accept-language",
    b"authorization",
    b"cache-control",
    b"connection",
    b"content-length",
    b"content-type",
    b"cookie",
    b"date",
    b"host",
    b"keep-alive",
    b"origin",
    b"referer",
    b"server",
    b"transfer-encoding",
    b"user-agent",
    b"x-accel-buffering",
    b"x-request-id",
)
#: a common field name, as clients and servers spell it -> its lower case, one object
#: for every request (an open stream holds its head's fields: one bytes object less per
#: field); a fixed table, so that no client can grow it
_LOWER = {
    spelling: name
    for name in _COMMON_NAMES
    for spelling in (name, name.title(), name.upper(), name.capitalize())
}
#: h11 refuses a Content-Length of more digits (CONTENT_LENGTH_MAX_DIGITS)
_MAX_LENGTH_DIGITS = 18
_END = b"\r\n\r\n"


class Head:
    """A plain request head (what :func:`parse_head` accepted)."""

    __slots__ = ("headers", "keep_alive", "length", "method", "path", "query", "size")

    def __init__(
        self,
        method: str,
        path: str,
        query: bytes,
        headers: list[tuple[bytes, bytes]],
        length: int,
        keep_alive: bool,
        size: int,
    ) -> None:
        self.method = method
        #: the target's path (no escapes in it: it is the ASGI ``path`` and ``raw_path``)
        self.path = path
        #: what follows the target's ``?`` (b"" without one)
        self.query = query
        #: (lowercased name, stripped value), in the order received (as h11 gives them)
        self.headers = headers
        #: the declared body length (0 without Content-Length)
        self.length = length
        #: False when the client asked to close after this request (``Connection: close``)
        self.keep_alive = keep_alive
        #: the head's size in bytes, its blank line included
        self.size = size


def parse_head(data: bytes, max_size: int) -> Head | None:
    """The head at the start of ``data`` if it is a plain, complete HTTP/1.1 request of
    at most ``max_size`` bytes (module docstring); else None."""
    end = data.find(_END, 0, max_size)
    if end < 0:
        return None
    lines = data[:end].split(b"\r\n")
    parts = lines[0].split(b" ")
    if len(parts) != 3 or parts[2] != b"HTTP/1.1" or parts[0] not in _PLAIN_METHODS:
        return None
    target = _PLAIN_TARGET.fullmatch(parts[1])
    if target is None:
        return None
    headers = _header_fields(lines[1:])
    if headers is None:
        return None
    framing = _framing(headers)
    if framing is None:
        return None
    length, keep_alive = framing
    if length and parts[0] != b"POST":
        return None
    path, query = target[1].decode("ascii"), target[2] or b""
    return Head(parts[0].decode("ascii"), path, query, headers, length, keep_alive, end + 4)


def _header_fields(lines: list[bytes]) -> list[tuple[bytes, bytes]] | None:
    """h11's view of the header lines, or None where one is not plain."""
    headers = []
    match = _HEADER_LINE.fullmatch
    for line in lines:
        m = match(line)
        if m is None:
            return None
        raw = m[1]
        name = _LOWER.get(raw) or raw.lower()
        if name in _LEFT_TO_H11:
            return None
        headers.append((name, m[2]))
    return headers


def _framing(headers: list[tuple[bytes, bytes]]) -> tuple[int, bool] | None:
    """(declared length, keep-alive), or None where h11 should judge the fields (no
    Host or several, several Content-Length, one that is not a plain number)."""
    hosts = 0
    length: int | None = None
    keep_alive = True
    for name, value in headers:
        if name == b"host":
            hosts += 1
        elif name == b"content-length":
            if length is not None or not value.isdigit() or len(value) > _MAX_LENGTH_DIGITS:
                return None
            length = int(value)
        elif name == b"connection" and b"close" in _tokens(value):
            keep_alive = False
    if hosts != 1:
        return None
    return (length or 0), keep_alive


def _tokens(value: bytes) -> list[bytes]:
    """A comma-separated field's tokens, lowercased (h11's ``get_comma_header``)."""
    return [t for t in (part.strip() for part in value.lower().split(b",")) if t]


# --------------------------------------------------------------------------- an upstream's answer


class ResponseHead:
    """An upstream's response head that :func:`parse_response_head` accepted."""

    __slots__ = ("chunked", "headers", "keep_alive", "length", "size", "status")

    def __init__(
        self,
        status: int,
        headers: list[tuple[bytes, bytes]],
        chunked: bool,
        length: int,
        keep_alive: bool,
        size: int,
    ) -> None:
        self.status = status
        #: (lowercased name, stripped value), in the order received (as h11 gives them)
        self.headers = headers
        #: ``Transfer-Encoding: chunked``
        self.chunked = chunked
        #: the ``Content-Length``; -1 without one (chunked, or until the server closes)
        self.length = length
        #: False when the server closes after this answer (``Connection: close``)
        self.keep_alive = keep_alive
        #: the head's size in bytes, its blank line included
        self.size = size

    @property
    def framing(self) -> str:
        """h11's name for how the body is delimited."""
        if self.chunked:
            return "chunked"
        return "content-length" if self.length >= 0 else "http/1.0"


def parse_response_head(data: bytes, max_size: int) -> ResponseHead | None:
    """The head at the start of ``data`` if it is a plain, complete HTTP/1.1 answer to
    a POST of at most ``max_size`` bytes; else None (then h11 reads it, and refuses
    whatever is wrong with it). Plain: a final status (not 1xx, 204 or 304, whose
    framing h11 decides), CRLF line ends, every line in h11's grammar (no obsolete
    line fold), at most one ``Content-Length`` of digits only or one
    ``Transfer-Encoding: chunked`` but not both. What it accepts, h11 accepts with
    the same status, fields, framing and keep-alive (a property test holds it to
    that): a subset, never more."""
    end = data.find(_END, 0, max_size)
    if end < 0:
        return None
    lines = data[:end].split(b"\r\n")
    m = _STATUS_LINE.fullmatch(lines[0])
    if m is None:
        return None
    status = int(m[1])
    if status < 200 or status == 204 or status == 304:
        return None
    headers = []
    chunked = False
    length = -1
    keep_alive = True
    match = _HEADER_LINE.fullmatch
    for line in lines[1:]:
        f = match(line)
        if f is None:
            return None
        raw = f[1]
        name = _LOWER.get(raw) or raw.lower()
        value = f[2]
        if name == b"content-length":
            if length >= 0 or not value.isdigit() or len(value) > _MAX_LENGTH_DIGITS:
                return None
            length = int(value)
        elif name == b"transfer-encoding":
            value = value.lower()  # as h11 keeps it
            if chunked or value != b"chunked":
                return None
            chunked = True
        elif name == b"connection" and b"close" in _tokens(value):
            keep_alive = False
        headers.append((name, value))
    if chunked and length >= 0:
        return None
    return ResponseHead(status, headers, chunked, length, keep_alive, end + 4)


# --------------------------------------------------------------------------- our answers

#: the end of a chunked body
LAST_CHUNK = b"0\r\n\r\n"


def response_head(
    status: int, headers: Iterable[tuple[bytes, bytes]], *, close: bool
) -> tuple[bytes, bool]:
    """The response head (the status line, then ``headers`` as given) and whether its
    body is chunked, framed as h11 frames it for a ``GET`` or ``POST``: without
    ``Content-Length`` the body is chunked and ``Transfer-Encoding: chunked`` comes last
    (a 204 or 304 has no body: nothing is added); ``close`` drops the ``Connection``
    fields and ends the head with ``Connection: close``. A field that could split the
    head (CR, LF or NUL in a value, a name that is not a token) raises ``ValueError``:
    the app's bug, never sent."""
    out = [b"HTTP/1.1 %d \r\n" % status]
    chunked = status not in (204, 304)
    for name, value in headers:
        lower = name.lower()
        if lower == b"content-length":
            chunked = False
        elif lower == b"transfer-encoding" or (close and lower == b"connection"):
            continue  # the framing is this function's
        if not _HEADER_LINE.fullmatch(b"%s: %s" % (name, value)):
            raise ValueError(f"response header {name!r} cannot be sent")
        out.append(b"%s: %s\r\n" % (name, value))
    if chunked:
        out.append(b"Transfer-Encoding: chunked\r\n")
    if close:
        out.append(b"Connection: close\r\n")
    out.append(b"\r\n")
    return b"".join(out), chunked


def chunk(data: bytes) -> bytes:
    """One piece of a chunked body (``data`` not empty)."""
    return b"%x\r\n%s\r\n" % (len(data), data)
