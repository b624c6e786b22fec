"""The bulk chunked-body decoder (gateway/core/chunked.py) against h11, the reference.

Every body runs whole, one byte at a time, at every split point and at seeded random
splits; the payload must be identical each time, and identical to what h11 (which
httpcore uses) makes of the same bytes. Bodies h11 refuses must be refused too.
"""

from __future__ import annotations

import itertools
import random
from collections.abc import Iterable, Iterator

import h11
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.core.chunked import MAX_LINE, ChunkedDecoder, ChunkedError

PROPERTY_SETTINGS = settings(max_examples=300, deadline=None, database=None)


def framed(*payloads: bytes, trailer: bytes = b"", ext: bytes = b"") -> bytes:
    body = b"".join(b"%x%s\r\n%s\r\n" % (len(p), ext, p) for p in payloads if p)
    return body + b"0\r\n" + trailer + b"\r\n"


def decode(chunks: Iterable[bytes]) -> tuple[bytes, bool, bytes]:
    d = ChunkedDecoder()
    out = b"".join(d.feed(c) for c in chunks)
    if d.error is not None:  # as its readers do: raised before they read on
        raise d.error
    return out, d.done, d.leftover


def payload_before_error(chunks: Iterable[bytes]) -> tuple[bytes, ChunkedError | None]:
    """What a reader relays of ``chunks`` until the decoder refuses them, and why."""
    d = ChunkedDecoder()
    out = b""
    try:
        for c in chunks:
            out += d.feed(c)
        if d.error is not None:
            d.feed(b"")
    except ChunkedError as exc:
        return out, exc
    return out, None


