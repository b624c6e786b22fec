"""The relay benchmark's parts work (its figures are printed, never asserted): the three
processes start and stop, and the raw client completes sequential streams on new
connections and on one kept-alive connection, through the gateway and direct."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from harness.bench import instructions
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


@pytest.mark.skipif(
    not instructions.available() and os.environ.get("CI") != "true",
    reason="valgrind is not installed (python3 dev.py setup installs it as root)",
)
def test_the_instructions_benchmark_counts_each_kind_of_request() -> None:
    figures = instructions.measure(requests=5)
    assert list(figures) == [
        "1-delta chat, a new connection each",
        "1-delta chat, kept alive",
        "GET /health, kept alive",
        "a paced delta (per delta, 2 streams)",
    ]
    # counted only while the requests ran: far below start-up's billions, and a chat
    # costs more than a health check
    assert all(10 < k < 50_000 for k in figures.values()), figures
    assert figures["GET /health, kept alive"] < figures["1-delta chat, kept alive"]
    # a delta costs less than a request (its stream's start and end are taken out)
    paced = figures["a paced delta (per delta, 2 streams)"]
    assert 10 < paced < figures["1-delta chat, kept alive"], figures


def test_the_bytecode_profile_counts_the_requests_only(capsys: pytest.CaptureFixture[str]) -> None:
    """``profile --requests --bytecodes``: counted between the two signals only (far
    below start-up's millions), the relay's own functions among the top, each file's
    share printed."""
    from harness.bench.profile import bytecode_requests

    assert bytecode_requests(top=40, n=20, keep_alive=True) == 0
    out = capsys.readouterr().out
    first = out.splitlines()[0]
    assert first.startswith("gateway bytecodes per 1-delta chat (kept alive, 20 requests): ")
    per_request = int(first.rsplit(": ", 1)[1].replace(",", ""))
    assert 2_000 < per_request < 200_000, first
    assert "gateway/stream/pipeline.py" in out and "by file:" in out
