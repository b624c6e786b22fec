"""Hostile HTTP/1.1 over raw sockets: the case catalogue, a raw client, and the processes.

Each :class:`Case` is a list of byte strings written on one fresh TCP connection (with
an optional pause between them, optionally half-closing or aborting afterwards); the
client then reads until the server closes, resets, or ``read_timeout`` passes, and
parses every response it can (:func:`parse_responses`). The verdict is left to the
test: which statuses are allowed, whether the connection may stay open.

Most cases end with :data:`FOLLOW_UP` (``GET /health`` with ``Connection: close``):
a server that kept the connection usable answers it (200) and closes; one that decided
to close after the refusal has said ``Connection: close``. A wedged connection shows up
as ``end == "timeout"``.

:class:`Services` starts the demo upstream, ``gateway run`` and ``gateway proxy`` as
processes (free ports, a temp config) and stops them whatever happens.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import select
import socket
import time
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness.instances import gateway_toml
from tests.procs import Proc, free_port

KEY = "hostile-alice-key-0123456789"
PROXY_KEY = "hostile-proxy-key-0123456789"
OWUI_KEY = "hostile-owui-key-0123456789"

FOLLOW_UP = b"GET /health HTTP/1.1\r\nHost: h\r\nConnection: close\r\n\r\n"

#: (method, path) of every route of the API server, plus an unknown one
GATEWAY_ROUTES: tuple[tuple[str, str], ...] = (
    ("GET", "/health"),
    ("GET", "/health/ready"),
    ("GET", "/metrics"),
    ("GET", "/v1/models"),
    ("POST", "/v1/chat/completions"),
    ("POST", "/v1/responses"),
    ("GET", "/v1/responses/resp_nope"),
    ("DELETE", "/v1/responses/resp_nope"),
    ("POST", "/v1/runs"),
    ("GET", "/v1/runs/run_nope"),
    ("POST", "/v1/runs/run_nope/stop"),
    ("GET", "/v1/runs/run_nope/events"),
    ("GET", "/v1/sessions"),
    ("GET", "/v1/sessions/s1"),
    ("DELETE", "/v1/sessions/s1"),
    ("GET", "/v1/artifacts"),
    ("GET", "/v1/artifacts/nope"),
    ("DELETE", "/v1/artifacts/nope"),
    ("POST", "/v1/selftest"),
    ("GET", "/nope"),
)
PROXY_ROUTES: tuple[tuple[str, str], ...] = (
    ("GET", "/health"),
    ("GET", "/v1/models"),
    ("POST", "/v1/chat/completions"),
    ("GET", "/nope"),
)
#: routes that parse a JSON body
JSON_ROUTES = ("/v1/chat/completions", "/v1/responses", "/v1/runs", "/v1/selftest")


# --------------------------------------------------------------------------- parsing


@dataclass
class Resp:
    status: int
    headers: dict[str, str]
    body: bytes

    @property
    def closes(self) -> bool:
        return "close" in self.headers.get("connection", "").lower()


def _chunked(data: bytes, i: int) -> tuple[bytes, int] | None:
    """Decode a chunked body starting at ``i``: (body, end) or None if incomplete."""
    body = bytearray()
    while True:
        j = data.find(b"\r\n", i)
        if j < 0:
            return None
        size = int(data[i:j].split(b";")[0].strip() or b"0", 16)
        i = j + 2
        if size == 0:
            k = data.find(b"\r\n\r\n", i - 2)
            return (bytes(body), k + 4) if k >= 0 else None
        if len(data) < i + size + 2:
            return None
        body += data[i : i + size]
        i += size + 2


def parse_responses(data: bytes, *, eof: bool) -> list[Resp]:
    """Every complete response in ``data`` (1xx included); a response framed by the
    end of the connection counts only if ``eof``."""
    out: list[Resp] = []
    i = 0
    while i < len(data):
        j = data.find(b"\r\n\r\n", i)
        if j < 0:
            break
        lines = data[i:j].split(b"\r\n")
        m = re.match(rb"HTTP/\d\.\d (\d{3})", lines[0])
        if m is None:
            break
        status = int(m.group(1))
        headers: dict[str, str] = {}
        for line in lines[1:]:
            name, _, value = line.partition(b":")
            key = name.strip().lower().decode("latin1")
            val = value.strip().decode("latin1")
            headers[key] = f"{headers[key]}, {val}" if key in headers else val
        i = j + 4
        if 100 <= status < 200 or status in (204, 304):
            out.append(Resp(status, headers, b""))
            continue
        if "chunked" in headers.get("transfer-encoding", "").lower():
            got = _chunked(data, i)
            if got is None:
                break
            body, i = got
        elif "content-length" in headers:
            n = int(headers["content-length"])
            if len(data) < i + n:
                break
            body, i = data[i : i + n], i + n
        else:
            if not eof:
                break
            body, i = data[i:], len(data)
        out.append(Resp(status, headers, body))
    return out


# --------------------------------------------------------------------------- the client


@dataclass
class Case:
    """One connection's worth of hostile bytes."""

    kind: str
    server: str  # "gateway" | "proxy"
    parts: list[bytes]
    pause: float = 0.0  # seconds between parts
    finish: str = "read"  # "read" | "shut_wr" (half-close, then read) | "abort" (close at once)
    read_timeout: float = 6.0
    label: str = ""


