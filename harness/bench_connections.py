"""Many slow concurrent streams through one real ``gateway run`` process.

    python -m harness.bench_connections --streams 10000 [--events 5] [--delay 3]
                                        [--rate 4000] [--timeout 600]

Three processes besides this one's client: the demo upstream (served by
:func:`gateway.http.serve.run_until_signalled`, so it has the same backlog and descriptor
limit as the gateway), and ``gateway run`` with a throw-away config. The client is
this process: raw non-blocking sockets on one ``selectors`` loop, no HTTP library. It
opens ``--streams`` connections at ``--rate`` per second, each sending one
``POST /v1/chat/completions`` with ``stream: true`` and the ``demo-long`` model
(``--events`` deltas, ``--delay`` seconds apart: a slow model), and reads each stream
to its end.

A stream *completed* when it got ``200``, a final chunk with ``finish_reason: "stop"``,
``data: [DONE]`` and the end of the chunked body. Everything else is counted by what
happened (HTTP status and error code, reset, closed early, timed out). Sampled once a
second: the gateway's and upstream's RSS and open descriptors (``/proc``); reported:
their peaks, the gateway's CPU seconds, the kernel's listen-queue overflows during the
run (``/proc/net/netstat``: machine-wide), time to first byte and stream duration
percentiles.

Descriptors: a relayed stream holds two in the gateway (client + upstream connection),
so N streams need about 2N + 30; the gateway raises its soft limit to the hard one at
start and says in its log how many streams fit. Linux only (``/proc``).
"""

from __future__ import annotations

import argparse
import contextlib
import errno
import json
import os
import re
import resource
import selectors
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

KEY = "bench-connections-key-0123456789"


# --------------------------------------------------------------------------- the client


@dataclass
class Stream:
    sock: socket.socket
    t_start: float
    head: bytes = b""
    status: int = 0
    tail: bytes = b""
    bytes_in: int = 0
    t_first: float | None = None
    t_end: float | None = None
    saw_done: bool = False
    saw_stop: bool = False
    outcome: str = ""
    error_code: str = ""


@dataclass
class ClientResult:
    streams: int
    outcomes: Counter[str] = field(default_factory=Counter)
    ttfb: list[float] = field(default_factory=list)
    durations: list[float] = field(default_factory=list)
    wall: float = 0.0

    @property
    def completed(self) -> int:
        return self.outcomes["completed"]


def _request(port: int, events: int, delay: float, key: str) -> bytes:
    body = json.dumps(
        {
            "model": "demo-long",
            "stream": True,
            "demo_events": events,
            "demo_delay": delay,
            "messages": [{"role": "user", "content": "go slowly"}],
        }
    ).encode()
    head = (
        f"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n"
        f"Authorization: Bearer {key}\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n"
    )
    return head.encode() + body


_DONE = b"data: [DONE]"
_STOP = b'"finish_reason": "stop"'
_STOP2 = b'"finish_reason":"stop"'


def _on_data(st: Stream, data: bytes, now: float) -> None:
    if st.t_first is None:
        st.t_first = now
    st.bytes_in += len(data)
    if not st.status:
        st.head += data
        end = st.head.find(b"\r\n\r\n")
        if end < 0:
            return
        m = re.match(rb"HTTP/1\.1 (\d{3})", st.head)
        st.status = int(m.group(1)) if m else -1
        data = st.head[end + 4 :]
        if st.status != 200:
            st.tail = data[:2000]
            return
        st.head = b""
    window = st.tail + data
    st.saw_done = st.saw_done or _DONE in window
    st.saw_stop = st.saw_stop or _STOP in window or _STOP2 in window
    if st.status != 200 and len(st.tail) < 2000:
        st.tail = (st.tail + data)[:2000]
    else:
        st.tail = window[-64:]


def _finish(st: Stream, now: float, how: str) -> None:
    st.t_end = now
    if st.status == 200 and st.saw_done and st.saw_stop and st.tail.endswith(b"0\r\n\r\n"):
        st.outcome = "completed"
        return
    if st.status and st.status != 200:
        code = ""
        with contextlib.suppress(ValueError, KeyError, TypeError):
            code = json.loads(st.tail)["error"]["code"]
        st.outcome = f"http {st.status} {code}".strip()
        return
    if st.status == 200:
        st.outcome = f"200 but {how} before the end"
        return
    st.outcome = how


