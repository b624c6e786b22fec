"""A cheap streaming client for the relay benchmark: raw sockets, asyncio, its own process.

``python -m harness.bench.raw_client URL --model M --streams S [--key K] [--hold SECONDS]``
opens ``S`` concurrent ``POST /v1/chat/completions`` streams (``Connection: close``),
reads each to EOF without parsing more than it must, and prints one JSON line:
``{"wall": s, "completed": k, "ttfb": [s...], "cpu": s, "bytes": n}`` (``cpu``: the
client's own CPU while the streams ran, start-up excluded). ``completed``
counts streams whose body held ``data: [DONE]``; ``ttfb`` is the time from sending the
request to the first non-empty ``content`` delta. With ``--sequential N`` the streams run one after another (per-request cost), with
``--keep-alive`` too on one kept-alive connection (what an SDK's connection pool does). With ``--hold`` every stream is
opened, read until its first content, then the client prints ``{"held": k}``, keeps the
connections open for that many seconds, and closes them (memory per open stream).

With ``--runs`` each stream is a background run instead: ``POST /v1/runs`` (``model``,
``input``), then ``GET /v1/runs/{id}/events`` on ``--follow URL`` (default: the same
gateway; another instance sharing its database shows the cross-instance path) read to
EOF. ``completed`` then counts runs that ended ``run.completed``, ``events`` adds up
the last ``id:`` (the run's journaled events) of every run.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import time
from urllib.parse import urlsplit

_CONTENT = re.compile(rb'"content":"[^"]')
_DONE = b"data: [DONE]"
_RUN_ID = re.compile(rb'"run_id": ?"(run_[0-9a-f]+)"')
_LENGTH = re.compile(rb"(?i)\r\ncontent-length: *(\d+)")
_EVENT_ID = re.compile(rb"(?:^|\n)id: (\d+)\n")
_RUN_COMPLETED = b'"event":"run.completed"'


def _request(
    host: str, port: int, path: str, key: str, body: bytes, *, close: bool = True
) -> bytes:
    connection = "Connection: close\r\n" if close else ""
    return (
        f"POST {path} HTTP/1.1\r\nHost: {host}:{port}\r\nAuthorization: Bearer {key}\r\n"
        f"Content-Type: application/json\r\nAccept: text/event-stream\r\n"
        f"{connection}Content-Length: {len(body)}\r\n\r\n"
    ).encode() + body


_CLOSE = re.compile(rb"(?i)\r\nconnection: *close\r\n")
_CHUNKED_END = b"\r\n0\r\n\r\n"


async def _kept_alive(
    host: str, port: int, request: bytes, n: int
) -> list[tuple[bool, float | None, int, None]]:
    """``n`` streams one after another on one kept-alive connection (each read to the
    end of its chunked body); a new connection after an answer that closed its own
    (hypercorn ends a connection after 1,000 requests with ``Connection: close``)."""
    reader, writer = await asyncio.open_connection(host, port)
    results: list[tuple[bool, float | None, int, None]] = []
    for _ in range(n):
        writer.write(request)
        done, ttfb, total, closed = await _read_answer(reader, time.perf_counter())
        results.append((done, ttfb, total, None))
        if closed:
            writer.close()
            reader, writer = await asyncio.open_connection(host, port)
    writer.close()
    return results


async def _read_answer(
    reader: asyncio.StreamReader, t0: float
) -> tuple[bool, float | None, int, bool]:
    """One chunked answer: ``[DONE]`` seen, time to first content, bytes, and whether
    the connection is over (``Connection: close``, or it ended before the answer)."""
    ttfb: float | None = None
    head, seen, total = b"", b"", 0
    while not seen.endswith(_CHUNKED_END):
        try:
            data = await reader.read(65536)
        except ConnectionError:  # a reset before the server's EOF
            data = b""
        if not data:
            return _DONE in seen, ttfb, total, True
        if total < 4096:
            head += data[: 4096 - total]
        total += len(data)
        seen = (seen + data)[-4096:]
        if ttfb is None and _CONTENT.search(seen):
            ttfb = time.perf_counter() - t0
    head = head.split(b"\r\n\r\n", 1)[0] + b"\r\n"
    return _DONE in seen, ttfb, total, bool(_CLOSE.search(head))


async def _one(
    host: str, port: int, request: bytes, started: asyncio.Event | None
) -> tuple[bool, float | None, int, asyncio.StreamWriter | None]:
    reader, writer = await asyncio.open_connection(host, port)
    t0 = time.perf_counter()
    writer.write(request)
    ttfb: float | None = None
    head = b""
    tail = b""
    total = 0
    while True:
        data = await reader.read(65536)
        if not data:
            break
        total += len(data)
        if ttfb is None:
            head += data
            if _CONTENT.search(head):
                ttfb = time.perf_counter() - t0
                head = b""
                if started is not None:
                    return False, ttfb, total, writer
        tail = (tail + data)[-64:]
        if tail.endswith(b"\r\n0\r\n\r\n"):
            break  # the chunked body ended (servers may keep the connection open)
    writer.close()
    return _DONE in tail, ttfb, total, None


def _get(host: str, port: int, path: str, key: str) -> bytes:
    return (
        f"GET {path} HTTP/1.1\r\nHost: {host}:{port}\r\nAuthorization: Bearer {key}\r\n"
        f"Accept: text/event-stream\r\nConnection: close\r\n\r\n"
    ).encode()


async def _run(
    target: tuple[str, int], follow: tuple[str, int], prefix: str, key: str, body: bytes
) -> tuple[bool, int, int]:
    """Start one run on ``target``, follow it on ``follow`` to its end:
    ``(completed, last event id, bytes)``."""
    host, port = target
    reader, writer = await asyncio.open_connection(host, port)
    writer.write(_request(host, port, prefix + "/runs", key, body))
    head = await reader.readuntil(b"\r\n\r\n")  # the server may keep the connection
    length = _LENGTH.search(head)
    answer = head + (await reader.readexactly(int(length.group(1))) if length else b"")
    writer.close()
    found = _RUN_ID.search(answer)
    if found is None:
        return False, 0, len(answer)
    fhost, fport = follow
    reader, writer = await asyncio.open_connection(fhost, fport)
    path = f"{prefix}/runs/{found.group(1).decode()}/events"
    writer.write(_get(fhost, fport, path, key))
    last, total, completed, tail = 0, 0, False, b""
    while True:
        data = await reader.read(65536)
        if not data:
            break
        total += len(data)
        window = tail + data
        ids = _EVENT_ID.findall(window)
        if ids:
            last = max(last, int(ids[-1]))
        completed = completed or _RUN_COMPLETED in window
        tail = window[-64:]
        if tail.endswith(b"\r\n0\r\n\r\n"):
            break
    writer.close()
    return completed, last, total


async def _main_runs(args: argparse.Namespace) -> dict[str, object]:
    url, follow = urlsplit(args.url), urlsplit(args.follow or args.url)
    target = (url.hostname or "127.0.0.1", url.port or 80)
    follower = (follow.hostname or "127.0.0.1", follow.port or 80)
    body = json.dumps({"model": args.model, "input": "go"} | json.loads(args.extra)).encode()
    prefix = url.path.rstrip("/")
    t0 = time.perf_counter()
    results = await asyncio.gather(
        *(_run(target, follower, prefix, args.key, body) for _ in range(args.streams))
    )
    return {
        "wall": time.perf_counter() - t0,
        "completed": sum(1 for r in results if r[0]),
        "events": sum(r[1] for r in results),
        "ttfb": [],
        "bytes": sum(r[2] for r in results),
        "cpu": time.process_time(),
    }


async def _main(args: argparse.Namespace) -> dict[str, object]:
    if args.runs:
        return await _main_runs(args)
    url = urlsplit(args.url)
    host, port = url.hostname or "127.0.0.1", url.port or 80
    body = json.dumps(
        {"model": args.model, "messages": [{"role": "user", "content": "go"}], "stream": True}
        | json.loads(args.extra)
    ).encode()
    path = url.path.rstrip("/") + "/chat/completions"
    request = _request(host, port, path, args.key, body, close=not args.keep_alive)
    hold = asyncio.Event() if args.hold else None
    cpu0 = time.process_time()  # not the interpreter's start-up and imports
    t0 = time.perf_counter()
    results: list[tuple[bool, float | None, int, asyncio.StreamWriter | None]]
    if args.sequential and args.keep_alive:
        results = list(await _kept_alive(host, port, request, args.sequential))
    elif args.sequential:
        results = [await _one(host, port, request, None) for _ in range(args.sequential)]
    else:
        results = await asyncio.gather(
            *(_one(host, port, request, hold) for _ in range(args.streams))
        )
    wall = time.perf_counter() - t0
    cpu = time.process_time() - cpu0
    if args.hold:
        print(json.dumps({"held": sum(1 for r in results if r[3] is not None)}), flush=True)
        await asyncio.sleep(args.hold)
        for r in results:
            if r[3] is not None:
                r[3].close()
    return {
        "wall": wall,
        "completed": sum(1 for r in results if r[0]),
        "ttfb": [r[1] for r in results if r[1] is not None],
        "bytes": sum(r[2] for r in results),
        "cpu": cpu,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("url", help="base URL ending in /v1")
    ap.add_argument("--model", required=True)
    ap.add_argument("--streams", type=int, default=1)
    ap.add_argument("--key", default="none")
    ap.add_argument("--extra", default="{}", help="JSON merged into the request body")
    ap.add_argument("--hold", type=float, default=0.0)
    ap.add_argument("--sequential", type=int, default=0, help="N streams one after another")
    ap.add_argument(
        "--keep-alive", action="store_true", help="with --sequential: all on one connection"
    )
    ap.add_argument("--runs", action="store_true", help="background runs, each followed")
    ap.add_argument("--follow", default="", help="base URL to follow runs on (default: url)")
    args = ap.parse_args()
    print(json.dumps(asyncio.run(_main(args))), flush=True)


if __name__ == "__main__":
    main()
