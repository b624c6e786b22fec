"""Rewriter throughput against a baseline of one compiled-regex scan.

``python -m harness.bench rewriter [--mb 4]``: :class:`gateway.core.rewrite.StreamRewriter`
over plain prose without candidates and over path-dense text, whole, in 4 KiB chunks
and in 16-character deltas, next to one ``finditer`` of a host-path regex over the same
text. Targets: plain prose >= 50 % of the baseline, path-dense >= 10 MB/s.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable

from gateway.core.rewrite import StreamRewriter
from harness.bench.corpus import BASELINE, path_dense, plain_prose


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
