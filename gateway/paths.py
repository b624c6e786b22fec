"""Host-local path detector (sans-IO).

Strategy
--------
The detector answers one question for the streaming rewriter: starting at ``pos``
in a buffer of text, where is the next host-local path, where does it end, and is
that already certain or does it depend on text that has not arrived yet?

1. *Triggers.* A path can only start at one of four characters: ``/`` (a POSIX
   root such as ``/Users/``), ``~`` (``~/``), ``\\`` (UNC ``\\\\server\\share``) or
   ``:`` (the colon of a drive ``C:\\`` / ``C:/`` or of ``file://``). One compiled
   character-class search finds them, so prose without any of them costs a single
   C-level scan.
2. *Start check.* At a trigger the detector checks the boundary (a path never
   starts right after a letter or digit of a space-separated script, or after
   ``/ \\ . ~``: that keeps ``https://host/tmp/x``, ``and/or``, ``../tmp`` and ``s://``
   out; any other punctuation, ``_`` ``-`` ``]`` included, is a boundary) and the
   literal start (root name, ``~/``, ``file://``, drive, UNC). If the buffer ends
   inside a possible start the answer is "need more".
3. *Context.* The one or two characters before the start say how the path is
   delimited: after `` ` ``, ``"``, ``'`` or ``<``, and as a markdown link target
   ``](``, the path runs to the matching closer on the same line and may contain
   spaces (*quoted*); after ``[`` it is link text; otherwise it is *prose* and ends
   at whitespace, a quote, backtick, angle bracket, ``*``, ``|``, an unbalanced
   closing bracket, CJK punctuation, or trailing ASCII sentence punctuation.
4. *Bound.* Nothing longer than ``max_path_chars`` is ever held: a quoted
   candidate without its closer by then is re-read as prose, and a prose path
   longer than the bound is *overlong*: the caller consumes it to its end keeping
   only its last segment (:class:`OverlongPath`) and emits that name alone.

Every decision depends only on the text (never on where a chunk ended), which is
what makes the rewriter's output independent of chunking.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable
from enum import Enum
from typing import NamedTuple
from urllib.parse import unquote

DEFAULT_ROOT_NAMES: tuple[str, ...] = (
    "Users",
    "users",
    "home",
    "root",
    "tmp",
    "private",
    "var",
    "Volumes",
    "mnt",
    "opt",
    "srv",
    "etc",
)
DEFAULT_MAX_PATH_CHARS = 4096
#: the last segment of an overlong path is kept up to this many characters
MAX_NAME_CHARS = 255


class Context(Enum):
    """How the text around a path delimits it, which decides its replacement."""

    PROSE = "prose"  # [name](url) or name
    QUOTED = "quoted"  # inside `..`, "..", '..', <..> or ](..): bare url or name
    LINK_TEXT = "link_text"  # inside [..]: the name alone


class PathMatch(NamedTuple):
    """A complete host-local path found in the text (immutable)."""

    raw: str  #: the text that is replaced ("" for an overlong path: never kept whole)
    path: str  #: normalised path handed to the resolver
    name: str  #: the file name alone (never a folder part)
    context: Context
    overlong: bool = False
    suffix: str = ""  #: literal text emitted after the replacement (overlong paths only)


# --- character classes ------------------------------------------------------

_TRIGGER = re.compile(r"[/~\\:]")
_CJK_STOP = "。，、；：！？「」『』（）【】《》〈〉"
_PROSE_STOP = re.compile(r"[\s\"'`<>*|()\[\]{}\x00-\x1f\x7f" + _CJK_STOP + "]")
_OPENERS = "([{"
_BRACKETS = "([{)]}"
_CLOSER_OF = {")": "(", "]": "[", "}": "{"}
_TRAILING_PUNCT = ".,;:!?"
_QUOTE_CLOSERS = {"`": "`", '"': '"', "'": "'", "<": ">"}
_CONTEXT_CHARS = frozenset("`\"'<([")
_QUOTE_END = {c: re.compile("[\r\n" + re.escape(c) + "]") for c in "`\"'>)]"}
_NOT_BOUNDARY = frozenset("/\\.~")
_NON_SEPARATOR = re.compile(r"[^/\\]")
_SEPARATORS = re.compile(r"[/\\]+")
_UNC = re.compile(r"\\\\(?:\\\\)?[\w.$-]+\\{1,2}[\w.$-]")
_UNC_PARTIAL = re.compile(r"\\(?:\\(?:\\?\\?[\w.$-]*(?:\\{1,2})?)?)?")
_SECOND_START = re.compile(r"\s(?:/|~/|[A-Za-z]:[\\/]|\\\\|file:)", re.IGNORECASE)
_HOME_PARENTS = frozenset({"/Users", "/users", "/home"})
_WIN_HOME_PARENT = re.compile(r"[A-Za-z]:[\\/]+(?:Users|Documents and Settings)", re.IGNORECASE)


def could_contain_path(text: str) -> bool:
    """False when ``text`` cannot hold a path start (none of ``/ ~ \\ :``): no rewrite needed."""
    return _TRIGGER.search(text) is not None


def _spaceless_script(ch: str) -> bool:
    """True for letters of scripts written without spaces (CJK, kana, Thai...)."""
    o = ord(ch)
    return (
        0x2E80 <= o <= 0x9FFF
        or 0xF900 <= o <= 0xFAFF
        or 0xFF00 <= o <= 0xFFEF
        or 0xAC00 <= o <= 0xD7AF
        or 0x0E00 <= o <= 0x0EFF
        or 0x1000 <= o <= 0x109F
        or 0x20000 <= o <= 0x3FFFF
    )


def is_boundary(ch: str) -> bool:
    """May a path start right after ``ch`` ("" means start of text)?"""
    if not ch:
        return True
    if ch in _NOT_BOUNDARY:
        return False
    if ch.isalnum():
        return _spaceless_script(ch)
    return True


def file_name(path: str) -> str:
    """The file name alone: last segment; a home directory becomes ``~``."""
    trimmed = path.rstrip("/\\") if path[-1:] in ("/", "\\") else path
    if "\\" in trimmed:
        cut = max(trimmed.rfind("/"), trimmed.rfind("\\"))
        folder, name = trimmed[:cut].rstrip("/\\"), trimmed[cut + 1 :]
    else:
        folder, _, name = trimmed.rpartition("/")
    if (
        folder in _HOME_PARENTS
        or trimmed == "/root"
        or (folder[1:2] == ":" and _WIN_HOME_PARENT.fullmatch(folder.rstrip("/\\")))
    ):
        return "~"
    return name or "~"


def _normalise(raw: str) -> str:
    """The path the resolver sees: ``file://`` decoded, JSON-escaped ``\\\\`` collapsed."""
    if raw[0] in "/~":
        return raw
    if raw[:7].lower() == "file://":
        rest = unquote(raw[7:])
        if rest.lower().startswith("localhost/"):
            rest = rest[9:]
        if re.match(r"/[A-Za-z]:[\\/]", rest):
            return rest[1:]
        return rest if rest.startswith("/") else "//" + rest
    if "\\" in raw and (raw.startswith("\\\\") or (len(raw) > 2 and raw[1] == ":")):
        unc = raw.startswith("\\\\")
        body = re.sub(r"\\\\", r"\\", raw[2:] if unc else raw)
        return "\\\\" + body.lstrip("\\") if unc else body
    return raw