def run_client(
    port: int,
    streams: int,
    *,
    events: int,
    delay: float,
    rate: float,
    timeout: float,
    key: str = KEY,
    on_tick: Callable[[int, int, ClientResult], None] | None = None,
) -> ClientResult:
    """Open ``streams`` streaming requests against 127.0.0.1:``port``, read them all."""
    req = _request(port, events, delay, key)
    sel = selectors.DefaultSelector()
    result = ClientResult(streams)
    started = 0
    live: dict[int, Stream] = {}
    t0 = time.monotonic()
    deadline = t0 + timeout
    next_tick = t0 + 1.0
    while started < streams or live:
        now = time.monotonic()
        if now > deadline:
            break
        due = min(streams, int((now - t0) * rate) + 1)
        while started < due:
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            sock.setblocking(False)
            err = sock.connect_ex(("127.0.0.1", port))
            st = Stream(sock, time.monotonic())
            started += 1
            if err not in (0, errno.EINPROGRESS):
                st.outcome = f"connect failed: {errno.errorcode.get(err, err)}"
                result.outcomes[st.outcome] += 1
                sock.close()
                continue
            live[sock.fileno()] = st
            sel.register(sock, selectors.EVENT_WRITE, st)
        wait = 0.05 if started < streams else 0.5
        for sel_key, mask in sel.select(wait):
            st = sel_key.data
            sock = st.sock
            now = time.monotonic()
            if mask & selectors.EVENT_WRITE:
                err = sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
                if err:
                    how = f"connect failed: {errno.errorcode.get(err, err)}"
                else:
                    try:
                        sock.send(req)  # small: fits in an empty send buffer
                        sel.modify(sock, selectors.EVENT_READ, st)
                        continue
                    except OSError as exc:
                        how = f"send failed: {errno.errorcode.get(exc.errno or 0, exc)}"
                sel.unregister(sock)
                live.pop(sock.fileno(), None)
                sock.close()
                st.outcome = how
                result.outcomes[how] += 1
                continue
            try:
                data = sock.recv(65536)
            except BlockingIOError:
                continue
            except ConnectionResetError:
                data, how = b"", "reset"
            else:
                how = "closed"
            if data:
                _on_data(st, data, now)
                continue
            sel.unregister(sock)
            live.pop(sock.fileno(), None)
            sock.close()
            _finish(st, now, how)
            result.outcomes[st.outcome] += 1
            if st.outcome == "completed":
                assert st.t_first is not None and st.t_end is not None
                result.ttfb.append(st.t_first - st.t_start)
                result.durations.append(st.t_end - st.t_start)
        if on_tick is not None and now >= next_tick:
            next_tick = now + 1.0
            on_tick(started, len(live), result)
    for st in live.values():
        with contextlib.suppress(OSError):
            sel.unregister(st.sock)
        st.sock.close()
        _finish(st, time.monotonic(), "timed out")
        result.outcomes[st.outcome] += 1
    sel.close()
    result.wall = time.monotonic() - t0
    return result


# --------------------------------------------------------------------------- processes


def raise_nofile() -> int:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and soft < hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    return resource.getrlimit(resource.RLIMIT_NOFILE)[0]


