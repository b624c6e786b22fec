"""Where the gateway's CPU goes while it relays: py-spy over the relay benchmark's setup.

``python -m harness.bench profile [--paced | --paths | --requests] [--top 10]`` starts the relay
benchmark's
three processes (:func:`harness.bench.relay.start`), warms the gateway up, then samples
it with ``py-spy record --nonblocking`` (from the venv) while the client runs
``bulk`` (6 streams of 20,000 deltas one after another, 64 events per upstream write),
with ``--paced`` 20 concurrent streams of 1,000 deltas, one event per read, with ``--paths``
6 path-dense streams of 20,000 deltas one after another (the relay benchmark's paths
scenario: a path every 10 deltas, half of them files that become links), or with
``--requests`` 1,000 sequential 1-delta streams (``Connection: close``: the per-request
cost; with ``--keep-alive`` all on one kept-alive connection, as an SDK's pool sends
them) under cProfile with a CPU timer instead (:mod:`harness.bench.cprof`), or with
``--requests --bytecodes`` 300 of them with the bytecodes each function runs counted
(:mod:`harness.bench.bytecodes`: exact, whatever the host's load). It
prints the gateway's CPU per delta and the top functions by self time and by
inclusive time (samples waiting in epoll or on a lock are left out: idle).
"""

from __future__ import annotations

import collections
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from harness.bench.relay import client, cpu_seconds, start

#: frames that mean the sampled thread was waiting, not working
_IDLE = ("epoll", "select (selectors", "get_events", "_wait_for_tstate_lock", "wait (threading")


def _key(frame: str) -> str:
    """``func (path/to/file.py:12)`` -> ``func (file.py)``."""
    if " (" not in frame:
        return frame
    name, _, where = frame.partition(" (")
    return f"{name} ({where.split(':')[0].split('/')[-1]})"


def summarize(raw: Path, top: int) -> tuple[int, list[tuple[str, int]], list[tuple[str, int]]]:
    """Busy samples, top self and top inclusive functions of a py-spy ``raw`` file."""
    incl: collections.Counter[str] = collections.Counter()
    own: collections.Counter[str] = collections.Counter()
    total = 0
    for line in raw.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        if not count.isdigit():
            continue
        frames = stack.split(";")
        if any(marker in f for f in frames[-3:] for marker in _IDLE):
            continue
        n = int(count)
        total += n
        for key in {_key(f) for f in frames}:
            incl[key] += n
        own[_key(frames[-1])] += n
    return total, own.most_common(top), incl.most_common(top * 3)


def _plan(paced: bool, requests: bool, paths: bool) -> tuple[str, list[str], int, int, str]:
    """model, client arguments, runs, deltas, what is measured."""
    if paths:
        return "bench-paths-20000-bulk", ["--streams", "1"], 6, 120_000, "6 × 20,000 path-dense"
    if requests:
        return "bench-plain-1-bulk", ["--sequential", "1000"], 1, 1000, "1,000 requests"
    if paced:
        return "bench-plain-1000-paced", ["--streams", "20"], 1, 20_000, "20 × 1,000 paced"
    return "bench-plain-20000-bulk", ["--streams", "1"], 6, 120_000, "6 × 20,000 bulk"


def cprofile_requests(top: int, n: int = 1000, keep_alive: bool = False) -> int:
    """The gateway under cProfile (CPU time) while ``n`` sequential 1-delta streams run."""
    how = ("--keep-alive",) if keep_alive else ()
    import pstats

    with tempfile.TemporaryDirectory(prefix="relay-cprofile-") as tmpdir:
        tmp = Path(tmpdir)
        out = tmp / "gateway.prof"
        p = start(tmp, wrap=["-m", "harness.bench.cprof", str(out)])
        try:
            client(p.gw_url, "bench-plain-1-bulk", "--sequential", "100", *how)  # warm-up
            c0 = cpu_seconds(p.gateway.pid)
            client(p.gw_url, "bench-plain-1-bulk", "--sequential", str(n), *how)
            c1 = cpu_seconds(p.gateway.pid)
        finally:
            p.stop()
        print(f"gateway under cProfile: {(c1 - c0) / n * 1e3:.2f} ms of CPU per request")
        print("(start-up, warm-up and shutdown included below; cProfile adds its own cost)")
        stats = pstats.Stats(str(out))
        stats.sort_stats("tottime").print_stats(top)
        stats.sort_stats("cumtime").print_stats(top * 3)
    return 0