def _trim_end(raw: str, before: str) -> str:
    """Give trailing sentence punctuation back; after ``_`` also the closing ``_``
    of markdown emphasis (``_/tmp/x.txt_``)."""
    raw = raw.rstrip(_TRAILING_PUNCT)
    if before == "_" and raw.endswith("_"):
        raw = raw[:-1].rstrip(_TRAILING_PUNCT)
    return raw


def _needs_body(text: str) -> bool:
    return _NON_SEPARATOR.search(text) is not None


# --- results ----------------------------------------------------------------


class Found(NamedTuple):
    """A path at ``buf[start:end]``."""

    start: int
    end: int
    match: PathMatch


class NeedMore(NamedTuple):
    """Text from ``start`` may be a path; decide when more text (or the end) arrives."""

    start: int


class Overlong(NamedTuple):
    """A prose path from ``start`` is longer than the bound and still running."""

    start: int


class Clear(NamedTuple):
    """No path starts before ``end``; ``buf[end:]`` (a possible start) must wait."""

    end: int


ScanResult = Found | NeedMore | Overlong | Clear

_tuple_new = tuple.__new__


def _found(start: int, end: int, match: PathMatch) -> Found:
    """``Found(...)`` without the generated ``__new__`` (hot path: one per path)."""
    found: Found = _tuple_new(Found, (start, end, match))
    return found


