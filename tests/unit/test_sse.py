"""Tests for the sans-IO SSE codec (gateway/core/sse.py).

Every decoder case runs whole, one byte at a time, at every split point (and every
pair of split points for short inputs), with empty chunks, and with seeded random
splits; all runs must give identical events (h11 tests/test_io.py style). A literal,
whole-input reading of WHATWG HTML §9.2.6 serves as the oracle for the properties.
"""

from __future__ import annotations

import itertools
import random
import re
import tracemalloc
import zlib
from collections.abc import Iterable, Iterator
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.core.errors import SSEEventTooLarge
from gateway.core.sse import (
    DONE,
    SSEDecoder,
    SSEEvent,
    encode_comment,
    encode_event,
    encode_json,
)

E = SSEEvent
THREE_PIECE_MAX_LEN = 64
RANDOM_SPLITS = 25
PROPERTY_SETTINGS = settings(max_examples=300, deadline=None, database=None)

Decoded = tuple[list[SSEEvent], str, int | None]


# --- helpers -------------------------------------------------------------------------


def decode_chunks(chunks: Iterable[bytes], **kwargs: Any) -> Decoded:
    """Feed ``chunks`` to a fresh decoder; return events, last_event_id and retry."""
    decoder = SSEDecoder(**kwargs)
    events: list[SSEEvent] = []
    for chunk in chunks:
        events.extend(decoder.feed(chunk))
    events.extend(decoder.close())
    return events, decoder.last_event_id, decoder.retry


def split_at(data: bytes, points: Iterable[int]) -> list[bytes]:
    cuts = [0, *sorted(points), len(data)]
    return [data[a:b] for a, b in itertools.pairwise(cuts)]


def chunkings(data: bytes, *, three_pieces: bool = True) -> Iterator[list[bytes]]:
    """Whole, byte by byte, with empty chunks, every split point, seeded random splits."""
    n = len(data)
    yield [data]
    yield [data[i : i + 1] for i in range(n)]
    yield [b"", data, b""]
    for i in range(n + 1):
        yield [data[:i], data[i:]]
    if three_pieces and n <= THREE_PIECE_MAX_LEN:
        for i in range(n + 1):
            for j in range(i, n + 1):
                yield [data[:i], data[i:j], data[j:]]
    rnd = random.Random(zlib.crc32(data))
    for _ in range(RANDOM_SPLITS):
        k = rnd.randint(1, max(1, min(n, 12)))
        yield split_at(data, (rnd.randint(0, n) for _ in range(k)))


_LINE_END = re.compile(r"\r\n|\r|\n")


def reference_decode(body: bytes) -> Decoded:
    """WHATWG §9.2.6 read literally, on the whole input at once."""
    text = body.decode("utf-8", "replace")
    if text.startswith("\ufeff"):
        text = text[1:]
    lines = _LINE_END.split(text)[:-1]  # the last piece is unterminated: discarded
    events: list[SSEEvent] = []
    data = event_type = last_id = ""
    retry: int | None = None
    for line in lines:
        if line == "":
            if data == "":
                event_type = ""
                continue
            if data.endswith("\n"):
                data = data[:-1]
            events.append(SSEEvent(data, event_type or "message", last_id, retry))
            data = event_type = ""
            continue
        if line.startswith(":"):
            continue
        if ":" in line:
            name, value = line.split(":", 1)
            if value.startswith(" "):
                value = value[1:]
        else:
            name, value = line, ""
        if name == "data":
            data += value + "\n"
        elif name == "event":
            event_type = value
        elif name == "id":
            if "\0" not in value:
                last_id = value
        elif name == "retry" and value and all(c in "0123456789" for c in value):
            retry = int(value)
    return events, last_id, retry


def assert_decodes(data: bytes, expected: Decoded, **kwargs: Any) -> None:
    for chunks in chunkings(data):
        assert decode_chunks(chunks, **kwargs) == expected, chunks


# --- the decoder against fixed cases ---------------------------------------------------

LONG_COMMENT = b":" + b"x" * 200