@dataclass
class ProcStats:
    pid: int
    rss_peak_kb: int = 0
    fds_peak: int = 0

    def sample(self) -> tuple[int, int]:
        try:
            fds = len(os.listdir(f"/proc/{self.pid}/fd"))
            status = Path(f"/proc/{self.pid}/status").read_text()
        except OSError:
            return 0, 0
        m = re.search(r"VmRSS:\s+(\d+)", status)
        rss = int(m.group(1)) if m else 0
        self.rss_peak_kb = max(self.rss_peak_kb, rss)
        self.fds_peak = max(self.fds_peak, fds)
        return rss, fds

    def cpu_seconds(self) -> float:
        try:
            fields = Path(f"/proc/{self.pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            return 0.0
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def listen_overflows() -> int:
    """Machine-wide TcpExt ListenOverflows + ListenDrops (0 where unreadable)."""
    try:
        lines = Path("/proc/net/netstat").read_text().splitlines()
    except OSError:
        return 0
    for names, values in zip(lines[::2], lines[1::2], strict=False):
        if names.startswith("TcpExt:"):
            table = dict(zip(names.split()[1:], values.split()[1:], strict=False))
            return int(table.get("ListenOverflows", 0)) + int(table.get("ListenDrops", 0))
    return 0


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def _wait_for(log: Path, pattern: str, proc: subprocess.Popen[bytes], timeout: float) -> str:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        text = log.read_text(errors="replace")
        m = re.search(pattern, text)
        if m:
            return m.group(0)
        if proc.poll() is not None:
            break
        time.sleep(0.05)
    raise RuntimeError(f"{log.name}: no {pattern!r}\n{log.read_text(errors='replace')[-2000:]}")


@dataclass
class Servers:
    """The demo upstream and ``gateway run``, each its own process."""

    base: Path
    gateway_port: int = 0
    procs: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)

    def start(self, *, extra_server: str = "") -> None:
        up_port, self.gateway_port = free_port(), free_port()
        root = self.base / "artifacts"
        root.mkdir(parents=True, exist_ok=True)
        cfg = self.base / "gateway.toml"
        cfg.write_text(
            f"""state_dir = "{self.base / "state"}"

[server]
bind = "127.0.0.1:{self.gateway_port}"
public_base_url = "http://127.0.0.1:{self.gateway_port}"
drain_timeout_seconds = 5.0
{extra_server}
[upstream]
base_url = "http://127.0.0.1:{up_port}/v1"
connect_timeout_seconds = 30.0

[artifacts]
roots = ["{root}"]

[[auth.keys]]
key = "{KEY}"
principal = "bench"
""",
            encoding="utf-8",
        )
        env = {k: v for k, v in os.environ.items() if not k.startswith("GATEWAY_")}
        env.pop("NOTIFY_SOCKET", None)
        env["PYTHONUNBUFFERED"] = "1"
        py = sys.executable
        for name, argv in (
            ("upstream", [py, "-m", "harness.bench_connections", "upstream", "--port", str(up_port), "--root", str(root)]),
            ("gateway", [py, "-m", "gateway.cli", "run", "--config", str(cfg)]),
        ):  # fmt: skip
            with (self.base / f"{name}.log").open("wb") as out:
                self.procs[name] = subprocess.Popen(
                    argv, stdout=out, stderr=subprocess.STDOUT, env=env
                )
            pattern = "listening on http://" if name == "gateway" else "upstream ready"
            _wait_for(self.base / f"{name}.log", pattern, self.procs[name], 30)

    def log(self, name: str) -> str:
        return (self.base / f"{name}.log").read_text(errors="replace")

    def stop(self) -> None:
        for proc in reversed(list(self.procs.values())):
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
                try:
                    proc.wait(20)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait(5)


def _upstream_main(port: int, root: Path) -> int:
    """The demo upstream behind the same serving code as the gateway (backlog, fds)."""
    import logging

    import trio

    from gateway.cli.demo_upstream import create_demo_upstream_app
    from gateway.http.serve import run_until_signalled

    logging.basicConfig(
        level=logging.WARNING, format="%(asctime)s %(levelname)s %(name)s %(message)s"
    )
    app = create_demo_upstream_app(root, outside_dir=root.parent / "outside", chunk_delay=0.0)

    def ready(urls: list[list[str]]) -> None:
        print(f"upstream ready on {urls[0][0]}", flush=True)

    # a model server, not a client-facing one: the gateway's loop may lag seconds
    # between a request's head and body at 10,000 streams on 2 busy cores
    trio.run(
        lambda: run_until_signalled(
            [(app, f"127.0.0.1:{port}", None)],
            drain_timeout=3.0,
            on_ready=ready,
            header_timeout=60.0,
        )
    )
    return 0


# --------------------------------------------------------------------------- report