@dataclass
class Outcome:
    case: Case
    responses: list[Resp]
    end: str  # "eof" | "rst" | "timeout" | "aborted" | "refused"
    sent_all: bool
    seconds: float
    raw: bytes = b""

    @property
    def statuses(self) -> list[int]:
        return [r.status for r in self.responses if r.status >= 200]


def run_case(case: Case, port: int) -> Outcome:
    t0 = time.monotonic()
    try:
        sock = socket.create_connection(("127.0.0.1", port), timeout=5)
    except OSError:
        return Outcome(case, [], "refused", False, time.monotonic() - t0)
    data = bytearray()
    end = "timeout"
    sent_all = True
    with sock:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        try:
            for n, part in enumerate(case.parts):
                if n and case.pause:
                    time.sleep(case.pause)
                sock.sendall(part)
        except OSError:  # the server closed or reset while we were still sending
            sent_all = False
        if case.finish == "abort":
            sock.setsockopt(
                socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00"
            )
            return Outcome(case, [], "aborted", sent_all, time.monotonic() - t0)
        if case.finish == "shut_wr":
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_WR)
        sock.setblocking(False)
        deadline = time.monotonic() + case.read_timeout
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                break
            ready, _, _ = select.select([sock], [], [], left)
            if not ready:
                break
            try:
                chunk = sock.recv(65536)
            except ConnectionResetError:
                end = "rst"
                break
            except BlockingIOError:
                continue
            if not chunk:
                end = "eof"
                break
            data += chunk
    raw = bytes(data)
    return Outcome(
        case, parse_responses(raw, eof=end != "timeout"), end, sent_all, time.monotonic() - t0, raw
    )


# --------------------------------------------------------------------------- the catalogue


def _req(
    method: str,
    path: str,
    headers: Iterable[tuple[str, str]] = (),
    body: bytes = b"",
    *,
    version: str = "HTTP/1.1",
    length: bool = True,
) -> bytes:
    lines = [f"{method} {path} {version}", "Host: h"]
    lines += [f"{k}: {v}" for k, v in headers]
    if length and body:
        lines.append(f"Content-Length: {len(body)}")
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin1") + body


def _auth(server: str, keyed: bool) -> list[tuple[str, str]]:
    if not keyed:
        return []
    return [("Authorization", f"Bearer {KEY if server == 'gateway' else OWUI_KEY}")]


CHAT = {"model": "demo", "messages": [{"role": "user", "content": "hi"}]}