DECODER_CASES: list[tuple[str, bytes, Decoded]] = [
    # web-platform-tests eventsource/format-*
    (
        "wpt-bom",
        b"\xef\xbb\xbfdata:1\n\n\xef\xbb\xbfdata:2\n\ndata:3\n\n",
        ([E("1"), E("3")], "", None),
    ),
    (
        "wpt-bom-2",
        b"\xef\xbb\xbf\xef\xbb\xbfdata:1\n\ndata:2\n\ndata:3\n\n",
        ([E("2"), E("3")], "", None),
    ),
    (
        "wpt-comments",
        b"data:1\r:\x00\n:\r\ndata:2\n"
        + LONG_COMMENT
        + b"\rdata:3\n:data:fail\r"
        + LONG_COMMENT
        + b"\ndata:4\n\n",
        ([E("1\n2\n3\n4")], "", None),
    ),
    (
        "wpt-data-before-final-empty-line",
        b"retry:1000\ndata:test1\n\nid:test\ndata:test2",
        ([E("test1", retry=1000)], "test", 1000),
    ),
    (
        "wpt-field-data",
        b"data:\n\ndata\ndata\n\ndata:test\n\n",
        ([E(""), E("\n"), E("test")], "", None),
    ),
    (
        "wpt-field-event",
        b"event:test\ndata:x\n\ndata:x\n\n",
        ([E("x", "test"), E("x")], "", None),
    ),
    ("wpt-field-event-empty", b"event: \ndata:data\n\n", ([E("data")], "", None)),
    (
        "wpt-field-id",
        b"id:1\ndata:a\n\ndata:b\n\nid\ndata:c\n\n",
        ([E("a", id="1"), E("b", id="1"), E("c", id="")], "", None),
    ),
    (
        "wpt-field-id-2",
        b"id:1\n\ndata:x\n\nid:2\r\ndata:y\r\n\r\n",
        ([E("x", id="1"), E("y", id="2")], "2", None),
    ),
    (
        "wpt-field-id-null",
        b"id:1\ndata:a\n\nid:2\x00\ndata:b\n\nid:\x00\ndata:c\n\n",
        ([E("a", id="1"), E("b", id="1"), E("c", id="1")], "1", None),
    ),
    (
        "wpt-field-parsing",
        b"data:\x00\ndata:  2\rData:1\ndata\x00:2\ndata:1\r\x00data:4\nda-ta:3\rdata_5\n"
        b"data:3\rdata:\r\n data:32\ndata:4\n\n",
        ([E("\x00\n 2\n1\n3\n\n4")], "", None),
    ),
    ("wpt-field-retry", b"retry:03000\ndata:x\n\n", ([E("x", retry=3000)], "", 3000)),
    (
        "wpt-field-retry-bogus",
        "retry:3000\nretry:1000x\nretry:-1\nretry:1.5\nretry:12 \nretry:  5\n"
        "retry:٣\nretry:²\ndata:x\n\nretry: 500\ndata:y\n\n".encode(),
        ([E("x", retry=3000), E("y", retry=500)], "", 500),
    ),
    (
        "wpt-field-retry-empty",
        b"retry:2000\nretry\ndata:test\n\nretry:\ndata:t2\n\n",
        ([E("test", retry=2000), E("t2", retry=2000)], "", 2000),
    ),
    (
        "wpt-field-unknown",
        b"data:test\n data\ndata\nfoobar:xxx\njustsometext\n:thisisacommentyay\ndata:test\n\n",
        ([E("test\n\ntest")], "", None),
    ),
    (
        "wpt-leading-space",
        b"data:\x20\x20test\n\ndata:\ttab\n\ndata:x \n\ndata: \n\n",
        ([E(" test"), E("\ttab"), E("x "), E("")], "", None),
    ),
    (
        "wpt-newlines",
        b"data:test\r\ndata\ndata:test\r\n\r\n",
        ([E("test\n\ntest")], "", None),
    ),
    (
        "newlines-lone-cr",
        b"data:a\rdata:b\r\rdata:c\r\n\n",
        ([E("a\nb"), E("c")], "", None),
    ),
    (
        "newlines-cr-crlf",
        b"data:x\r\r\ndata:y\n\r\n\rdata:z\n\r",
        ([E("x"), E("y"), E("z")], "", None),
    ),
    ("wpt-null-character", b"data:\x00\n\n", ([E("\x00")], "", None)),
    (
        "wpt-utf-8",
        "data:ok…\n\ndata:日本語 Ελληνικά 😀\n\n".encode(),
        ([E("ok…"), E("日本語 Ελληνικά 😀")], "", None),
    ),
    (
        "invalid-utf-8",
        b"data:\xff\xfe x\n\ndata:\xe2\x82\n\ndata:\xc3\n\ndata:\xf0\x9f\x98\r\n\n",
        ([E("\ufffd\ufffd x"), E("\ufffd"), E("\ufffd"), E("\ufffd")], "", None),
    ),
    ("invalid-utf-8-in-bom-position", b"\xef\xbbdata:x\n\n", ([], "", None)),
    ("invalid-utf-8-unterminated", b"data:ok\n\ndata:\xe2", ([E("ok")], "", None)),
    # openai-python tests/test_sse_framing.py style
    (
        "openai-multiple-events",
        b'event: completion\ndata: {"foo":true}\n\nevent: completion\ndata: {"bar":false}\n\n',
        ([E('{"foo":true}', "completion"), E('{"bar":false}', "completion")], "", None),
    ),
    (
        "openai-multi-line-data",
        b'data: {\ndata: "foo":\ndata: \ndata:\ndata: true}\n\n',
        ([E('{\n"foo":\n\n\ntrue}')], "", None),
    ),
    (
        "openai-crlf-events",
        b"event: a\r\ndata: 1\r\n\r\nevent: b\r\ndata: 2\r\n\r\n",
        ([E("1", "a"), E("2", "b")], "", None),
    ),
    ("openai-done", DONE, ([E("[DONE]")], "", None)),
    ("comments-only", b": keepalive\n\n: ping\n\n:\n\n", ([], "", None)),
    ("data-less-event-not-dispatched", b"event: ping\n\nid: 9\n\n", ([], "9", None)),
    ("id-with-colon", b"id: a:b\ndata: x\n\n", ([E("x", id="a:b")], "a:b", None)),
    ("empty-input", b"", ([], "", None)),
    ("blank-lines-only", b"\n\r\n\r\n\r", ([], "", None)),
    ("bom-only", b"\xef\xbb\xbf", ([], "", None)),
    ("bom-then-crlf", b"\xef\xbb\xbf\r\ndata:x\r\n\r\n", ([E("x")], "", None)),
    ("bom-inside-data-kept", b"data:\xef\xbb\xbfx\n\n", ([E("\ufeffx")], "", None)),
    (
        "other-unicode-breaks-are-not-line-ends",
        "data: a\u2028b\x85c\x0bd\x0ce\x1cf\n\n".encode(),
        ([E("a\u2028b\x85c\x0bd\x0ce\x1cf")], "", None),
    ),
    ("unterminated-line", b"data: a\n\ndata: b", ([E("a")], "", None)),
    ("unterminated-event", b"data: a\n\ndata: b\n", ([E("a")], "", None)),
    ("unterminated-after-cr", b"data: x\r", ([], "", None)),
    (
        "event-type-reset-after-data-less-blank",
        b"event: x\n\ndata: 1\n\n",
        ([E("1")], "", None),
    ),
    (
        "retry-huge-ignored",
        b"retry:" + b"9" * 5000 + b"\ndata:x\n\n",
        ([E("x")], "", None),
    ),
]