def _match(raw: str, path: str, name: str, context: Context) -> PathMatch:
    """``PathMatch(...)`` with default flags, without the generated ``__new__``."""
    match: PathMatch = _tuple_new(PathMatch, (raw, path, name, context, False, ""))
    return match


class OverlongPath:
    """Consumes an overlong prose path to its end, keeping only its last segments.

    Memory stays bounded by :data:`MAX_NAME_CHARS`; nothing of the path is
    emitted until it ends, and then only its name.
    """

    def __init__(self) -> None:
        self._depth = 0
        self._last = ""  # current (last) segment, truncated
        self._prev_seg = ""  # the segment before it (for paths ending in '/')
        self.tail = ""  # last two raw characters consumed

    def feed(self, text: str, final: bool) -> tuple[int, PathMatch, str] | None:
        """Consume ``text``; when the path ends return (consumed, match, trailing punct)."""
        pos = 0
        end = len(text)
        while True:
            m = _PROSE_STOP.search(text, pos)
            if m is None:
                self._consume(text[pos:])
                if final:
                    return end, *self._finish()
                return None
            ch = m.group()
            if ch in _OPENERS:
                self._depth += 1
                self._consume(text[pos : m.end()])
                pos = m.end()
                continue
            if ch in _CLOSER_OF and self._depth > 0:
                self._depth -= 1
                self._consume(text[pos : m.end()])
                pos = m.end()
                continue
            self._consume(text[pos : m.start()])
            return m.start(), *self._finish()

    def _consume(self, chunk: str) -> None:
        if not chunk:
            return
        self.tail = (self.tail + chunk)[-2:]
        segs = _SEPARATORS.split(chunk)
        if len(segs) == 1:
            self._last = (self._last + segs[0])[-MAX_NAME_CHARS:]
            return
        first = (self._last + segs[0])[-MAX_NAME_CHARS:]
        middle = [s for s in segs[1:-1] if s]
        self._prev_seg = middle[-1][-MAX_NAME_CHARS:] if middle else (first or self._prev_seg)
        self._last = segs[-1][-MAX_NAME_CHARS:]

    def _finish(self) -> tuple[PathMatch, str]:
        name = self._last
        stripped = name.rstrip(_TRAILING_PUNCT)
        trailing = name[len(stripped) :]
        if not stripped:
            stripped = self._prev_seg.rstrip(_TRAILING_PUNCT) or "~"
        match = PathMatch("", "", stripped, Context.PROSE, overlong=True, suffix=trailing)
        return match, trailing


