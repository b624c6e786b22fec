"""Chunking strategies: ways to cut an upstream body into network reads.

Each strategy maps a body (and :class:`Options`) to a list of chunkings (a
chunking is a list of byte strings that join back to the body). vcrpy keeps no
boundaries, so every byte-level hazard (a UTF-8 character, a CRLF, an SSE field
name, a path cut in two) is created here.

Where a path starts is decided with the default host roots plus
``Options.extra_roots`` (the replay passes the cassette's mount prefixes and the
sandbox root), so a containerised agent's ``/workspace/...`` is cut like
``/Users/...``.
"""

from __future__ import annotations

import functools
import itertools
import random
import re
from collections.abc import Callable
from dataclasses import dataclass

Chunking = list[bytes]

#: every-split in a full run (``python -m harness replay``): bodies up to 1500 bytes get
#: every split point, longer ones 1500 evenly spread points plus every point in a path
FULL_SPLIT_LIMIT = 1500
FULL_SPLIT_SPREAD = 1500
#: every-split in the CI profile (``--ci``; tests/e2e/test_harness.py): every split point
#: for bodies up to 640 bytes, else 120 spread points plus every point inside a path
CI_SPLIT_LIMIT = 640
CI_SPLIT_SPREAD = 120


@dataclass(frozen=True)
class Options:
    seed: int = 0
    #: absolute prefixes that start a path besides the default host roots
    extra_roots: tuple[str, ...] = ()
    #: every-split: bodies up to this many bytes get every split point...
    split_limit: int = FULL_SPLIT_LIMIT
    #: ...longer ones this many evenly spread points plus every point inside a path
    split_spread: int = FULL_SPLIT_SPREAD

    @classmethod
    def ci(cls, seed: int = 0, extra_roots: tuple[str, ...] = ()) -> Options:
        return cls(seed, extra_roots, CI_SPLIT_LIMIT, CI_SPLIT_SPREAD)


_DEFAULT_STARTS = (
    rb"/(?:Users|users|home|root|tmp|private|var|Volumes|mnt|opt|srv|etc)/|~/|file://|FILE://"
    rb"|[A-Za-z]:\\\\|[A-Za-z]:\\|[A-Za-z]:/|\\\\\\\\"
)
#: where a path ends inside a JSON-encoded SSE body (roughly: a closing quote,
#: whitespace, a closing bracket, or a JSON ``\n`` / ``\"`` escape)
_PATH_END = re.compile(rb"""[\s"'`<>)\]]|\\n|\\\"""")
_MAX_PATH_SPAN = 96
_FIELD = re.compile(rb"(?:^|\n)(data|event|id|retry):", re.MULTILINE)


@functools.lru_cache(maxsize=64)
def _path_start_re(extra_roots: tuple[str, ...]) -> re.Pattern[bytes]:
    extra = [
        re.escape(r.replace("\\", "/").rstrip("/").encode() + b"/")
        for r in extra_roots
        if r.startswith("/") and len(r.rstrip("/")) > 1
    ]
    return re.compile(b"|".join([_DEFAULT_STARTS, *extra]))


def path_starts(body: bytes, extra_roots: tuple[str, ...] = ()) -> list[int]:
    """Offsets where a host path may start (default roots plus ``extra_roots``)."""
    return sorted({m.start() for m in _path_start_re(extra_roots).finditer(body)})


def path_points(body: bytes, extra_roots: tuple[str, ...] = ()) -> set[int]:
    """Every offset strictly inside a path (a cut there splits the path in two)."""
    points: set[int] = set()
    for start in path_starts(body, extra_roots):
        end = _PATH_END.search(body, start + 1)
        stop = min(end.start() if end else len(body), start + _MAX_PATH_SPAN)
        points.update(range(start + 1, stop + 1))
    return points


def _cut(body: bytes, points: list[int]) -> Chunking:
    bounds = [0, *sorted({p for p in points if 0 < p < len(body)}), len(body)]
    return [body[a:b] for a, b in itertools.pairwise(bounds) if b > a]


def whole(body: bytes, opts: Options) -> list[Chunking]:
    return [[body]]


def per_event(body: bytes, opts: Options) -> list[Chunking]:
    points = [m.end() for m in re.finditer(rb"\r?\n\r?\n|\r\r", body)]
    return [_cut(body, points)]


def every_byte(body: bytes, opts: Options) -> list[Chunking]:
    return [[body[i : i + 1] for i in range(len(body))]]


def every_split(body: bytes, opts: Options) -> list[Chunking]:
    """Two-piece splits: one boundary, everything else arrives in one read.

    A body of up to ``opts.split_limit`` bytes gets every split point. A longer
    one gets ``opts.split_spread`` evenly spread points plus every point inside
    each host path (where a single cut splits a path in two).
    """
    n = len(body)
    if n <= opts.split_limit:
        points = list(range(1, n))
    else:
        k = max(2, opts.split_spread)
        spread = {1 + (i * (n - 2)) // (k - 1) for i in range(k)}
        inside = {p for p in path_points(body, opts.extra_roots) if 0 < p < n}
        points = sorted(spread | inside)
    return [_cut(body, [p]) for p in points]


def seeded_random(body: bytes, opts: Options, count: int = 20) -> list[Chunking]:
    rnd = random.Random(opts.seed)
    out = []
    n = len(body)
    for _ in range(count):
        k = rnd.randint(1, max(1, min(40, n - 1)))
        out.append(_cut(body, rnd.sample(range(1, n), min(k, n - 1)) if n > 1 else []))
    return out


def utf8_inside(body: bytes, opts: Options) -> list[Chunking]:
    """Split inside every multi-byte UTF-8 character (all of them in one chunking)."""
    points = [i for i in range(1, len(body)) if 0x80 <= body[i] < 0xC0]
    return [_cut(body, points)] if points else []


def crlf(body: bytes, opts: Options) -> list[Chunking]:
    """The body re-framed with CRLF line ends, split inside every CRLF."""
    framed = body.replace(b"\r\n", b"\n").replace(b"\n", b"\r\n")
    points = [m.start() + 1 for m in re.finditer(rb"\r\n", framed)]
    return [_cut(framed, points)]


def field_names(body: bytes, opts: Options) -> list[Chunking]:
    """Split inside every SSE field name (``da|ta:``, ``ev|ent:``)."""
    points = []
    for m in _FIELD.finditer(body):
        s, e = m.start(1), m.end(1)
        points.append(s + (e - s) // 2)
    return [_cut(body, points)] if points else []


def path_prefixes(body: bytes, opts: Options, max_depth: int = 24) -> list[Chunking]:
    """For each offset into a path (up to ``max_depth``), cut every path there."""
    starts = path_starts(body, opts.extra_roots)
    if not starts:
        return []
    return [_cut(body, [s + k for s in starts]) for k in range(1, max_depth + 1)]


STRATEGIES: dict[str, Callable[[bytes, Options], list[Chunking]]] = {
    "whole": whole,
    "per-event": per_event,
    "every-byte": every_byte,
    "every-split": every_split,
    "random": seeded_random,
    "utf8": utf8_inside,
    "crlf": crlf,
    "field": field_names,
    "path-prefix": path_prefixes,
}
#: the default: every strategy (every-split bounded by ``Options.split_limit``)
DEFAULT = list(STRATEGIES)