@pytest.mark.parametrize(
    ("body", "expected"),
    [pytest.param(body, expected, id=name) for name, body, expected in DECODER_CASES],
)
def test_decoder_case_under_every_chunking(body: bytes, expected: Decoded) -> None:
    assert_decodes(body, expected)


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        pytest.param(body, expected, id=name)
        for name, body, expected in DECODER_CASES
        if name != "retry-huge-ignored"  # int() refuses >4300 digits in the oracle too
    ],
)
def test_reference_oracle_agrees_with_fixed_cases(body: bytes, expected: Decoded) -> None:
    assert reference_decode(body) == expected


def test_multibyte_utf8_split_at_every_byte() -> None:
    text = "é€😀日本 \u2028 Ω"
    body = f"data: {text}\n\n".encode()
    for i in range(len(body) + 1):
        for j in range(i, len(body) + 1):
            assert decode_chunks([body[:i], body[i:j], body[j:]])[0] == [E(text)]


def test_cr_ends_line_at_once_and_following_lf_is_skipped() -> None:
    decoder = SSEDecoder()
    assert decoder.feed(b"data: a\n\r") == [E("a")]  # the CR dispatches without waiting
    assert decoder.feed(b"\ndata: b\r") == []  # that LF belonged to the CR
    assert decoder.feed(b"") == []
    assert decoder.feed(b"\ndata: c\r") == []  # again, across an empty chunk
    assert decoder.feed(b"\n\r\n") == [E("b\nc")]


def test_bom_split_across_chunks_is_stripped_once() -> None:
    decoder = SSEDecoder()
    assert decoder.feed(b"\xef") == []
    assert decoder.feed(b"\xbb") == []
    assert decoder.feed(b"\xbfdata: x\n\n\xef\xbb\xbfdata: y\n\ndata: z\n\n") == [E("x"), E("z")]


