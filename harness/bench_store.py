"""State-store benchmark: SQLite vs PostgreSQL, side by side in one run.

    python -m harness.bench_store [--links 2000] [--events 3000] [--repeat 3]

Figures (best of ``--repeat`` passes; PostgreSQL is a throw-away local cluster started
by :mod:`harness.pgcluster` on loopback TCP with ``fsync=off``, so these are the
store's CPU and round-trip costs, not a durable disk's):

* **links minted/s** -- ``ArtifactService.inspect`` (realpath, lstat) + ``mint``
  (one INSERT), in a worker thread as the rewriter does it;
* **run events journaled/s** -- ``append_run_events`` as the relay journals: one
  append (one transaction: lock the run row, insert, update ``last_seq``, NOTIFY on
  PostgreSQL) per upstream read, with 1 or 8 events per read; and 4 runs journaling
  concurrently from 4 threads;
* **cost per event, journaled vs not (µs)** -- in trio, per upstream read of one
  event: build and encode the SSE event (unjournaled), or additionally hop to a worker
  thread, journal it and publish it on the RunBus (journaled). The difference is what
  the journal adds to each relayed read.

Print-only: no timed assertion anywhere.
"""

from __future__ import annotations

import argparse
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = ["main"]


@dataclass
class Figures:
    backend: str
    links_per_s: float
    mint_us: float
    appends_per_s_1: float
    events_per_s_8: float
    events_per_s_conc: float
    unjournaled_us: float
    journaled_us: float


def _config(tmp: Path) -> Any:
    from gateway.config import config_from_dict

    return config_from_dict(
        {
            "state_dir": str(tmp / "state"),
            "artifacts": {"roots": [str(tmp / "artifacts")]},
            "auth": {"keys": [{"key": "bench-key-0123456789", "principal": "bench"}]},
        }
    )


def _best(repeat: int, fn: Callable[[], float]) -> float:
    return min(fn() for _ in range(repeat))


def _links(tmp: Path, store: Any, n: int, repeat: int) -> tuple[float, float]:
    from gateway.artifacts import ArtifactService
    from gateway.signing import Signer

    root = tmp / "artifacts" / "mint"
    root.mkdir(parents=True, exist_ok=True)
    paths = []
    for i in range(n):
        p = root / f"sub{i % 20:02d}" / f"result-{i:05d}.csv"
        p.parent.mkdir(exist_ok=True)
        p.write_bytes(b"x" * (1 + i % 512))
        paths.append(str(p))
    svc = ArtifactService(_config(tmp), store, Signer.from_store(store))

    def one_pass() -> float:
        t0 = time.perf_counter()
        for path in paths:
            facts = svc.inspect(path)
            if facts is None:
                raise RuntimeError("a benchmark file was refused")
            svc.url(svc.mint(facts, "bench", "public"))
        return time.perf_counter() - t0

    seconds = _best(repeat, one_pass)
    return n / seconds, seconds / n * 1e6


_RUNS = [0]


def _new_run(store: Any) -> str:
    from gateway.store import RunRecord

    _RUNS[0] += 1
    run_id = f"run_bench_{_RUNS[0]:06d}_{time.monotonic_ns()}"
    now = time.time()
    store.create_run(
        RunRecord(
            run_id,
            "bench",
            "run",
            "m",
            "private",
            "running",
            now,
            holder="B",
            lease_expires=now + 3600,
        )
    )
    return run_id


def _event(run_id: str, seq: int) -> dict[str, Any]:
    return {"event": "message.delta", "run_id": run_id, "seq": seq, "delta": "hello, world. "}


def _journal(store: Any, events: int, per_append: int, repeat: int) -> float:
    """Events/s for one run appending ``per_append`` events per call."""

    def one_pass() -> float:
        run_id = _new_run(store)
        seq = 0
        t0 = time.perf_counter()
        while seq < events:
            batch = [_event(run_id, seq + i + 1) for i in range(per_append)]
            store.append_run_events(run_id, batch, "B")
            seq += per_append
        return time.perf_counter() - t0

    return events / _best(repeat, one_pass)


def _journal_concurrent(store: Any, events: int, threads: int, repeat: int) -> float:
    """Events/s over ``threads`` runs appending one event per call at once."""

    def one_pass() -> float:
        run_ids = [_new_run(store) for _ in range(threads)]
        per = events // threads
        start = threading.Barrier(threads + 1)

        def work(run_id: str) -> None:
            start.wait()
            for seq in range(1, per + 1):
                store.append_run_events(run_id, [_event(run_id, seq)], "B")

        pool = [threading.Thread(target=work, args=(r,)) for r in run_ids]
        for t in pool:
            t.start()
        start.wait()
        t0 = time.perf_counter()
        for t in pool:
            t.join()
        return (time.perf_counter() - t0) * events / (per * threads)

    return events / _best(repeat, one_pass)


