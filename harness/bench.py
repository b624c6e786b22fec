"""Benchmarks that print figures side by side in one run (no timed assertions).

    python -m harness.bench rewriter [--mb 4]

Rewriter: throughput of :class:`gateway.rewrite.StreamRewriter` against a baseline
of one compiled-regex scan (``finditer`` of a host-path regex) over the same text,
for plain prose without candidates and for path-dense text. Targets: plain prose at
>= 50 % of the baseline's speed, path-dense text >= 10 MB/s.
"""

from __future__ import annotations

import argparse
import random
import re
import sys
import time
from collections.abc import Callable

from gateway.rewrite import StreamRewriter

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


def _best(fn: Callable[[], object], repeat: int = 5) -> float:
    best = float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


def _rewrite_chunks(text: str, size: int) -> None:
    rw = StreamRewriter(lambda p: "https://gw.example/v1/artifacts/x")
    if size <= 0:
        rw.feed(text)
    else:
        for i in range(0, len(text), size):
            rw.feed(text[i : i + size])
    rw.flush()


def bench_rewriter(mb: float) -> int:
    n = int(mb * 1_000_000)
    print(f"rewriter benchmark: {mb} MB per corpus, best of 5, python {sys.version.split()[0]}")
    print(f"{'corpus':<12} {'feed':<14} {'MB/s':>9} {'baseline MB/s':>14} {'ratio':>7}")
    for name, text in (("plain prose", plain_prose(n)), ("path-dense", path_dense(n))):
        nbytes = len(text.encode())
        paths = StreamRewriter(lambda p: None)
        paths.feed(text)
        paths.flush()
        print(
            f"  {name}: {nbytes / 1e6:.1f} MB, {paths.paths_seen * 1000 / nbytes:.1f} paths per KB"
        )
        base = _best(lambda t=text: sum(1 for _ in BASELINE.finditer(t)))  # type: ignore[misc]
        base_mbs = nbytes / base / 1e6
        for label, size in (("whole text", 0), ("4 KiB chunks", 4096), ("16-char deltas", 16)):
            t = _best(lambda size=size, t=text: _rewrite_chunks(t, size))  # type: ignore[misc]
            mbs = nbytes / t / 1e6
            print(f"{name:<12} {label:<14} {mbs:>9.1f} {base_mbs:>14.1f} {mbs / base_mbs:>6.0%}")
    return 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m harness.bench", description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="what", required=True)
    r = sub.add_parser("rewriter", help="rewriter throughput vs one regex scan")
    r.add_argument("--mb", type=float, default=4.0)
    args = ap.parse_args(argv)
    if args.what == "rewriter":
        return bench_rewriter(args.mb)
    return 2  # pragma: no cover


if __name__ == "__main__":
    raise SystemExit(main())
