"""The upstream client's response-head parser (gateway.http.h1.parse_response_head) against
h11, its reference.

An upstream's head that the parser accepts must be one h11 accepts as the answer to a
POST, read the same way: status, fields (lowercased names, stripped values, in order),
body framing, keep-alive and where the head ends. Declining is always safe (h11 then
reads it, as before); accepting what h11 refuses, or reading it differently, is the bug
these properties look for: the upstream is not trusted.
"""

from __future__ import annotations

import h11
import pytest
from h11._connection import _body_framing, _keep_alive
from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.http.h1 import parse_response_head
from tests.unit.test_h1 import mutations

MAX = 16 * 1024
SSE_HEAD = (
    b"HTTP/1.1 200 OK\r\n"
    b"content-type: text/event-stream; charset=utf-8\r\n"
    b"Transfer-Encoding: chunked\r\n"
    b"Date: Thu, 03 Dec 2026 20:00:00 GMT\r\n\r\n"
)
BODY = b"5\r\nhello\r\n0\r\n\r\n"


def _h11_view(data: bytes) -> tuple[h11.Response, tuple[str, tuple[int, ...]], int] | None:
    """What h11 reads from ``data`` as the client of a POST: the final response, its
    framing and the head's size; None when h11 refuses the head or needs more."""
    conn = h11.Connection(h11.CLIENT, max_incomplete_event_size=MAX)
    conn.send(
        h11.Request(method="POST", target="/c", headers=[("Host", "u"), ("Content-Length", "0")])
    )
    conn.send(h11.EndOfMessage())
    conn.receive_data(data)
    try:
        while True:
            event = conn.next_event()
            if isinstance(event, h11.Response):
                break
            if not isinstance(event, h11.InformationalResponse):
                return None
    except h11.RemoteProtocolError:
        return None
    rest, _ = conn.trailing_data
    return event, _body_framing(b"POST", event), len(data) - len(rest)


def _agrees(data: bytes) -> bool:
    """Check the parser against h11 on ``data``; True if the parser took it."""
    head = parse_response_head(data, MAX)
    if head is None:
        return False
    seen = _h11_view(data)
    assert seen is not None, f"accepted a head h11 refuses: {data!r}"
    response, (kind, args), size = seen
    assert head.status == response.status_code
    assert head.headers == [(bytes(n), bytes(v)) for n, v in response.headers]
    assert head.framing == kind
    if kind == "content-length":
        assert head.length == args[0]
    assert head.keep_alive == _keep_alive(response)
    assert head.size == size
    return True


def test_a_plain_event_stream_head_is_lean() -> None:
    head = parse_response_head(SSE_HEAD + BODY, MAX)
    assert head is not None and _agrees(SSE_HEAD + BODY)
    assert (head.status, head.chunked, head.length, head.keep_alive) == (200, True, -1, True)
    assert head.headers[0] == (b"content-type", b"text/event-stream; charset=utf-8")
    assert (SSE_HEAD + BODY)[head.size :] == BODY


@pytest.mark.parametrize(
    "data",
    [
        b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello",
        b"HTTP/1.1 200\r\nContent-Length: 0\r\n\r\n",
        b"HTTP/1.1 429 Too Many Requests\r\nRetry-After: 3\r\nConnection: close\r\n\r\n",
        b"HTTP/1.1 500 \r\nX-A:\r\nX-B: \t a \t b \t\r\n\r\n",
        b"HTTP/1.1 200 \x80\xff reason\tok\r\nConnection: Keep-Alive, CLOSE\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: CHUNKED\r\n\r\n",  # h11 lowercases it
        b"HTTP/1.1 200 OK\r\nTRANSFER-ENCODING:  Chunked \r\n\r\n",
    ],
)
def test_plain_heads_are_lean_and_read_as_h11_reads_them(data: bytes) -> None:
    assert _agrees(data)


@pytest.mark.parametrize(
    "data",
    [
        SSE_HEAD[:-2],  # not whole yet
        b"HTTP/1.1 200 OK\nContent-Length: 0\n\n",  # bare LF ends
        b"HTTP/1.1 200 OK\r\nX-A: a\n\r\n",  # a bare LF line end h11 reads as the end
        b"HTTP/1.0 200 OK\r\nContent-Length: 0\r\n\r\n",
        b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n",
        b"HTTP/1.1 204 No Content\r\nContent-Length: 7\r\n\r\n",
        b"HTTP/1.1 304 Not Modified\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nX-A: a\r\n b\r\n\r\n",  # an obsolete line fold
        b"HTTP/1.1 200 OK\r\nContent-Length: 5, 5\r\n\r\nhello",
        b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nContent-Length: 5\r\n\r\nhello",
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nContent-Length: 5\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip, chunked\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding:\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nContent-Length: -1\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nContent-Length: 1234567890123456789\r\n\r\n",
        b"HTTP/1.1 2000 OK\r\n\r\n",
        b"HTTP/1.1 20 OK\r\n\r\n",
        b"HTTP/1.1 200 O\x00K\r\n\r\n",
        b"HTTP/1.1  200 OK\r\n\r\n",
        b"http/1.1 200 OK\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nX A: a\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nX-A: a\x00b\r\n\r\n",
        b"HTTP/1.1 200 OK\r\n: a\r\n\r\n",
    ],
)
def test_what_the_parser_leaves_to_h11(data: bytes) -> None:
    assert parse_response_head(data, MAX) is None


