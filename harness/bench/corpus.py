"""Text corpora shared by the benchmarks: plain prose, path-dense text, a regex baseline."""

from __future__ import annotations

import random
import re

BASELINE = re.compile(
    r"(?:(?<![\w/])/(?:Users|home|root|tmp|private|var|Volumes|mnt|opt|srv|etc)/[^\s\"'`<>]+"
    r"|~/[^\s\"'`<>]+|(?<![\w])[A-Za-z]:[\\/][^\s\"'`<>]+|\\\\[^\s\"'`<>]+|file://[^\s\"'`<>]+)"
)

WORDS = [
    "the",
    "gateway",
    "relays",
    "every",
    "delta",
    "as",
    "soon",
    "as",
    "it",
    "arrives",
    "and",
    "only",
    "holds",
    "what",
    "could",
    "still",
    "become",
    "a",
    "path",
    "so",
    "ordinary",
    "text",
    "is",
    "never",
    "delayed",
    "while",
    "the",
    "model",
    "writes",
    "long",
    "answers",
    "with",
    "numbers",
    "like",
    "42",
    "and",
    "3.14",
    "punctuation,",
    "quotes",
    "'like",
    "this'",
    "and",
    "unicode",
    "such",
    "as",
    "café",
    "naïve",
    "中文",
    "✓",
]


def plain_prose(n_bytes: int, seed: int = 1) -> str:
    rnd = random.Random(seed)
    out: list[str] = []
    size = 0
    while size < n_bytes:
        w = rnd.choice(WORDS)
        out.append(w)
        size += len(w.encode()) + 1
    return " ".join(out)


def path_dense(n_bytes: int, seed: int = 2) -> str:
    rnd = random.Random(seed)
    templates = [
        "/Users/alice/out/report-{n}.pdf",
        "C:\\Users\\bob\\plot{n}.png",
        "`/tmp/run {n}/data.csv`",
        "~/notes/{n}.md",
        "file:///home/u/a%20b{n}.txt",
        "[r](/srv/agent/workspace/o{n}.bin)",
    ]
    out: list[str] = []
    size = 0
    while size < n_bytes:
        s = rnd.choice(templates).format(n=rnd.randint(0, 9999)) + rnd.choice(
            [" ", ". ", ", ", "\n"]
        )
        s += " ".join(rnd.choice(WORDS) for _ in range(rnd.randint(2, 6))) + " "
        out.append(s)
        size += len(s.encode())
    return "".join(out)
