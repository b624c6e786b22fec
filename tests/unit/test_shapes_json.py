"""gateway.core.checks.loads_bounded with a decoder made once: json.loads with that
decoder's options, for text and bytes alike."""

from __future__ import annotations

import json

import pytest

from gateway.core.checks import JSONTooDeep, loads_bounded


def _marked(text: str) -> tuple[str, str]:
    return ("float", text)  # unlike a float, never equal to one: the option shows


DECODER = json.JSONDecoder(parse_float=_marked)


@pytest.mark.parametrize(
    "text",
    [
        '{"a": 1.5}',
        b'{"a": 1.5}',
        '{"a": 1.5}'.encode("utf-16"),
        b"\xef\xbb\xbf[1.5]",  # bytes may start with UTF-8's BOM (json reads them so)
        " [1.5] ",
        b"\n1.5",
    ],
)
def test_the_decoders_options_hold_for_text_and_bytes(text: str | bytes) -> None:
    assert loads_bounded(text, 8, DECODER) == json.loads(text, parse_float=_marked)


@pytest.mark.parametrize("text", ["\ufeff{}", "{} x", b"", "[[["])
def test_what_json_loads_refuses_is_refused(text: str | bytes) -> None:
    with pytest.raises(ValueError) as ours:
        loads_bounded(text, 8, DECODER)
    with pytest.raises(ValueError) as theirs:
        json.loads(text, parse_float=_marked)
    assert type(ours.value) is type(theirs.value)


def test_the_depth_bound_comes_first() -> None:
    with pytest.raises(JSONTooDeep):
        loads_bounded(b"[" * 9 + b"]" * 9, 8, DECODER)
