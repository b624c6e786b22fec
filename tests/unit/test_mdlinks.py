"""Markdown links around paths (gateway/core/markdown.py, through the streaming rewriter).

Every case runs whole, byte by byte, at every split point, every pair of split points
(short texts) and seeded random splits (``test_rewrite.chunkings``); the streamed output
must equal the one-shot rewrite and the expectation, and no emitted prefix may hold a
secret folder name. Hypothesis then mixes brackets, parentheses and paths freely.
"""

from __future__ import annotations

import itertools

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gateway.core.markdown import MAX_LINK_TEXT
from gateway.core.rewrite import StreamRewriter, rewrite
from tests.unit.test_rewrite import chunkings

URL = "https://gw.example/v1/artifacts/x"
SECRET = "zqsecret"
P = f"/home/{SECRET}/out/report.md"


def linked(path: str) -> str | None:
    """Files whose name starts with "report" get a link; anything else its name."""
    return URL if path.rsplit("/", 1)[-1].startswith("report") else None


def check(text: str, expected: str, resolver=linked) -> None:  # type: ignore[no-untyped-def]
    assert rewrite(text, resolver) == expected
    for chunks in chunkings(text):
        rw = StreamRewriter(resolver)
        outs = [rw.feed(c) for c in chunks] + [rw.flush()]
        assert "".join(outs) == expected, chunks
        acc = ""
        for out in outs:
            acc += out
            assert SECRET not in acc, (chunks, acc)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        # a link to a path that gets none: the text stays, the dead link goes
        (f"[notes](/home/{SECRET}/notes.md) ok", "notes (notes.md) ok"),
        (f"[notes.md](/home/{SECRET}/notes.md)", "notes.md"),
        (f"[/home/{SECRET}/notes.md](/home/{SECRET}/notes.md)", "notes.md"),
        (f"[](/home/{SECRET}/notes.md)", "notes.md"),
        (f"[my notes](</home/{SECRET}/my notes.md>) ok", "my notes (my notes.md) ok"),
        (f"[x]( /home/{SECRET}/n.md ) ok", "x (n.md) ok"),
        (f"see ![plot](/home/{SECRET}/plot.png)", "see !plot (plot.png)"),
        # a path that gets a link: the link as before
        (f"[the report]({P}) ok", f"[the report]({URL}) ok"),
        (f"[r](<{P}>)", f"[r](<{URL}>)"),
        # brackets that are not link text: the path is a link inside them
        (f"[{P}] done", f"[[report.md]({URL})] done"),
        (f"Saved: [{P}]", f"Saved: [[report.md]({URL})]"),
        (f"[{P}]\n", f"[[report.md]({URL})]\n"),
        # link text of an inline or a reference link, a definition: the name alone
        (f"[{P}](https://x.example)", "[report.md](https://x.example)"),
        (f"[{P}][1]", "[report.md][1]"),
        (f"[{P}]: https://x.example", "[report.md]: https://x.example"),
        # no link: text as it was
        ("[docs](https://example.com/a) and [1] and [ ] done", None),
        ("a [b] (c) [d]", None),
        ("[unclosed text\nnext line", None),
        # an inner link when the outer bracket is not one
        (f"[a [b](/home/{SECRET}/n.md) c", "[a b (n.md) c"),
        # escaped brackets in link text are text
        (f"[a \\[b\\] c](/home/{SECRET}/n.md)", "a \\[b\\] c (n.md)"),
    ],
)
def test_markdown_links_around_paths(text: str, expected: str | None) -> None:
    check(text, text if expected is None else expected)


def test_link_text_longer_than_the_bound_is_no_link() -> None:
    """Past MAX_LINK_TEXT characters a "[" is text: the hold is bounded."""
    long = "w" * MAX_LINK_TEXT
    text = f"[{long}](/home/{SECRET}/n.md) ok"
    rw = StreamRewriter(linked)
    out = rw.feed(text[: MAX_LINK_TEXT + 2])
    assert out.startswith("[w")  # decided once the bound is passed
    assert rw.held_chars <= MAX_LINK_TEXT
    assert rewrite(text, linked) == f"[{long}](n.md) ok"


def test_ordinary_text_with_a_bracket_is_held_only_until_its_meaning_is_known() -> None:
    rw = StreamRewriter(linked)
    assert rw.feed("a list: [") == "a list: "
    assert rw.feed("1") == ""
    assert rw.feed("] and") == "[1] and"  # the character after "]" tells
    assert rw.feed(" [docs](") == " "
    # a target that is no path: the link goes out (the rewriter holds what could
    # still start a path, as ever)
    assert rw.feed("https://x.example/a ").startswith("[docs](https:")
    assert rw.feed("y) done") == "y) done"
    assert rw.flush() == ""


#: a path then what may end it (a path glued to a letter is no path in prose, "and/or",
#: so a word or another path never follows one directly)
PATHS = st.tuples(
    st.sampled_from([P, f"/home/{SECRET}/n.md", f"/tmp/{SECRET}/a b.txt"]),
    st.sampled_from([" ", ")", "]", ">", "\n", ") ", "] "]),
).map("".join)
PIECES = st.one_of(
    st.sampled_from([*"[]()<> \n!:", "\\[", "\\]", "word ", "https://x.example/p "]),
    PATHS,
)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(PIECES, max_size=24).map("".join), st.data())
def test_property_brackets_and_paths_are_chunking_invariant(text: str, data: st.DataObject) -> None:
    """Any mix of brackets, parentheses and paths: the same output for every chunking,
    no secret in any emitted prefix, nothing held after the flush."""
    whole = rewrite(text, linked)
    cuts = sorted(set(data.draw(st.lists(st.integers(0, len(text)), max_size=10))))
    bounds = [0, *cuts, len(text)]
    rw = StreamRewriter(linked)
    acc = ""
    for a, b in itertools.pairwise(bounds):
        acc += rw.feed(text[a:b])
        assert SECRET not in acc
    acc += rw.flush()
    assert acc == whole
    assert SECRET not in acc
    assert not rw.holding