def bytecode_requests(top: int, n: int = 300, keep_alive: bool = False) -> int:
    """Bytecodes per request by function (:mod:`harness.bench.bytecodes`) over ``n``
    sequential 1-delta streams: a per-function figure the host's noise does not move."""
    import json

    how = ("--keep-alive",) if keep_alive else ()
    with tempfile.TemporaryDirectory(prefix="relay-bytecodes-") as tmpdir:
        tmp = Path(tmpdir)
        out = tmp / "bytecodes.json"
        p = start(tmp, wrap=["-m", "harness.bench.bytecodes", str(out)])
        try:
            client(p.gw_url, "bench-plain-1-bulk", "--sequential", "300", *how)  # warm-up
            time.sleep(2.5)  # past the gateway's idle second (its heap trim)
            p.gateway.send_signal(signal.SIGUSR1)
            time.sleep(0.3)
            client(p.gw_url, "bench-plain-1-bulk", "--sequential", str(n), *how)
            p.gateway.send_signal(signal.SIGUSR2)
            for _ in range(100):
                if out.exists() and out.stat().st_size:
                    break
                time.sleep(0.1)
            time.sleep(0.2)
            rows = json.loads(out.read_text())
        finally:
            p.stop()
    total = sum(r[0] for r in rows)
    how_text = "kept alive" if keep_alive else "a new connection each"
    print(f"gateway bytecodes per 1-delta chat ({how_text}, {n} requests): {total / n:,.0f}")
    print("by function (bytecodes per request, calls per request):")
    for ops, calls, name in sorted(rows, reverse=True)[:top]:
        print(f"  {ops / n:8,.0f}  {calls / n:5.2f}×  {name}")
    files: collections.Counter[str] = collections.Counter()
    for ops, _, name in rows:
        files[name.split(":")[0]] += ops
    print("by file:")
    for name, ops in files.most_common(top):
        print(f"  {ops / n:8,.0f}  {100 * ops / max(total, 1):4.1f} %  {name}")
    return 0


def main(
    paced: bool = False,
    top: int = 10,
    requests: bool = False,
    keep_alive: bool = False,
    paths: bool = False,
    bytecodes: bool = False,
) -> int:
    if requests and bytecodes:
        return bytecode_requests(top, keep_alive=keep_alive)
    if requests:
        return cprofile_requests(top, keep_alive=keep_alive)
    spy = shutil.which("py-spy", path=str(Path(sys.executable).parent)) or shutil.which("py-spy")
    if spy is None:
        print("py-spy is not installed (pip install py-spy)", file=sys.stderr)
        return 1
    model, cargs, runs, deltas, what = _plan(paced, requests, paths)
    with tempfile.TemporaryDirectory(prefix="relay-profile-") as tmpdir:
        tmp = Path(tmpdir)
        p = start(tmp)
        try:
            client(p.gw_url, "bench-plain-200-bulk", "--streams", "4")  # warm-up
            raw = tmp / "gateway.raw"
            args = ["record", "-p", str(p.gateway.pid), "-o", str(raw), "-f", "raw"]
            rec = subprocess.Popen(
                [spy, *args, "-r", "400", "--nonblocking"],
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
            time.sleep(0.5)
            c0 = cpu_seconds(p.gateway.pid)
            for _ in range(runs):
                client(p.gw_url, model, *cargs)
            c1 = cpu_seconds(p.gateway.pid)
            rec.send_signal(signal.SIGINT)
            rec.wait(30)
            total, own, incl = summarize(raw, top)
        finally:
            p.stop()
    unit = "request" if requests else "delta"
    print(f"gateway profile, {what}: {(c1 - c0) / deltas * 1e6:.1f} µs of CPU per {unit}")
    print(f"{total} busy samples; self time:")
    for name, n in own:
        print(f"  {100 * n / max(total, 1):5.1f} %  {name}")
    print("inclusive (below the frames every sample shares):")
    for name, n in incl:
        if n >= 0.97 * total:
            continue
        print(f"  {100 * n / max(total, 1):5.1f} %  {name}")
    return 0