def _framing_cases(server: str, method: str, path: str, keyed: bool) -> Iterator[Case]:
    """Broken message framing: chunked bodies, lengths, header syntax."""
    a = _auth(server, keyed)
    head = [*a, ("Content-Type", "application/json")]
    te = [*head, ("Transfer-Encoding", "chunked")]

    def c(kind: str, *parts: bytes, **kw: object) -> Case:
        return Case(kind, server, list(parts), label=f"{method} {path} key={keyed}", **kw)  # type: ignore[arg-type]

    yield c("bad_chunk_size", _req(method, path, te, b"zz\r\nabc\r\n0\r\n\r\n", length=False))
    yield c(
        "chunk_size_overflow",
        _req(method, path, te, b"ffffffffffffffffffffff\r\nabc\r\n0\r\n\r\n", length=False),
    )
    yield c(
        "chunk_missing_final",
        _req(method, path, te, b"2\r\n{}\r\n", length=False),
        finish="shut_wr",
    )
    yield c(
        "chunk_bad_terminator",
        _req(method, path, te, b"2\r\n{}XX0\r\n\r\n", length=False),
    )
    yield c(
        "trailers_abuse",
        _req(
            method,
            path,
            te,
            b"2\r\n{}\r\n0\r\n" + b"".join(b"X-T%d: v\r\n" % i for i in range(3000)) + b"\r\n",
            length=False,
        ),
        FOLLOW_UP,
    )
    yield c(
        "trailer_without_colon",
        _req(method, path, te, b"2\r\n{}\r\n0\r\nnocolon\r\n\r\n", length=False),
        FOLLOW_UP,
    )
    yield c(
        "cl_and_te",
        _req(method, path, [*te, ("Content-Length", "5")], b"2\r\n{}\r\n0\r\n\r\n", length=False),
        FOLLOW_UP,
    )
    yield c(  # a zero length is a Content-Length too (a CL-trusting front reads no body)
        "cl0_and_te",
        _req(method, path, [*te, ("Content-Length", "0")], b"2\r\n{}\r\n0\r\n\r\n", length=False),
        FOLLOW_UP,
    )
    yield c(  # a request hidden in the body a Content-Length-trusting front would see
        "cl_and_te_smuggled",
        _req(
            method,
            path,
            [*te, ("Content-Length", str(5 + len(FOLLOW_UP)))],
            b"0\r\n\r\n" + FOLLOW_UP,
            length=False,
        ),
    )
    yield c(
        "te_not_chunked",
        _req(method, path, [*head, ("Transfer-Encoding", "gzip")], b"{}", length=False),
        FOLLOW_UP,
    )
    yield c(
        "te_chunked_identity",
        _req(
            method,
            path,
            [*head, ("Transfer-Encoding", "chunked, identity")],
            b"2\r\n{}\r\n0\r\n\r\n",
            length=False,
        ),
        FOLLOW_UP,
    )
    yield c(
        "two_content_lengths",
        _req(
            method,
            path,
            [*head, ("Content-Length", "2"), ("Content-Length", "3")],
            b"{}",
            length=False,
        ),
        FOLLOW_UP,
    )
    yield c(
        "content_length_list",
        _req(method, path, [*head, ("Content-Length", "2, 2")], b"{}", length=False),
        FOLLOW_UP,
    )
    yield c(
        "negative_content_length",
        _req(method, path, [*head, ("Content-Length", "-1")], b"{}", length=False),
        FOLLOW_UP,
    )
    yield c(
        "huge_content_length",
        _req(method, path, [*head, ("Content-Length", "9" * 30)], b"{}", length=False),
        FOLLOW_UP,
    )
    yield c(
        "body_shorter_than_declared",
        _req(method, path, [*head, ("Content-Length", "100")], b'{"a": 1', length=False),
        finish="shut_wr",
    )
    yield c(
        "body_longer_than_declared",
        _req(
            method,
            path,
            [*head, ("Content-Length", "2")],
            b'{}{"extra": "garbage"}\r\n\r\n',
            length=False,
        ),
        FOLLOW_UP,
    )
    yield c(
        "header_without_colon",
        _req(method, path, [*a, ("X-Broken", "")]).replace(b"X-Broken: ", b"X-Broken"),
        FOLLOW_UP,
    )
    yield c(
        "header_space_before_colon",
        _req(method, path, a).replace(b"Host: h", b"Host : h"),
        FOLLOW_UP,
    )
    yield c("obs_fold", _req(method, path, [*a, ("X-Folded", "one\r\n two")]), FOLLOW_UP)
    yield c("nul_in_header", _req(method, path, [*a, ("X-Nul", "a\x00b")]), FOLLOW_UP)
    yield c("cr_in_header", _req(method, path, [*a, ("X-Cr", "a\rb")]), FOLLOW_UP)
    yield c("lf_only_line_endings", _req(method, path, a).replace(b"\r\n", b"\n"), FOLLOW_UP)
    yield c("missing_host", _req(method, path, a).replace(b"Host: h\r\n", b""), FOLLOW_UP)
    yield c("two_hosts", _req(method, path, [*a, ("Host", "evil")]), FOLLOW_UP)
    yield c("obs_text_in_header", _req(method, path, [*a, ("X-Latin", "caf\xe9\xff")]), FOLLOW_UP)


