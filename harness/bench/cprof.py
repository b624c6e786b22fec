"""``python -m harness.bench.cprof OUT gateway-args...``: ``gateway.cli`` under cProfile.

The timer is ``time.process_time`` (CPU, not wall: on a shared machine py-spy's samples
inside a ``send(2)`` are mostly the process waiting to run again after it woke its peer),
the stats are dumped to ``OUT`` when the gateway exits (SIGTERM drains and returns).
Used by ``python -m harness.bench profile --requests``.
"""

from __future__ import annotations

import cProfile
import sys
import time


def main() -> int:
    out, args = sys.argv[1], sys.argv[2:]
    from gateway.cli import main as gateway_main

    prof = cProfile.Profile(time.process_time)
    prof.enable()
    try:
        return gateway_main(args)
    finally:
        prof.disable()
        prof.dump_stats(out)


if __name__ == "__main__":
    raise SystemExit(main())
