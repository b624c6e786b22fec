"""A fast OpenAI-compatible streaming upstream for the relay benchmark (asyncio, stdlib).

Run as its own process: ``python -m harness.bench.fast_upstream --port P --root DIR``.
It must cost less per delta than the gateway, so it is plain asyncio with HTTP/1.1
written by hand (keep-alive, chunked bodies); like a real server it encodes each event
(one ``json.dumps``) as it sends it, which makes it the reference "direct" rate (~50k
deltas/s here). A relay can only be measured against an upstream that does the work
any upstream does: fed pre-encoded bytes, the raw client alone reads ~500k deltas/s.

The request's ``model`` picks the stream: ``bench-<kind>-<n>-<mode>`` with

* kind ``plain`` (words, no path start), ``paths`` (one path per 10 deltas; half
  of them name existing files under ``--root``, which become links, half missing
  files, which become names) or ``links`` (every delta names another existing file:
  ``n`` links minted per stream, ``n`` ≤ 1024);
* ``n`` deltas;
* mode ``bulk`` (as fast as the socket takes them; one HTTP chunk per event as real
  streaming servers write them, 64 chunks per socket write) or ``paced``
  (one event per write, ``bench_pace_ms`` apart, default 2 ms: each event arrives in
  its own read at the gateway); ``paced<ms>`` (e.g. ``paced5``) names the pace in the
  model, for callers that cannot add body fields (a run's body is the gateway's).

``GET /v1/models`` lists one model. Files ``f<i>.txt`` for the path deltas and
``links/l<i>.txt`` for the link deltas are written under ``--root`` at start.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import itertools
import json
from collections.abc import Iterable, Iterator
from pathlib import Path

WORDS = ("the ", "gateway ", "relays ", "every ", "delta ", "as ", "it ", "arrives ", "ok ")
BULK_GROUP = 64
LINK_FILES = 64
MANY_LINKS = 1024
_HEAD = (
    b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
    b"Cache-Control: no-cache\r\nTransfer-Encoding: chunked\r\n\r\n"
)


def _chunk(delta: dict[str, object], finish: str | None = None) -> bytes:
    obj = {
        "id": "chatcmpl-bench",
        "object": "chat.completion.chunk",
        "created": 1700000000,
        "model": "bench",
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
    }
    return b"data: " + json.dumps(obj, separators=(",", ":")).encode() + b"\n\n"


def deltas(kind: str, n: int, root: Path) -> Iterator[bytes]:
    """The SSE events of one stream (role, n content deltas, finish, [DONE]).

    Each event is encoded as it is sent, as a real server encodes each chunk: "direct"
    is what such an upstream delivers, and the gateway is measured against it. (The
    events used to be encoded up front per connection: a 100,000-delta stream of the
    memory phase cost ~2 s of upstream CPU before its first byte, for each of the
    hundreds of streams it opens, and stalled that phase for minutes.)"""
    yield _chunk({"role": "assistant", "content": ""})
    for i in range(n):
        text = WORDS[i % len(WORDS)]
        if kind == "paths" and i % 10 == 5:
            j = (i // 10) % LINK_FILES
            text = f"see {root}/f{j}.txt " if (i // 10) % 2 == 0 else f"see /home/none/m{i}.txt "
        elif kind == "links":
            text = f"see {root}/links/l{i % MANY_LINKS}.txt "
        yield _chunk({"content": text})
    yield _chunk({}, "stop")
    yield b"data: [DONE]\n\n"


def _framed(data: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(data), data)


async def _stream(
    writer: asyncio.StreamWriter, events: Iterable[bytes], pace: float | None
) -> None:
    writer.write(_HEAD)
    if pace is None:
        it = iter(events)
        while group := list(itertools.islice(it, BULK_GROUP)):
            # one HTTP chunk per event, as streaming servers write them
            writer.write(b"".join(_framed(ev) for ev in group))
            await writer.drain()
    else:
        for ev in events:
            writer.write(_framed(ev))
            await writer.drain()
            await asyncio.sleep(pace)
    writer.write(b"0\r\n\r\n")
    await writer.drain()


def _json(writer: asyncio.StreamWriter, status: str, obj: object) -> None:
    body = json.dumps(obj).encode()
    writer.write(
        b"HTTP/1.1 %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s"
        % (status.encode(), len(body), body)
    )


async def _handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, root: Path) -> None:
    try:
        while True:
            head = await reader.readuntil(b"\r\n\r\n")
            line, _, rest = head.partition(b"\r\n")
            method, target, _ = line.split(b" ", 2)
            length = 0
            close = False
            for h in rest.split(b"\r\n"):
                name, _, value = h.partition(b":")
                name = name.strip().lower()
                if name == b"content-length":
                    length = int(value)
                elif name == b"connection":
                    close = value.strip().lower() == b"close"
            body = await reader.readexactly(length) if length else b""
            if method == b"GET" and target.endswith(b"/models"):
                _json(writer, "200 OK", {"object": "list", "data": [{"id": "bench-plain-1-bulk"}]})
                await writer.drain()
                continue
            req = json.loads(body or b"{}")
            parts = str(req.get("model", "")).split("-")
            if len(parts) != 4 or parts[0] != "bench":
                _json(writer, "404 Not Found", {"error": {"message": "no such model"}})
                await writer.drain()
                continue
            kind, n, mode = parts[1], int(parts[2]), parts[3]
            events = deltas(kind, n, root)
            pace = None
            if mode.startswith("paced"):
                pace = float(mode[5:] or req.get("bench_pace_ms", 2.0)) / 1000
            await _stream(writer, events, pace)
            if close:
                break
    except (asyncio.IncompleteReadError, ConnectionError):
        pass
    finally:
        writer.close()


def write_files(root: Path) -> None:
    root.mkdir(parents=True, exist_ok=True)
    for j in range(LINK_FILES):
        (root / f"f{j}.txt").write_bytes(b"bench file %d\n" % j)
    (root / "links").mkdir(exist_ok=True)
    for j in range(MANY_LINKS):
        (root / "links" / f"l{j}.txt").write_bytes(b"link file %d\n" % j)


async def _main(port: int, root: Path) -> None:
    server = await asyncio.start_server(
        lambda r, w: _handle(r, w, root), "127.0.0.1", port, backlog=4096
    )
    print(f"ready {server.sockets[0].getsockname()[1]}", flush=True)
    async with server:
        await server.serve_forever()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--port", type=int, default=0)
    ap.add_argument("--root", type=Path, required=True)
    args = ap.parse_args()
    write_files(args.root)
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(_main(args.port, args.root))


if __name__ == "__main__":
    main()
