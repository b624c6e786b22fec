"""Streaming path rewriter (sans-IO).

Strategy
--------
``feed(text)`` appends to a small held buffer and asks the detector for the next
path. Everything before a possible path start goes out at once; a complete path
goes out as its replacement; only the tail from a possible start onward is held,
never more than ``max_path_chars`` (past that an overlong path is consumed to its
end keeping only its last segment, see :class:`gateway.core.paths.OverlongPath`).

The detector needs up to two characters before a start (boundary and opener), so
the buffer handed to it is ``history + held + new`` with the history marked as
already emitted. Every decision depends only on the characters, never on where a
chunk ended; therefore for any chunking ``feed(a) + feed(b) + ... + flush()`` equals
``rewrite(a + b + ...)``, and no emitted prefix ever contains a raw path: a path
is either held whole or replaced whole.

What a path becomes is the resolver's decision (``path -> url | None``); the
rewriter only formats it: ``[name](url)`` in prose, the bare url inside quotes,
code spans, angle brackets and markdown link targets, the name alone inside link
text or when the resolver declines. The async glue uses :meth:`feed_pieces`, which
hands back unresolved :class:`PathMatch` objects so resolution can run off the
event loop.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable, Iterable
from urllib.parse import quote

from gateway.core.markdown import LinkJoiner, LinkMatch, dead_link_text
from gateway.core.paths import (
    DEFAULT_MAX_PATH_CHARS,
    Clear,
    Context,
    Found,
    NeedMore,
    OverlongPath,
    PathDetector,
    PathMatch,
    json_escape,
)

Resolver = Callable[[str], "str | None"]
#: what the rewriter emits: text, a path, or a markdown link to a path
Piece = str | PathMatch | LinkMatch

__all__ = [
    "LinkMatch",
    "Piece",
    "Resolver",
    "StreamRewriter",
    "md_escape",
    "name_only",
    "piece_paths",
    "render",
    "render_piece",
    "rewrite",
    "scrub_identifier",
]


def name_only(path: str) -> None:
    """The default resolver: never a link, so every path becomes its file name."""
    return None


def md_escape(name: str) -> str:
    """``name`` as markdown link text (brackets and backslashes escaped)."""
    if "[" not in name and "]" not in name and "\\" not in name:
        return name
    return name.replace("\\", "\\\\").replace("[", "\\[").replace("]", "\\]")


def render(match: PathMatch, url: str | None, *, json_text: bool = False) -> str:
    """The text that replaces ``match`` given the resolver's answer.

    The replacement is written in the path's own spelling: a percent-encoded
    path's name is percent-encoded again (it cannot end the surrounding URL), and
    inside a JSON-escaped string the whole replacement is JSON-escaped (a ``"`` or
    ``\\`` in a name cannot end or break that string). ``json_text`` says the whole
    channel is JSON text (tool-call arguments): a plainly spelled path is then
    inside a JSON string too.
    """
    name = match.name
    if match.pct_level:
        for _ in range(match.pct_level):
            # a lone surrogate (from a JSON "\\ud800") has no UTF-8: "?" instead of a crash
            name = quote(name, safe="", errors="replace")
    if match.context is Context.CODE:  # the whole span, backticks included
        tick = "``" if "`" in name else "`"
        span = f"{tick}{name}{tick}"
        text = span if url is None else f"[{span}]({url})"
    elif url is None or match.context is Context.LINK_TEXT:
        text = name
    elif match.context is Context.QUOTED:
        text = url
    else:
        text = f"[{md_escape(name)}]({url})"
    level = match.json_level or (1 if json_text and not match.overlong else 0)
    for _ in range(level):
        text = json_escape(text)
    return text + match.suffix if match.suffix else text


def piece_paths(piece: Piece) -> list[PathMatch]:
    """The paths in one piece that a resolver answers (overlong ones never get a link)."""
    if isinstance(piece, str):
        return []
    if isinstance(piece, LinkMatch):
        found = [p for p in piece.text if isinstance(p, PathMatch)] + [piece.target]
        return [p for p in found if not p.overlong]
    return [] if piece.overlong else [piece]


def render_piece(
    piece: Piece, url_of: Callable[[PathMatch], str | None], *, json_text: bool = False
) -> str:
    """The text of one piece, each of its paths' links asked of ``url_of`` (a path that
    is overlong is never asked). A markdown link whose target gets no link loses the
    link: its text stays (see :mod:`gateway.core.markdown`)."""
    if isinstance(piece, str):
        return piece
    if isinstance(piece, PathMatch):
        return render(piece, None if piece.overlong else url_of(piece), json_text=json_text)
    text = "".join(render_piece(p, url_of, json_text=json_text) for p in piece.text)
    target = piece.target
    url = None if target.overlong else url_of(target)
    if url is None:
        name = render(target, None, json_text=json_text)
        if not piece.closer and name.endswith(")"):
            name = name[:-1]  # the path took the link's ")" (see mdlinks._read)
        return dead_link_text(text, name)
    return f"[{text}{piece.middle}{render(target, url, json_text=json_text)}{piece.closer}"


class StreamRewriter:
    """Incremental rewriter: ``feed(text) -> str`` safe to emit now, ``flush() -> str``.

    Not thread-safe; one instance per text channel (one per choice's content, one
    per tool-call argument string, ...).
    """

    def __init__(
        self,
        resolver: Resolver | None = None,
        *,
        detector: PathDetector | None = None,
        extra_roots: Iterable[str] = (),
        max_path_chars: int = DEFAULT_MAX_PATH_CHARS,
        json_text: bool = False,
    ) -> None:
        self._resolve: Resolver = resolver or name_only
        self.json_text = json_text  #: the channel is JSON text (see :func:`render`)
        self._detector = detector or PathDetector.shared(tuple(extra_roots), max_path_chars)
        self._hist = ""  # up to LOOKBEHIND raw characters already emitted (context only)
        self._held = ""  # raw text not yet emitted
        self._skip: OverlongPath | None = None
        self._closed = False
        self.paths_seen = 0
        #: markdown links around paths (not in JSON text: tool-call arguments)
        self._links = None if json_text else LinkJoiner()

    @property
    def held_chars(self) -> int:
        """How many characters are held back right now."""
        links = self._links
        return len(self._held) + (links.held_chars if links is not None else 0)

    @property
    def holding(self) -> bool:
        return self.held_chars > 0 or self._skip is not None

    def feed_pieces(self, text: str) -> list[Piece]:
        """Like :meth:`feed` but paths come back unresolved."""
        if self._closed:
            raise RuntimeError("feed() after flush()")
        return self._joined(self._run(text, final=False), False)

    def flush_pieces(self) -> list[Piece]:
        """End of the stream: everything held is decided and returned."""
        if self._closed:
            return []
        out = self._joined(self._run("", final=True), True)
        self._closed = True
        return out

    def _joined(self, pieces: list[Piece], final: bool) -> list[Piece]:
        links = self._links
        if links is None or (not final and not links.held_chars and _plain(pieces)):
            return pieces  # the common case: no "[" anywhere
        return links.feed(pieces, final)  # type: ignore[arg-type,return-value]

    def feed(self, text: str) -> str:
        """Feed text; return what is safe to emit now (paths already replaced)."""
        return self._join(self.feed_pieces(text))

    def flush(self) -> str:
        """End the stream; return the rest (held paths resolved or reduced to names)."""
        return self._join(self.flush_pieces())

    def _join(self, pieces: list[Piece]) -> str:
        def url_of(p: PathMatch) -> str | None:
            return self._resolve(p.path)

        return "".join(render_piece(p, url_of, json_text=self.json_text) for p in pieces)

    def _run(self, text: str, final: bool) -> list[Piece]:
        out: list[Piece] = []
        if self._skip is not None:
            done = self._skip.feed(text, final)
            if done is None:
                return out
            text, match = done
            self.paths_seen += 1
            out.append(match)
            self._hist = self._skip.tail
            self._skip = None
        buf = self._hist + self._held + text
        pos = len(self._hist)
        detector = self._detector
        detector.new_buffer()
        while True:
            res = detector.scan(buf, pos, final, self.json_text)
            if type(res) is Found:
                if res.start > pos:
                    out.append(buf[pos : res.start])
                self.paths_seen += 1
                out.append(res.match)
                pos = res.end
                continue
            if isinstance(res, Clear):
                if res.end > pos:
                    out.append(buf[pos : res.end])
                self._keep(buf, res.end)
                return out
            if res.start > pos:
                out.append(buf[pos : res.start])
            if isinstance(res, Found):
                self.paths_seen += 1
                out.append(res.match)
                pos = res.end
                continue
            if isinstance(res, NeedMore):
                self._keep(buf, res.start)
                return out
            # Overlong: consume it to its end, keeping only its name.
            skip = OverlongPath(res.stop)
            done = skip.feed(buf[res.start :], final)
            if done is None:
                self._skip = skip
                self._held = ""
                self._hist = ""
                return out
            raise AssertionError(
                "detector reported Overlong for a path that ends"
            )  # pragma: no cover

    def _keep(self, buf: str, at: int) -> None:
        self._held = buf[at:]
        self._hist = buf[max(0, at - self._detector.lookbehind) : at]


def _plain(pieces: list[Piece]) -> bool:
    """No piece is text with a "[" (nothing for the link joiner to hold)."""
    return not any(type(p) is str and "[" in p for p in pieces)


def rewrite(
    text: str,
    resolver: Resolver | None = None,
    *,
    extra_roots: Iterable[str] = (),
    max_path_chars: int = DEFAULT_MAX_PATH_CHARS,
) -> str:
    """One-shot rewrite of a whole string (same result as any streaming chunking)."""
    rw = StreamRewriter(resolver, extra_roots=extra_roots, max_path_chars=max_path_chars)
    return rw.feed(text) + rw.flush()


#: where a path glued after a word may start inside an identifier
GLUE = frozenset("/\\%~$&")
#: the longest identifier read separator by separator; a longer one is a stand-in
MAX_IDENTIFIER = 256
#: the most places a glued path is tried at (one rewrite each: ``&`` × 256 took 0.6 s);
#: an identifier with more is a stand-in too (model ids have a handful)
MAX_GLUED = 12


def scrub_identifier(text: str, scrub: Callable[[str], str] = rewrite) -> str:
    """``text`` as an identifier (a model id, ``root``, ``parent``), its paths as names.

    An identifier is not prose, so the prose rule "a path never starts after a letter"
    (``and/or``, ``km/h``) protects nothing there: ``local/Users/alice/m`` names a host
    path. Every separator after a word, and every letter a drive or scheme may start
    with, is tried as a start too, left to right; a path
    found there becomes its name behind a ``/`` (``local/m``). Longer than
    :data:`MAX_IDENTIFIER` after ``scrub``, or with more than :data:`MAX_GLUED` such
    places: no identifier, a stable stand-in (``id_<hash>``) in its place (the cost
    stays bounded: at most ``MAX_GLUED`` places, two rewrites each, of the rewritten
    text and of the text as written, and at most ``MAX_GLUED`` more to find where one
    was written, see :class:`_Written`).

    A place is read in ``text`` as written too, not only in the rewritten text: the
    prose pass may have found a path inside the glued one and put its name where it
    began. After a folder whose last character is a boundary (``a数据``, ``a-``,
    ``a(1)``: a start may follow one in prose), the folder's first part and that name
    read again as one last segment (``v2\\\\SystemRoot\\\\a数据\\\\b\\\\r.pdf``, JSON text,
    showed ``v2/a数据r.pdf``); right after the glued start, that path may end sooner
    than the glued one and leave its folders (:func:`_as_written`).
    """
    out = scrub(text)
    tries = sum(1 for i in range(1, len(out)) if _glued_span(out, i))
    if len(out) > MAX_IDENTIFIER or tries > MAX_GLUED:
        return _stand_in(text)
    written = _Written(text, scrub, out)
    i = 1
    while i < len(out):  # left to right: a scheme before its path wins
        span = _glued_span(out, i)
        if span and written.copied(out, i, span):  # not in a name the rewrite put in
            if tries == 0:  # the places were counted before names were put in
                return _stand_in(text)
            tries -= 1
            tail = out[i:]
            named = scrub(tail)
            found = named != tail  # a path starts here in the rewritten text
            at = written.find(out, i, span) if found else written.fixed(i, span)
            if found and at is None:  # not found where it was written: no identifier
                return _stand_in(text)
            if at is not None:
                if text[at:] != tail:  # a rewrite lies behind it: read it as written
                    named = _as_written(tail, scrub(text[at:]), named, span)
                if named != tail:
                    out = out[:i] + "/" + named.lstrip("/\\")
                    written.restart(at, named, i + 1)
        i += 1
    return out


def _as_written(tail: str, glued: str, named: str, span: int) -> str:
    """What a start glued to a word (``span`` characters for sure) reads as: ``named``
    (``tail``, the rewritten text from it on, read again) or ``glued`` (the text as
    written, read from it).

    Found in ``tail`` (``named`` differs), a path may be cut short there: a path the
    prose pass found inside it put its name after the folder's first part (``a数据``
    + ``r.pdf``); ``glued`` then, unless it shows a separator ``tail`` does not end
    with (a folder ``tail`` hid: read from the glued start, a path may end sooner, at
    a space). Not found, such a path may have cut off its start (JSON text of
    ``v2c:\\\\.\\\\Documents and Settings/a/x``: ``\\\\.\\\\Documents`` after the drive's
    colon is a share's root, which ends at the space, before the folders): ``glued``
    if ``tail`` ends with it and shows more than the start holds for sure before it
    (``C:`` of ``v2C:\\Users\\a\\x`` stays: ``v2C:x``)."""
    same = _common_prefix(tail[::-1], glued[::-1])
    if named != tail:
        return named if _SEPARATOR.search(glued, 0, len(glued) - same) else glued
    return glued if same == len(glued) and len(tail) - same > span else tail


def _stand_in(text: str) -> str:
    digest = hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()
    return "id_" + digest[:24]


class _Written:
    """Where a place in the rewritten identifier stands in the text as written.

    ``out[start:]`` (the identifier being rewritten) is ``read`` without its leading
    separators, and ``read`` is ``scrub(text[at:])``. Before the first character that
    rewrite changed and after the last one, both are the same text at a fixed offset;
    in between (a name, a link, and the text between two rewritten paths) the place is
    the one from which the text before it reads as ``read`` up to it: found by
    rewriting that text, at most :data:`MAX_GLUED` times per identifier.
    """

    def __init__(self, text: str, scrub: Callable[[str], str], read: str) -> None:
        self.text = text
        self.scrub = scrub
        self.probes = MAX_GLUED
        self.restart(0, read, 0)

    def restart(self, at: int, read: str, start: int) -> None:
        raw = self.text[at:]
        self.at = at
        self.read = read
        self.off = start - (len(read) - len(read.lstrip("/\\")))  # out[x] is read[x - off]
        self.head = _common_prefix(raw, read)
        self.tail = _common_prefix(raw[::-1], read[::-1])

    def fixed(self, i: int, span: int) -> int | None:
        """The place of ``out[i]`` if it is before or after everything rewritten."""
        q = i - self.off
        if q + span <= self.head:
            return self.at + q
        if len(self.read) - q <= self.tail:
            return len(self.text) - (len(self.read) - q)
        return None

    def _between(self, out: str, i: int, span: int) -> tuple[str, int, int]:
        """What a start at ``out[i]`` in between begins with as written (the start and
        two more characters: a path found inside it by the prose pass begins after its
        root, ``~/a``, ``%5Cx``, ``C:\\x``), and where in the text it may stand."""
        want = out[i : i + span + 2]
        lo = self.at + max(1, self.head - span + 1)
        return want, lo, len(self.text) - self.tail - 1 + len(want)

    def copied(self, out: str, i: int, span: int) -> bool:
        """Could the start at ``out[i]`` have been written in the text (not only put in
        by the rewrite: a name's ``%`` or ``~``, a link's ``https:``)?"""
        if self.fixed(i, span) is not None:
            return True
        want, lo, hi = self._between(out, i, span)
        return self.text.find(want, lo, hi) >= 0

    def find(self, out: str, i: int, span: int) -> int | None:
        """Where ``out[i:]`` (a start ``span`` characters long, then the rest) begins in
        the text, or None."""
        at = self.fixed(i, span)
        if at is not None:
            return at
        head = self.read[: i - self.off]
        want, lo, hi = self._between(out, i, span)
        r = self.text.find(want, lo, hi)
        while r >= 0 and self.probes > 0:
            self.probes -= 1
            if self.scrub(self.text[self.at : r]) == head:
                return r
            r = self.text.find(want, r + 1, hi)
        return None


def _common_prefix(a: str, b: str) -> int:
    """How many characters ``a`` and ``b`` begin with alike."""
    return next(
        (k for k, (x, y) in enumerate(zip(a, b, strict=False)) if x != y), min(len(a), len(b))
    )


def _glued_span(text: str, i: int) -> int:
    """Could a path glued to what precedes start at ``text[i]``: the first of a run of
    separators, or a letter that may open a drive (``C:``) or a scheme (``file:``)?
    How many characters its start holds for sure (the separator; the letters up to
    the colon), 0 if none."""
    c = text[i]
    if c in GLUE:
        return int(c != text[i - 1])
    if not (c.isascii() and c.isalpha()):
        return 0
    colon = _COLON.search(text, i + 1, i + 24)
    return 0 if colon is None else colon.end() - i


#: a separator in any spelling (plain, JSON, percent, HTML)
_SEPARATOR = re.compile(
    r"[/\\]|%(?:25)?(?:2f|5c)|&(?:amp;)?(?:#x0*(?:2f|5c)|#0*(?:47|92)|b?sol)", re.IGNORECASE
)
#: a colon as a drive or a scheme may spell it (plain, percent, HTML, JSON)
_COLON = re.compile(r":|%(?:25)*3a|&#0*58|&#x0*3a|&colon|\\u003a", re.IGNORECASE)