def _pct(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m harness.bench_connections",
        description="Many slow concurrent streams through one gateway process: how many "
        "complete, connect and first-byte latency, the gateway's memory and descriptors.",
        epilog="example: python -m harness.bench_connections --streams 2000 --delay 1",
    )
    sub = parser.add_subparsers(dest="cmd", title="internal", metavar="upstream")
    up = sub.add_parser("upstream", help="the benchmark starts its demo upstream with this")
    up.add_argument("--port", type=int, required=True)
    up.add_argument("--root", type=Path, required=True)
    parser.add_argument("--streams", type=int, default=10000, help="concurrent streams (10000)")
    parser.add_argument("--events", type=int, default=5, help="deltas per stream")
    parser.add_argument("--delay", type=float, default=3.0, help="seconds between deltas")
    parser.add_argument("--rate", type=float, default=4000.0, help="new connections per second")
    parser.add_argument("--timeout", type=float, default=600.0, help="give up after (s)")
    args = parser.parse_args(argv)
    if args.cmd == "upstream":
        return _upstream_main(args.port, args.root)

    limit = raise_nofile()
    if limit < args.streams + 64:
        print(f"this client needs {args.streams + 64} descriptors; its limit is {limit}")
        return 2
    base = Path(tempfile.mkdtemp(prefix="bench-connections-"))
    servers = Servers(base)
    servers.start()
    gw = ProcStats(servers.procs["gateway"].pid)
    upstream = ProcStats(servers.procs["upstream"].pid)
    print(
        f"{args.streams} streams x {args.events} deltas, {args.delay:g} s apart, opened at "
        f"{args.rate:g}/s; gateway pid {gw.pid}, upstream pid {upstream.pid}; logs in {base}"
    )
    fd_line = re.search(r"file descriptors: .*", servers.log("gateway"))
    if fd_line:
        print(f"gateway: {fd_line.group(0)}")
    overflows0 = listen_overflows()
    cpu0 = gw.cpu_seconds()

    def tick(started: int, live: int, result: ClientResult) -> None:
        rss, fds = gw.sample()
        upstream.sample()
        print(
            f"  t={time.monotonic() - t0:6.1f}s opened {started:6d} open {live:6d} "
            f"completed {result.completed:6d}  gateway rss {rss / 1024:6.0f} MiB fds {fds:6d}",
            flush=True,
        )

    t0 = time.monotonic()
    try:
        result = run_client(
            servers.gateway_port,
            args.streams,
            events=args.events,
            delay=args.delay,
            rate=args.rate,
            timeout=args.timeout,
            on_tick=tick,
        )
        cpu = gw.cpu_seconds() - cpu0
        alive = servers.procs["gateway"].poll() is None
    finally:
        servers.stop()
    log = servers.log("gateway")
    print()
    print(f"completed      {result.completed} of {result.streams} in {result.wall:.1f} s")
    for outcome, n in result.outcomes.most_common():
        if outcome != "completed":
            print(f"  {outcome:<40} {n}")
    print(
        f"ttfb           p50 {_pct(result.ttfb, 0.5) * 1000:.0f} ms  "
        f"p99 {_pct(result.ttfb, 0.99) * 1000:.0f} ms"
    )
    print(
        f"duration       p50 {_pct(result.durations, 0.5):.1f} s  "
        f"p99 {_pct(result.durations, 0.99):.1f} s  "
        f"(ideal {args.events * args.delay:.1f} s)"
    )
    print(
        f"gateway        peak rss {gw.rss_peak_kb / 1024:.0f} MiB, peak fds {gw.fds_peak}, cpu {cpu:.1f} s, alive at the end: {alive}"
    )
    print(
        f"upstream       peak rss {upstream.rss_peak_kb / 1024:.0f} MiB, peak fds {upstream.fds_peak}"
    )
    print(
        f"listen queue   overflows+drops during the run (machine-wide): {listen_overflows() - overflows0}"
    )
    print(f"gateway log    {log.count('Traceback')} tracebacks, {log.count(' ERROR ')} ERROR lines")
    return 0 if result.completed == result.streams else 1


if __name__ == "__main__":
    sys.exit(main())