def h11_decode(body: bytes) -> tuple[bytes, bool]:
    """What h11 makes of ``body`` as a chunked response body (raises on bad framing)."""
    conn = h11.Connection(h11.CLIENT)
    conn.send(h11.Request(method="GET", target="/", headers=[("Host", "x")]))
    conn.send(h11.EndOfMessage())
    conn.receive_data(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n" + body)
    assert type(conn.next_event()) is h11.Response
    out = b""
    while True:
        ev = conn.next_event()
        if type(ev) is h11.Data:
            out += ev.data
        elif type(ev) is h11.EndOfMessage:
            return out, True
        else:
            return out, False


def chunkings(data: bytes) -> Iterator[list[bytes]]:
    yield [data]
    yield [data[i : i + 1] for i in range(len(data))]
    yield [b"", data, b""]
    for i in range(len(data) + 1):
        yield [data[:i], data[i:]]
    rng = random.Random(len(data))
    for _ in range(20):
        cuts = sorted(rng.sample(range(len(data) + 1), min(4, len(data) + 1)))
        yield [data[a:b] for a, b in itertools.pairwise([0, *cuts, len(data)])]


BODIES = [
    framed(b"data: hello\n\n"),
    framed(*(b"data: {}\n\n" for _ in range(10))),
    framed(b"x" * 70_000, b"y"),  # a chunk longer than a socket read
    framed(b"a", b"bc", b"def", ext=b";name=value"),
    framed(b"trailers follow", trailer=b"X-Sum: 1\r\nX-Other: two\r\n"),
    b"A\r\n0123456789\r\n0\r\n\r\n",  # upper-case hex
    b"a;ext \t\r\n0123456789\r\n0 \r\n\r\n",  # trailing whitespace on size lines
    b"0\r\n\r\n",  # an empty body
]


@pytest.mark.parametrize("body", BODIES, ids=range(len(BODIES)))
def test_every_chunking_gives_h11s_payload(body: bytes) -> None:
    expected, complete = h11_decode(body)
    assert complete
    for chunks in chunkings(body) if len(body) < 2000 else [[body], [body[:5], body[5:]]]:
        assert decode(chunks) == (expected, True, b"")


def test_leftover_after_the_end_is_kept() -> None:
    body = framed(b"abc") + b"HTTP/1.1 200 OK\r\n"
    for chunks in chunkings(body):
        assert decode(chunks) == (b"abc", True, b"HTTP/1.1 200 OK\r\n")


def test_a_partial_chunk_is_passed_on_at_once() -> None:
    d = ChunkedDecoder()
    assert d.feed(b"10\r\n0123") == b"0123"  # never held until the chunk is whole
    assert d.in_chunk
    assert d.feed(b"456789abcdef\r\n") == b"456789abcdef"
    assert not d.in_chunk and not d.done


BAD = [
    b"g\r\nabc\r\n0\r\n\r\n",  # not hex
    b"\r\n0\r\n\r\n",  # empty size
    b"3\r\nabcX\r\n0\r\n\r\n",  # no CRLF after the data
    b"3\r\nabc\rX0\r\n\r\n",  # CR not followed by LF
    b"3\nabc\r\n0\r\n\r\n",  # LF-only size line
    b"123456789012345678901\r\n",  # more than 20 hex digits
    b"-1\r\n",
    b" 3\r\nabc\r\n0\r\n\r\n",  # leading space
]


@pytest.mark.parametrize("body", BAD, ids=range(len(BAD)))
def test_bad_framing_is_refused_like_h11(body: bytes) -> None:
    with pytest.raises(h11.ProtocolError):
        h11_decode(body)
    for chunks in chunkings(body):
        with pytest.raises(ChunkedError):
            decode(chunks)


BROKEN_AFTER_TEXT = [
    framed(b"data: w0\n\n")[:-5] + b"zz\r\n",  # a valid chunk, then a bad size line
    framed(b"data: a\n\n", b"data: b\n\n")[:-5] + b"3\r\nabcX",  # no CRLF after data
    b"5\r\nhello\r\n" + b"9" * 30 + b"\r\n",  # a size of more than 20 digits
]


@pytest.mark.parametrize("body", BROKEN_AFTER_TEXT, ids=range(len(BROKEN_AFTER_TEXT)))
def test_the_text_before_a_broken_frame_does_not_depend_on_the_reads(body: bytes) -> None:
    """The payload before a broken frame is passed on whatever the reads' boundaries,
    and the refusal follows it (it was lost when the broken frame came in the same
    read, and relayed when it came in the next)."""
    results = {payload_before_error(chunks)[0] for chunks in chunkings(body)}
    assert len(results) == 1, results
    for chunks in chunkings(body):
        assert payload_before_error(chunks)[1] is not None


def test_overlong_lines_are_refused() -> None:
    with pytest.raises(ChunkedError):
        ChunkedDecoder().feed(b"1" + b";" * (MAX_LINE + 10))
    d = ChunkedDecoder()
    d.feed(b"0\r\n")
    with pytest.raises(ChunkedError):
        d.feed(b"X-Trailer: " + b"v" * (MAX_LINE + 10))


_payloads = st.lists(st.binary(min_size=1, max_size=40), max_size=8)


@PROPERTY_SETTINGS
@given(_payloads, st.integers(0, 2**32), st.sampled_from([b"", b";a=b", b"  "]))
def test_property_same_payload_as_h11(payloads: list[bytes], seed: int, ext: bytes) -> None:
    body = framed(*payloads, ext=ext)
    expected, complete = h11_decode(body)
    assert complete and expected == b"".join(payloads)
    rng = random.Random(seed)
    cuts = sorted(rng.sample(range(len(body) + 1), min(6, len(body) + 1)))
    chunks = [body[a:b] for a, b in itertools.pairwise([0, *cuts, len(body)])]
    assert decode(chunks) == (expected, True, b"")


@PROPERTY_SETTINGS
@given(st.binary(max_size=60))
def test_property_arbitrary_bytes_agree_with_h11(data: bytes) -> None:
    """Whatever the bytes: the same payload as h11 when h11 accepts them (as far as they
    go), a refusal when h11 refuses them."""
    try:
        expected, complete = h11_decode(data)
    except h11.ProtocolError:
        with pytest.raises(ChunkedError):
            decode([data])
        return
    try:
        out, done, _ = decode([data])
    except ChunkedError:
        # h11 reads lazily: it may not have reached the bad part (it stops at the end)
        assert complete
        return
    assert done == complete
    assert out == expected