def test_properties_track_last_event_id_and_retry() -> None:
    decoder = SSEDecoder()
    assert (decoder.last_event_id, decoder.retry) == ("", None)
    decoder.feed(b"id: 5\nretry: 250\n")
    assert (decoder.last_event_id, decoder.retry) == ("5", 250)
    assert decoder.feed(b"data: x\n\n") == [E("x", id="5", retry=250)]
    assert decoder.close() == []
    assert (decoder.last_event_id, decoder.retry) == ("5", 250)


def test_feed_after_close_is_refused() -> None:
    decoder = SSEDecoder()
    decoder.close()
    with pytest.raises(RuntimeError):
        decoder.feed(b"data: x\n\n")


def test_long_line_in_small_chunks_is_decoded() -> None:
    payload = "0123456789abcdef" * 16384  # 256 KiB on one line
    body = f"data: {payload}\n\n".encode()
    events, _, _ = decode_chunks(split_at(body, range(7, len(body), 7)))
    assert events == [E(payload)]


# --- the size bound --------------------------------------------------------------------


def outcome(chunks: Iterable[bytes], limit: int) -> Decoded | str:
    try:
        return decode_chunks(chunks, max_event_bytes=limit)
    except SSEEventTooLarge as exc:
        assert exc.code == "sse_event_too_large"
        return "too large"


def assert_outcome(body: bytes, limit: int, expected: Decoded | str) -> None:
    for chunks in chunkings(body, three_pieces=False):
        assert outcome(chunks, limit) == expected, chunks


@pytest.mark.parametrize(
    "body",
    [
        pytest.param(b"data: " + b"x" * 200 + b"\n\n", id="one-giant-line"),
        pytest.param(b"data: " + b"x" * 200, id="one-giant-unterminated-line"),
        pytest.param(b":" + b"c" * 200 + b"\n\n", id="one-giant-comment"),
        pytest.param(b"data: 0123456789\n" * 20 + b"\n", id="many-data-lines"),
        pytest.param(
            b"data: 0123456789\n" * 8 + b"data: " + b"x" * 50,
            id="data-lines-then-unterminated-line",
        ),
        pytest.param(
            b"event: " + b"e" * 60 + b"\ndata: " + b"x" * 44 + b"\n\n", id="long-event-type"
        ),
        pytest.param(
            b"event: " + b"e" * 60 + b"\ndata: " + b"x" * 44, id="long-event-type-unterminated"
        ),
        pytest.param("data: 😀😀\n".encode() * 60 + b"\n", id="many-non-ascii-lines"),
    ],
)
def test_incomplete_event_over_the_bound_raises(body: bytes) -> None:
    assert_outcome(body, 100, "too large")


def test_many_small_events_beyond_the_bound_do_not_raise() -> None:
    body = b"data: 0123456789\n\n" * 1000  # 18 000 bytes through a 100-character bound
    expected: Decoded = ([E("0123456789")] * 1000, "", None)
    for chunks in [[body], [body[i : i + 1] for i in range(len(body))]]:
        assert outcome(chunks, 100) == expected
    rnd = random.Random(7)
    for _ in range(10):
        points = [rnd.randint(0, len(body)) for _ in range(50)]
        assert outcome(split_at(body, points), 100) == expected


@pytest.mark.parametrize("lines", [1, 2, 3, 4])
@pytest.mark.parametrize("limit", [9, 10, 15, 19, 20, 21])
def test_bound_verdict_does_not_depend_on_chunking(lines: int, limit: int) -> None:
    body = b"data: abcd\n" * lines + b"\n"
    verdict = outcome([body], limit)
    assert_outcome(body, limit, verdict)
    # held = data buffer (5 per line) + the line being read (10): the exact edge
    assert (verdict == "too large") == (5 * (lines - 1) + 10 > limit)


def test_error_is_one_sentence_without_payload_and_sticks() -> None:
    decoder = SSEDecoder(max_event_bytes=50)
    with pytest.raises(SSEEventTooLarge) as info:
        decoder.feed(b"data: " + b"SECRET" * 20)
    message = info.value.message
    assert "SECRET" not in message
    assert message.endswith(".") and message.count(". ") == 0
    with pytest.raises(SSEEventTooLarge):
        decoder.feed(b"\n\n")
    with pytest.raises(SSEEventTooLarge):
        decoder.close()


