"""Benchmarks that print figures side by side in one run (no timed assertions).

    python -m harness.bench rewriter [--mb 4]
    python -m harness.bench relay [--events 3000] [--streams 1,100]

Rewriter: throughput of :class:`gateway.rewrite.StreamRewriter` against a baseline
of one compiled-regex scan (``finditer`` of a host-path regex) over the same text,
for plain prose without candidates and for path-dense text. Targets: plain prose at
>= 50 % of the baseline's speed, path-dense text >= 10 MB/s.

Relay: the demo upstream and the API server, both real hypercorn on 127.0.0.1 in this
process, and an httpx client streaming ``demo-long`` either directly from the upstream
or through the gateway (rewriting on), for each concurrency level:

* events/s: ``demo_delay`` 0, one event per upstream write (``--batch``), all events
  of all streams divided by the wall time from the first request to the last
  ``[DONE]``;
* added latency per event: ``demo_delay`` of a few ms per stream; the upstream app is
  wrapped so that every body write is stamped (``time.perf_counter``, after hypercorn
  took the bytes) with the indices of the deltas it carries, and the client stamps
  every event when it is decoded. latency = arrival - upstream write, one clock, per
  event; "added" is the gateway path's percentile minus the direct path's.

Targets (reported, not asserted): gateway >= 50 % of direct events/s; p99 added
latency <= 5 ms at 1 stream. Upstream, gateway and client share one trio loop (one
core), so the gateway path also pays for the gateway's CPU out of the client's and
upstream's budget: the ratio is a pessimistic bound for separate processes.
"""

from __future__ import annotations

import argparse
import json
import random
import re
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
    top-level fields); ``sent[(tag, i)]`` is the ``perf_counter`` time right after
    hypercorn accepted the write that carried delta ``i``.
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
            await send(msg)
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


async def _run_streams(
    client: Any,
    url: str,
    headers: dict[str, str],
    bodies: list[dict[str, Any]],
    stamp: bool,
) -> tuple[float, list[_Stream]]:
    import trio

    results: list[_Stream] = [_Stream() for _ in bodies]

    async def run(i: int) -> None:
        results[i] = await _one_stream(client, url, headers, bodies[i], stamp)

    t0 = time.perf_counter()
    async with trio.open_nursery() as nursery:
        for i in range(len(bodies)):
            nursery.start_soon(run, i)
    return time.perf_counter() - t0, results


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
    direct_eps: float
    gateway_eps: float
    delay_ms: float = 0.0
    lat_events: int = 0
    direct_lat: tuple[float, float] = (0.0, 0.0)
    gateway_lat: tuple[float, float] = (0.0, 0.0)


async def _serve_all(
    tmp: Path, body: Callable[[str, str, StampingApp, Any], Awaitable[list[_Row]]]
) -> list[_Row]:
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
    hc.keep_alive_timeout = 75.0
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
        from dataclasses import replace

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
                await app.gateway.aclose()
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
        await _run_streams(client, url, headers, bodies(4, 50, 0.0, "warm"), False)

    rows: list[_Row] = []
    for n in streams:
        per = max(20, min(events, max_total // n))
        eps: dict[str, float] = {}
        for name, (url, headers) in paths.items():
            elapsed, res = await _run_streams(client, url, headers, bodies(n, per, 0.0, name), False)
            got = sum(r.events for r in res)
            if got < n * per:
                raise RuntimeError(f"{name}: {got} of {n * per} events arrived")
            eps[name] = got / elapsed
        delay = lat_delay if lat_delay is not None else 0.005 * max(1, n // 10)
        lat: dict[str, tuple[float, float]] = {}
        lat_n = 0
        for name, (url, headers) in paths.items():
            upstream.sent.clear()
            upstream.stamping = True
            try:
                tag = f"lat-{name}-{n}"
                _, res = await _run_streams(
                    client, url, headers, bodies(n, lat_events, delay, tag), True
                )
            finally:
                upstream.stamping = False
            samples = [
                (t - upstream.sent[(f"{tag}-{k}", i)]) * 1000
                for k, r in enumerate(res)
                for i, t in r.arrivals
                if (f"{tag}-{k}", i) in upstream.sent
            ]
            lat_n = len(samples)
            lat[name] = (_pct(samples, 50), _pct(samples, 99))
        rows.append(
            _Row(n, per, eps["direct"], eps["gateway"], delay * 1000, lat_n, lat["direct"], lat["gateway"])
        )
    return rows


def bench_relay(
    events: int,
    streams: list[int],
    *,
    batch: int = 1,
    max_total: int = 60_000,
    lat_events: int = 300,
    lat_delay: float | None = None,
) -> int:
    import trio

    print(
        f"relay benchmark: demo-long, python {sys.version.split()[0]}, trio {trio.__version__};"
        " upstream, gateway and client in one process / one trio loop"
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
                    lat_events=lat_events,
                    lat_delay=lat_delay,
                ),
            )
        )
    print()
    print(f"throughput: demo_delay 0, {batch} event(s) per upstream write; target gateway >= 50% of direct")
    print(f"{'streams':>7} {'events/stream':>13} {'direct ev/s':>12} {'gateway ev/s':>13} {'ratio':>6}  target")
    for r in rows:
        ratio = r.gateway_eps / r.direct_eps
        print(
            f"{r.streams:>7} {r.per_stream:>13} {r.direct_eps:>12,.0f} {r.gateway_eps:>13,.0f}"
            f" {ratio:>6.0%}  {'met' if ratio >= 0.5 else 'MISSED'}"
        )
    print()
    print(
        "latency per event (ms): arrival at the client - upstream body write, same clock;"
        " added = gateway - direct; target p99 added <= 5 ms at 1 stream"
    )
    print(
        f"{'streams':>7} {'delay ms':>8} {'offered ev/s':>12} {'events':>7}"
        f" {'direct p50/p99':>15} {'gateway p50/p99':>16} {'added p50/p99':>14}  target"
    )
    for r in rows:
        added = (r.gateway_lat[0] - r.direct_lat[0], r.gateway_lat[1] - r.direct_lat[1])
        offered = r.streams / (r.delay_ms / 1000)
        verdict = ("met" if added[1] <= 5 else "MISSED") if r.streams == 1 else "-"
        print(
            f"{r.streams:>7} {r.delay_ms:>8.1f} {offered:>12,.0f} {r.lat_events:>7}"
            f" {r.direct_lat[0]:>7.2f}/{r.direct_lat[1]:<7.2f}"
            f" {r.gateway_lat[0]:>8.2f}/{r.gateway_lat[1]:<7.2f}"
            f" {added[0]:>6.2f}/{added[1]:<7.2f}  {verdict}"
        )
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
        "--max-total", type=int, default=60_000, help="cap on events per throughput run"
    )
    rl.add_argument("--latency-events", type=int, default=300, help="events per latency stream")
    rl.add_argument(
        "--latency-delay",
        type=float,
        default=None,
        help="seconds between upstream writes in latency runs (default 5 ms x max(1, streams/10))",
    )
    args = ap.parse_args(argv)
    if args.what == "rewriter":
        return bench_rewriter(args.mb)
    if args.what == "relay":
        return bench_relay(
            args.events,
            args.streams,
            batch=args.batch,
            max_total=args.max_total,
            lat_events=args.latency_events,
            lat_delay=args.latency_delay,
        )
    return 2  # pragma: no cover


if __name__ == "__main__":
    raise SystemExit(main())
