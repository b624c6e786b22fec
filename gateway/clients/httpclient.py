"""The one outbound HTTP/1.1 client: every request the gateway sends to its upstream.

One :class:`HTTPClient` per origin (``upstream.base_url``) keeps a pool of keep-alive
connections and sends any request below the base URL: the streaming chat POST, JSON
calls, ``/models``, and event streams of any method and path (``/responses``,
``/runs/{id}/events``). It is built on public APIs only:

* connections are trio's (``trio.open_tcp_stream``); a plain one is then read and
  written through its own non-blocking socket with ``trio.lowlevel.wait_readable`` /
  ``wait_writable`` (a read that finds bytes there costs no scheduler round), a TLS one
  through ``trio.SSLStream`` with :func:`gateway.clients.trust.verify_context`'s trust;
* the request head is written by hand from validated fields, head and body in one write;
* the response head is read by :func:`gateway.http.h1.parse_response_head` when it is
  plain and whole in the first read (a strict subset of h11's grammar with h11's
  results), else by ``h11.Connection(our_role=h11.CLIENT)``, which refuses what is
  wrong with it; the body's framing (chunked in bulk by
  :class:`gateway.core.chunked.ChunkedDecoder`, ``Content-Length``, close-delimited) follows
  RFC 9112 §6.3 as h11 decides it; ``gzip``/``deflate`` bodies are decoded by
  :mod:`zlib` (``br`` by the ``brotli`` package when it is installed), at most
  :data:`MAX_DECODED` bytes per step;
* one read of the socket is one item of the body (every chunk it completed);
* a response read to its end on a keep-alive connection returns the connection to the
  pool, kept for the same ``key`` (principal) only; anything else closes it.

The exception boundary: every failure leaves this module as an
:class:`~gateway.core.errors.UpstreamError` (or :class:`~gateway.core.errors.Overloaded` when the
process is out of file descriptors) whose message names the URL and what to change,
never a key, and is logged once per code and URL per :data:`LOG_EVERY` seconds
(:func:`report`):

    upstream_refused       nothing listens at the host and port (502)
    upstream_dns_failed    the host name does not resolve (502)
    upstream_unreachable   any other connect failure: no route, reset (502)
    upstream_tls_failed    the TLS handshake failed: certificate not trusted, another
                           host's name, a server that does not speak TLS (502)
    upstream_timeout       connect, write or first-byte deadline passed (504)
    upstream_disconnected  the connection broke or closed before the answer was whole (502)
    upstream_bad_response  the answer is not HTTP/1.1 or its body cannot be decoded (502)
    gateway_overloaded     EMFILE/ENFILE while connecting (503)

A test may hand the client an ``httpx.AsyncBaseTransport`` (``transport=``): requests
then go to it through httpx's public API (a scripted upstream with chosen chunk
boundaries) and its answers are read through the same decoding and error boundary.
"""

from __future__ import annotations

import contextlib
import errno
import importlib
import logging
import math
import re
import socket
import ssl
import time
import zlib
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

import h11
import trio

from gateway import __version__
from gateway.clients.trust import verify_context
from gateway.core.chunked import ChunkedDecoder, ChunkedError
from gateway.core.errors import GatewayError, Overloaded, UpstreamError
from gateway.http.h1 import ResponseHead, parse_response_head
from gateway.stream.clock import clock

__all__ = [
    "KEEPALIVE_EXPIRY",
    "HTTPClient",
    "Headers",
    "Origin",
    "Response",
    "abandon",
    "report",
]

log = logging.getLogger("gateway.upstream")

#: seconds an idle pooled connection is kept
KEEPALIVE_EXPIRY = 5.0
#: bytes asked of the socket per read
READ_BYTES = 64 * 1024
#: socket reads in a row that found bytes there before a read yields once
QUICK_READS = 8
#: the longest response head accepted (h11's default ``max_incomplete_event_size``)
MAX_HEAD = 16 * 1024
#: the most a compressed body's decoder hands out per step (a bomb stays bounded)
MAX_DECODED = 1 << 20
#: a failure is logged at most once per code and URL in this many seconds
LOG_EVERY = 60.0

_TOKEN = re.compile(r"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")
_VALUE = re.compile(r"(?:[\x21-\x7e](?:[\x20-\x7e]*[\x21-\x7e])?)?")
_BLANK_LINE = re.compile(rb"\n\r?\n")

_brotli: Any
try:  # optional, as in httpx: ``br`` is decoded only where the package is installed
    _brotli = importlib.import_module("brotli")
except ImportError:  # pragma: no cover - depends on the environment
    _brotli = None


# ------------------------------------------------------------------ errors and logs

_last_logged: dict[tuple[str, str], tuple[float, int]] = {}


def report(exc: GatewayError, url: str, cause: str = "") -> GatewayError:
    """Log ``exc`` (an upstream failure at ``url``) as one warning, at most once per
    code and URL every :data:`LOG_EVERY` seconds (the next line counts what was left
    out); ``cause``: the technical detail (an OS or TLS error). Returns ``exc``."""
    key = (exc.code, url)
    now = time.monotonic()
    last, skipped = _last_logged.get(key, (-math.inf, 0))
    if now - last < LOG_EVERY:
        _last_logged[key] = (last, skipped + 1)
        return exc
    _last_logged[key] = (now, 0)
    if len(_last_logged) > 1024:  # bounded: an upstream's own codes are many
        _last_logged.clear()
    more = f" ({skipped} more like it in the last {LOG_EVERY:g} s)" if skipped else ""
    why = f" [{cause}]" if cause else ""
    # an upstream's verdict on the request itself (model_not_found, upstream_http_400)
    # is the client's problem: info; everything else is a failure of the upstream
    ours = exc.code.startswith(("upstream_", "gateway_")) and "_http_" not in exc.code
    level = logging.WARNING if ours else logging.INFO
    log.log(level, "upstream %s failed: %s: %s%s%s", url, exc.code, exc.message, why, more)
    return exc