def test_partial_line_memory_stays_near_the_bound() -> None:
    limit = 100_000
    decoder = SSEDecoder(max_event_bytes=limit)
    tracemalloc.start()
    try:
        with pytest.raises(SSEEventTooLarge):
            for _ in range(limit):  # 2-character chunks: no interned one-char strings
                decoder.feed(b"xy")
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 10 * limit


# --- encoders --------------------------------------------------------------------------


def test_encoder_output() -> None:
    assert encode_event("x") == b"data: x\n\n"
    assert encode_event(" x", event="e", id="1") == b"event: e\nid: 1\ndata:  x\n\n"
    assert (
        encode_json({"a": "é\n", "b": [1, None]}) == 'data: {"a":"é\\n","b":[1,null]}\n\n'.encode()
    )
    assert encode_json([], event="done") == b"event: done\ndata: []\n\n"
    assert encode_comment() == b": keepalive\n"
    assert encode_comment("ping") == b": ping\n"
    assert DONE == b"data: [DONE]\n\n"


@pytest.mark.parametrize("bad", ["a\nb", "a\rb", "a\r\nb", "\n", "end\r"])
def test_encoders_refuse_line_breaks(bad: str) -> None:
    with pytest.raises(ValueError):
        encode_event(bad)
    with pytest.raises(ValueError):
        encode_event("x", event=bad)
    with pytest.raises(ValueError):
        encode_event("x", id=bad)
    with pytest.raises(ValueError):
        encode_json(1, event=bad)
    with pytest.raises(ValueError):
        encode_comment(bad)


def test_encoder_refuses_nul_in_id() -> None:
    with pytest.raises(ValueError):
        encode_event("x", id="a\x00b")


def test_encoded_stream_round_trips() -> None:
    body = b"".join(
        [
            encode_comment(),
            encode_json({"text": "multi\nline", "emoji": "😀"}, id="1"),
            encode_event(" leading space", event="custom"),
            encode_comment("still here"),
            encode_event("", event=""),
            encode_event("x\x00y\u2028z", id=""),
            DONE,
        ]
    )
    expected: Decoded = (
        [
            E('{"text":"multi\\nline","emoji":"😀"}', id="1"),
            E(" leading space", "custom", id="1"),
            E("", id="1"),
            E("x\x00y\u2028z", id=""),
            E("[DONE]", id=""),
        ],
        "",
        None,
    )
    for chunks in chunkings(body, three_pieces=False):
        assert decode_chunks(chunks) == expected


# --- properties ------------------------------------------------------------------------

one_line = st.text(st.characters(codec="utf-8", exclude_characters="\r\n"), max_size=30)
events_strategy = st.lists(
    st.tuples(
        one_line,  # data
        st.none() | one_line,  # event
        st.none() | one_line.filter(lambda s: "\x00" not in s),  # id
        st.none() | one_line,  # a comment before the event
    ),
    max_size=8,
)
EventSpec = tuple[str, str | None, str | None, str | None]


def encode_specs(specs: list[EventSpec]) -> tuple[bytes, list[SSEEvent]]:
    parts: list[bytes] = []
    expected: list[SSEEvent] = []
    last_id = ""
    for data, event, id_, comment in specs:
        if comment is not None:
            parts.append(encode_comment(comment))
        parts.append(encode_event(data, event=event, id=id_))
        if id_ is not None:
            last_id = id_
        expected.append(E(data, event or "message", last_id))
    return b"".join(parts), expected


def draw_chunks(draw: st.DataObject, body: bytes) -> list[bytes]:
    points = draw.draw(st.lists(st.integers(0, len(body)), max_size=12), label="split points")
    return split_at(body, points)


@PROPERTY_SETTINGS
@given(specs=events_strategy, draw=st.data())
def test_encode_then_decode_under_any_chunking(specs: list[EventSpec], draw: st.DataObject) -> None:
    body, expected = encode_specs(specs)
    events, last_id, _ = decode_chunks(draw_chunks(draw, body))
    assert events == expected
    assert last_id == (expected[-1].id if expected else "")


SSE_ATOMS = [
    b"data:", b"data: ", b"event:", b"id:", b"retry:", b":", b" ", b"\r", b"\n", b"\r\n",
    b"\xef\xbb\xbf", b"\xe2\x82", b"\xac", b"x", b"7", b"\x00", b"\xff", b"\xc3\xa9",
    b"\xf0\x9f\x98\x80",
]  # fmt: skip
sse_soup = st.lists(st.sampled_from(SSE_ATOMS), max_size=40).map(b"".join)


