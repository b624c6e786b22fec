"""Benchmarks that print figures side by side in one run (no timed assertions).

    python -m harness.bench rewriter [--mb 4]
    python -m harness.bench relay [--events 3000] [--streams 1,100] [--repeat 3]
    python -m harness.bench links [--files 2000] [--mb 50] [--repeat 3]

Rewriter: throughput of :class:`gateway.rewrite.StreamRewriter` against a baseline
of one compiled-regex scan (``finditer`` of a host-path regex) over the same text,
for plain prose without candidates and for path-dense text. Targets: plain prose at
>= 50 % of the baseline's speed, path-dense text >= 10 MB/s.

Relay: the demo upstream and the API server, both real hypercorn on 127.0.0.1 in this
process, and an httpx client streaming ``demo-long`` either directly from the upstream
or through the gateway (rewriting on), for each concurrency level:

* events/s: ``demo_delay`` 0, one event per upstream write (``--batch``), all events
  of all streams divided by the wall time from the first request to the last
  ``[DONE]``, and divided by this process's CPU time (robust to other load on the
  machine); best of ``--repeat``, the two paths interleaved;
* added latency per event: ``demo_delay`` of a few ms per stream; the upstream app is
  wrapped so that every body write is stamped (``time.perf_counter``, when the
  upstream hands it to hypercorn) with the indices of the deltas it carries, and the
  client stamps every event when it is decoded. latency = arrival - upstream write,
  one clock, per event; "added" is the gateway path's percentile minus the direct
  path's.

Targets (reported, not asserted): gateway >= 50 % of direct events/s; p99 added
latency <= 5 ms at 1 stream. Upstream, gateway and client share one trio loop (one
core), so the gateway path also pays for the gateway's CPU out of the client's and
upstream's budget, and does twice the HTTP I/O of the direct path: the wall ratio is
a pessimistic bound for separate processes; ``gw alone`` estimates the gateway's own
capacity from the CPU cost difference.

Links: the cost of minting one managed-download link (``ArtifactService.inspect`` +
``mint`` against a real SQLite store in a temporary directory, ``--files`` distinct
files; then the same through ``ResponseLinks.resolve``, which adds the worker-thread
hop and, for public links, the HMAC), and the download throughput of one ``--mb`` file
through the gateway (real hypercorn, httpx client, the owner's bearer key) next to
reading the same file directly; best of ``--repeat``.
"""

from __future__ import annotations

import argparse
import json
import logging
import random
import re
import socket
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

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


# --------------------------------------------------------------------------- relay

BENCH_KEY = "bench-key-0123456789abcdef"
_INDEX_RE = re.compile(r'"content":"[a-z]+-(\d+) "')


class StampingApp:
    """ASGI wrapper of the demo upstream: stamps every body write of a tagged request.

    The request's JSON body carries ``bench_tag`` (the gateway forwards unknown
    top-level fields); ``sent[(tag, i)]`` is the ``perf_counter`` time at which the
    upstream handed hypercorn the write that carried delta ``i``.
    """

    def __init__(self, app: Any) -> None:
        self.app = app
        self.stamping = False
        self.sent: dict[tuple[str, int], float] = {}

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http" or not self.stamping:
            await self.app(scope, receive, send)
            return
        body = bytearray()
        tag: list[str] = []

        async def rx() -> Any:
            msg = await receive()
            if msg["type"] == "http.request":
                body.extend(msg.get("body", b""))
            return msg

        async def tx(msg: Any) -> None:
            if msg["type"] == "http.response.body" and msg.get("body"):
                t = time.perf_counter()
                if not tag:
                    try:
                        tag.append(str(json.loads(bytes(body)).get("bench_tag", "")))
                    except ValueError:
                        tag.append("")
                if tag[0]:
                    for i in _INDEX_RE.findall(msg["body"].decode("utf-8", "replace")):
                        self.sent[(tag[0], int(i))] = t
            await send(msg)

        await self.app(scope, rx, tx)


@dataclass
class _Stream:
    events: int = 0
    arrivals: list[tuple[int, float]] = field(default_factory=list)