def test_the_size_bound_holds() -> None:
    big = b"HTTP/1.1 200 OK\r\nX-A: " + b"a" * MAX + b"\r\nContent-Length: 0\r\n\r\n"
    assert parse_response_head(big, MAX) is None
    assert parse_response_head(big, len(big)) is not None


def test_a_head_cut_anywhere_is_not_lean() -> None:
    for cut in range(len(SSE_HEAD)):
        assert parse_response_head(SSE_HEAD[:cut], MAX) is None
    assert parse_response_head(SSE_HEAD, MAX) is not None


# -- properties: generated heads, built from the pieces that trip parsers up

_STATUS_LINES = [
    b"HTTP/1.1 200 OK",
    b"HTTP/1.1 200",
    b"HTTP/1.1 200 ",
    b"HTTP/1.1 401 Unauthorized",
    b"HTTP/1.1 204 No Content",
    b"HTTP/1.1 304 Not Modified",
    b"HTTP/1.1 100 Continue",
    b"HTTP/1.1 199 x",
    b"HTTP/1.0 200 OK",
    b"HTTP/2.0 200 OK",
    b"HTTP/1.1 099 x",
    b"HTTP/1.1 999 x",
    b"HTTP/1.1 200 a\x7fb",
    b"HTTP/1.1 200 a\x0bb",
    b"HTTP/1.1 200 a\rb",
    b"HTTP/1.1 2x0 OK",
    b"HTTP/1.1 200OK",
]
_NAMES = [
    b"Content-Type",
    b"content-length",
    b"Content-Length",
    b"Transfer-Encoding",
    b"Connection",
    b"Retry-After",
    b"X\x7fB",
    b"X B",
    b"",
    b"X:Y",
]
_VALUES = [
    b"",
    b"x",
    b"0",
    b"7",
    b"007",
    b"2, 2",
    b"2,3",
    b"-1",
    b"+7",
    b"close",
    b"Close",
    b"keep-alive, close",
    b"closed",
    b"chunked",
    b"CHUNKED",
    b"chunked, chunked",
    b"gzip",
    b"a b",
    b" x ",
    b"x\x0b",
    b"x\x00",
    b"\x80\xff",
    b"x\ry",
    b"x\ny",
]
_SEPS = [b":", b": ", b":\t", b" :", b": \t "]
_LINE_ENDS = [b"\r\n", b"\r\n", b"\r\n", b"\n", b"\r"]
_GOOD = [
    b"Content-Type: text/event-stream",
    b"Cache-Control: no-cache",
    b"Connection: keep-alive",
    b"Connection: close",
    b"X-A: a b",
    b"X-B:\tv\t",
    b"X-C:",
    b"Date: Thu, 03 Dec 2026 20:00:00 GMT",
]


@st.composite
def heads(draw: st.DrawFn) -> bytes:
    def odd() -> bool:
        return draw(st.integers(0, 7)) == 0

    status = draw(st.sampled_from(_STATUS_LINES)) if odd() else b"HTTP/1.1 200 OK"
    lines: list[bytes] = []
    framing = draw(st.sampled_from([b"Transfer-Encoding: chunked", b"Content-Length: 5", None]))
    if framing is not None:
        lines.append(framing)
    for _ in range(draw(st.integers(0, 4))):
        if odd():
            fold = draw(st.sampled_from([b"", b"", b" ", b"\t"]))
            name = draw(st.sampled_from(_NAMES))
            lines.append(
                fold + name + draw(st.sampled_from(_SEPS)) + draw(st.sampled_from(_VALUES))
            )
        else:
            lines.append(draw(st.sampled_from(_GOOD)))
    lines = draw(st.permutations(lines))
    ends = [draw(st.sampled_from(_LINE_ENDS)) if odd() else b"\r\n" for _ in range(len(lines) + 2)]
    out = [status, ends[0]]
    for line, end in zip(lines, ends[1:], strict=False):
        out += [line, end]
    out += [ends[-1], draw(st.sampled_from([BODY, b"hello", b""]))]
    if odd():
        out.insert(0, b"HTTP/1.1 100 Continue\r\n\r\n")
    return b"".join(out)


@settings(max_examples=3000, deadline=None)
@given(heads())
def test_generated_heads_read_as_h11_reads_them(data: bytes) -> None:
    _agrees(data)


@settings(max_examples=1500, deadline=None)
@given(st.binary(max_size=200))
def test_random_bytes_after_a_status_line(tail: bytes) -> None:
    _agrees(b"HTTP/1.1 200 OK\r\n" + tail)


def test_seeded_mutations_of_a_real_head() -> None:
    taken = sum(_agrees(data) for data in mutations(SSE_HEAD + BODY, seed=1412, count=4000))
    assert taken > 400  # the mutations hit the body and harmless bytes too: many are lean
