"""Chunking strategies: ways to cut an upstream body into network reads.

Each strategy maps a body to a list of chunkings (a chunking is a list of byte
strings that join back to the body). vcrpy keeps no boundaries, so every
byte-level hazard (a UTF-8 character, a CRLF, an SSE field name, a path cut in
two) is created here.
"""

from __future__ import annotations

import itertools
import random
import re
from collections.abc import Callable

Chunking = list[bytes]

_PATH_START = re.compile(
    rb"(?:/(?:Users|home|root|tmp|private|var|Volumes|mnt|opt|srv|etc)/|~/|file://|[A-Za-z]:\\\\|[A-Za-z]:\\|[A-Za-z]:/|\\\\\\\\)"
)
_FIELD = re.compile(rb"(?:^|\n)(data|event|id|retry):", re.MULTILINE)


def _cut(body: bytes, points: list[int]) -> Chunking:
    bounds = [0, *sorted({p for p in points if 0 < p < len(body)}), len(body)]
    return [body[a:b] for a, b in itertools.pairwise(bounds) if b > a]


def whole(body: bytes, seed: int) -> list[Chunking]:
    return [[body]]


def per_event(body: bytes, seed: int) -> list[Chunking]:
    points = [m.end() for m in re.finditer(rb"\r?\n\r?\n|\r\r", body)]
    return [_cut(body, points)]


def every_byte(body: bytes, seed: int) -> list[Chunking]:
    return [[body[i : i + 1] for i in range(len(body))]]


def every_split(body: bytes, seed: int, limit: int = 1500) -> list[Chunking]:
    """Every two-piece split; above ``limit`` bytes, ``limit`` evenly spread ones."""
    n = len(body)
    if n <= limit:
        points = list(range(1, n))
    else:
        points = sorted({1 + (i * (n - 2)) // (limit - 1) for i in range(limit)})
    return [_cut(body, [p]) for p in points]


def seeded_random(body: bytes, seed: int, count: int = 20) -> list[Chunking]:
    rnd = random.Random(seed)
    out = []
    n = len(body)
    for _ in range(count):
        k = rnd.randint(1, max(1, min(40, n - 1)))
        out.append(_cut(body, rnd.sample(range(1, n), min(k, n - 1)) if n > 1 else []))
    return out


def utf8_inside(body: bytes, seed: int) -> list[Chunking]:
    """Split inside every multi-byte UTF-8 character (all of them in one chunking)."""
    points = [i for i in range(1, len(body)) if 0x80 <= body[i] < 0xC0]
    return [_cut(body, points)] if points else []


def crlf(body: bytes, seed: int) -> list[Chunking]:
    """The body re-framed with CRLF line ends, split inside every CRLF."""
    framed = body.replace(b"\r\n", b"\n").replace(b"\n", b"\r\n")
    points = [m.start() + 1 for m in re.finditer(rb"\r\n", framed)]
    return [_cut(framed, points)]


def field_names(body: bytes, seed: int) -> list[Chunking]:
    """Split inside every SSE field name (``da|ta:``, ``ev|ent:``)."""
    points = []
    for m in _FIELD.finditer(body):
        s, e = m.start(1), m.end(1)
        points.append(s + (e - s) // 2)
    return [_cut(body, points)] if points else []


def path_prefixes(body: bytes, seed: int, max_depth: int = 24) -> list[Chunking]:
    """For each offset into a path (up to ``max_depth``), cut every path there."""
    starts = [m.start() for m in _PATH_START.finditer(body)]
    if not starts:
        return []
    return [_cut(body, [s + k for s in starts]) for k in range(1, max_depth + 1)]


STRATEGIES: dict[str, Callable[[bytes, int], list[Chunking]]] = {
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
#: the CI default: everything; every-split is capped per cassette
DEFAULT = list(STRATEGIES)
