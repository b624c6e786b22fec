"""Relay cost: deltas/s direct vs through the gateway, CPU per delta and per request.

``python -m harness.bench relay [--repeat 3] [--quick]`` (or ``python3 dev.py bench relay``).

Method: three parties, each in its own process, so that none pays for another's CPU:

* the upstream is :mod:`harness.bench.fast_upstream` (plain asyncio, pre-encoded chunks),
* the gateway is a real ``gateway run`` process (rewriting on, one artifact root),
* the client is :mod:`harness.bench.raw_client` (raw sockets, reads to EOF, parses only
  what it must); its own CPU is printed too, so one can see it is cheaper than the
  gateway it measures.

For every scenario the direct run (client → upstream) and the gateway run (client →
gateway → upstream) alternate, ``--repeat`` times each; the table shows the median and
the range. ``ratio`` = gateway deltas/s ÷ direct deltas/s of the same repetition.
CPU figures come from ``/proc/<pid>/stat`` of the gateway and the upstream processes
and from the client's ``time.process_time()``, divided by the deltas relayed.

Scenarios: ``plain`` (words only, 64 events per upstream write) at 1, 20 and 100
concurrent streams; ``paths`` (one path per 10 deltas, half of them existing files
that become links); ``paced`` (20 streams, one event per upstream write 2 ms apart, so
each event arrives in its own read: the realistic token-stream case; its ratio is ~1
by construction, the CPU per delta is the figure). Then per request: the time to the
first content byte (direct vs gateway, 1-delta streams one after another, each on a
new connection and then all on one kept-alive connection) and the gateway's CPU per
request for those streams and for ``GET /health``; then memory: idle
RSS and RSS per open stream (streams held open mid-answer: first right after start-up
and the warm-up, again after the runs, where held streams reuse what the runs freed).
"""

from __future__ import annotations

import http.client
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

BENCH_KEY = "bench-key-0123456789abcdef"
TICK = os.sysconf("SC_CLK_TCK")


@dataclass(frozen=True)
class Scenario:
    name: str
    model: str
    streams: int
    deltas: int  # per stream

    @property
    def total(self) -> int:
        return self.streams * self.deltas


SCENARIOS = (
    Scenario("plain, 1 stream", "bench-plain-4000-bulk", 1, 4000),
    Scenario("plain, 20 streams", "bench-plain-1000-bulk", 20, 1000),
    Scenario("plain, 100 streams", "bench-plain-300-bulk", 100, 300),
    Scenario("paths, 1 stream", "bench-paths-4000-bulk", 1, 4000),
    Scenario("paced, 20 streams", "bench-plain-300-paced", 20, 300),
)


def cpu_seconds(pid: int) -> float:
    """utime + stime of a process (seconds)."""
    with open(f"/proc/{pid}/stat") as fh:
        fields = fh.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK


def rss_mib(pid: int) -> float:
    with open(f"/proc/{pid}/status") as fh:
        for line in fh:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0


