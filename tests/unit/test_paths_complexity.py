"""The detector's work is linear in its input (no timing: the machine is shared).

Every regex search the detector runs past a start (stop characters, quote closers,
second starts, the separator split of an overlong path) goes through a counting
wrapper that adds up the characters each call looks at. Adversarial inputs must cost
a bounded number of examined characters per input character, whatever their size:
the quadratic behaviour (``'/home/a/' + '(' * n``: a 255-character split per bracket;
``'](/home/a/x' * n``: a 4,096-character closer search per start) would show as
hundreds of characters per input character, growing with the bound.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import pytest

import gateway.core.paths as P
from gateway.core.rewrite import StreamRewriter, rewrite

ROOTS = ["/tmp/rt1/zqroot", "/zqagentws", "C:\\zqwinwork"]


class _Counting:
    """A compiled pattern that counts the characters its searches examine."""

    work = 0

    def __init__(self, pat: re.Pattern[str]) -> None:
        self.pat = pat

    @staticmethod
    def _end(s: str, endpos: int | None) -> int:
        return len(s) if endpos is None else min(endpos, len(s))

    def search(self, s: str, pos: int = 0, endpos: int | None = None) -> Any:
        end = self._end(s, endpos)
        m = self.pat.search(s, pos, end)
        _Counting.work += (m.end() if m else end) - pos + 1
        return m

    def finditer(self, s: str, pos: int = 0, endpos: int | None = None) -> Iterator[Any]:
        end = self._end(s, endpos)
        last = pos
        for m in self.pat.finditer(s, pos, end):
            _Counting.work += m.end() - last + 1
            last = m.end()
            yield m
        _Counting.work += end - last

    def split(self, s: str) -> list[str]:
        _Counting.work += len(s) + 1
        return self.pat.split(s)


@pytest.fixture()
def counted(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    for name in (
        "_STOP_WIN",
        "_STOP_ESC",
        "_STOP_SHELL",
        "_STOP_PCT",
        "_SEPARATORS",
        "_SECOND_START",
    ):
        monkeypatch.setattr(P, name, _Counting(getattr(P, name)))
    quote_ends = P._quote_ends
    monkeypatch.setattr(
        P, "_quote_ends", lambda esc: {k: _Counting(v) for k, v in quote_ends(esc).items()}
    )
    P._spelling.cache_clear()
    P._spelling_of.cache_clear()
    yield
    P._spelling.cache_clear()
    P._spelling_of.cache_clear()


ADVERSARIAL = {
    "open parens": lambda n: "/home/a/" + "(" * n,
    "bracket pairs": lambda n: "/home/a/" + "()" * (n // 2),
    "percent parens": lambda n: "%2Fhome%2Fa%2F" + "(" * n,
    "link targets": lambda n: "](/home/a/x" * (n // 11),
    "quoted, no closer": lambda n: '"/home/a/x' * (n // 10),
    "code spans, no closer": lambda n: "`/home/a/x " * (n // 11),
    "angle, second starts": lambda n: "</home/a<'/home/b" * (n // 17) + " /home/z>",
    "separators": lambda n: "/home/a/" + "%2F" * (n // 3),
    "link text": lambda n: "[/home/a/" * (n // 9),
}


def _work(text: str, chunk: int | None = None) -> int:
    _Counting.work = 0
    if chunk is None:
        rewrite(text, extra_roots=ROOTS)
    else:
        rw = StreamRewriter(extra_roots=ROOTS)
        for i in range(0, len(text), chunk):
            rw.feed(text[i : i + chunk])
        rw.flush()
    return _Counting.work


@pytest.mark.parametrize("name", sorted(ADVERSARIAL))
def test_work_per_input_character_is_bounded(counted: None, name: str) -> None:
    make = ADVERSARIAL[name]
    small, big = make(20_000), make(200_000)
    w_small, w_big = _work(small), _work(big)
    print(f"{name}: {w_small / len(small):.1f} and {w_big / len(big):.1f} chars examined per char")
    # linear: a constant per character, the same at 20k and 200k (quadratic was 100s)
    assert w_big <= 8 * len(big)
    assert w_big / len(big) <= 1.5 * (w_small / len(small)) + 1


@pytest.mark.parametrize("name", ["open parens", "link targets", "angle, second starts"])
def test_streamed_work_is_bounded_too(counted: None, name: str) -> None:
    """In 64 KiB chunks the held tail is re-read once per chunk, at most
    max_path_chars of it: still a constant per character."""
    text = ADVERSARIAL[name](300_000)
    assert _work(text, chunk=65_536) <= 8 * len(text)
