"""Instructions per request: the gateway under valgrind's callgrind, a figure this
shared host's noise does not move.

``python -m harness.bench instructions [--requests N]`` (needs ``valgrind``: Debian's
package). The same three processes as :mod:`harness.bench.relay` (the upstream and the
client outside valgrind); callgrind counts only while the measured requests run (it
is switched on with ``callgrind_control`` after a warm-up and the gateway's first idle
second, and off after them). Printed: thousands of instructions executed by the
gateway process per request, for 1-delta chat streams each on a new connection, all on
one kept-alive connection, and ``GET /health`` kept alive. Instructions are not CPU
time (the kernel's share, caches and the host's speed are not in them), but a change
that removes work shows here to about ±2 % (run-to-run spread measured), where the CPU
figures of the relay benchmark move by ±30 %.
"""

from __future__ import annotations

import glob
import http.client
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from harness.bench import relay

MODEL = "bench-plain-1-bulk"
NEW_CONN = "1-delta chat, a new connection each"
PACED = "a paced delta (per delta, 2 streams)"
#: 2 streams of 150 deltas, one upstream write each, 30 ms apart: far enough apart for
#: the gateway slowed by callgrind (~50x) to read each on its own
PACED_STREAMS, PACED_DELTAS = 2, 150
PACED_ARGS = ("--streams", str(PACED_STREAMS), "--extra", '{"bench_pace_ms": 30}')


def _paced(p: relay.Procs, out: Path, per_stream: float) -> float:
    """Thousands of instructions per paced delta: the run's count less a 1-delta
    stream's per stream (its request, connection and end)."""
    model = f"bench-plain-{PACED_DELTAS}-paced"
    whole = _count(p.gateway.pid, out, lambda: relay.client(p.gw_url, model, *PACED_ARGS))
    return (whole / 1000 - per_stream * PACED_STREAMS) / (PACED_STREAMS * PACED_DELTAS)


def _start(tmp: Path, out: Path) -> relay.Procs:
    """:func:`harness.bench.relay.start` with the gateway under callgrind (counting off)."""
    valgrind = ["valgrind", "--tool=callgrind", "--instr-atstart=no"]
    return relay.start(tmp, prefix=[*valgrind, f"--callgrind-out-file={out}/callgrind.out.%p"])


def _count(pid: int, out: Path, run: Callable[[], object]) -> int:
    """Instructions the gateway executed while ``run()`` ran."""
    for f in glob.glob(f"{out}/callgrind.out.*"):
        os.remove(f)
    subprocess.run(["callgrind_control", "-i", "on", str(pid)], capture_output=True, check=True)
    run()
    subprocess.run(["callgrind_control", "-i", "off", str(pid)], capture_output=True, check=True)
    subprocess.run(["callgrind_control", "-d", str(pid)], capture_output=True, check=True)
    total = 0
    for f in glob.glob(f"{out}/callgrind.out.*"):
        with open(f, errors="replace") as fh:
            for line in fh:
                if line.startswith(("summary:", "totals:")):
                    total = max(total, int(line.split()[1]))
    return total


def measure(requests: int = 200) -> dict[str, float]:
    """Thousands of gateway instructions per request, by kind of request."""
    figures: dict[str, float] = {}
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        out = tmp / "callgrind"
        out.mkdir()
        p = _start(tmp, out)
        try:
            relay.client(p.gw_url, MODEL, "--sequential", "30")
            time.sleep(2.5)  # past the idle second: start-up's trim and freeze are done
            host, port = p.gw_url.split("//")[1].split("/")[0].split(":")

            def health() -> None:
                conn = http.client.HTTPConnection(host, int(port))
                for _ in range(requests):
                    conn.request("GET", "/health")
                    conn.getresponse().read()
                conn.close()

            runs = {
                NEW_CONN: lambda: relay.client(p.gw_url, MODEL, "--sequential", str(requests)),
                "1-delta chat, kept alive": lambda: relay.client(
                    p.gw_url, MODEL, "--sequential", str(requests), "--keep-alive"
                ),
                "GET /health, kept alive": health,
            }
            for name, run in runs.items():
                figures[name] = _count(p.gateway.pid, out, run) / requests / 1000
            figures[PACED] = _paced(p, out, figures[NEW_CONN])
        finally:
            p.stop()
    return figures


def available() -> bool:
    return shutil.which("valgrind") is not None and shutil.which("callgrind_control") is not None


def main(requests: int = 200) -> int:
    if not available():
        print("valgrind is not installed (Debian: apt-get install valgrind)", file=sys.stderr)
        return 2
    figures = measure(requests)
    print(f"gateway instructions per request (callgrind, {requests} requests each):")
    for name, k in figures.items():
        print(f"  {name}: {k:,.0f} k")
    return 0
