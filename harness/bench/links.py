"""Link minting cost and download throughput.

``python -m harness.bench links [--files 2000] [--mb 50] [--repeat 3]``: the cost of
minting one managed-download link (``ArtifactService.inspect`` + ``mint`` against a real
SQLite store, then the same through ``ResponseLinks.resolve``, which adds the
worker-thread hop and, for public links, the HMAC), and the download throughput of one
file through the gateway (real hypercorn, httpx client, the owner's bearer key) next to
reading the same file directly; best of ``--repeat``.
"""

from __future__ import annotations

import random
import sys
import tempfile
import time
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

BENCH_KEY = "bench-key-0123456789abcdef"
#: paths per resolve_many call (the path-dense relay scenario's new paths per read: ≈ 6)
BATCH = 8


def _links_config(tmp: Path) -> Any:
    from gateway.ops.config import config_from_dict

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
    batch_private_us: float


def _mint_figures(tmp: Path, n: int, repeat: int) -> _MintFigures:
    """µs per link: inspect + mint (SQLite insert) directly, then via ResponseLinks.resolve.

    Each pass mints ``n`` new records for the same ``n`` files; best pass of ``repeat``.
    """
    import trio

    from gateway.links.artifacts import ArtifactService
    from gateway.links.signing import Signer
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
                facts = svc.inspect(path, "bench")
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

        async def resolve_batches(mode: str) -> float:
            """As the pipeline resolves the new paths of one read: 8 a hop, 1 transaction."""
            links = svc.for_response("bench", mode)
            t0 = time.perf_counter()
            for at in range(0, len(paths), BATCH):
                await links.resolve_many(paths[at : at + BATCH])
            return time.perf_counter() - t0

        runs: list[tuple[float, float, float, float, float]] = []
        for _ in range(repeat):  # interleaved, so warm-up and store growth hit all alike
            t_inspect, t_mint = direct()
            t_priv = trio.run(resolve_all, "private")
            t_pub = trio.run(resolve_all, "public")
            runs.append((t_inspect, t_mint, t_priv, t_pub, trio.run(resolve_batches, "private")))
        t_inspect, t_mint, t_priv, t_pub, t_batch = (min(c) for c in zip(*runs, strict=True))
    finally:
        store.close()
    us = 1e6 / n
    return _MintFigures(n, t_inspect * us, t_mint * us, t_priv * us, t_pub * us, t_batch * us)


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

    from gateway.api.app import create_app
    from gateway.http.serve import serve_app

    app = create_app(_links_config(tmp))
    state: Any = app.gateway
    facts = state.artifacts.inspect(str(big), "bench")
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

    from gateway.links.artifacts import READ_CHUNK

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
        print(
            f"  {f'ResponseLinks.resolve_many, {BATCH} a hop, private':<44}"
            f" {m.batch_private_us:>12.1f}"
        )

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
