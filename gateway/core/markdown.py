"""Markdown links around paths, read over the rewriter's pieces (sans-IO).

The path detector decides what a path is; this layer decides what the markdown
*around* it means, which the rewrite of the path depends on:

* ``[text](<path>)`` — a link whose target is a host path. When the path gets a link
  the text is as before (``[text](url)``); when it does not (a missing file, one
  outside the roots), the link goes and the text stays: ``text``, followed by
  `` (name)`` when the text does not already hold the file's name. Writing
  ``[report.md](report.md)`` would be a relative link, which a chat front resolves
  against its own origin (Open WebUI opens an empty "New Chat" tab).
* ``[<path>]`` not followed by ``(``, ``[`` or ``:`` — brackets, not link text: the
  path is rewritten as in prose (``[[report.md](url)]``), where the detector, which
  sees only the ``[``, read it as link text (its name alone).

Strategy
--------
:class:`LinkJoiner` sits after the rewriter: it receives the pieces the rewriter
emits (text, and :class:`~gateway.core.paths.PathMatch` for each path, both already
decided) and holds the text from an unclosed ``[`` until the bracket's meaning is
known: a ``]`` and the character after it, a newline or another ``[`` inside (no
link), a target that is not a path, or :data:`MAX_LINK_TEXT` characters. Text
without a ``[`` passes at once. Every decision depends only on the characters and the
paths, never on where a chunk ended, so the output is the same for every chunking.
An image's ``!`` has already gone out when its ``[`` is seen (holding every ``!`` would
delay ordinary text): a dead image link keeps it.
"""

from __future__ import annotations

from typing import NamedTuple

from gateway.core.paths import Context, PathMatch

__all__ = ["MAX_LINK_TEXT", "LinkJoiner", "LinkMatch", "dead_link_text"]

#: characters held from a "[" at most (a path counts its raw length): the link text,
#: what follows it up to the target, and the target
MAX_LINK_TEXT = 2048

Atom = str | PathMatch  # one character, or one path


class LinkMatch(NamedTuple):
    """``[text](path)``: a markdown link whose target is a host path."""

    text: tuple[str | PathMatch, ...]  #: the link text's pieces
    middle: str  #: ``](``, spaces, ``<``
    target: PathMatch
    closer: str  #: ``>``, spaces, ``)``


def dead_link_text(text: str, name: str) -> str:
    """What a link to a path that gets no link becomes: its text (the rendered link
    text), and the file's name (as the path's spelling writes it) after it unless the
    text already holds it."""
    if not text.strip():
        return name
    return text if name in text else f"{text} ({name})"


class LinkJoiner:
    """Pieces in, pieces out: markdown links with a path target joined into one
    :class:`LinkMatch`; path pieces in brackets that are no link text read as prose."""

    def __init__(self) -> None:
        self._held: list[Atom] = []  # from an unclosed "[" on: one character or path each
        self._chars = 0

    @property
    def held_chars(self) -> int:
        return self._chars

    def feed(self, pieces: list[str | PathMatch], final: bool = False) -> list[object]:
        """The pieces that are decided now (``final``: all of them)."""
        out: list[object] = []
        for piece in pieces:
            if isinstance(piece, str):
                self._text_piece(piece, out)
            elif self._held:
                self._held.append(piece)
                self._chars += _size(piece)
                if self._chars > MAX_LINK_TEXT:
                    self._decide(out, False)
            else:
                out.append(piece)
        self._decide(out, final)
        return out

    def _text_piece(self, piece: str, out: list[object]) -> None:
        while piece:
            if not self._held:
                at = piece.find("[")
                if at < 0:
                    _text(out, piece)
                    return
                _text(out, piece[:at])
                piece = piece[at:]
            room = MAX_LINK_TEXT + 1 - self._chars
            self._held.extend(piece[:room])
            self._chars += min(room, len(piece))
            piece = piece[room:]
            if self._chars > MAX_LINK_TEXT:
                self._decide(out, False)

    def _decide(self, out: list[object], final: bool) -> None:
        """Emit what the held atoms' beginning is, as long as it can be told. Past
        :data:`MAX_LINK_TEXT` the first atoms within it are read as if they ended the
        stream (the same atoms whatever the chunking)."""
        held = self._held
        while held:
            k, size = 0, 0
            for atom in held:
                size += _size(atom)
                if size > MAX_LINK_TEXT:
                    break
                k += 1
            forced = k < len(held)
            verdict, end, close = _read(held[:k] if forced else held, final or forced)
            if verdict == "more":
                return
            if verdict == "link":
                out.append(_link(held[:end], close))
            elif verdict == "brackets":
                for atom in held[:end]:
                    _atom(out, _as_prose(atom))
            else:  # not a link: its "[" is text
                end = 1
                _atom(out, held[0])
            # what follows, up to the next "[", is text or paths outside any bracket
            nxt = next((i for i in range(end, len(held)) if held[i] == "["), len(held))
            for atom in held[end:nxt]:
                _atom(out, atom)
            held = self._held = held[nxt:]
            self._chars = sum(_size(a) for a in held)


