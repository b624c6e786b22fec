"""Streaming path rewriter (sans-IO).

Strategy
--------
``feed(text)`` appends to a small held buffer and asks the detector for the next
path. Everything before a possible path start goes out at once; a complete path
goes out as its replacement; only the tail from a possible start onward is held,
never more than ``max_path_chars`` (past that an overlong path is consumed to its
end keeping only its last segment, see :class:`gateway.paths.OverlongPath`).

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

from gateway.paths import (
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
Piece = str | PathMatch

__all__ = [
    "Piece",
    "Resolver",
    "StreamRewriter",
    "md_escape",
    "name_only",
    "render",
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

    @property
    def held_chars(self) -> int:
        """How many characters are held back right now."""
        return len(self._held)

    @property
    def holding(self) -> bool:
        return bool(self._held) or self._skip is not None

    def feed_pieces(self, text: str) -> list[Piece]:
        """Like :meth:`feed` but paths come back unresolved."""
        if self._closed:
            raise RuntimeError("feed() after flush()")
        return self._run(text, final=False)

    def flush_pieces(self) -> list[Piece]:
        """End of the stream: everything held is decided and returned."""
        if self._closed:
            return []
        out = self._run("", final=True)
        self._closed = True
        return out

    def feed(self, text: str) -> str:
        """Feed text; return what is safe to emit now (paths already replaced)."""
        return self._join(self.feed_pieces(text))

    def flush(self) -> str:
        """End the stream; return the rest (held paths resolved or reduced to names)."""
        return self._join(self.flush_pieces())

    def _join(self, pieces: list[Piece]) -> str:
        return "".join(
            p
            if isinstance(p, str)
            else render(p, None if p.overlong else self._resolve(p.path), json_text=self.json_text)
            for p in pieces
        )

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
    stays bounded: at most ``MAX_GLUED`` rewrites of ``MAX_IDENTIFIER`` characters).
    """
    out = scrub(text)
    tries = sum(1 for i in range(1, len(out)) if _glued_start(out, i))
    if len(out) > MAX_IDENTIFIER or tries > MAX_GLUED:
        digest = hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()
        return "id_" + digest[:24]
    i = 1
    while i < len(out) and tries > 0:  # left to right: a scheme before its path wins
        if _glued_start(out, i):
            tries -= 1
            tail = out[i:]
            named = scrub(tail)
            if named != tail:
                out = out[:i] + "/" + named.lstrip("/\\")
        i += 1
    return out


def _glued_start(text: str, i: int) -> bool:
    """Could a path glued to what precedes start at ``text[i]``: the first of a run of
    separators, or a letter that may open a drive (``C:``) or a scheme (``file:``)?"""
    c = text[i]
    if c in GLUE:
        return c != text[i - 1]
    return c.isascii() and c.isalpha() and _COLON.search(text, i + 1, i + 24) is not None


#: a colon as a drive or a scheme may spell it (plain, percent, HTML, JSON)
_COLON = re.compile(r":|%(?:25)*3a|&#0*58|&#x0*3a|&colon|\\u003a", re.IGNORECASE)