class PathDetector:
    """Finds host-local paths; see the module docstring for the rules.

    ``extra_roots`` are further absolute POSIX prefixes that count as host-local
    (the configured artifact roots and mount prefixes). A detector holds no
    per-stream state: one instance serves any number of rewriters (see :meth:`shared`).
    """

    @staticmethod
    @functools.lru_cache(maxsize=64)
    def shared(
        extra_roots: tuple[str, ...] = (), max_path_chars: int = DEFAULT_MAX_PATH_CHARS
    ) -> PathDetector:
        """A cached detector for these settings (building one compiles a regex)."""
        return PathDetector(extra_roots, max_path_chars=max_path_chars)

    def __init__(
        self, extra_roots: Iterable[str] = (), *, max_path_chars: int = DEFAULT_MAX_PATH_CHARS
    ) -> None:
        roots = ["/" + n + "/" for n in DEFAULT_ROOT_NAMES]
        for r in extra_roots:
            r = r.replace("\\", "/").rstrip("/")
            if r.startswith("/") and len(r) > 1 and r + "/" not in roots:
                roots.append(r + "/")
        roots.sort(key=len, reverse=True)
        self._roots = tuple(roots)
        self._root_re = re.compile("|".join(re.escape(r) for r in roots))
        self.max_path_chars = max_path_chars
        self.max_start_chars = max(max(len(r) for r in roots), 8)

    # -- start recognition -----------------------------------------------------

    def _start_at(self, buf: str, k: int, pos: int, final: bool) -> tuple[str, int, int]:
        """Classify the trigger at ``buf[k]``.

        Returns ("no", 0, 0), ("more", start, 0) or ("yes", start, body_start).
        """
        n = len(buf)
        ch = buf[k]
        if ch == "/":
            if not is_boundary(buf[k - 1] if k > 0 else ""):
                return "no", 0, 0
            m = self._root_re.match(buf, k)
            if m is None:
                frag = buf[k:]
                if (
                    not final
                    and len(frag) < self.max_start_chars
                    and any(r.startswith(frag) for r in self._roots)
                ):
                    return "more", k, 0
                return "no", 0, 0
            return "yes", k, m.end()
        if ch == "~":
            if not is_boundary(buf[k - 1] if k > 0 else ""):
                return "no", 0, 0
            if k + 1 >= n:
                return ("no", 0, 0) if final else ("more", k, 0)
            return ("yes", k, k + 2) if buf[k + 1] == "/" else ("no", 0, 0)
        if ch == "\\":
            if not is_boundary(buf[k - 1] if k > 0 else ""):
                return "no", 0, 0
            m = _UNC.match(buf, k)
            if m is not None:
                return "yes", k, m.end() - 1
            pm = _UNC_PARTIAL.match(buf, k)
            if not final and pm is not None and pm.end() == n:
                return "more", k, 0
            return "no", 0, 0
        # ch == ":" : the colon of file:// or of a drive letter
        if k >= pos + 4 and buf[k - 4 : k].lower() == "file":
            start = k - 4
            if not is_boundary(buf[start - 1] if start > 0 else ""):
                return "no", 0, 0
            frag = buf[k : k + 3]
            if frag == "://":
                return "yes", start, k + 3
            if not final and "://".startswith(frag) and k + len(frag) == n:
                return "more", start, 0
            return "no", 0, 0
        if k >= pos + 1 and "A" <= buf[k - 1].upper() <= "Z" and buf[k - 1].isascii():
            start = k - 1
            if not is_boundary(buf[start - 1] if start > 0 else ""):
                return "no", 0, 0
            if k + 1 >= n:
                return ("no", 0, 0) if final else ("more", start, 0)
            sep = buf[k + 1]
            if sep == "\\":
                return "yes", start, k + 2
            if sep == "/":
                if k + 2 >= n:
                    return ("no", 0, 0) if final else ("more", start, 0)
                return ("no", 0, 0) if buf[k + 2] == "/" else ("yes", start, k + 2)
        return "no", 0, 0

    def _tail_start(self, buf: str, lo: int) -> int:
        """Index where a possible (incomplete) start begins at the end of ``buf``.

        Only for starts whose first character is not a trigger: a drive letter
        (``C`` awaiting ``:``) and ``f``/``fi``/``fil``/``file`` awaiting ``:``.
        Returns ``len(buf)`` if the tail cannot begin a path.
        """
        n = len(buf)
        if n <= lo or not (buf[-1].isascii() and buf[-1].isalpha()):
            return n  # every held start ("C", "f".."file") ends in an ASCII letter
        for size in (4, 3, 2, 1):
            i = n - size
            if i < lo:
                continue
            frag = buf[i:].lower()
            if ("file".startswith(frag) or (size == 1 and "a" <= frag <= "z")) and is_boundary(
                buf[i - 1] if i > 0 else ""
            ):
                return i
        return n

    # -- the scan ----------------------------------------------------------------

    def scan(self, buf: str, pos: int, final: bool) -> ScanResult:
        """Find the next path at or after ``buf[pos]``.

        ``buf[:pos]`` is context only (up to two characters already emitted), it is
        looked at for boundaries and openers but never reported.
        """
        k = pos
        root_match = self._root_re.match
        while True:
            t = _TRIGGER.search(buf, k)
            if t is None:
                return Clear(len(buf) if final else self._tail_start(buf, pos))
            k = t.start()
            if t.group() == "/" and k > 0 and buf[k - 1] not in _CONTEXT_CHARS:
                # fast path: a POSIX root in prose (the common case)
                prev = buf[k - 1]
                if prev in _NOT_BOUNDARY or (prev.isalnum() and not _spaceless_script(prev)):
                    k += 1
                    continue
                m = root_match(buf, k)
                if m is not None:
                    res = self._parse_prose(buf, k, m.end(), final)
                    if res is None:
                        k += 1
                        continue
                    return res
            verdict, start, body = self._start_at(buf, k, pos, final)
            if verdict == "no":
                k += 1
                continue
            if verdict == "more":
                return NeedMore(start)
            res = self._parse(buf, start, body, final)
            if res is None:
                k += 1
                continue
            return res

    def _context(self, buf: str, start: int) -> tuple[Context, str]:
        c1 = buf[start - 1] if start >= 1 else ""
        if c1 in _QUOTE_CLOSERS:
            return Context.QUOTED, _QUOTE_CLOSERS[c1]
        if c1 == "(" and start >= 2 and buf[start - 2] == "]":
            return Context.QUOTED, ")"
        if c1 == "[":
            return Context.LINK_TEXT, "]"
        return Context.PROSE, ""

    def _parse(self, buf: str, start: int, body: int, final: bool) -> ScanResult | None:
        ctx, closer = self._context(buf, start)
        if closer:
            res = self._parse_quoted(buf, start, body, ctx, closer, final)
            if res is not None:
                return res
        return self._parse_prose(buf, start, body, final)

    def _parse_quoted(
        self, buf: str, start: int, body: int, ctx: Context, closer: str, final: bool
    ) -> ScanResult | None:
        """A delimited path; None means "read it as prose instead"."""
        limit = start + self.max_path_chars
        m = _QUOTE_END[closer].search(buf, body, limit + 1)
        if m is None:
            if final or len(buf) > limit:
                return None
            return NeedMore(start)
        if m.group() != closer:
            return None
        j = m.start()
        raw = buf[start:j]
        if not _needs_body(raw[body - start :]) or _SECOND_START.search(raw):
            return None
        path = _normalise(raw)
        return _found(start, j, _match(raw, path, file_name(path), ctx))

    def _parse_prose(self, buf: str, start: int, body: int, final: bool) -> ScanResult | None:
        n = len(buf)
        limit = start + self.max_path_chars
        depth = 0
        j = body
        first = _PROSE_STOP.search(buf, j)
        if first is not None and first.group() not in _BRACKETS and first.start() <= limit:
            # fast path: no bracket inside, the first stop ends the path
            raw = buf[start : first.start()].rstrip(_TRAILING_PUNCT)
            if start and buf[start - 1] == "_":
                raw = _trim_end(raw, "_")
            b = body - start
            if len(raw) <= b or (raw[b] in "/\\" and _NON_SEPARATOR.search(raw, b) is None):
                return None
            path = _normalise(raw)
            return _found(
                start, start + len(raw), _match(raw, path, file_name(path), Context.PROSE)
            )
        while True:
            m = _PROSE_STOP.search(buf, j)
            if m is None:
                if not final:
                    return Overlong(start) if n > limit else NeedMore(start)
                end = n
                break
            ch = m.group()
            if ch in _OPENERS:
                depth += 1
                j = m.end()
                continue
            if ch in _CLOSER_OF and depth > 0:
                depth -= 1
                j = m.end()
                continue
            end = m.start()
            break
        if end - start > self.max_path_chars:
            seg = OverlongPath()
            done = seg.feed(buf[start:end], final=True)
            assert done is not None
            return Found(start, end, done[1])
        raw = _trim_end(buf[start:end], buf[start - 1] if start else "")
        if not _needs_body(raw[body - start :]):
            return None
        ctx = Context.PROSE
        path = _normalise(raw)
        return _found(start, start + len(raw), _match(raw, path, file_name(path), ctx))