def _size(atom: Atom) -> int:
    return len(atom.raw) or 1 if isinstance(atom, PathMatch) else 1


def _read(a: list[Atom], final: bool) -> tuple[str, int, int]:
    """What the atoms from a ``[`` are: ("link", end, index of its ``]``), ("brackets",
    end of the ``]``, -), ("not", -, -), or ("more", -, -) when the atoms so far cannot
    tell (never when ``final``)."""
    more = ("not", 0, 0) if final else ("more", 0, 0)
    n, i = len(a), 1
    while i < n and a[i] != "]":
        if a[i] in ("[", "\n"):
            return "not", 0, 0
        i += 2 if a[i] == "\\" else 1  # a backslash escapes the next character
    if i + 1 >= n:
        return ("brackets", i + 1, 0) if final and i < n else more
    close = i
    if a[i + 1] in ("[", ":"):
        return "not", 0, 0
    if a[i + 1] != "(":
        return "brackets", i + 1, 0
    i = _skip_spaces(a, i + 2)
    angle = i < n and a[i] == "<"
    i += angle
    if i >= n:
        return more
    target = a[i]
    if not isinstance(target, PathMatch):
        return "not", 0, 0
    i += 1
    if not angle and target.context is Context.PROSE and target.raw.endswith(")"):
        return "link", i, close  # the path took the link's ")" (it holds an unbalanced "(")
    if angle:
        if i >= n:
            return more
        if a[i] != ">":
            return "not", 0, 0
        i += 1
    i = _skip_spaces(a, i)
    if i >= n:
        return more
    return ("link", i + 1, close) if a[i] == ")" else ("not", 0, 0)


def _skip_spaces(a: list[Atom], i: int) -> int:
    while i < len(a) and a[i] in (" ", "\t"):
        i += 1
    return i


def _link(atoms: list[Atom], close: int) -> LinkMatch:
    target = next(i for i in range(close, len(atoms)) if isinstance(atoms[i], PathMatch))
    text: list[object] = []
    for atom in atoms[1:close]:
        _atom(text, atom)
    return LinkMatch(
        tuple(text),  # type: ignore[arg-type]
        "".join(atoms[close:target]),  # type: ignore[arg-type]
        atoms[target],  # type: ignore[arg-type]
        "".join(atoms[target + 1 :]),  # type: ignore[arg-type]
    )


def _as_prose(atom: Atom) -> Atom:
    if isinstance(atom, PathMatch) and atom.context is Context.LINK_TEXT:
        return atom._replace(context=Context.PROSE)
    return atom


def _atom(out: list[object], atom: Atom) -> None:
    if isinstance(atom, str):
        _text(out, atom)
    else:
        out.append(atom)


def _text(out: list[object], text: str) -> None:
    """Append text, joined to the text before it (one string between two paths)."""
    if not text:
        return
    if out and isinstance(out[-1], str):
        out[-1] += text
    else:
        out.append(text)