async def _one_stream(
    client: Any, url: str, headers: dict[str, str], body: dict[str, Any], stamp: bool
) -> _Stream:
    from gateway.sse import SSEDecoder

    out = _Stream()
    decoder = SSEDecoder()
    async with client.stream("POST", url, json=body, headers=headers) as resp:
        if resp.status_code != 200:
            raise RuntimeError(f"{url}: HTTP {resp.status_code}")
        async for piece in resp.aiter_raw():
            events = decoder.feed(piece)
            if not events:
                continue
            t = time.perf_counter()
            for ev in events:
                if ev.data == "[DONE]" or ev.event != "message":
                    continue
                out.events += 1
                if stamp:
                    m = _INDEX_RE.search(ev.data)
                    if m is not None:
                        out.arrivals.append((int(m.group(1)), t))
    return out


@dataclass
class _Run:
    wall: float  # seconds from the first request to the last [DONE]
    cpu: float  # CPU seconds this process spent meanwhile
    streams: list[_Stream]

    @property
    def events(self) -> int:
        return sum(s.events for s in self.streams)


async def _run_streams(
    client: Any,
    url: str,
    headers: dict[str, str],
    bodies: list[dict[str, Any]],
    stamp: bool,
    stagger: float = 0.0,
) -> _Run:
    """Run one stream per body concurrently; stream ``i`` starts ``i * stagger / n`` late."""
    import trio

    results: list[_Stream] = [_Stream() for _ in bodies]

    async def run(i: int) -> None:
        if stagger:
            await trio.sleep(i * stagger / len(bodies))
        results[i] = await _one_stream(client, url, headers, bodies[i], stamp)

    c0, t0 = time.process_time(), time.perf_counter()
    async with trio.open_nursery() as nursery:
        for i in range(len(bodies)):
            nursery.start_soon(run, i)
    return _Run(time.perf_counter() - t0, time.process_time() - c0, results)