def _line_cases(server: str, keyed: bool) -> Iterator[Case]:
    """Request-line trouble: methods, targets, versions, whole-head sizes."""
    a = _auth(server, keyed)

    def c(kind: str, *parts: bytes, label: str = "", **kw: object) -> Case:
        return Case(kind, server, list(parts), label=f"{label} key={keyed}", **kw)  # type: ignore[arg-type]

    for method in ("G@T", "GET\x00", "PÖST", "", "get", "PROPFIND", "CONNECT", "TRACE", "BREW"):
        yield c("invalid_method", _req(method, "/health", a), FOLLOW_UP, label=repr(method))
    for target in (
        "*",
        "http://h/health",
        "http://h",
        "https://h:99999/v1/models",
        "ftp://h/health",
        "health",
        "v1/models",
        "/%00",
        "/v1/models%00",
        "/v1/artifacts/%00",
        "/v1/sessions/%ff%fe",
        "/v1/sessions/%",
        "/v1/sessions/..%2f..%2fetc%2fpasswd",
        "//v1/models",
        "/v1/models?" + "a=1&" * 200,
        "/" + "a" * 9000,
        "/v1/sessions/" + "b" * 12000,
        "/" + "c" * 70000,
        "h:443",
    ):
        yield c("invalid_target", _req("GET", target, a), FOLLOW_UP, label=target[:40])
        yield c(
            "invalid_target",
            _req("POST", target, a, json.dumps(CHAT).encode()),
            FOLLOW_UP,
            label="POST " + target[:40],
        )
    yield c("http09", b"GET /health\r\n\r\n", FOLLOW_UP)
    yield c("http09_bare", b"GET /\r\n", finish="shut_wr")
    for version in (
        "HTTP/2.0",
        "HTTP/3.0",
        "HTTP/1.9",
        "HTTP/0.9",
        "HTTP/1",
        "HTTPS/1.1",
        "http/1.1",
    ):
        yield c("odd_version", _req("GET", "/health", a, version=version), FOLLOW_UP, label=version)
    yield c(
        "http10_keepalive",
        _req("GET", "/health", [*a, ("Connection", "keep-alive")], version="HTTP/1.0"),
        FOLLOW_UP,
    )
    yield c(
        "h2_preface", b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + b"\x00\x00\x00\x04\x00\x00\x00\x00\x00"
    )
    yield c(
        "h2c_upgrade",
        _req(
            "GET",
            "/health",
            [
                *a,
                ("Connection", "Upgrade, HTTP2-Settings"),
                ("Upgrade", "h2c"),
                ("HTTP2-Settings", "AAMAAABkAAQAAP__"),
            ],
        ),
        FOLLOW_UP,
    )
    yield c(
        "websocket_upgrade",
        _req(
            "GET",
            "/v1/models",
            [
                *a,
                ("Connection", "Upgrade"),
                ("Upgrade", "websocket"),
                ("Sec-WebSocket-Key", "dGhlIHNhbXBsZSBub25jZQ=="),
                ("Sec-WebSocket-Version", "13"),
            ],
        ),
        FOLLOW_UP,
    )
    yield c("header_line_100kb", _req("GET", "/health", [*a, ("X-Big", "x" * 100_000)]), FOLLOW_UP)
    yield c(
        "ten_thousand_headers",
        _req("GET", "/health", [*a, *((f"X-H{i}", "v") for i in range(10_000))]),
        FOLLOW_UP,
    )
    yield c(
        "many_small_headers",
        _req("GET", "/v1/models", [*a, *((f"X{i}", "") for i in range(1500))]),
        FOLLOW_UP,
    )
    yield c("garbage_bytes", bytes(range(256)) * 4, FOLLOW_UP)
    yield c("tls_client_hello", bytes.fromhex("160301020001000200fc0303") + os.urandom(64))
    yield c("empty_lines_before_request", b"\r\n\r\n\r\n" + _req("GET", "/health", a), FOLLOW_UP)
    yield c("early_close_mid_request_line", b"GET /hea", finish="abort")
    yield c("early_close_mid_headers", b"GET /health HTTP/1.1\r\nHost: h\r\nX-A: 1", finish="abort")
    yield c(
        "half_close_mid_headers", b"GET /health HTTP/1.1\r\nHost: h\r\nX-A: 1", finish="shut_wr"
    )
    body = json.dumps(CHAT).encode()
    yield c(
        "early_close_mid_body",
        _req(
            "POST",
            "/v1/chat/completions",
            [*a, ("Content-Length", str(len(body)))],
            body[:10],
            length=False,
        ),
        finish="abort",
    )
    yield c(
        "reset_mid_stream",
        _req(
            "POST",
            "/v1/chat/completions",
            a,
            json.dumps({**CHAT, "stream": True, "model": "demo-long"}).encode(),
        ),
        finish="abort",
    )


