"""Generated host paths of every class in every spelling (see tests/pathgen.py).

Properties, for every generated text and every chunking:
- no emitted prefix holds a secret folder token, in any spelling;
- the streamed output equals the one-shot rewrite (with and without links);
- a clean path (prose, spaces around it) becomes exactly its name, and the
  resolver sees the normal form;
- text holding only URLs, API routes, fractions... comes out unchanged.
CI runs ~10^4 examples over the four properties (``pathgen.CI_SETTINGS``); the
``slow`` soak runs many more.
"""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.core.paths import PathDetector
from gateway.core.rewrite import StreamRewriter, rewrite
from tests import pathgen

ROOTS = pathgen.CONFIG_ROOTS
URL = "https://gw.example/v1/artifacts/"


def link(path: str) -> str:
    return URL + str(abs(hash(path)) % 10_000)


def check_stream(text: str, chunks: list[str], secrets: tuple[str, ...]) -> None:
    """Streamed == one-shot, and no secret in it. Output is append-only, so a secret
    in any emitted prefix would be in the whole output too."""
    for resolver in (None, link):
        one_shot = rewrite(text, resolver, extra_roots=ROOTS)
        assert not pathgen.leaked(one_shot, secrets), one_shot
        rw = StreamRewriter(resolver, extra_roots=ROOTS)
        streamed = "".join([rw.feed(chunk) for chunk in chunks]) + rw.flush()
        assert streamed == one_shot, chunks


@pathgen.CI_SETTINGS
@given(st.data())
def test_no_secret_reaches_the_client_for_any_chunking(data: st.DataObject) -> None:
    planted = data.draw(pathgen.planted_texts())
    chunks = data.draw(pathgen.chunkings(planted.text))
    check_stream(planted.text, chunks, planted.secrets)


@pathgen.CI_SETTINGS
@given(pathgen.host_paths())
def test_a_clean_path_becomes_its_name(hp: pathgen.HostPath) -> None:
    seen: list[str] = []

    def spy(path: str) -> None:
        seen.append(path)

    out = rewrite(f"see {hp.text} now", spy, extra_roots=ROOTS)
    assert not pathgen.leaked(out, hp.secrets)
    assert len(seen) == 1, (hp.text, out)
    assert "\\/" not in seen[0] and "%2f" not in seen[0].lower()  # the normal form
    # the name, in the path's own spelling (percent- or JSON-encoded like the path);
    # an unknown deep-link scheme stays in front of it ("myeditor:name")
    body = out.removeprefix("see ").removesuffix(" now")
    assert any(dec(body).endswith(hp.name) for dec in pathgen.DECODERS), (hp.text, out)


@pathgen.CI_SETTINGS
@given(pathgen.texts_without_paths(), st.data())
def test_urls_routes_and_fractions_come_out_unchanged(text: str, data: st.DataObject) -> None:
    chunks = data.draw(pathgen.chunkings(text))
    rw = StreamRewriter(link, extra_roots=ROOTS)
    assert "".join(rw.feed(c) for c in chunks) + rw.flush() == text
    assert rewrite(text, link, extra_roots=ROOTS) == text


@pathgen.CI_SETTINGS
@given(pathgen.host_paths())
def test_the_start_prefix_test_holds_every_prefix_of_a_start(hp: pathgen.HostPath) -> None:
    """No prefix of a real path start is ever let out (the twin-regex contract)."""
    det = PathDetector.shared(ROOTS)
    text = " " + hp.text
    for i in range(2, min(len(text), 40) + 1):  # the start region; later cuts: above
        rw = StreamRewriter(detector=det)
        out = rw.feed(text[:i])
        rest = rw.flush()
        # whatever went out at once must be what a one-shot rewrite starts with
        assert rewrite(text, extra_roots=ROOTS).startswith(out) or out == " ", (text[:i], out)
        assert not pathgen.leaked(out, hp.secrets)
        assert rest is not None


def test_json_contexts_stay_valid_json() -> None:
    names = ['say"hi.txt', "back\\slash.txt", "tab\tname.txt"]
    for name in names:
        # a POSIX path with that name, inside a JSON string, JSON-escaped
        value = json.dumps({"p": f"/tmp/zqjsonsecret1/{name}"})
        out = rewrite(value, link, extra_roots=ROOTS)
        assert json.loads(out)["p"].startswith(URL)  # quoted: the bare link
        out = rewrite(value, extra_roots=ROOTS)
        assert "zqjsonsecret1" not in out
        json.loads(out)  # still valid JSON
        prose = json.dumps({"text": f"saved /tmp/zqjsonsecret1/{name.replace(chr(9), '_')} ok"})
        for resolver in (None, link):
            out = rewrite(prose, resolver, extra_roots=ROOTS)
            assert "zqjsonsecret1" not in json.loads(out)["text"], out


@pytest.mark.slow
@pathgen.SLOW_SETTINGS
@given(st.data())
def test_soak_no_secret_reaches_the_client(data: st.DataObject) -> None:
    planted = data.draw(pathgen.planted_texts(max_paths=5))
    chunks = data.draw(pathgen.chunkings(planted.text, max_cuts=40))
    check_stream(planted.text, chunks, planted.secrets)


def _is_start_prefix(det: PathDetector, buf: str, s: int, glued: bool) -> bool:
    """The definition: the whole rest of ``buf`` from ``s`` is a prefix of a start."""
    table = det._glued_prefix if glued else det._prefix
    return table[buf[s]].fullmatch(buf, s) is not None


@settings(parent=pathgen.CI_SETTINGS, max_examples=600)
@given(pathgen.host_paths(), st.sampled_from(["", "see ", "`", "(", '"', "x"]))
def test_the_memoised_start_head_answers_as_the_whole_match(
    hp: pathgen.HostPath, before: str
) -> None:
    """``PathDetector._inside_start`` (a memoised answer for the first characters, the
    whole match only when they are a prefix) says what matching the whole rest says,
    at every start character and every cut of every spelling: the prefix languages
    are prefix-closed, which the memo relies on."""
    det = PathDetector.shared(ROOTS)
    text = before + hp.text + " and more"
    for glued, table in ((False, det._prefix), (True, det._glued_prefix)):
        for s in range(len(text)):
            if text[s] not in table:
                continue
            for cut in range(s + 1, min(len(text), s + det.max_start_chars) + 1):
                buf = text[:cut]
                assert det._inside_start(buf, s, glued) == _is_start_prefix(det, buf, s, glued)