def _per_event_cost(store: Any, events: int, repeat: int) -> tuple[float, float]:
    """µs per relayed read of one event: unjournaled vs journaled (trio)."""
    import trio

    from gateway.runbus import RunBus
    from gateway.sse import encode_json

    bus = RunBus(store)

    async def unjournaled() -> float:
        run_id = "run_plain"
        sent = 0
        t0 = time.perf_counter()
        for seq in range(1, events + 1):
            event = _event(run_id, seq)
            sent += len(encode_json(event, id=str(seq)))
            await trio.lowlevel.checkpoint()
        return time.perf_counter() - t0

    async def journaled() -> float:
        run_id = _new_run(store)
        sent = 0
        t0 = time.perf_counter()
        for seq in range(1, events + 1):
            event = _event(run_id, seq)
            await trio.to_thread.run_sync(store.append_run_events, run_id, [event], "B")
            bus.published(run_id, seq)
            sent += len(encode_json(event, id=str(seq)))
        return time.perf_counter() - t0

    plain = min(trio.run(unjournaled) for _ in range(repeat))
    journal = min(trio.run(journaled) for _ in range(repeat))
    return plain / events * 1e6, journal / events * 1e6


def _measure(name: str, tmp: Path, store: Any, args: argparse.Namespace) -> Figures:
    links_per_s, mint_us = _links(tmp, store, args.links, args.repeat)
    appends_1 = _journal(store, args.events, 1, args.repeat)
    events_8 = _journal(store, args.events, 8, args.repeat)
    conc = _journal_concurrent(store, args.events, 4, args.repeat)
    plain_us, journal_us = _per_event_cost(store, min(args.events, 2000), args.repeat)
    return Figures(name, links_per_s, mint_us, appends_1, events_8, conc, plain_us, journal_us)


@contextmanager
def _postgres() -> Iterator[tuple[str | None, str]]:
    from harness.pgcluster import PgUnavailable, temporary_cluster

    try:
        with temporary_cluster() as cluster:
            yield cluster.create_database("bench"), ""
    except PgUnavailable as exc:
        yield None, str(exc).splitlines()[0]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m harness.bench_store", description=__doc__.split("\n")[0]
    )
    ap.add_argument("--links", type=int, default=2000, help="links minted per pass")
    ap.add_argument("--events", type=int, default=3000, help="events journaled per pass")
    ap.add_argument("--repeat", type=int, default=3, help="passes; the best one counts")
    args = ap.parse_args(argv)

    from gateway.store import open_store

    results: list[Figures] = []
    notes: list[str] = []
    with tempfile.TemporaryDirectory(prefix="bench-store-") as tmp_text:
        tmp = Path(tmp_text)
        sqlite_tmp = tmp / "sqlite"
        store = open_store(sqlite_tmp / "state")
        try:
            results.append(_measure("sqlite", sqlite_tmp, store, args))
        finally:
            store.close()
        with _postgres() as (url, why):
            if url is None:
                notes.append(f"postgresql: skipped ({why})")
            else:
                pg_tmp = tmp / "pg"
                store = open_store(pg_tmp, url, migrate=True)
                try:
                    results.append(_measure("postgresql", pg_tmp, store, args))
                finally:
                    store.close()

    rows: list[tuple[str, Callable[[Figures], str]]] = [
        ("links minted/s (inspect + insert)", lambda f: f"{f.links_per_s:,.0f}"),
        ("  µs per link", lambda f: f"{f.mint_us:,.0f}"),
        ("events journaled/s, 1 per append", lambda f: f"{f.appends_per_s_1:,.0f}"),
        ("events journaled/s, 8 per append", lambda f: f"{f.events_per_s_8:,.0f}"),
        ("events journaled/s, 4 runs at once", lambda f: f"{f.events_per_s_conc:,.0f}"),
        ("µs per event, unjournaled (trio)", lambda f: f"{f.unjournaled_us:,.1f}"),
        ("µs per event, journaled (trio)", lambda f: f"{f.journaled_us:,.1f}"),
        ("  journal adds, µs per read", lambda f: f"{f.journaled_us - f.unjournaled_us:,.1f}"),
    ]
    width = max(len(label) for label, _ in rows) + 2
    print(f"{'':<{width}}" + "".join(f"{f.backend:>14}" for f in results))
    for label, cell in rows:
        print(f"{label:<{width}}" + "".join(f"{cell(f):>14}" for f in results))
    print(
        f"\n(links: {args.links} per pass; events: {args.events} per pass; best of "
        f"{args.repeat}; PostgreSQL: local cluster, loopback TCP, fsync off)"
    )
    for note in notes:
        print(note)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