def _pipelined_cases(server: str, keyed: bool) -> Iterator[Case]:
    a = _auth(server, keyed)
    ok = _req("GET", "/health", a)

    def c(kind: str, *parts: bytes, label: str = "", **kw: object) -> Case:
        return Case(kind, server, list(parts), label=f"{label} key={keyed}", **kw)  # type: ignore[arg-type]

    for bad in (
        b"GET /health HTTP/1.1\r\nHost h\r\n\r\n",
        b"G\x00T / HTTP/1.1\r\nHost: h\r\n\r\n",
        _req(
            "POST",
            "/v1/chat/completions",
            [*a, ("Transfer-Encoding", "chunked")],
            b"zz\r\n\r\n",
            length=False,
        ),
        _req("POST", "/v1/chat/completions", [*a, ("Content-Length", "x")], b"{}", length=False),
    ):
        yield c("pipelined_bad_in_middle", ok + ok + bad + ok + FOLLOW_UP)
    yield c("pipelined_many", ok * 50 + FOLLOW_UP)
    yield c("pipelined_byte_by_byte", *[bytes([b]) for b in ok + FOLLOW_UP])


def _refusal_cases(server: str) -> Iterator[Case]:
    """A POST refused before its body is read, then more on the same connection."""
    routes = ["/v1/chat/completions", "/nope", "/health"]
    if server == "gateway":
        routes += ["/v1/runs", "/v1/responses"]
    for path in routes:
        for keyed in (False, True):
            a = _auth(server, keyed)
            for size in (10, 60_000, 300_000, 5_000_000):
                body = b"x" * size
                head = _req("POST", path, [*a, ("Content-Length", str(size))], length=False)
                label = f"{path} key={keyed} {size}B"
                # the body arrives with the head, in one go
                yield Case(
                    "refusal_body_then_request", server, [head + body + FOLLOW_UP], label=label
                )
                # the client waits for the refusal first, then sends the body and more
                yield Case(
                    "refusal_then_body_then_request",
                    server,
                    [head, body + FOLLOW_UP],
                    pause=0.3,
                    label=label,
                )
            yield Case(
                "refusal_chunked_then_request",
                server,
                [
                    _req(
                        "POST",
                        path,
                        [*a, ("Transfer-Encoding", "chunked")],
                        b"4\r\nabcd\r\n0\r\n\r\n",
                        length=False,
                    ),
                    FOLLOW_UP,
                ],
                pause=0.2,
                label=f"{path} key={keyed}",
            )
            yield Case(
                "expect_100_continue_refused",
                server,
                [
                    _req(
                        "POST",
                        path,
                        [*a, ("Content-Length", "5"), ("Expect", "100-continue")],
                        length=False,
                    ),
                    b"hello" + FOLLOW_UP,
                ],
                pause=0.3,
                label=f"{path} key={keyed}",
            )