@PROPERTY_SETTINGS
@given(body=sse_soup, draw=st.data())
def test_decoder_matches_the_literal_spec_reading(body: bytes, draw: st.DataObject) -> None:
    assert decode_chunks(draw_chunks(draw, body)) == reference_decode(body)


# --- interoperability with openai-python's decoder --------------------------------------


def openai_decode(chunks: list[bytes]) -> list[tuple[str, str, str]]:
    streaming = pytest.importorskip("openai._streaming", exc_type=ImportError)
    decoder = streaming.SSEDecoder()
    return [(s.data, s.event or "message", s.id or "") for s in decoder.iter_bytes(iter(chunks))]


def as_tuples(events: list[SSEEvent]) -> list[tuple[str, str, str]]:
    return [(e.data, e.event, e.id) for e in events]


def test_openai_decoder_reads_our_encoding_under_every_chunking() -> None:
    specs: list[EventSpec] = [
        ('{"choices":[{"delta":{"content":"héllo 😀"}}]}', None, None, "keepalive"),
        (" two  spaces", "custom", None, None),
        ("x:y: z", "", None, "ping"),
        ('{"usage":{}}', None, None, None),
        ("[DONE]", None, None, None),
    ]
    body, expected = encode_specs(specs)
    for chunks in chunkings(body, three_pieces=False):
        assert openai_decode(chunks) == as_tuples(expected), chunks


@settings(max_examples=100, deadline=None, database=None)
@given(specs=events_strategy, draw=st.data())
def test_openai_decoder_agrees_on_random_streams(
    specs: list[EventSpec], draw: st.DataObject
) -> None:
    # Streams with an ``id`` are left out: see the keep-alive caveat test below.
    specs = [(d, e, None, c) for d, e, _, c in specs]
    body, expected = encode_specs(specs)
    assert openai_decode(draw_chunks(draw, body)) == as_tuples(expected)


def test_openai_ignores_keepalive_comment_after_an_id() -> None:
    """Why encode_comment writes no blank line.

    openai-python keeps ``last_event_id`` and dispatches on any blank line once it is
    set, so ``: keepalive\\n\\n`` after an ``id`` would become an event with empty
    data (its Stream then calls ``json.loads("")``). A lone comment line is ignored.
    """
    hazard = encode_json({"a": 1}, id="7") + b": keepalive\n\n" + DONE
    assert ("", "message", "7") in openai_decode([hazard])
    body = encode_json({"a": 1}, id="7") + encode_comment() + DONE
    assert openai_decode([body]) == [
        ('{"a":1}', "message", "7"),
        ("[DONE]", "message", "7"),
    ]
    assert as_tuples(decode_chunks([body])[0]) == [
        ('{"a":1}', "message", "7"),
        ("[DONE]", "message", "7"),
    ]


def test_events_before_an_oversized_one_in_the_same_chunk_are_dispatched() -> None:
    """What goes out before SSEEventTooLarge does not depend on the chunking: the events
    a chunk completed come first, the error with the next call."""
    body = b"data: a\n\ndata: b\n\ndata: " + b"x" * 200
    for splits in ((), (5,), (10,), tuple(range(1, len(body)))):
        decoder = SSEDecoder(max_event_bytes=100)
        events: list[str] = []
        with pytest.raises(SSEEventTooLarge):
            cuts = [0, *splits, len(body)]
            for a, b in itertools.pairwise(cuts):
                events += [e.data for e in decoder.feed(body[a:b])]
            decoder.close()
        assert events == ["a", "b"], splits


@pytest.mark.parametrize(
    ("body", "cut"),
    [
        (b'data: {"a":1}\n\n', False),
        (b'data: {"a":1}\n\ndata: [DONE]\n', False),  # [DONE] without its blank line
        (b'data: {"a":1}\n\ndata: [DONE]', False),
        (b"data: {}\n\n: keepalive", False),  # a comment is no event
        (b"data: {}\n\nevent: x\n", False),  # no data: nothing to lose
        (b'data: {"a":1}\n\ndata: {"b"', True),
        (b'data: {"b":2}\n', True),  # never dispatched
        (b"data: [DO", True),
        (b'data: {"b":2}\r\ndata: 3', True),
    ],
)
def test_a_stream_that_ends_inside_an_event_is_a_cut(body: bytes, cut: bool) -> None:
    for split in range(len(body) + 1):  # the same whatever the reads
        dec = SSEDecoder(max_event_bytes=1 << 20)
        dec.feed(body[:split])
        dec.feed(body[split:])
        assert dec.cut_event is cut, (body, split)