@dataclass
class Procs:
    upstream: subprocess.Popen[str]
    gateway: subprocess.Popen[bytes]
    up_url: str
    gw_url: str
    tmp: Path

    def stop(self) -> None:
        for p in (self.gateway, self.upstream):
            p.terminate()
        for p in (self.gateway, self.upstream):
            try:
                p.wait(15)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
        if self.upstream.stdout is not None:
            self.upstream.stdout.close()


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def start(tmp: Path, wrap: list[str] | None = None, prefix: list[str] | None = None) -> Procs:
    """The three processes; ``wrap`` replaces ``-m gateway.cli`` (a profiler module),
    ``prefix`` runs the gateway's interpreter under another program (valgrind)."""
    root = tmp / "artifacts"
    up = subprocess.Popen(
        [sys.executable, "-m", "harness.bench.fast_upstream", "--root", str(root)],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert up.stdout is not None
    line = up.stdout.readline()
    if not line.startswith("ready "):
        up.kill()
        up.wait()
        up.stdout.close()
        raise RuntimeError("the benchmark upstream did not start")
    up_url = f"http://127.0.0.1:{int(line.split()[1])}/v1"
    port = _free_port()
    cfg = tmp / "bench.toml"
    cfg.write_text(
        f'state_dir = "{tmp / "state"}"\n[server]\nbind = "127.0.0.1:{port}"\n'
        f'public_base_url = "http://127.0.0.1:{port}"\n[upstream]\nbase_url = "{up_url}"\n'
        f'[artifacts]\nroots = ["{root}"]\n'
        # one principal drives the whole load: its quotas must not shape it
        "[quotas]\nlinks_per_minute = 1000000000\nmax_running_runs = 100000\n"
        f'[[auth.keys]]\nkey = "{BENCH_KEY}"\nprincipal = "bench"\n'
    )
    log = (tmp / "gateway.log").open("wb")
    gw = subprocess.Popen(
        [
            *(prefix or []),
            sys.executable,
            *(wrap or ["-m", "gateway.cli"]),
            "run",
            "--config",
            str(cfg),
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    log.close()
    gw_url = f"http://127.0.0.1:{port}"
    # 60 s: under cProfile on a loaded machine the start-up (the detector's regexes)
    # alone took longer than the 15 s this waited before
    until = time.monotonic() + 60
    while time.monotonic() < until:
        try:
            with urllib.request.urlopen(gw_url + "/health", timeout=1) as r:
                if r.status == 200:
                    return Procs(up, gw, up_url, gw_url + "/v1", tmp)
        except OSError:
            time.sleep(0.05)
    Procs(up, gw, up_url, gw_url, tmp).stop()
    raise RuntimeError("the gateway did not become healthy; see " + str(tmp / "gateway.log"))


def client(url: str, model: str, *args: str) -> dict[str, Any]:
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "harness.bench.raw_client",
            url,
            "--model",
            model,
            "--key",
            BENCH_KEY,
            *args,
        ],
        capture_output=True,
        text=True,
        check=True,
        timeout=600,
    )
    result: dict[str, Any] = json.loads(out.stdout.splitlines()[-1])
    return result


@dataclass
class Figures:
    direct: list[float] = field(default_factory=list)  # deltas/s
    gateway: list[float] = field(default_factory=list)
    ratio: list[float] = field(default_factory=list)
    gw_cpu_us: list[float] = field(default_factory=list)  # per delta
    client_cpu_us: list[float] = field(default_factory=list)
    up_cpu_us: list[float] = field(default_factory=list)
    incomplete: int = 0


def run_scenario(p: Procs, sc: Scenario, repeat: int) -> Figures:
    fig = Figures()
    args = ("--streams", str(sc.streams))
    for _ in range(repeat):
        d = client(p.up_url, sc.model, *args)
        g0, u0 = cpu_seconds(p.gateway.pid), cpu_seconds(p.upstream.pid)
        g = client(p.gw_url, sc.model, *args)
        g1, u1 = cpu_seconds(p.gateway.pid), cpu_seconds(p.upstream.pid)
        fig.incomplete += 2 * sc.streams - d["completed"] - g["completed"]
        fig.direct.append(sc.total / d["wall"])
        fig.gateway.append(sc.total / g["wall"])
        fig.ratio.append(d["wall"] / g["wall"])
        fig.gw_cpu_us.append((g1 - g0) / sc.total * 1e6)
        fig.client_cpu_us.append(g["cpu"] / sc.total * 1e6)
        fig.up_cpu_us.append((u1 - u0) / sc.total * 1e6)
    return fig


def _fmt(values: list[float], spec: str = ",.0f") -> str:
    med = statistics.median(values)
    return f"{med:{spec}} ({min(values):{spec}}–{max(values):{spec}})"


def per_request(p: Procs, n: int, repeat: int) -> dict[str, list[float]]:
    """First content byte and CPU per request: ``n * 10`` 1-delta streams each on a new
    connection (``Connection: close``), then ``n * 20`` on one kept-alive connection (an
    SDK's pool), then as many ``GET /health`` kept alive (the CPU clock ticks in 10 ms:
    500 requests make that ±0.02 ms, a thousand ±0.01 ms)."""
    keys = ("direct", "gateway", "cpu_chat", "direct_ka", "gateway_ka", "cpu_chat_ka")
    out: dict[str, list[float]] = {k: [] for k in (*keys, "cpu_health")}
    for _ in range(repeat):
        for suffix, count, extra in (("", n * 10, ()), ("_ka", n * 20, ("--keep-alive",))):
            args = ("--sequential", str(count), *extra)
            d = client(p.up_url, "bench-plain-1-bulk", *args)
            g0 = cpu_seconds(p.gateway.pid)
            g = client(p.gw_url, "bench-plain-1-bulk", *args)
            g1 = cpu_seconds(p.gateway.pid)
            out["direct" + suffix].append(statistics.median(d["ttfb"]) * 1000)
            out["gateway" + suffix].append(statistics.median(g["ttfb"]) * 1000)
            out["cpu_chat" + suffix].append((g1 - g0) / count * 1000)
        host, port = p.gw_url.split("//")[1].split("/")[0].split(":")
        conn = http.client.HTTPConnection(host, int(port))
        h0 = cpu_seconds(p.gateway.pid)
        for _ in range(n * 20):
            conn.request("GET", "/health")
            conn.getresponse().read()
        out["cpu_health"].append((cpu_seconds(p.gateway.pid) - h0) / (n * 20) * 1000)
        conn.close()
    return out


def memory(p: Procs, streams: int) -> tuple[float, float, int]:
    """RSS before and with ``streams`` open streams (each held mid-answer)."""
    idle = rss_mib(p.gateway.pid)
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "harness.bench.raw_client",
            p.gw_url,
            "--model",
            "bench-plain-100000-paced",
            "--key",
            BENCH_KEY,
            "--streams",
            str(streams),
            "--hold",
            "2",
            "--extra",
            '{"bench_pace_ms": 500}',
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None
    held = json.loads(proc.stdout.readline()).get("held", 0)
    time.sleep(0.5)
    busy = rss_mib(p.gateway.pid)
    proc.wait(60)
    return idle, (busy - idle) * 1024 / max(held, 1), held


def _idle_after_warmup(p: Procs) -> float:
    client(p.gw_url, "bench-plain-200-bulk", "--streams", "4")  # imports, pools, caches
    # idle: past gateway.ops.memory's settle time (it gives freed heap back after 1 s idle)
    time.sleep(2.5)
    return rss_mib(p.gateway.pid)


def report(p: Procs, repeat: int, quick: bool) -> None:
    scenarios = SCENARIOS[:1] + SCENARIOS[3:4] if quick else SCENARIOS
    print(
        f"relay benchmark: python {sys.version.split()[0]}, {os.cpu_count()} cores;"
        f" upstream, gateway and client in separate processes; median (range) of {repeat}"
    )
    t_start = time.monotonic()
    idle_rss = _idle_after_warmup(p)
    # per open stream first, on the heap start-up and the warm-up left: after the
    # throughput runs, held streams reuse what the runs freed, by chance (the same code
    # read 28.6-33.1 KiB in one session); the second figure is that one
    held_n = 100 if quick else 500
    _, first_per_stream, first_held = memory(p, held_n)
    cols = ("scenario", "direct d/s", "gateway d/s", "ratio", "gw µs/delta", "client µs/d")
    print(
        f"{cols[0]:<20} {cols[1]:>22} {cols[2]:>22} {cols[3]:>18} {cols[4]:>16} {cols[5]:>14}"
        "  upstream µs/d"
    )
    for sc in scenarios:
        f = run_scenario(p, sc, repeat)
        note = f"  ({f.incomplete} incomplete!)" if f.incomplete else ""
        print(
            f"{sc.name:<20} {_fmt(f.direct):>22} {_fmt(f.gateway):>22} {_fmt(f.ratio, '.2f'):>18}"
            f" {_fmt(f.gw_cpu_us):>16} {_fmt(f.client_cpu_us, '.1f'):>14}"
            f"  {statistics.median(f.up_cpu_us):.1f}{note}",
            flush=True,
        )
    r = per_request(p, 20 if quick else 50, repeat)
    for suffix, how in (("", "a new connection each"), ("_ka", "kept alive")):
        added = [g - d for g, d in zip(r["gateway" + suffix], r["direct" + suffix], strict=True)]
        print(
            f"first content byte ({how}): direct {_fmt(r['direct' + suffix], '.2f')} ms,"
            f" gateway {_fmt(r['gateway' + suffix], '.2f')} ms, added {_fmt(added, '.2f')} ms"
        )
    print(
        f"gateway CPU per request: 1-delta chat {_fmt(r['cpu_chat'], '.2f')} ms"
        f" (a new connection each), {_fmt(r['cpu_chat_ka'], '.2f')} ms (kept alive);"
        f" GET /health {_fmt(r['cpu_health'], '.2f')} ms (kept alive)"
    )
    idle, per_stream, held = memory(p, held_n)
    print(
        f"memory: idle RSS {idle_rss:.1f} MiB after start-up ({idle:.1f} MiB after the runs);"
        f" {first_per_stream:.1f} KiB per open stream ({first_held} held after start-up),"
        f" {per_stream:.1f} KiB after the runs ({held} held)"
    )
    print(
        f"(benchmark took {time.monotonic() - t_start:.0f} s; load average at the end:"
        f" {' '.join(f'{x:.1f}' for x in os.getloadavg())})"
    )


def main(repeat: int = 3, quick: bool = False) -> int:
    with tempfile.TemporaryDirectory(prefix="relay-bench-") as tmpdir:
        p = start(Path(tmpdir))
        try:
            report(p, repeat, quick)
        finally:
            p.stop()
    return 0