def _json_cases(server: str, path: str, keyed: bool) -> Iterator[Case]:
    """JSON bodies a parser can choke on."""
    a = [*_auth(server, keyed), ("Content-Type", "application/json")]
    if server == "proxy":
        a.append(("X-OpenWebUI-User-Id", "u1"))

    def c(kind: str, body: bytes, label: str = "") -> Case:
        return Case(
            kind,
            server,
            [_req("POST", path, a, body), FOLLOW_UP],
            label=f"{path} key={keyed} {label}",
        )

    chat = json.dumps(CHAT)
    yield c(
        "json_invalid_utf8",
        b'{"model": "demo", "messages": [{"role": "user", "content": "\xff\xfe\xc3"}]}',
    )
    yield c("json_invalid_utf8", b'{"model": "\xed\xa0\x80"}', "encoded surrogate")
    yield c("json_lone_surrogate", chat.replace('"hi"', '"\\ud800"').encode(), "content")
    yield c("json_lone_surrogate", chat.replace('"demo"', '"\\udfff"').encode(), "model")
    yield c("json_lone_surrogate", chat.replace('"user"', '"\\udbff x"').encode(), "role")
    yield c(
        "json_lone_surrogate",
        b'{"\\ud800": 1, "model": "demo", "messages": [{"role": "user", "content": "hi"}]}',
        "key",
    )
    yield c("json_deep_nesting", b"[" * 100_000 + b"]" * 100_000, "100k [")
    yield c("json_deep_nesting", b'{"a":' * 5000 + b"1" + b"}" * 5000, "5k {")
    yield c(
        "json_deep_nesting",
        chat.replace('"hi"', "[" * 200 + "]" * 200).encode(),
        "content 200 deep",
    )
    yield c("json_deep_nesting", b"[" * 100_000, "unclosed")
    yield c(
        "json_huge_number", chat.replace("}]}", '}], "temperature": 1e999999}').encode(), "1e999999"
    )
    yield c(
        "json_huge_number",
        chat.replace("}]}", '}], "max_tokens": ' + "9" * 5000 + "}").encode(),
        "5000 digits",
    )
    yield c("json_huge_number", chat.replace("}]}", '}], "top_p": NaN}').encode(), "NaN")
    yield c("json_huge_number", chat.replace("}]}", '}], "seed": -Infinity}').encode(), "-Infinity")
    yield c("json_huge_number", b'{"model": 1e400, "messages": []}', "model 1e400")
    yield c("json_not_object", b'"just a string"')
    yield c("json_not_object", b"null")
    yield c("json_trailing_garbage", (chat + "garbage").encode())
    yield c(
        "json_duplicate_keys",
        b'{"model": "demo", "model": 7, "messages": [{"role": "user", "content": "hi"}]}',
    )
    yield c("json_bom", b"\xef\xbb\xbf" + chat.encode())
    yield c("json_utf16", chat.encode("utf-16"))
    yield c("json_wrong_types", b'{"model": ["demo"], "messages": "hi", "stream": "yes"}')
    yield c("json_wrong_types", b'{"model": "demo", "messages": [1, 2, 3]}', "messages ints")
    yield c(
        "json_wrong_types",
        b'{"model": "demo", "messages": [{"role": "user", "content": {"x": 1}}], "stream": false, "download_link_mode": ["x"]}',
        "odd content",
    )
    yield c(
        "json_wrong_types", b'{"model": "demo", "input": [{"role": 1}], "messages": [{}]}', "input"
    )
    yield c("json_nul_in_string", chat.replace('"hi"', '"a\\u0000b"').encode())


