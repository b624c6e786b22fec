"""The connection handler's plain head parser and answer framing (gateway.http.h1)
against h11, its reference.

The parser may accept only what h11 accepts, and must read it as h11 does: the same
method, target and headers (as hypercorn builds the ASGI scope from them), the same body
length and the same keep-alive. Whatever it declines goes to h11, so declining is always
safe; accepting something h11 refuses, or reading it differently, is the bug the
properties below look for. The response writer must frame an answer byte for byte as
h11 does for hypercorn.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from urllib.parse import unquote

import h11
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.http.h1 import LAST_CHUNK, chunk, parse_head, response_head

MAX = 16 * 1024
BODY = b'{"model": "m", "messages": []}'


def _h11_view(data: bytes) -> tuple[h11.Request, bytes] | None:
    """What h11 reads from ``data`` as a server: the request and as much of its body as
    ``data`` holds; None when h11 refuses the head or needs more of it."""
    conn = h11.Connection(h11.SERVER, max_incomplete_event_size=MAX)
    conn.receive_data(data)
    try:
        request = conn.next_event()
        if not isinstance(request, h11.Request):
            return None
        body = b""
        while True:
            event = conn.next_event()
            if isinstance(event, h11.Data):
                body += event.data
            elif isinstance(event, h11.EndOfMessage | h11.NEED_DATA):
                return request, body
            else:
                return None
    except h11.RemoteProtocolError:
        return None


def _keep_alive(request: h11.Request) -> bool:
    return b"close" not in h11._headers.get_comma_header(request.headers, b"connection")


def _agrees(data: bytes) -> None:
    head = parse_head(data, MAX)
    if head is None:
        return  # h11's way: always allowed
    seen = _h11_view(data)
    assert seen is not None, f"accepted a head h11 refuses: {data!r}"
    request, body = seen
    assert head.method.encode() == request.method
    target = head.path.encode() + (b"?" + head.query if b"?" in request.target else b"")
    assert target == request.target
    assert head.query == request.target.partition(b"?")[2]
    assert unquote(head.path) == head.path  # nothing to unescape: path and raw path agree
    assert head.headers == list(request.headers)
    assert data[head.size : head.size + head.length] == body
    assert head.keep_alive == _keep_alive(request)


def _request(method: bytes, target: bytes, lines: list[bytes], body: bytes = b"") -> bytes:
    return b"%s %s HTTP/1.1\r\n%s\r\n%s" % (
        method,
        target,
        b"".join(x + b"\r\n" for x in lines),
        body,
    )


def test_a_plain_chat_request_is_plain() -> None:
    data = _request(
        b"POST",
        b"/v1/chat/completions",
        [b"Host: gw", b"Authorization: Bearer k", b"Content-Length: %d" % len(BODY)],
        BODY,
    )
    head = parse_head(data, MAX)
    assert head is not None
    assert (head.method, head.path, head.length, head.keep_alive) == (
        "POST",
        "/v1/chat/completions",
        len(BODY),
        True,
    )
    assert head.headers == [
        (b"host", b"gw"),
        (b"authorization", b"Bearer k"),
        (b"content-length", b"%d" % len(BODY)),
    ]
    _agrees(data)


@pytest.mark.parametrize(
    "data",
    [
        _request(b"POST", b"/v1/chat/completions", [b"Host: x", b"Transfer-Encoding: chunked"]),
        _request(
            b"POST",
            b"/v1/chat/completions",
            [b"Host: x", b"Content-Length: 2", b"Content-Length: 2"],
        ),
        _request(b"POST", b"/v1/chat/completions", [b"Host: x", b"Content-Length: 2, 2"]),
        _request(b"POST", b"/v1/chat/completions", [b"Host: x", b"Content-Length: +2"]),
        _request(
            b"POST",
            b"/v1/chat/completions",
            [b"Host: x", b"Expect: 100-continue", b"Content-Length: 2"],
        ),
        _request(b"GET", b"/health", [b"Host: x", b"Upgrade: h2c", b"Connection: Upgrade"]),
        _request(b"GET", b"/health", [b"Host: x", b"Host: y"]),
        _request(b"GET", b"/health", []),
        _request(b"GET", b"/health", [b"Host: x", b" folded"]),
        _request(b"GET", b"/health", [b"Host : x"]),
        _request(b"GET", b"/health", [b"Host: x\x00y"]),
        _request(b"GET", b"/health", [b"Host: x", b"Content-Length: 1"], b"x"),
        _request(b"GET", b"/%68ealth", [b"Host: x"]),
        _request(b"GET", b"http://x/health", [b"Host: x"]),
        _request(b"GET", b"*", [b"Host: x"]),
        _request(b"GET", b"/h\xc3\xa9", [b"Host: x"]),
        _request(b"GET", b"/health#frag", [b"Host: x"]),
        _request(b"HEAD", b"/health", [b"Host: x"]),
        _request(b"PUT", b"/v1/chat/completions", [b"Host: x"]),
        b"GET /health HTTP/1.0\r\nHost: x\r\n\r\n",
        b"GET /health HTTP/1.1\nHost: x\n\n",
        b"GET /health HTTP/1.1\r\nHost: x\n\r\n",
        b"GET /health HTTP/1.1\r\nHost: x\r\n",  # incomplete
        b"GET  /health HTTP/1.1\r\nHost: x\r\n\r\n",
        b"\r\nGET /health HTTP/1.1\r\nHost: x\r\n\r\n",
        _request(b"GET", b"/health", [b"Host: x", b"X-Big: " + b"a" * MAX]),
    ],
)
def test_what_the_plain_parser_leaves_to_h11(data: bytes) -> None:
    assert parse_head(data, MAX) is None


@pytest.mark.parametrize(
    ("target", "path", "query"),
    [
        (b"/health", "/health", b""),
        (b"/health?x=1&y=%20", "/health", b"x=1&y=%20"),
        (b"/v1/responses/resp_1", "/v1/responses/resp_1", b""),
        (b"//v1/models", "//v1/models", b""),
        (b"/a?", "/a", b""),
    ],
)
def test_plain_targets(target: bytes, path: str, query: bytes) -> None:
    head = parse_head(_request(b"GET", target, [b"Host: x"]), MAX)
    assert head is not None and (head.path, head.query) == (path, query)
    _agrees(_request(b"GET", target, [b"Host: x"]))


def test_connection_close_in_any_spelling() -> None:
    for value in (b"close", b"Close", b"keep-alive, CLOSE", b" ,close,"):
        data = _request(b"GET", b"/health", [b"Host: x", b"Connection: " + value])
        head = parse_head(data, MAX)
        assert head is not None and not head.keep_alive, value
        _agrees(data)


def test_a_head_cut_anywhere_is_not_lean() -> None:
    data = _request(b"POST", b"/v1/chat/completions", [b"Host: x", b"Content-Length: 30"], BODY)
    end = data.index(b"\r\n\r\n") + 4
    for cut in range(end):
        assert parse_head(data[:cut], MAX) is None
    for cut in range(end, len(data) + 1):
        head = parse_head(data[:cut], MAX)
        assert head is not None and head.size == end


# -- properties: generated heads, built from the pieces that trip parsers up

_NAMES = [
    b"Host",
    b"host",
    b"Content-Length",
    b"Connection",
    b"Authorization",
    b"X-A",
    b"Transfer-Encoding",
    b"Expect",
    b"Upgrade",
    b"TE",
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
    b"30",
    b"007",
    b"2, 2",
    b"-1",
    b"close",
    b"keep-alive",
    b"chunked",
    b"a b",
    b"a\tb",
    b" x ",
    b"\tx",
    b"x\x0b",
    b"x\x00",
    b"\x80\xff",
    b"x\ry",
    b"x\ny",
    b'"q"',
]
_SEPS = [b":", b": ", b":\t", b" :", b": \t "]
_LINE_ENDS = [b"\r\n", b"\r\n", b"\r\n", b"\n", b"\r"]


_GOOD = [
    b"Authorization: Bearer k",
    b"Content-Type: application/json",
    b"Connection: close",
    b"Connection: keep-alive",
    b"X-A: a b",
    b"X-B:\tv\t",
    b"X-C:",
    b"Accept: */*",
]


def _weird_line(draw: st.DrawFn) -> bytes:
    fold = draw(st.sampled_from([b"", b"", b" ", b"\t"]))
    name = draw(st.sampled_from(_NAMES))
    return fold + name + draw(st.sampled_from(_SEPS)) + draw(st.sampled_from(_VALUES))


@st.composite
def heads(draw: st.DrawFn) -> bytes:
    """Mostly plain requests (so that the plain parser takes many), each piece now and then
    swapped for one that trips parsers up."""

    def odd() -> bool:
        return draw(st.integers(0, 9)) == 0

    method = draw(st.sampled_from([b"HEAD", b"PUT", b"get"])) if odd() else b"POST"
    target = b"/v1/chat/completions"
    if odd():
        target = draw(
            st.sampled_from(
                [b"/health", b"/health?a", b"/v1/chat/completions/", b"*", b"/%41", b"/a?b#c"]
            )
        )
    version = (
        draw(st.sampled_from([b"HTTP/1.0", b"HTTP/2.0", b"http/1.1"])) if odd() else b"HTTP/1.1"
    )
    body = draw(st.sampled_from([BODY, b"", BODY[:7]]))
    lines = [b"Host: gw"] if not odd() else []
    lines.append(b"Content-Length: %d" % len(BODY) if not odd() else _weird_line(draw))
    for _ in range(draw(st.integers(0, 4))):
        lines.append(_weird_line(draw) if odd() else draw(st.sampled_from(_GOOD)))
    lines = draw(st.permutations(lines))
    ends = [draw(st.sampled_from(_LINE_ENDS)) if odd() else b"\r\n" for _ in range(len(lines) + 2)]
    out = [b"%s %s %s" % (method, target, version), ends[0]]
    for line, end in zip(lines, ends[1:], strict=False):
        out += [line, end]
    out += [ends[-1], body]
    if odd():
        out.append(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
    return b"".join(out)


@settings(max_examples=3000, deadline=None)
@given(heads())
def test_generated_heads_read_as_h11_reads_them(data: bytes) -> None:
    _agrees(data)


@settings(max_examples=1500, deadline=None)
@given(st.binary(max_size=200))
def test_random_bytes_after_a_request_line(tail: bytes) -> None:
    _agrees(b"POST /v1/chat/completions HTTP/1.1\r\n" + tail)


def test_seeded_mutations_of_a_real_request() -> None:
    base = _request(
        b"POST",
        b"/v1/chat/completions",
        [
            b"Host: gw",
            b"Authorization: Bearer k",
            b"Content-Type: application/json",
            b"Content-Length: %d" % len(BODY),
        ],
        BODY,
    )
    for data in mutations(base, seed=1404, count=4000):
        _agrees(data)


def mutations(base: bytes, *, seed: int, count: int) -> Iterator[bytes]:
    """``count`` copies of ``base`` with 1-3 bytes replaced, inserted or deleted each,
    from the bytes that trip head parsers up (seeded: the same every run)."""
    rng = random.Random(seed)
    alphabet = b" \t\r\n:\x00,;\x0bAa0\x80"
    for _ in range(count):
        data = bytearray(base)
        for _ in range(rng.randint(1, 3)):
            at = rng.randrange(len(data))
            what = rng.randrange(3)
            if what == 0:
                data[at] = rng.choice(alphabet)
            elif what == 1:
                data.insert(at, rng.choice(alphabet))
            else:
                del data[at]
        yield bytes(data)


# -- answers


def _h11_answer(
    status: int, headers: list[tuple[bytes, bytes]], body: list[bytes], close: bool
) -> bytes:
    conn = h11.Connection(h11.SERVER)
    close_line = [b"Connection: close"] if close else []
    conn.receive_data(_request(b"GET", b"/health", [b"Host: x", *close_line]))
    conn.next_event()
    conn.next_event()
    out = conn.send(h11.Response(status_code=status, headers=headers))
    for piece in body:
        out += conn.send(h11.Data(data=piece))
    return out + conn.send(h11.EndOfMessage())


DATE = [(b"date", b"Thu, 03 Dec 2026 09:44:06 GMT")]


@pytest.mark.parametrize("close", [False, True])
@pytest.mark.parametrize(
    ("headers", "body"),
    [
        (
            [
                (b"content-type", b"text/event-stream; charset=utf-8"),
                (b"cache-control", b"no-cache"),
            ],
            [b"data: 1\n\n", b"data: [DONE]\n\n"],
        ),
        ([(b"content-type", b"application/json"), (b"content-length", b"2")], [b"{}"]),
        ([(b"www-authenticate", b'Bearer realm="x"'), (b"content-length", b"0")], []),
        ([(b"content-type", b"text/plain")], []),
        (
            [
                (b"content-type", b"application/json"),
                (b"content-length", b"2"),
                (b"connection", b"close"),
            ],
            [b"{}"],
        ),
        ([(b"connection", b"keep-alive"), (b"content-length", b"0")], []),
    ],
)
def test_answers_are_framed_as_h11_frames_them(
    headers: list[tuple[bytes, bytes]], body: list[bytes], close: bool
) -> None:
    head, chunked = response_head(200, [*headers, *DATE], close=close)
    ours = head + b"".join(chunk(b) if chunked else b for b in body if b)
    if chunked:
        ours += LAST_CHUNK
    assert ours == _h11_answer(200, [*headers, *DATE], body, close)


@pytest.mark.parametrize(
    "header",
    [
        (b"x-a", b"1\r\nSet-Cookie: y"),
        (b"x-a", b"1\n"),
        (b"x-a", b"\x00"),
        (b"x a", b"1"),
        (b"", b"1"),
    ],
)
def test_a_header_that_would_split_the_answer_is_never_sent(header: tuple[bytes, bytes]) -> None:
    with pytest.raises(ValueError, match="cannot be sent"):
        response_head(200, [header, *DATE], close=False)


def test_common_field_names_are_one_object_for_every_request() -> None:
    """A common field name, in the spellings clients use, is read as the same
    lower-case object every time (an open stream holds its head's fields); any other
    name is lower-cased as h11 lower-cases it."""
    heads = [
        b"POST /v1/chat/completions HTTP/1.1\r\n" + fields + b"Content-Length: 2\r\n\r\n{}"
        for fields in (
            b"Host: a\r\nContent-Type: application/json\r\nX-Custom-Thing: 1\r\n",
            b"HOST: a\r\ncontent-type: application/json\r\nx-CUSTOM-thing: 1\r\n",
        )
    ]
    first, second = (parse_head(h, 16384) for h in heads)
    assert first is not None and second is not None
    names = [[name for name, _ in head.headers] for head in (first, second)]
    assert names[0] == names[1] == [b"host", b"content-type", b"x-custom-thing", b"content-length"]
    for a, b in zip(*names, strict=True):
        assert (a is b) == (a != b"x-custom-thing")


@pytest.mark.parametrize("status", [204, 304])
@pytest.mark.parametrize("close", [False, True])
def test_answers_without_a_body_are_framed_as_h11_frames_them(status: int, close: bool) -> None:
    headers = [(b"x-a", b"1"), *DATE]
    head, chunked = response_head(status, headers, close=close)
    assert not chunked
    assert head == _h11_answer(status, headers, [], close)