def _pct(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    s = sorted(values)
    k = min(len(s) - 1, max(0, round(q / 100 * (len(s) - 1))))
    return s[k]


@dataclass
class _Row:
    streams: int
    per_stream: int
    wall_eps: dict[str, float]  # best events/s (wall clock) per path
    cpu_eps: dict[str, float]  # best events per CPU-second per path
    delay_ms: float = 0.0
    lat_events: int = 0
    lat: dict[str, tuple[float, float]] = field(default_factory=dict)  # p50, p99 ms


async def _gateway_process(tmp: Path, up_url: str) -> tuple[Any, str]:
    """Start ``gateway run`` as its own process (its own core); return (popen, url)."""
    import subprocess

    import httpx
    import trio

    with socket.socket() as sk:
        sk.bind(("127.0.0.1", 0))
        port = sk.getsockname()[1]
    cfg = tmp / "bench.toml"
    cfg.write_text(
        f'''state_dir = "{tmp / "gw-state"}"
[server]
bind = "127.0.0.1:{port}"
public_base_url = "http://127.0.0.1:{port}"
[upstream]
base_url = "{up_url}"
[artifacts]
roots = ["{tmp / "artifacts"}"]
[[auth.keys]]
key = "{BENCH_KEY}"
principal = "bench"
'''
    )
    log = (tmp / "gateway.log").open("wb")
    proc = await trio.to_thread.run_sync(
        partial(
            subprocess.Popen,
            [sys.executable, "-m", "gateway.cli", "run", "--config", str(cfg)],
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    )
    log.close()
    url = f"http://127.0.0.1:{port}"
    async with httpx.AsyncClient() as c:
        for _ in range(200):
            try:
                if (await c.get(url + "/health")).status_code == 200:
                    return proc, url
            except httpx.HTTPError:
                pass
            await trio.sleep(0.05)
    proc.kill()
    raise RuntimeError("the gateway process did not become healthy")


async def _serve_all(
    tmp: Path,
    body: Callable[[str, str, StampingApp, Any], Awaitable[list[_Row]]],
    separate: bool = False,
) -> list[_Row]:
    """Demo upstream + API server (real hypercorn, 127.0.0.1, ephemeral ports) + client.

    ``separate``: the gateway runs as its own ``gateway run`` process (as deployed),
    the upstream and the client stay in this one.
    """
    from dataclasses import replace

    import httpx
    import trio
    from hypercorn.config import Config as HyperConfig
    from hypercorn.trio import serve

    from gateway.app import create_app
    from gateway.config import config_from_dict
    from gateway.demo_upstream import create_demo_upstream_app
    from gateway.server import serve_app

    upstream = StampingApp(
        create_demo_upstream_app(tmp / "artifacts", outside_dir=tmp / "outside", chunk_delay=0.0)
    )
    hc = HyperConfig()
    hc.bind = ["127.0.0.1:0"]
    hc.accesslog = None
    hc.errorlog = logging.getLogger("hypercorn.error")
    hc.keep_alive_timeout = 75.0
    logging.getLogger("hypercorn.error").setLevel(logging.WARNING)
    config = config_from_dict(
        {
            "state_dir": str(tmp / "state"),
            "server": {"bind": "127.0.0.1:0", "public_base_url": "http://127.0.0.1:8642"},
            "artifacts": {"roots": [str(tmp / "artifacts")]},
            "auth": {"keys": [{"key": BENCH_KEY, "principal": "bench", "role": "user"}]},
        }
    )
    async with trio.open_nursery() as nursery:
        binds: list[str] = await nursery.start(
            partial(serve, upstream, hc, shutdown_trigger=trio.sleep_forever)
        )
        up_url = binds[0] + "/v1"
        if separate:
            proc, gw = await _gateway_process(tmp, up_url)
            try:
                limits = httpx.Limits(max_connections=2000, max_keepalive_connections=2000)
                async with httpx.AsyncClient(
                    timeout=httpx.Timeout(30, read=None), limits=limits
                ) as client:
                    return await body(up_url, gw + "/v1", upstream, client)
            finally:
                proc.terminate()
                with trio.CancelScope(shield=True):
                    await trio.to_thread.run_sync(proc.wait, 15)
                nursery.cancel_scope.cancel()
        config = replace(config, upstream=replace(config.upstream, base_url=up_url))
        app = create_app(config)
        try:
            urls: list[str] = await nursery.start(
                partial(serve_app, app, "127.0.0.1:0", shutdown_trigger=trio.sleep_forever)
            )
            limits = httpx.Limits(max_connections=2000, max_keepalive_connections=2000)
            async with httpx.AsyncClient(
                timeout=httpx.Timeout(30, read=None), limits=limits
            ) as client:
                rows = await body(up_url, urls[0] + "/v1", upstream, client)
        finally:
            nursery.cancel_scope.cancel()
            with trio.CancelScope(shield=True):
                await app.gateway.aclose()  # type: ignore[attr-defined]
    return rows


async def _relay_rows(
    up_url: str,
    gw_url: str,
    upstream: StampingApp,
    client: Any,
    *,
    events: int,
    max_total: int,
    streams: list[int],
    batch: int,
    repeat: int,
    lat_events: int,
    lat_delay: float | None,
) -> list[_Row]:
    paths = {
        "direct": (up_url + "/chat/completions", {}),
        "gateway": (gw_url + "/chat/completions", {"Authorization": f"Bearer {BENCH_KEY}"}),
    }
    msgs = [{"role": "user", "content": "bench"}]

    def bodies(n: int, per: int, delay: float, tag: str) -> list[dict[str, Any]]:
        return [
            {
                "model": "demo-long",
                "messages": msgs,
                "stream": True,
                "demo_events": per,
                "demo_delay": delay,
                "demo_batch": batch if delay == 0 else 1,
                "bench_tag": f"{tag}-{i}",
            }
            for i in range(n)
        ]

    for url, headers in paths.values():  # warm up both paths (connections, caches)
        await _run_streams(client, url, headers, bodies(max(streams), 20, 0.0, "warm"), False)

    rows: list[_Row] = []
    for n in streams:
        per = max(20, min(events, max_total // n))
        wall = dict.fromkeys(paths, 0.0)
        cpu = dict.fromkeys(paths, 0.0)
        for _ in range(repeat):  # interleaved, best of `repeat`: other load only slows down
            for name, (url, headers) in paths.items():
                run = await _run_streams(client, url, headers, bodies(n, per, 0.0, name), False)
                if run.events < n * per:
                    raise RuntimeError(f"{name}: {run.events} of {n * per} events arrived")
                wall[name] = max(wall[name], run.events / run.wall)
                cpu[name] = max(cpu[name], run.events / max(run.cpu, 1e-9))
        delay = lat_delay if lat_delay is not None else 0.005 * max(1, n // 10)
        lat_per = max(50, min(lat_events, 10_000 // n))
        row = _Row(n, per, wall, cpu, delay * 1000)
        for name, (url, headers) in paths.items():
            upstream.sent.clear()
            upstream.stamping = True
            try:
                tag = f"lat-{name}-{n}"
                # staggered starts spread the streams' writes evenly over the delay
                run = await _run_streams(
                    client, url, headers, bodies(n, lat_per, delay, tag), True, stagger=delay
                )
            finally:
                upstream.stamping = False
            samples = [
                (t - upstream.sent[(f"{tag}-{k}", i)]) * 1000
                for k, r in enumerate(run.streams)
                for i, t in r.arrivals
                if (f"{tag}-{k}", i) in upstream.sent
            ]
            row.lat_events = len(samples)
            row.lat[name] = (_pct(samples, 50), _pct(samples, 99))
        rows.append(row)
    return rows


def bench_relay(
    events: int,
    streams: list[int],
    *,
    batch: int = 1,
    max_total: int = 30_000,
    repeat: int = 3,
    lat_events: int = 300,
    lat_delay: float | None = None,
    separate: bool = True,
) -> int:
    import os

    import trio

    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print(
        f"relay benchmark: demo-long, python {sys.version.split()[0]}, trio {trio.__version__},"
        f" {os.cpu_count()} CPUs, load average {load:.2f} at start;"
        + (
            " gateway in its own process (`gateway run`), upstream and client in this one"
            if separate
            else " upstream, gateway and client in one process / one trio loop"
        )
    )
    with tempfile.TemporaryDirectory(prefix="relay-bench-") as tmpdir:
        rows = trio.run(
            partial(
                _serve_all,
                Path(tmpdir),
                partial(
                    _relay_rows,
                    events=events,
                    max_total=max_total,
                    streams=streams,
                    batch=batch,
                    repeat=repeat,
                    lat_events=lat_events,
                    lat_delay=lat_delay,
                ),
                separate,
            )
        )
    print()
    print(
        f"throughput: demo_delay 0, {batch} event(s) per upstream write, best of {repeat}"
        " (paths interleaved); target gateway >= 50% of direct"
    )
    print(f"{'':>22}{'--- events/s (wall) ---':^32}   {'--- events per CPU-second ---':^45}")
    print(
        f"{'streams':>7} {'events/stream':>13}  {'direct':>9} {'gateway':>9} {'ratio':>6} {'':>6}"
        f"   {'direct':>9} {'gateway':>9} {'ratio':>6} {'gw alone':>9} {'ratio':>6}"
    )
    for r in rows:
        ratio = r.wall_eps["gateway"] / r.wall_eps["direct"]
        cratio = r.cpu_eps["gateway"] / r.cpu_eps["direct"]
        own = 1 / r.cpu_eps["gateway"] - 1 / r.cpu_eps["direct"]
        alone = 1 / own if own > 0 and not separate else float("nan")
        print(
            f"{r.streams:>7} {r.per_stream:>13}  {r.wall_eps['direct']:>9,.0f}"
            f" {r.wall_eps['gateway']:>9,.0f} {ratio:>6.0%} {'met' if ratio >= 0.5 else 'MISSED':>6}"
            f"   {r.cpu_eps['direct']:>9,.0f} {r.cpu_eps['gateway']:>9,.0f} {cratio:>6.0%}"
            f" {alone:>9,.0f} {alone / r.cpu_eps['direct']:>6.0%}"
        )
    if separate:
        print(
            "  events per CPU-second: of this process only (upstream + client); the gateway's"
            " CPU is in its own process, so 'gw alone' is n/a here (use --in-process).\n"
            "  The gateway joins writes already queued for a slower client, so the client may"
            " read fewer, larger chunks through it than directly (ratios above 100% are that)."
        )
    else:
        print(
            "  events per CPU-second: events / CPU time of this process (robust to other load on"
            " the machine).\n  gw alone = 1 / (1/gateway - 1/direct): the gateway's own CPU cost"
            " per event, i.e. what one core running only the gateway would relay (the upstream's"
            " and\n  the client's cost is the same on both paths). In one process the gateway path"
            " does twice the HTTP I/O of the direct path, so the wall ratio cannot exceed ~50%."
        )
    print()
    print(
        "added latency per event (ms): latency = arrival of the event at the client - the"
        " upstream's body write that carried it\n  (same clock, matched by delta index);"
        " added = gateway percentile - direct percentile; target p99 added <= 5 ms at 1 stream"
    )
    print(
        f"{'streams':>7} {'delay ms':>8} {'offered ev/s':>12} {'events':>7}"
        f" {'direct p50/p99':>15} {'gateway p50/p99':>16} {'added p50/p99':>14}  target"
    )
    for r in rows:
        d, g = r.lat["direct"], r.lat["gateway"]
        added = (g[0] - d[0], g[1] - d[1])
        offered = r.streams / (r.delay_ms / 1000)
        verdict = ("met" if added[1] <= 5 else "MISSED") if r.streams == 1 else "-"
        print(
            f"{r.streams:>7} {r.delay_ms:>8.1f} {offered:>12,.0f} {r.lat_events:>7}"
            f" {d[0]:>7.2f}/{d[1]:<7.2f} {g[0]:>8.2f}/{g[1]:<7.2f}"
            f" {added[0]:>6.2f}/{added[1]:<7.2f}  {verdict}"
        )
    return 0


# --------------------------------------------------------------------------- links


def _links_config(tmp: Path) -> Any:
    from gateway.config import config_from_dict

    return config_from_dict(
        {
            "state_dir": str(tmp / "state"),
            "server": {"bind": "127.0.0.1:0", "public_base_url": "http://127.0.0.1:8642"},
            "upstream": {"base_url": "http://127.0.0.1:9/v1"},  # never called
            "artifacts": {"roots": [str(tmp / "artifacts")], "max_bytes": 1 << 30},
            "auth": {"keys": [{"key": BENCH_KEY, "principal": "bench", "role": "user"}]},
        }
    )


@dataclass
class _MintFigures:
    n: int
    inspect_us: float
    mint_us: float
    resolve_private_us: float
    resolve_public_us: float


def _mint_figures(tmp: Path, n: int, repeat: int) -> _MintFigures:
    """µs per link: inspect + mint (SQLite insert) directly, then via ResponseLinks.resolve.

    Each pass mints ``n`` new records for the same ``n`` files; best pass of ``repeat``.
    """
    import trio

    from gateway.artifacts import ArtifactService
    from gateway.signing import Signer
    from gateway.store import SQLiteStore

    root = tmp / "artifacts" / "mint"
    root.mkdir(parents=True)
    paths: list[str] = []
    for i in range(n):
        p = root / f"sub{i % 20:02d}" / f"result-{i:05d}.csv"
        p.parent.mkdir(exist_ok=True)
        p.write_bytes(b"x" * (1 + i % 4096))
        paths.append(str(p))
    store = SQLiteStore(tmp / "state" / "mint-bench.sqlite3")
    try:
        svc = ArtifactService(_links_config(tmp), store, Signer.generate())

        def direct() -> tuple[float, float]:
            t_inspect = t_mint = 0.0
            for path in paths:
                t0 = time.perf_counter()
                facts = svc.inspect(path)
                t1 = time.perf_counter()
                if facts is None:
                    raise RuntimeError("a benchmark file was refused")
                svc.mint(facts, "bench", "private")
                t_mint += time.perf_counter() - t1
                t_inspect += t1 - t0
            return t_inspect, t_mint

        async def resolve_all(mode: str) -> float:
            links = svc.for_response("bench", mode)
            t0 = time.perf_counter()
            for path in paths:
                if await links.resolve(path) is None:
                    raise RuntimeError("a benchmark file was refused")
            return time.perf_counter() - t0

        runs: list[tuple[float, float, float, float]] = []
        for _ in range(repeat):  # interleaved, so warm-up and store growth hit all alike
            t_inspect, t_mint = direct()
            t_priv = trio.run(resolve_all, "private")
            runs.append((t_inspect, t_mint, t_priv, trio.run(resolve_all, "public")))
        t_inspect, t_mint, t_priv, t_pub = (min(col) for col in zip(*runs, strict=True))
    finally:
        store.close()
    us = 1e6 / n
    return _MintFigures(n, t_inspect * us, t_mint * us, t_priv * us, t_pub * us)


def _write_big(path: Path, mb: int) -> None:
    block = random.Random(3).randbytes(1 << 20)
    with open(path, "wb") as fh:
        for i in range(mb):
            fh.write(block[i % 251 :] + block[: i % 251])  # not all blocks identical


def _read_direct(path: Path, chunk: int) -> int:
    total = 0
    buf = bytearray(chunk)
    view = memoryview(buf)
    with open(path, "rb", buffering=0) as fh:
        while n := fh.readinto(view):
            total += n
    return total


async def _download_figures(tmp: Path, big: Path, repeat: int) -> tuple[list[float], str]:
    """Seconds per full download through the gateway (owner's bearer key), best of ``repeat``."""
    import hashlib

    import httpx
    import trio

    from gateway.app import create_app
    from gateway.server import serve_app

    app = create_app(_links_config(tmp))
    state: Any = app.gateway  # type: ignore[attr-defined]
    facts = state.artifacts.inspect(str(big))
    if facts is None:
        raise RuntimeError("the benchmark file was refused")
    url = state.artifacts.url(state.artifacts.mint(facts, "bench", "private"))
    path = url.split("/v1/", 1)[1]
    times: list[float] = []
    digest = ""
    async with trio.open_nursery() as nursery:
        try:
            urls: list[str] = await nursery.start(
                partial(serve_app, app, "127.0.0.1:0", shutdown_trigger=trio.sleep_forever)
            )
            headers = {"Authorization": f"Bearer {BENCH_KEY}"}
            async with httpx.AsyncClient(
                base_url=urls[0] + "/v1/", headers=headers, timeout=httpx.Timeout(60)
            ) as client:
                h = hashlib.sha256()  # one untimed run checks the bytes
                async with client.stream("GET", path) as resp:
                    if resp.status_code != 200:
                        raise RuntimeError(f"download: HTTP {resp.status_code}")
                    async for piece in resp.aiter_raw():
                        h.update(piece)
                digest = h.hexdigest()
                for _ in range(repeat):
                    got = 0
                    t0 = time.perf_counter()
                    async with client.stream("GET", path) as resp:
                        async for piece in resp.aiter_raw():
                            got += len(piece)
                    times.append(time.perf_counter() - t0)
                    if got != facts.size:
                        raise RuntimeError(f"download: {got} of {facts.size} bytes")
        finally:
            nursery.cancel_scope.cancel()
            with trio.CancelScope(shield=True):
                await state.aclose()
    return times, digest


def bench_links(n: int, mb: int, repeat: int = 3) -> int:
    import hashlib

    import trio

    from gateway.artifacts import READ_CHUNK

    print(
        f"links benchmark: python {sys.version.split()[0]}, trio {trio.__version__};"
        " gateway and client in one process / one trio loop"
    )
    with tempfile.TemporaryDirectory(prefix="links-bench-") as tmpdir:
        tmp = Path(tmpdir)
        m = _mint_figures(tmp, n, repeat)
        print()
        print(
            f"minting: {m.n} distinct files under one root, real SQLite store (WAL),"
            f" best pass of {repeat}"
        )
        print(f"  {'step':<44} {'µs per link':>12}")
        print(f"  {'ArtifactService.inspect (realpath, lstat)':<44} {m.inspect_us:>12.1f}")
        print(f"  {'ArtifactService.mint (SQLite insert)':<44} {m.mint_us:>12.1f}")
        print(f"  {'inspect + mint':<44} {m.inspect_us + m.mint_us:>12.1f}")
        print(
            f"  {'ResponseLinks.resolve, private (+ thread hop)':<44} {m.resolve_private_us:>12.1f}"
        )
        print(f"  {'ResponseLinks.resolve, public (+ HMAC)':<44} {m.resolve_public_us:>12.1f}")

        big = tmp / "artifacts" / "big.bin"
        _write_big(big, mb)
        size = big.stat().st_size
        direct: list[float] = []
        for _ in range(repeat):
            t0 = time.perf_counter()
            if _read_direct(big, READ_CHUNK) != size:
                raise RuntimeError("short read")
            direct.append(time.perf_counter() - t0)
        gw_times, digest = trio.run(_download_figures, tmp, big, repeat)
        with open(big, "rb") as fh:
            if hashlib.file_digest(fh, "sha256").hexdigest() != digest:
                raise RuntimeError("the downloaded bytes differ from the file")
    mbytes = size / 1e6
    print()
    print(
        f"download: {mbytes:.1f} MB file, best of {repeat}; gateway = real hypercorn + httpx,"
        f" owner's bearer key; direct = readinto({READ_CHUNK // 1024} KiB) from the page cache"
    )
    print(f"  {'path':<10} {'best s':>8} {'MB/s':>9}  runs (s)")
    for name, ts in (("direct", direct), ("gateway", gw_times)):
        runs = " ".join(f"{t:.3f}" for t in ts)
        print(f"  {name:<10} {min(ts):>8.3f} {mbytes / min(ts):>9.1f}  {runs}")
    print(f"  gateway / direct: {min(direct) / min(gw_times):.1%}  (bytes verified by SHA-256)")
    return 0


def _int_list(text: str) -> list[int]:
    try:
        values = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError("expected comma-separated integers, e.g. 1,100") from None
    if not values or any(v < 1 for v in values):
        raise argparse.ArgumentTypeError("expected positive integers, e.g. 1,100")
    return values


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m harness.bench", description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="what", required=True)
    r = sub.add_parser("rewriter", help="rewriter throughput vs one regex scan")
    r.add_argument("--mb", type=float, default=4.0)
    rl = sub.add_parser("relay", help="events/s and added latency: direct vs through the gateway")
    rl.add_argument("--events", type=int, default=3000, help="events per stream (throughput)")
    rl.add_argument("--streams", type=_int_list, default=[1, 100], help="concurrency levels")
    rl.add_argument("--batch", type=int, default=1, help="events per upstream write")
    rl.add_argument(
        "--max-total", type=int, default=30_000, help="cap on events per throughput run"
    )
    rl.add_argument("--repeat", type=int, default=3, help="throughput runs per path (best)")
    rl.add_argument("--latency-events", type=int, default=300, help="events per latency stream")
    rl.add_argument(
        "--in-process",
        action="store_true",
        help="run the gateway in the benchmark's own process (default: its own process)",
    )
    rl.add_argument(
        "--latency-delay",
        type=float,
        default=None,
        help="seconds between upstream writes in latency runs (default 5 ms x max(1, streams/10))",
    )
    lk = sub.add_parser("links", help="link minting cost and download throughput")
    lk.add_argument("--files", type=int, default=2000, help="distinct files to mint links for")
    lk.add_argument("--mb", type=int, default=50, help="size of the downloaded file")
    lk.add_argument("--repeat", type=int, default=3, help="downloads (best is reported)")
    args = ap.parse_args(argv)
    if args.what == "links":
        return bench_links(args.files, args.mb, args.repeat)
    if args.what == "rewriter":
        return bench_rewriter(args.mb)
    if args.what == "relay":
        return bench_relay(
            args.events,
            args.streams,
            batch=args.batch,
            max_total=args.max_total,
            repeat=args.repeat,
            lat_events=args.latency_events,
            lat_delay=args.latency_delay,
            separate=not args.in_process,
        )
    return 2  # pragma: no cover


if __name__ == "__main__":
    raise SystemExit(main())