def catalogue(server: str) -> list[Case]:
    """Every hostile case for ``server`` ("gateway" or "proxy")."""
    routes = GATEWAY_ROUTES if server == "gateway" else PROXY_ROUTES
    cases: list[Case] = []
    for keyed in (False, True):
        for method, path in routes:
            for m in {method, "POST" if method == "GET" else "GET"}:
                cases += _framing_cases(server, m, path, keyed)
        cases += _line_cases(server, keyed)
        cases += _pipelined_cases(server, keyed)
        for path in JSON_ROUTES if server == "gateway" else ("/v1/chat/completions",):
            cases += _json_cases(server, path, keyed)
    cases += _refusal_cases(server)
    return cases


def slow_cases(server: str, header_timeout: float) -> list[Case]:
    """Clients that take their time: slowloris, a stalled body, 100-continue then nothing."""
    over = header_timeout + 3
    head = b"GET /health HTTP/1.1\r\nHost: h\r\nX-Slow: " + b"a" * int(over + 2) + b"\r\n\r\n"
    a = _auth(server, True)
    return [
        Case("slow_headers", server, [bytes([b]) for b in head], pause=1.0, read_timeout=over + 4),
        Case(
            "slow_headers_after_keepalive",
            server,
            [_req("GET", "/health", a)] + [bytes([b]) for b in head],
            pause=1.0,
            read_timeout=over + 4,
        ),
        Case(
            "stalled_body",
            server,
            [
                _req(
                    "POST",
                    "/v1/chat/completions",
                    [*a, ("Content-Length", "100")],
                    b'{"model"',
                    length=False,
                )
            ],
            read_timeout=over + 60,
        ),
        Case(
            "expect_100_then_nothing",
            server,
            [
                _req(
                    "POST",
                    "/v1/chat/completions",
                    [*a, ("Content-Length", "100"), ("Expect", "100-continue")],
                    length=False,
                )
            ],
            read_timeout=over + 60,
        ),
        Case("idle_after_connect", server, [b""], read_timeout=over + 4),
    ]


# --------------------------------------------------------------------------- processes


@dataclass
class Services:
    base: Path
    ports: dict[str, int] = field(default_factory=dict)
    procs: dict[str, Proc] = field(default_factory=dict)

    def config(self, extra_server: Mapping[str, Any] | None = None) -> Path:
        p = self.ports
        root = self.base / "artifacts"
        root.mkdir(exist_ok=True)
        gateway = f"http://127.0.0.1:{p['gateway']}"
        server: dict[str, Any] = {"bind": f"127.0.0.1:{p['gateway']}", "public_base_url": gateway}
        server.update({"drain_timeout_seconds": 3.0, **(extra_server or {})})
        proxy: dict[str, Any] = {"bind": f"127.0.0.1:{p['proxy']}", "gateway_url": gateway}
        proxy.update({"gateway_key": PROXY_KEY, "client_keys": [OWUI_KEY]})
        cfg = self.base / "gateway.toml"
        cfg.write_text(
            gateway_toml(
                self.base / "state",
                upstream_url=f"http://127.0.0.1:{p['upstream']}/v1",
                roots=[root],
                keys=[(KEY, "alice", "user"), (PROXY_KEY, "owui-proxy", "proxy")],
                sections={"server": server, "proxy": proxy},
            ),
            encoding="utf-8",
        )
        return cfg

    def start(self, extra_server: Mapping[str, Any] | None = None) -> None:
        self.ports = {name: free_port() for name in ("upstream", "gateway", "proxy")}
        cfg = self.config(extra_server)
        up = ["-m", "gateway.cli.demo_upstream", "--port", str(self.ports["upstream"])]
        up += ["--root", str(self.base / "artifacts"), "--outside", str(self.base / "outside")]
        up += ["--chunk-delay", "0.005"]
        self.procs["upstream"] = Proc(up, self.base / "upstream.log")
        self.procs["upstream"].wait_for(r"base URL http://")
        for name, cmd in (("gateway", "run"), ("proxy", "proxy")):
            self.procs[name] = Proc(
                ["-m", "gateway.cli", cmd, "--config", str(cfg)], self.base / f"{name}.log"
            )
        for name in ("gateway", "proxy"):
            self.procs[name].wait_for(r"listening on http://127\.0\.0\.1:\d+")

    def stop(self) -> None:
        for name in ("proxy", "gateway", "upstream"):
            if name in self.procs:
                self.procs[name].stop()
