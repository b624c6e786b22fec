"""Python objects per open stream: tracemalloc in a real ``gateway run`` process.

``python -m harness.bench traced [--streams 200]`` starts the relay benchmark's
upstream and a gateway (:func:`harness.bench.relay.start`) whose interpreter runs
:func:`serve_traced`: on ``SIGUSR1`` it starts tracemalloc, on ``SIGUSR2`` it writes
the size of what is traced and alive to a file. After a warm-up the driver starts the
tracing, holds ``--streams`` streams open mid-answer (:mod:`harness.bench.raw_client`
``--hold``), reads the traced size while they are held, and prints it divided by the
streams held. Unlike RSS, the figure does not depend on what the allocator kept from
earlier requests; it is what the streams' objects cost.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from harness.bench import relay

ENV_OUT = "GATEWAY_TRACED_OUT"


def serve_traced() -> None:
    """``gateway.cli`` with the two signal handlers (the gateway's own process)."""
    import tracemalloc

    out = Path(os.environ[ENV_OUT])

    def start(signum: int, frame: object) -> None:
        tracemalloc.start(1)

    def dump(signum: int, frame: object) -> None:
        out.write_text(str(tracemalloc.get_traced_memory()[0]))

    signal.signal(signal.SIGUSR1, start)
    signal.signal(signal.SIGUSR2, dump)
    from gateway.cli import main

    raise SystemExit(main(sys.argv[1:]))


def measure(streams: int = 200) -> float:
    """KiB traced per held stream."""
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        out = tmp / "traced"
        os.environ[ENV_OUT] = str(out)
        p = relay.start(tmp, wrap=["-m", "harness.bench.traced"])
        try:
            relay.client(p.gw_url, "bench-plain-200-bulk", "--streams", "4")
            time.sleep(2.5)  # past the gateway's idle trim
            p.gateway.send_signal(signal.SIGUSR1)
            time.sleep(0.5)
            client = [sys.executable, "-m", "harness.bench.raw_client", p.gw_url]
            model = ["--model", "bench-plain-100000-paced", "--key", relay.BENCH_KEY]
            hold = ["--streams", str(streams), "--hold", "3", "--extra", '{"bench_pace_ms": 500}']
            proc = subprocess.Popen(
                [*client, *model, *hold],
                stdout=subprocess.PIPE,
                text=True,
            )
            assert proc.stdout is not None
            held = int(json.loads(proc.stdout.readline()).get("held", 0))
            time.sleep(0.5)
            p.gateway.send_signal(signal.SIGUSR2)
            until = time.monotonic() + 10
            while not out.exists() and time.monotonic() < until:
                time.sleep(0.05)
            traced = int(out.read_text())
            proc.wait(60)
        finally:
            p.stop()
    return traced / 1024 / max(held, 1)


def main(streams: int = 200) -> int:
    print(f"traced per open stream ({streams} held): {measure(streams):.1f} KiB")
    return 0


if __name__ == "__main__":
    serve_traced()