def _fail(
    code: str, message: str, url: str, cause: object = "", status: int = 502
) -> UpstreamError:
    exc = UpstreamError(message, code=code, status=status)
    report(exc, url, str(cause))
    return exc


def _chain(exc: BaseException) -> list[BaseException]:
    """``exc``, what it was raised from, and what it groups (each once)."""
    seen: dict[int, BaseException] = {}
    todo = [exc]
    while todo:
        e = todo.pop()
        if id(e) in seen:
            continue
        seen[id(e)] = e
        if isinstance(e, BaseExceptionGroup):
            todo.extend(e.exceptions)
        todo.extend(x for x in (e.__cause__, e.__context__) if x is not None)
    return list(seen.values())


def fds_exhausted(exc: BaseException) -> bool:
    """Is ``exc``, or anything it was raised from or groups, EMFILE/ENFILE?"""
    return any(
        isinstance(e, OSError) and e.errno in (errno.EMFILE, errno.ENFILE) for e in _chain(exc)
    )


def connect_error(exc: BaseException, origin: Origin, url: str) -> GatewayError:
    """The error for a failed connect (trio's ``open_tcp_stream`` or the TLS handshake)."""
    chain = _chain(exc)
    where = f"{origin.host}:{origin.port}"
    if fds_exhausted(exc):
        over = Overloaded(
            "The gateway has too many open connections (out of file descriptors) to reach "
            "the upstream model server; retry shortly. Operators: raise LimitNOFILE / "
            "NumberOfFiles or lower server.max_connections."
        )
        report(over, url, str(exc))
        return over
    for e in chain:
        if isinstance(e, socket.gaierror):
            return _fail(
                "upstream_dns_failed",
                f"The upstream host {origin.host!r} of {url} could not be resolved (DNS); "
                "check the host name in upstream.base_url.",
                url,
                e,
            )
    for e in chain:
        if isinstance(e, ssl.SSLCertVerificationError):
            return _fail(
                "upstream_tls_failed",
                f"The TLS certificate of {url} was refused ({e.verify_message}); use a "
                "certificate trusted by the system (or SSL_CERT_FILE) that names this host, "
                "or fix the host in upstream.base_url.",
                url,
                e,
            )
    for e in chain:
        if isinstance(e, ssl.SSLError):
            return _fail(
                "upstream_tls_failed",
                f"The TLS handshake with {url} failed ({e.reason or 'TLS error'}); does the "
                "server speak TLS on that port? (http:// or https:// in upstream.base_url)",
                url,
                e,
            )
    refused = [e for e in chain if isinstance(e, ConnectionRefusedError)]
    if refused:
        return _fail(
            "upstream_refused",
            f"The upstream {url} refused the connection (nothing listens on {where}); is "
            "the model server running, and are the host and port in upstream.base_url right?",
            url,
            refused[0],
        )
    return _fail(
        "upstream_unreachable",
        f"The upstream {url} could not be reached ({_os_reason(chain)}); check the host "
        "and port in upstream.base_url and the network.",
        url,
        exc,
    )


def _os_reason(chain: list[BaseException]) -> str:
    for e in chain:
        if isinstance(e, OSError) and e.strerror:
            return e.strerror.lower()
    return "connection failed"


# ------------------------------------------------------------------ origin, headers


