"""The relay benchmark's parts work (its figures are printed, never asserted): the three
processes start and stop, and the raw client completes sequential streams on new
connections and on one kept-alive connection, through the gateway and direct."""

from __future__ import annotations

from pathlib import Path

from harness.bench.relay import client, start


def test_the_benchmark_client_completes_its_streams(tmp_path: Path) -> None:
    p = start(tmp_path)
    try:
        for url in (p.gw_url, p.up_url):
            for extra in ((), ("--keep-alive",)):
                got = client(url, "bench-plain-1-bulk", "--sequential", "4", *extra)
                assert got["completed"] == 4, (url, extra, got)
                assert len(got["ttfb"]) == 4
    finally:
        p.stop()
    assert p.gateway.returncode is not None and p.upstream.returncode is not None