@dataclass(frozen=True)
class Origin:
    """Where a client's requests go: ``base_url`` split (no credentials, no query)."""

    scheme: str
    host: str
    port: int
    #: the base URL's path without its trailing slash ("/v1", or "")
    base_path: str

    @classmethod
    def parse(cls, base_url: str) -> Origin:
        parts = urlsplit(base_url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"not an absolute http(s) URL: {base_url!r}")
        port = parts.port or (443 if parts.scheme == "https" else 80)
        return cls(parts.scheme, parts.hostname, port, parts.path.rstrip("/"))

    @property
    def tls(self) -> bool:
        return self.scheme == "https"

    @property
    def netloc(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        default = 443 if self.tls else 80
        return host if self.port == default else f"{host}:{self.port}"

    def url(self, path: str = "") -> str:
        """The URL of ``path`` (below the base), as messages and logs name it."""
        return f"{self.scheme}://{self.netloc}{self.base_path}{path.split('?', 1)[0]}"


#: by grammar, the texts found valid already (bounded; most are constants)
_VALID: dict[re.Pattern[str], set[str]] = {}


def _valid(text: str, grammar: re.Pattern[str]) -> bool:
    known = _VALID.setdefault(grammar, set())
    if text in known:
        return True
    if grammar.fullmatch(text) is None:
        return False
    if len(known) < 512:
        known.add(text)
    return True


def check_header(name: str, value: str) -> None:
    """Refuse a header this client would have to write unsafely (CR, LF, non-ASCII)."""
    plain = value.isascii() and value.isprintable() and value == value.strip()
    if not _valid(name, _TOKEN) or not (plain or _VALUE.fullmatch(value)):
        raise ValueError(f"header {name!r} cannot be sent as it is")


class Headers:
    """A response's header fields: by name, case-insensitive, several joined by ``", "``;
    values decoded as ASCII, else UTF-8, else Latin-1."""

    __slots__ = ("raw",)

    def __init__(self, raw: list[tuple[bytes, bytes]]) -> None:
        #: (lowercased name, value) in the order received
        self.raw = raw

    def get_list(self, name: str) -> list[str]:
        key = name.lower().encode("latin-1")
        return [_decoded(v) for n, v in self.raw if n == key]

    def get(self, name: str, default: Any = None) -> Any:
        values = self.get_list(name)
        return ", ".join(values) if values else default

    def __getitem__(self, name: str) -> str:
        values = self.get_list(name)
        if not values:
            raise KeyError(name)
        return ", ".join(values)

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and bool(self.get_list(name))

    def items(self) -> list[tuple[str, str]]:
        return [(n.decode("latin-1"), _decoded(v)) for n, v in self.raw]


def _decoded(value: bytes) -> str:
    for encoding in ("ascii", "utf-8"):
        try:
            return value.decode(encoding)
        except UnicodeDecodeError:
            pass
    return value.decode("iso-8859-1")


def media_type(headers: Headers) -> str:
    """The ``Content-Type`` without parameters, lower case ("" without one)."""
    return str(headers.get("content-type", "")).split(";")[0].strip().lower()


# ------------------------------------------------------------------ content decoding


class _Decoder:
    """One ``Content-Encoding`` step: ``feed`` returns at most :data:`MAX_DECODED`
    bytes and keeps the input it did not use (``pending``) for the next call."""

    __slots__ = ("_br", "_coding", "_raw_tried", "_z", "pending")

    def __init__(self, coding: str) -> None:
        self._coding = coding
        self._br: Any = None
        self._z: Any = None
        self._raw_tried = False  # deflate: zlib-wrapped, else raw (decided by the first step)
        self.pending = b""
        if coding in ("gzip", "x-gzip"):
            self._z = zlib.decompressobj(zlib.MAX_WBITS | 16)
        elif coding == "deflate":
            self._z = zlib.decompressobj()
        elif coding == "br" and _brotli is not None:
            self._br = _brotli.Decompressor()
        else:
            raise ValueError(coding)

    def feed(self, data: bytes) -> bytes:
        data = self.pending + data if self.pending else data
        self.pending = b""
        if self._br is not None:
            out: bytes = self._br.process(data)
            return out
        try:
            out = self._z.decompress(data, MAX_DECODED)
        except zlib.error:
            if self._coding != "deflate" or self._raw_tried:
                raise
            self._z = zlib.decompressobj(-zlib.MAX_WBITS)  # raw deflate, as servers send
            out = self._z.decompress(data, MAX_DECODED)
        # a zlib header (2 bytes) went through: no raw deflate from here on
        self._raw_tried = self._raw_tried or len(data) - len(self._z.unconsumed_tail) >= 2
        self.pending = self._z.unconsumed_tail
        return bytes(out)

    def flush(self) -> bytes:
        if self._z is None:
            return b""
        return bytes(self._z.flush())


def decoders_for(encoding: str) -> list[_Decoder]:
    """The decoders of a ``Content-Encoding`` (applied last first); ValueError names a
    coding this client cannot decode."""
    out = []
    for coding in reversed([c.strip().lower() for c in encoding.split(",")]):
        if coding not in ("", "identity"):
            out.append(_Decoder(coding))
    return out


def accept_encoding() -> str:
    """What this client can decode, for ``Accept-Encoding``."""
    return "gzip, deflate, br" if _brotli is not None else "gzip, deflate"


# ------------------------------------------------------------------ connections


class _Conn:
    """One connection: a plain non-blocking socket, or a TLS stream over trio's."""

    __slots__ = ("sock", "tls")

    def __init__(self, sock: socket.socket | None, tls: trio.SSLStream[Any] | None) -> None:
        self.sock = sock
        self.tls = tls

    def idle_and_open(self) -> bool:
        """Nothing to read on it (no EOF, no stray bytes): it may carry a request."""
        if self.tls is not None:
            return not self.tls.transport_stream.socket.is_readable()
        assert self.sock is not None
        try:
            self.sock.recv(1, socket.MSG_PEEK)
        except (BlockingIOError, InterruptedError):
            return True
        except OSError:
            return False
        return False  # EOF, or bytes nobody asked for

    def close(self) -> None:
        """Close at once (idempotent; a task waiting on it is woken)."""
        sock = self.sock
        if sock is not None:
            if sock.fileno() != -1:
                trio.lowlevel.notify_closing(sock)
                sock.close()
        elif self.tls is not None:
            self.tls.transport_stream.socket.close()

    async def send_all(self, data: bytes, deadline: float) -> None:
        """Write ``data`` by ``deadline`` (then :class:`trio.TooSlowError`): one
        ``send(2)`` without a scope when the socket's buffer takes it all."""
        sock = self.sock
        if sock is None:
            assert self.tls is not None
            with trio.fail_at(deadline):
                await self.tls.send_all(data)
            return
        view = memoryview(data)
        while view:
            try:
                view = view[sock.send(view) :]
                continue
            except (BlockingIOError, InterruptedError):
                pass
            with trio.fail_at(deadline):
                await trio.lowlevel.wait_writable(sock)


class _Wake:
    """A stream-clock entry that wakes the wait on a socket at its moment."""

    __slots__ = ("fired", "sock")

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.fired = False

    def due(self, now: float) -> None:
        self.fired = True
        if self.sock.fileno() != -1:
            trio.lowlevel.notify_closing(self.sock)

    def drain(self) -> None:  # pragma: no cover - registered without a drain event
        pass


async def _receive_by(conn: _Conn, deadline: float) -> bytes:
    """One read of the response head, by ``deadline`` (then :class:`trio.TooSlowError`).
    On a plain socket the wait is timed by an entry in the run's stream clock, which
    wakes it at the deadline (``notify_closing``; the socket stays open), not by a
    cancel scope (≈ 57 k instructions a request)."""
    sock = conn.sock
    if sock is None:
        assert conn.tls is not None
        with trio.fail_at(deadline):
            return bytes(await conn.tls.receive_some(READ_BYTES))
    timer: _Wake | None = None
    handle = None
    try:
        while True:
            try:
                return sock.recv(READ_BYTES)
            except (BlockingIOError, InterruptedError):
                pass
            if trio.current_time() >= deadline:
                raise trio.TooSlowError
            if timer is None:
                timer = _Wake(sock)
                if deadline < math.inf:
                    handle = clock().add(timer, deadline)
            try:
                await trio.lowlevel.wait_readable(sock)
            except trio.ClosedResourceError:
                if not timer.fired:
                    raise
                raise trio.TooSlowError from None
    finally:
        if handle is not None:
            handle.cancel()


def h11_head(data: bytes, method: bytes) -> tuple[ResponseHead, int] | None:
    """The response head at the start of ``data`` as ``h11.Connection`` reads it (1xx
    answers skipped) and where it ends; None while incomplete. What h11 refuses raises
    :class:`h11.RemoteProtocolError`. The framing is RFC 9112 §6.3's, as h11 decides it."""
    conn = h11.Connection(h11.CLIENT, max_incomplete_event_size=MAX_HEAD)
    conn.send(h11.Request(method=method, target="/", headers=[("Host", "upstream")]))
    pos = 0
    while True:
        blank = _BLANK_LINE.search(data, pos)
        if blank is None:
            return None
        conn.receive_data(data[pos : blank.end()])
        pos = blank.end()
        event = conn.next_event()
        if isinstance(event, h11.Response):
            return _framing(event, method, pos), pos
        # NEED_DATA (a blank line h11 skips) or an InformationalResponse: read on


def _framing(event: h11.Response, method: bytes, size: int) -> ResponseHead:
    headers = [(bytes(n), bytes(v)) for n, v in event.headers]  # names lowercased
    fields: dict[bytes, list[bytes]] = {}
    for n, v in headers:
        fields.setdefault(n, []).extend(t.strip().lower() for t in v.split(b","))
    keep_alive = b"close" not in fields.get(b"connection", []) and event.http_version >= b"1.1"
    if event.status_code in (204, 304) or method == b"HEAD":
        return ResponseHead(event.status_code, headers, False, 0, keep_alive, size)
    if b"transfer-encoding" in fields:  # h11 accepts "chunked" alone
        return ResponseHead(event.status_code, headers, True, -1, keep_alive, size)
    lengths = fields.get(b"content-length")
    length = int(lengths[0]) if lengths else -1  # (h11 checked them: digits, all equal)
    return ResponseHead(event.status_code, headers, False, length, keep_alive and length >= 0, size)


# ------------------------------------------------------------------ responses


class Response:
    """An answer whose head was read; the body is read by the caller, who must
    :meth:`aclose` it (or :meth:`close_nowait`), whatever happens.

    ``receive_some()`` returns the next part of the body, decoded, one socket read's
    worth, and ``b""`` at its end; ``receive_nowait()`` the same from what is there
    already, or :class:`trio.WouldBlock`. On a plain connection a waiting read can be
    woken by :meth:`interrupt` having taken nothing (``pull_safe``)."""

    __slots__ = (
        "_client",
        "_conn",
        "_decoders",
        "_done",
        "_finished",
        "_interrupted",
        "_key",
        "_left",
        "_pending",
        "_quick",
        "_reusable",
        "_unchunk",
        "headers",
        "is_closed",
        "status_code",
        "url",
    )

    def __init__(
        self,
        client: HTTPClient,
        conn: _Conn,
        head: ResponseHead,
        pending: bytes,
        key: str,
        url: str,
    ) -> None:
        self._client = client
        self._conn = conn
        self._key = key
        self.url = url
        self.status_code: int = head.status
        self.headers = Headers(head.headers)
        self._unchunk = ChunkedDecoder() if head.chunked else None
        self._left = -1 if head.chunked else head.length  # -1: until EOF
        self._reusable = head.keep_alive and (head.chunked or head.length >= 0)
        self._pending = pending
        self._quick = 0
        self._interrupted = False
        self._done = self._left == 0
        self._finished = False  # the decoders were flushed
        self.is_closed = False
        self._decoders = self._content_decoders()

    def _content_decoders(self) -> list[_Decoder] | None:
        encoding = self.headers.get("content-encoding")
        if not encoding:
            return None
        try:
            return decoders_for(encoding) or None
        except ValueError as exc:
            self._reusable = False
            raise _fail(
                "upstream_bad_response",
                f"The upstream {self.url} sent a body compressed with {exc.args[0]!r}, which "
                "the gateway did not ask for and cannot decode.",
                self.url,
            ) from None

    @property
    def pull_safe(self) -> bool:
        """Can :meth:`interrupt` wake a waiting read having taken nothing?"""
        return self._conn.sock is not None

    def __aiter__(self) -> AsyncIterator[bytes]:
        return self._iterate()

    async def _iterate(self) -> AsyncIterator[bytes]:
        while data := await self.receive_some():
            yield data

    async def receive_some(self) -> bytes:
        """The next part of the body, decoded; ``b""`` at its end."""
        while True:
            if self._decoders is not None and self._decoding():
                payload = self._decode(b"")
            elif self._done or self.is_closed:
                return self._end()
            else:
                data = self._pending or (b"" if self._failed else await self._read())
                self._pending = b""
                payload = self._decode(self._take(data))
            if payload:
                return payload

    def receive_nowait(self) -> bytes:
        """:meth:`receive_some` from bytes already received (with the head, or waiting
        in the socket: one non-blocking read), or :class:`trio.WouldBlock`."""
        while True:
            if self._decoders is not None and self._decoding():
                payload = self._decode(b"")
            elif self._done or self.is_closed:
                return self._end()
            else:
                data = self._pending or (b"" if self._failed else self._recv_nowait())
                self._pending = b""
                payload = self._decode(self._take(data))
            if payload:
                return payload

    async def read(self, limit: int, *, idle_timeout: float = math.inf) -> bytes:
        """The whole body (each read within ``idle_timeout`` s); more than ``limit``
        bytes is an ``upstream_bad_response``."""
        out = bytearray()
        while True:
            with trio.move_on_after(idle_timeout) as scope:
                data = await self.receive_some()
            if scope.cancelled_caught:
                raise _fail(
                    "upstream_timeout",
                    f"The upstream {self.url} stopped sending its answer for "
                    f"{idle_timeout:g} s (upstream.idle_timeout_seconds).",
                    self.url,
                    status=504,
                )
            if not data:
                return bytes(out)
            out += data
            if len(out) > limit:
                raise _fail(
                    "upstream_bad_response",
                    f"The upstream {self.url} sent an answer larger than {limit} bytes.",
                    self.url,
                )

    async def read_prefix(self, limit: int) -> bytes:
        """Up to about ``limit`` bytes of the body (an error's), what came if it broke."""
        out = bytearray()
        try:
            while len(out) <= limit and (data := await self.receive_some()):
                out += data
        except GatewayError:
            pass
        return bytes(out[:limit])

    @property
    def _failed(self) -> bool:
        """The chunked decoder met a broken frame after payload it returned."""
        return self._unchunk is not None and self._unchunk.error is not None

    def _decoding(self) -> bool:
        assert self._decoders is not None
        return any(d.pending for d in self._decoders)

    def _decode(self, payload: bytes) -> bytes:
        decoders = self._decoders
        if decoders is None:
            return payload
        try:
            for d in decoders:
                payload = d.feed(payload)
        except Exception as exc:  # zlib.error, brotli.error
            self._reusable = False
            raise self._broken(
                "upstream_bad_response", "a body that cannot be decoded", exc
            ) from None
        return payload

    def _end(self) -> bytes:
        """At the end of the body: what the decoders still hold, once; then b""."""
        if self._decoders is None or self._finished or self.is_closed:
            return b""
        self._finished = True
        tail = b""
        try:
            for d in self._decoders:
                tail = d.feed(tail) + d.flush()
        except Exception as exc:
            raise self._broken(
                "upstream_bad_response", "a body that cannot be decoded", exc
            ) from None
        return tail

    def _broken(self, code: str, what: str, cause: object) -> UpstreamError:
        return _fail(
            code,
            f"The upstream {self.url} sent {what} in the middle of its answer.",
            self.url,
            cause,
        )

    def _disconnected(self, cause: object) -> UpstreamError:
        return _fail(
            "upstream_disconnected",
            f"The upstream {self.url} closed the connection in the middle of the response.",
            self.url,
            cause,
        )

    async def _read(self) -> bytes:
        """One socket read, waiting for it if nothing is there. Every
        :data:`QUICK_READS` reads that found bytes there yield once (an upstream that
        never pauses cannot starve the rest). A cancel or an :meth:`interrupt` lands
        only in the wait or that yield: before any byte is taken (pull-safe)."""
        sock = self._conn.sock
        if sock is None:
            tls = self._conn.tls
            assert tls is not None
            try:
                return self._received(bytes(await tls.receive_some(READ_BYTES)))
            except (trio.BrokenResourceError, trio.ClosedResourceError) as exc:
                raise self._disconnected(exc.__cause__ or exc) from exc
        if self._quick >= QUICK_READS:
            self._quick = 0
            await trio.lowlevel.checkpoint()
        while True:
            try:
                data = sock.recv(READ_BYTES)
                self._quick += 1
                self._interrupted = False  # the reader is back with bytes: done
                return self._received(data)
            except (BlockingIOError, InterruptedError):
                pass
            except OSError as exc:
                raise self._disconnected(exc) from exc
            self._quick = 0
            if self._interrupted:
                self._interrupted = False
                raise trio.WouldBlock
            try:
                await trio.lowlevel.wait_readable(sock)
            except trio.ClosedResourceError as exc:
                if not self._interrupted:
                    raise self._disconnected(exc) from exc

    def _recv_nowait(self) -> bytes:
        sock = self._conn.sock
        if sock is None:
            raise trio.WouldBlock
        try:
            data = sock.recv(READ_BYTES)
        except (BlockingIOError, InterruptedError):
            raise trio.WouldBlock from None
        except OSError as exc:
            raise self._disconnected(exc) from exc
        return self._received(data)

    def interrupt(self) -> None:
        """Wake the body read that waits (or the next one that would): it raises
        :class:`trio.WouldBlock` having taken nothing (``notify_closing``: the socket
        stays open; the next wait registers it again). Plain connections only."""
        self._interrupted = True
        sock = self._conn.sock
        if sock is not None and sock.fileno() != -1:
            trio.lowlevel.notify_closing(sock)

    def _received(self, data: bytes) -> bytes:
        """A read's bytes; at EOF, the end of a close-delimited body or an error."""
        if not data:
            if self._left < 0 and self._unchunk is None:  # close-delimited: the end
                self._done = True
                self._reusable = False
                return b""
            raise self._disconnected("EOF before the end of the body")
        return data

    def _take(self, data: bytes) -> bytes:
        """The payload ``data`` carries (framing removed); marks the end of the body."""
        unchunk = self._unchunk
        if unchunk is not None:
            try:
                payload = unchunk.feed(data)
            except ChunkedError as exc:
                self._reusable = False
                raise self._broken("upstream_disconnected", "broken chunked framing", exc) from None
            if unchunk.done:
                self._done = True
                self._reusable = self._reusable and not unchunk.leftover
            return payload
        if self._left < 0:
            return data
        if len(data) >= self._left:
            if len(data) > self._left:  # bytes after the body: never reuse the connection
                self._reusable = False
            data = data[: self._left]
            self._done = True
        self._left -= len(data)
        return data

    def _finish_nowait(self) -> None:
        """Read the rest of the body if it is already here (never waits): a relay stops
        at ``[DONE]``, and the chunked body's end is usually in the socket already."""
        sock = self._conn.sock
        if sock is None or len(self._pending) > READ_BYTES:
            return
        try:
            for _ in range(4):  # a few reads at most: a long rest is not worth it
                data = self._pending or sock.recv(READ_BYTES)
                self._pending = b""
                if not data:
                    self._reusable = False
                    return
                self._take(data)
                if self._done:
                    return
        except (BlockingIOError, InterruptedError):
            return
        except (OSError, GatewayError):
            self._reusable = False

    def close_nowait(self) -> bool:
        """Recycle the connection if it can be (the body read to its end, at once if
        the rest is here already, and keep-alive): True; else False, nothing done."""
        if self.is_closed:
            return True
        if not self._done and self._reusable:
            self._finish_nowait()
        if not (self._done and self._reusable):
            return False
        self.is_closed = True
        self._client._put(self._conn, self._key)
        return True

    async def aclose(self) -> None:
        """Recycle the connection (body read to the end, keep-alive) or close it."""
        if self.close_nowait():
            return
        self.is_closed = True
        self._conn.close()


# ------------------------------------------------------------------ the client


class _Unanswered(Exception):
    """A pooled connection failed before any byte of an answer (retried once)."""


_TARGET = re.compile(r"/[\x21-\x7e]*")
_WITH_BODY = frozenset({"POST", "PUT", "PATCH"})


@dataclass
class HTTPClient:
    """Requests to one origin below ``base_url``, over pooled keep-alive connections.

    ``headers`` go with every request (``Authorization``); ``connect_timeout`` bounds a
    connect with its TLS handshake, and a request's write. An idle connection is
    kept for the ``key`` (principal) whose request it served and reused only for that
    key's: bytes a misbehaving upstream sends after a complete answer cannot be told
    from the next request's answer, and must not reach another user (HTTP/1.1 has no
    request id). ``max_idle`` bounds them all together."""

    base_url: str
    headers: Sequence[tuple[str, str]] = ()
    connect_timeout: float = 10.0
    #: an ``httpx.AsyncBaseTransport`` answering instead of the network (tests)
    transport: Any = None
    max_idle: int = 100
    origin: Origin = field(init=False)
    _fixed: bytes = field(init=False, repr=False)
    _prefix: str = field(init=False, repr=False)
    _base_path: str = field(init=False, repr=False)
    _ssl: ssl.SSLContext | None = field(init=False, repr=False)
    #: (key, connection, since), oldest first
    _idle: list[tuple[str, _Conn, float]] = field(init=False, repr=False)
    _closed: bool = field(init=False, repr=False)

    def __post_init__(self) -> None:
        self.origin = Origin.parse(self.base_url)
        fixed = [
            ("Host", self.origin.netloc),
            ("User-Agent", f"artifact-gateway/{__version__}"),
            *self.headers,
        ]
        for name, value in fixed:
            check_header(name, value)
        self._fixed = "".join(f"{k}: {v}\r\n" for k, v in fixed).encode("ascii")
        self._ssl = verify_context() if self.origin.tls else None  # trust loaded on use
        self._prefix = self.origin.url()
        self._base_path = self.origin.base_path
        self._idle = []
        self._closed = False

    def url(self, path: str = "") -> str:
        """The URL of ``path`` below the base, as messages name it (no query)."""
        return self._prefix + (path.split("?", 1)[0] if "?" in path else path)

    def request_bytes(
        self, method: str, path: str, headers: Sequence[tuple[str, str]], content: bytes
    ) -> bytes:
        """The whole request: request line, fixed and extra headers, length, body."""
        if not _valid(path, _TARGET) or not _valid(method, _TOKEN):
            raise ValueError(f"cannot send {method} {path!r}")
        extra = "".join(f"{k}: {v}\r\n" for k, v in headers)
        if content or method in _WITH_BODY:
            extra += f"Content-Length: {len(content)}\r\n"
        line = f"{method} {self._base_path}{path} HTTP/1.1\r\n"
        return b"".join(
            (line.encode("ascii"), self._fixed, extra.encode("ascii"), b"\r\n", content)
        )

    async def open(
        self,
        method: str,
        path: str,
        *,
        content: bytes = b"",
        headers: Sequence[tuple[str, str]] = (),
        key: str = "",
        deadline: float = math.inf,
        timeout_name: str = "upstream.first_byte_timeout_seconds",
    ) -> Response:
        """Send ``method path`` (below the base URL; a query may follow) and read the
        answer's head, which must be whole by ``deadline`` (trio time; the error then
        names ``timeout_name``). The body is left to the caller, who must close the
        response. ``headers`` are checked (:class:`ValueError` for one that cannot be
        sent as it is); every status is returned, errors are only what
        prevented an answer (see the module's table).

        A pooled connection the server closed while we reused it (nothing of an
        answer came back) is retried once on a new connection: it never read it."""
        for name, value in headers:
            check_header(name, value)
        url = self.url(path)
        data = self.request_bytes(method, path, headers, content)
        started = trio.current_time()
        try:
            if self.transport is not None:
                return await _via_transport(self, method, path, headers, content, deadline)
            conn = self._take_idle(key)
            if conn is not None:
                try:
                    return await self._exchange(conn, data, key, url, method, deadline, False)
                except _Unanswered:
                    pass
            conn = await self._connect(url, deadline)
            return await self._exchange(conn, data, key, url, method, deadline, True)
        except trio.TooSlowError:
            raise _fail(
                "upstream_timeout",
                f"The upstream {url} did not answer within "
                f"{deadline - started:.3g} s ({timeout_name}).",
                url,
                status=504,
            ) from None

    async def _connect(self, url: str, deadline: float) -> _Conn:
        connect_by = trio.current_time() + self.connect_timeout
        origin = self.origin
        try:
            with trio.fail_at(min(connect_by, deadline)):
                stream = await trio.open_tcp_stream(origin.host, origin.port)
                if self._ssl is not None:
                    return await _handshake(stream, self._ssl, origin.host)
        except trio.TooSlowError:
            if deadline <= connect_by:  # the answer's bound came first
                raise
            raise _fail(
                "upstream_timeout",
                f"The upstream {url} did not accept the connection within "
                f"{self.connect_timeout:g} s (upstream.connect_timeout_seconds).",
                url,
                status=504,
            ) from None
        except (OSError, trio.BrokenResourceError) as exc:
            raise connect_error(exc, origin, url) from exc
        sock = socket.socket(fileno=stream.socket.detach())
        sock.setblocking(False)
        return _Conn(sock, None)

    def _take_idle(self, key: str) -> _Conn | None:
        """The latest pooled connection of ``key`` still usable (not expired, nothing
        to read); expired ones met on the way are closed."""
        now = trio.current_time()
        idle = self._idle
        for i in range(len(idle) - 1, -1, -1):
            k, conn, since = idle[i]
            expired = now - since >= KEEPALIVE_EXPIRY
            if k != key and not expired:
                continue
            del idle[i]
            if not expired and conn.idle_and_open():
                return conn
            conn.close()
        return None

    def _put(self, conn: _Conn, key: str) -> None:
        if self._closed or self.max_idle <= 0:
            conn.close()
            return
        if len(self._idle) >= self.max_idle:  # the oldest goes
            self._idle.pop(0)[1].close()
        self._idle.append((key, conn, trio.current_time()))

    async def _exchange(
        self,
        conn: _Conn,
        data: bytes,
        key: str,
        url: str,
        method: str,
        deadline: float,
        fresh: bool,
    ) -> Response:
        try:
            try:
                await conn.send_all(data, min(trio.current_time() + self.connect_timeout, deadline))
            except trio.TooSlowError:
                if trio.current_time() >= deadline:
                    raise
                raise _fail(
                    "upstream_timeout",
                    f"The upstream {url} did not take the request within "
                    f"{self.connect_timeout:g} s (upstream.connect_timeout_seconds).",
                    url,
                    status=504,
                ) from None
            except (trio.BrokenResourceError, trio.ClosedResourceError, OSError) as exc:
                if not fresh:
                    raise _Unanswered from exc
                raise _fail(
                    "upstream_disconnected",
                    f"The upstream {url} closed the connection while the request was sent.",
                    url,
                    exc,
                ) from exc
            return await self._response(conn, fresh, key, url, method.encode(), deadline)
        except BaseException:
            conn.close()
            raise

    async def _response(
        self, conn: _Conn, fresh: bool, key: str, url: str, method: bytes, deadline: float
    ) -> Response:
        """The answer's head: a plain one whole in the first read without h11
        (:func:`~gateway.http.h1.parse_response_head`), any other by h11."""
        buf = b""
        while True:
            try:
                data = await _receive_by(conn, deadline)
            except (trio.BrokenResourceError, trio.ClosedResourceError, OSError) as exc:
                if not fresh and not buf:
                    raise _Unanswered from exc
                raise _no_answer(url, exc) from exc
            if not data:
                if not fresh and not buf:
                    raise _Unanswered
                raise _no_answer(url, "closed before the answer's head was whole")
            fresh = True  # an answer began: no retry from here on
            if not buf and method != b"HEAD":
                head = parse_response_head(data, MAX_HEAD)
                if head is not None:
                    return Response(self, conn, head, data[head.size :], key, url)
            buf += data
            try:
                found = h11_head(buf, method)
            except h11.RemoteProtocolError as exc:
                raise _not_http(url, exc) from None
            if found is not None:
                return Response(self, conn, found[0], buf[found[1] :], key, url)
            if len(buf) > MAX_HEAD:
                raise _not_http(url, "the response head is longer than 16 KiB")

    async def aclose(self) -> None:
        """Close the idle connections; answers still open close with themselves."""
        self._closed = True
        while self._idle:
            self._idle.pop()[1].close()
        if self.transport is not None:
            await self.transport.aclose()


async def _handshake(stream: trio.SocketStream, ctx: ssl.SSLContext, host: str) -> _Conn:
    tls = trio.SSLStream(stream, ctx, server_hostname=host, https_compatible=True)
    try:
        await tls.do_handshake()
    except BaseException:
        await trio.aclose_forcefully(stream)
        raise
    return _Conn(None, tls)


def _no_answer(url: str, cause: object) -> UpstreamError:
    return _fail(
        "upstream_disconnected",
        f"The upstream {url} closed the connection without an answer.",
        url,
        cause,
    )


def _not_http(url: str, cause: object) -> UpstreamError:
    return _fail(
        "upstream_bad_response",
        f"The upstream {url} did not answer in HTTP/1.1; is upstream.base_url the "
        "model server's address, with the right scheme (http:// or https://) and port?",
        url,
        cause,
    )


# ------------------------------------------------------------------ a test transport


class _TransportResponse(Response):
    """An answer of an ``httpx.AsyncBaseTransport`` (:attr:`HTTPClient.transport`):
    its body chunks as they come (their boundaries kept), decoded as a socket's."""

    __slots__ = ("_chunks", "_http")

    def __init__(self, client: HTTPClient, resp: Any, url: str) -> None:
        raw = [(k.lower(), v) for k, v in resp.headers.raw]
        head = ResponseHead(resp.status_code, raw, False, -1, False, 0)
        super().__init__(client, _Conn(None, None), head, b"", "", url)
        self._http = resp
        self._chunks = resp.aiter_raw()

    @property
    def pull_safe(self) -> bool:
        return False

    async def _read(self) -> bytes:
        import httpx

        try:
            data: bytes = await self._chunks.__anext__()
            return data
        except StopAsyncIteration:
            return self._received(b"")
        except httpx.HTTPError as exc:
            raise self._disconnected(exc) from exc

    def _recv_nowait(self) -> bytes:
        raise trio.WouldBlock

    def interrupt(self) -> None:  # pragma: no cover - never pull-safe
        pass

    def close_nowait(self) -> bool:
        return self.is_closed

    async def aclose(self) -> None:
        if not self.is_closed:
            self.is_closed = True
            await abandon(self._chunks)
            with trio.CancelScope(shield=True), contextlib.suppress(Exception):
                await self._http.aclose()


async def abandon(chunks: AsyncIterator[bytes]) -> None:
    """Finish a byte iterator the way a cancelled read does (httpx's streams).

    httpx's iterator is a chain of async generators; one left suspended is finalized
    by the garbage collector with a ResourceWarning. A read in a cancelled scope ends
    them all (data already buffered comes back without a checkpoint first).
    """
    with trio.CancelScope() as scope:
        scope.cancel()
        with contextlib.suppress(Exception):
            while True:
                await chunks.__anext__()
    aclose = getattr(chunks, "aclose", None)
    if aclose is not None:
        with trio.CancelScope(shield=True), contextlib.suppress(Exception):
            await aclose()


async def _via_transport(
    client: HTTPClient,
    method: str,
    path: str,
    headers: Sequence[tuple[str, str]],
    content: bytes,
    deadline: float,
) -> Response:
    import httpx

    origin = client.origin
    url = client.url(path)
    fixed = [(k, v) for k, v in (line.split(": ", 1) for line in _fixed_lines(client))]
    request = httpx.Request(
        method,
        f"{origin.scheme}://{origin.netloc}{origin.base_path}{path}",
        headers=[*fixed, *headers],
        content=content,
    )
    try:
        with trio.fail_at(deadline):
            resp = await client.transport.handle_async_request(request)
    except httpx.ConnectError as exc:
        raise connect_error(exc, origin, url) from exc
    except httpx.TimeoutException:
        raise trio.TooSlowError from None
    except httpx.HTTPError as exc:
        raise _no_answer(url, exc) from exc
    return _TransportResponse(client, resp, url)


def _fixed_lines(client: HTTPClient) -> list[str]:
    return [line for line in client._fixed.decode("ascii").split("\r\n") if line]
