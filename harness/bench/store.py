"""State-store benchmark: one instance on SQLite, one on PostgreSQL, two on PostgreSQL.

``python -m harness.bench store [--repeat 3] [--quick] [--no-calls]`` (or
``python3 dev.py bench store``).

**Through real processes** (the method of :mod:`harness.bench.relay`): the upstream is
:mod:`harness.bench.fast_upstream`, the gateways are real ``gateway run`` processes
(:mod:`harness.instances`: own ``state_dir`` each, rewriting on, one artifact root),
the clients are :mod:`harness.bench.raw_client` processes, one per instance. Three
set-ups, measured one after the other and printed side by side: ``sqlite ×1`` (the
embedded default), ``postgresql ×1`` and ``postgresql ×2`` (two instances on one
database, the load split evenly; a run started on one instance is followed on the
other, so every journaled event crosses instances by NOTIFY). PostgreSQL is a
throw-away local cluster (:mod:`harness.pgcluster`: loopback TCP, ``fsync=off``).

* **links minted/s** -- chat streams whose every delta names another existing file
  (``bench-links-256-bulk``: 256 links per stream, 20 streams): every path is
  inspected (realpath, lstat) and minted (one INSERT); the count is checked in the
  database afterwards;
* **relay deltas/s** -- plain chat streams, not journaled (``bench-plain-1000-bulk``,
  20 streams): the figure of ``harness.bench relay``, per set-up;
* **run deltas/s, run events journaled/s** -- 50 background runs at once, each
  followed by a client (``bench-plain-300-paced2``: one upstream write every 2 ms, so
  up to 25,000 deltas/s are offered); a run journals one event per upstream *read*,
  so when the gateway falls behind, reads carry several deltas and events < deltas;
* **µs per event, journaled vs not** -- the gateways' CPU (``/proc/<pid>/stat``, all
  instances) per event sent, for 10 paced chat streams (unjournaled: read, rewrite,
  send) and for 10 paced runs with a follower each (journaled: read, rewrite, append
  + NOTIFY, wake, read back, send); the difference is what the journal costs per
  event. For PostgreSQL also the database server's CPU (postmaster and backends) per
  journaled event.

**The store calls alone** (in-process, one thread, no HTTP; best of ``--repeat``):
``ArtifactService.inspect`` + ``mint``, ``append_run_events`` with 1 or 8 events per
call and from 4 threads at once, and in trio the cost of one relayed read with and
without the journal (worker-thread hop, append, RunBus publish). ``--no-calls`` skips
this part.

Print-only: no timed assertion anywhere. Figures and how to read them:
``docs/benchmarks.md``.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness.bench.relay import cpu_seconds
from harness.instances import GatewayProcess, clean_env, start_all, stop_all

__all__ = ["main"]

BENCH_KEY = "bench-key-0123456789abcdef"
LINKS_PER_STREAM = 256
#: one principal drives the whole load: its per-principal quotas must not shape it
BENCH_QUOTAS = {
    "max_running_runs": 100_000,
    "links_per_minute": 1_000_000_000,
    "max_stored_bytes": 1 << 50,
}


# -- through real processes ----------------------------------------------------------------


@dataclass(frozen=True)
class Load:
    """One client workload: ``streams`` chat streams or runs of ``model``."""

    model: str
    streams: int
    deltas: int  # per stream
    runs: bool = False


@dataclass
class Setup:
    """Gateway instances on one database, and how to read that database."""

    name: str
    instances: list[GatewayProcess]
    count_artifacts: Callable[[], int]
    db_cpu: Callable[[], float] | None = None  # seconds of the database server's CPU


@dataclass
class Outcome:
    wall: float  # the slowest client's
    completed: int
    events: int  # runs: journaled events seen by the followers
    gateway_cpu: float  # seconds, all instances
    db_cpu: float | None


def _client_argv(url: str, load: Load, follow: str | None) -> list[str]:
    argv = [
        sys.executable,
        "-m",
        "harness.bench.raw_client",
        url,
        "--model",
        load.model,
        "--key",
        BENCH_KEY,
    ]
    if load.runs:
        argv += ["--runs", "--follow", follow or url]
    return argv


def drive(setup: Setup, load: Load) -> Outcome:
    """Run ``load`` split over the instances (one client process each); a run started
    on instance i is followed on instance i + 1."""
    insts = setup.instances
    urls = [i.url + "/v1" for i in insts]
    share = [
        load.streams // len(insts) + (k < load.streams % len(insts)) for k in range(len(insts))
    ]
    g0 = sum(cpu_seconds(i.pid) for i in insts)
    d0 = setup.db_cpu() if setup.db_cpu else None
    procs = [
        subprocess.Popen(
            [
                *_client_argv(urls[k], load, urls[(k + 1) % len(urls)]),
                "--streams",
                str(share[k]),
            ],
            stdout=subprocess.PIPE,
            text=True,
            env=clean_env(),
        )
        for k in range(len(insts))
        if share[k]
    ]
    results = []
    for p in procs:
        out, _ = p.communicate(timeout=600)
        if p.returncode != 0:
            raise RuntimeError(f"a benchmark client failed (exit {p.returncode})")
        results.append(json.loads(out.splitlines()[-1]))
    g1 = sum(cpu_seconds(i.pid) for i in insts)
    d1 = setup.db_cpu() if setup.db_cpu else None
    return Outcome(
        wall=max(r["wall"] for r in results),
        completed=sum(r["completed"] for r in results),
        events=sum(r.get("events", 0) for r in results),
        gateway_cpu=g1 - g0,
        db_cpu=None if d0 is None or d1 is None else d1 - d0,
    )


@dataclass
class ProcFigures:
    name: str
    links: list[float] = field(default_factory=list)  # links minted/s
    relay: list[float] = field(default_factory=list)  # chat deltas/s
    run_deltas: list[float] = field(default_factory=list)
    run_events: list[float] = field(default_factory=list)  # journaled events/s
    chat_us: list[float] = field(default_factory=list)  # gateway CPU per chat event
    run_us: list[float] = field(default_factory=list)  # gateway CPU per journaled event
    db_us: list[float] = field(default_factory=list)  # database CPU per journaled event
    problems: list[str] = field(default_factory=list)


LINKS = Load(f"bench-links-{LINKS_PER_STREAM}-bulk", 20, LINKS_PER_STREAM)
RELAY = Load("bench-plain-1000-bulk", 20, 1000)
RUNS = Load("bench-plain-300-paced2", 50, 300, runs=True)
CHAT_PACED = Load("bench-plain-300-paced2", 10, 300)
RUNS_PACED = Load("bench-plain-300-paced2", 10, 300, runs=True)


def _scaled(load: Load, quick: bool) -> Load:
    if not quick:
        return load
    return Load(load.model, max(2, load.streams // 2), load.deltas, load.runs)


def measure(setup: Setup, repeat: int, quick: bool) -> ProcFigures:
    fig = ProcFigures(setup.name)

    def complete(load: Load, out: Outcome) -> None:
        if out.completed != load.streams:
            fig.problems.append(f"{load.model}: {load.streams - out.completed} incomplete")

    drive(setup, Load("bench-plain-200-bulk", 2 * len(setup.instances), 200))  # warm-up
    drive(setup, Load("bench-plain-20-bulk", 2 * len(setup.instances), 20, runs=True))
    for _ in range(repeat):
        load = _scaled(LINKS, quick)
        before = setup.count_artifacts()
        out = drive(setup, load)
        minted = setup.count_artifacts() - before
        complete(load, out)
        if minted != load.streams * load.deltas:
            fig.problems.append(f"minted {minted} links, expected {load.streams * load.deltas}")
        fig.links.append(minted / out.wall)

        load = _scaled(RELAY, quick)
        out = drive(setup, load)
        complete(load, out)
        fig.relay.append(load.streams * load.deltas / out.wall)

        load = _scaled(RUNS, quick)
        out = drive(setup, load)
        complete(load, out)
        fig.run_deltas.append(load.streams * load.deltas / out.wall)
        fig.run_events.append(out.events / out.wall)

        load = _scaled(CHAT_PACED, quick)
        out = drive(setup, load)
        complete(load, out)
        fig.chat_us.append(out.gateway_cpu / (load.streams * load.deltas) * 1e6)

        load = _scaled(RUNS_PACED, quick)
        out = drive(setup, load)
        complete(load, out)
        fig.run_us.append(out.gateway_cpu / max(out.events, 1) * 1e6)
        if out.db_cpu is not None:
            fig.db_us.append(out.db_cpu / max(out.events, 1) * 1e6)
    return fig


def _gateways(
    base: Path, n: int, upstream_url: str, root: Path, database_url: str
) -> list[GatewayProcess]:
    return [
        GatewayProcess.create(
            base / f"gw{k}",
            name=f"gw{k}",
            upstream_url=upstream_url,
            roots=[root],
            keys=[(BENCH_KEY, "bench", "user")],
            database_url=database_url,
            sections={"quotas": BENCH_QUOTAS},
        )
        for k in range(n)
    ]


def _sqlite_count(path: Path) -> Callable[[], int]:
    def count() -> int:
        import sqlite3

        conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
        try:
            return int(conn.execute("SELECT count(*) FROM artifacts").fetchone()[0])
        finally:
            conn.close()

    return count


def _pg_count(url: str) -> Callable[[], int]:
    def count() -> int:
        import psycopg

        with psycopg.connect(url, autocommit=True) as conn:
            row = conn.execute("SELECT count(*) FROM artifacts").fetchone()
            return int(row[0]) if row else 0

    return count


def _cluster_cpu(datadir: Path) -> Callable[[], float]:
    """CPU seconds of a PostgreSQL cluster: the postmaster, the children it reaped, and
    the live children (backends, walwriter, ...)."""
    tick = os.sysconf("SC_CLK_TCK")

    def stat(pid: str) -> list[str]:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()

    def total() -> float:
        master = (datadir / "postmaster.pid").read_text().split()[0]
        f = stat(master)
        ticks = sum(int(x) for x in f[11:15])  # utime stime cutime cstime
        for pid in os.listdir("/proc"):
            if not pid.isdigit() or pid == master:
                continue
            try:
                f = stat(pid)
            except OSError:
                continue
            if f[1] == master:  # ppid
                ticks += int(f[11]) + int(f[12])
        return ticks / tick

    return total


def _start_upstream(root: Path) -> tuple[subprocess.Popen[str], str]:
    up = subprocess.Popen(
        [sys.executable, "-m", "harness.bench.fast_upstream", "--root", str(root)],
        stdout=subprocess.PIPE,
        text=True,
        env=clean_env(),
    )
    assert up.stdout is not None
    line = up.stdout.readline()
    if not line.startswith("ready "):
        up.kill()
        raise RuntimeError("the benchmark upstream did not start")
    return up, f"http://127.0.0.1:{int(line.split()[1])}/v1"


def _run_setup(
    name: str,
    instances: list[GatewayProcess],
    count: Callable[[], int],
    db_cpu: Callable[[], float] | None,
    repeat: int,
    quick: bool,
) -> ProcFigures:
    start_all(instances)
    try:
        return measure(Setup(name, instances, count, db_cpu), repeat, quick)
    finally:
        stop_all(instances)


def processes(tmp: Path, repeat: int, quick: bool) -> tuple[list[ProcFigures], list[str]]:
    """The three set-ups, one after the other; notes for what could not run."""
    from harness.pgcluster import PgUnavailable, temporary_cluster

    root = tmp / "artifacts"
    up, up_url = _start_upstream(root)
    results: list[ProcFigures] = []
    notes: list[str] = []
    try:
        gws = _gateways(tmp / "sqlite", 1, up_url, root, "")
        db_file = gws[0].config.parent / "state" / "gateway.sqlite3"
        results.append(_run_setup("sqlite ×1", gws, _sqlite_count(db_file), None, repeat, quick))
        try:
            with temporary_cluster() as cluster:
                cpu = _cluster_cpu(cluster.datadir)
                for n in (1, 2):
                    url = cluster.create_gateway_database(f"bench{n}")
                    gws = _gateways(tmp / f"pg{n}", n, up_url, root, url)
                    results.append(
                        _run_setup(f"postgresql ×{n}", gws, _pg_count(url), cpu, repeat, quick)
                    )
        except PgUnavailable as exc:
            notes.append(f"postgresql: skipped ({str(exc).splitlines()[0]})")
    finally:
        up.terminate()
        up.wait(10)
    return results, notes


def _cell(values: Sequence[float], spec: str = ",.0f") -> str:
    if not values:
        return "-"
    med = statistics.median(values)
    if len(values) == 1:
        return f"{med:{spec}}"
    return f"{med:{spec}} ({min(values):{spec}}–{max(values):{spec}})"


def print_processes(results: list[ProcFigures], repeat: int, quick: bool) -> None:
    def paired(f: ProcFigures) -> list[float]:
        return [r - c for r, c in zip(f.run_us, f.chat_us, strict=True)]

    rows: list[tuple[str, Callable[[ProcFigures], str]]] = [
        (
            f"links minted/s ({_scaled(LINKS, quick).streams} streams × 256)",
            lambda f: _cell(f.links),
        ),
        (
            f"relay deltas/s (chat, {_scaled(RELAY, quick).streams} streams × 1000)",
            lambda f: _cell(f.relay),
        ),
        (
            f"run deltas/s ({_scaled(RUNS, quick).streams} runs × 300, followed)",
            lambda f: _cell(f.run_deltas),
        ),
        ("run events journaled/s (same runs)", lambda f: _cell(f.run_events)),
        ("gateway µs/event, chat (unjournaled)", lambda f: _cell(f.chat_us)),
        ("gateway µs/event, run (journaled, followed)", lambda f: _cell(f.run_us)),
        ("  the journal adds, µs/event", lambda f: _cell(paired(f))),
        ("database µs/journaled event", lambda f: _cell(f.db_us)),
    ]
    width = max(len(label) for label, _ in rows) + 2
    col = max(20, *(len(cell(f)) + 2 for _, cell in rows for f in results))
    try:
        load = f"load average {os.getloadavg()[0]:.1f}"
    except OSError:
        load = "load average unknown"
    print(
        f"store benchmark: python {sys.version.split()[0]}, {os.cpu_count()} cores, {load};"
        f" upstream, gateways and clients in separate processes; median (range) of {repeat}"
    )
    print(f"{'':<{width}}" + "".join(f"{f.name:>{col}}" for f in results))
    for label, cell in rows:
        print(f"{label:<{width}}" + "".join(f"{cell(f):>{col}}" for f in results))
    for f in results:
        for problem in dict.fromkeys(f.problems):
            print(f"{f.name}: {problem}!")


# -- the store calls alone (in-process) ------------------------------------------------------


@dataclass
class CallFigures:
    backend: str
    links_per_s: float
    mint_us: float
    appends_per_s_1: float
    events_per_s_8: float
    events_per_s_conc: float
    unjournaled_us: float
    journaled_us: float


def _config(tmp: Path) -> Any:
    from gateway.ops.config import config_from_dict

    return config_from_dict(
        {
            "state_dir": str(tmp / "state"),
            "artifacts": {"roots": [str(tmp / "artifacts")]},
            "auth": {"keys": [{"key": "bench-key-0123456789", "principal": "bench"}]},
        }
    )


def _best_of(repeat: int, fn: Callable[[], float]) -> float:
    return min(fn() for _ in range(repeat))


def _links(tmp: Path, store: Any, n: int, repeat: int) -> tuple[float, float]:
    from gateway.links.artifacts import ArtifactService
    from gateway.links.signing import Signer

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
            facts = svc.inspect(path, "bench")
            if facts is None:
                raise RuntimeError("a benchmark file was refused")
            svc.url(svc.mint(facts, "bench", "public"))
        return time.perf_counter() - t0

    seconds = _best_of(repeat, one_pass)
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

    return events / _best_of(repeat, one_pass)


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

    return events / _best_of(repeat, one_pass)


def _per_event_cost(store: Any, events: int, repeat: int) -> tuple[float, float]:
    """µs per relayed read of one event: unjournaled vs journaled (trio)."""
    import trio

    from gateway.core.sse import encode_json
    from gateway.runs.bus import RunBus

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


def _calls_measure(
    name: str, tmp: Path, store: Any, links: int, events: int, repeat: int
) -> CallFigures:
    links_per_s, mint_us = _links(tmp, store, links, repeat)
    appends_1 = _journal(store, events, 1, repeat)
    events_8 = _journal(store, events, 8, repeat)
    conc = _journal_concurrent(store, events, 4, repeat)
    plain_us, journal_us = _per_event_cost(store, min(events, 2000), repeat)
    return CallFigures(name, links_per_s, mint_us, appends_1, events_8, conc, plain_us, journal_us)


@contextmanager
def _postgres() -> Iterator[tuple[str | None, str]]:
    from harness.pgcluster import PgUnavailable, temporary_cluster

    try:
        with temporary_cluster() as cluster:
            yield cluster.create_gateway_database("calls"), ""
    except PgUnavailable as exc:
        yield None, str(exc).splitlines()[0]


def store_calls(tmp: Path, links: int, events: int, repeat: int) -> list[str]:
    """Measure and print the in-process table; notes for what could not run."""
    from gateway.store import open_store

    results: list[CallFigures] = []
    notes: list[str] = []
    sqlite_tmp = tmp / "calls-sqlite"
    store = open_store(sqlite_tmp / "state")
    try:
        results.append(_calls_measure("sqlite", sqlite_tmp, store, links, events, repeat))
    finally:
        store.close()
    with _postgres() as (url, why):
        if url is None:
            notes.append(f"postgresql: skipped ({why})")
        else:
            pg_tmp = tmp / "calls-pg"
            store = open_store(pg_tmp, url)
            try:
                results.append(_calls_measure("postgresql", pg_tmp, store, links, events, repeat))
            finally:
                store.close()

    rows: list[tuple[str, Callable[[CallFigures], str]]] = [
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
    print(
        f"\nthe store calls alone (in-process, no HTTP; links: {links} per pass; events:"
        f" {events} per pass; best of {repeat})"
    )
    print(f"{'':<{width}}" + "".join(f"{f.backend:>14}" for f in results))
    for label, cell in rows:
        print(f"{label:<{width}}" + "".join(f"{cell(f):>14}" for f in results))
    return notes


def main(
    repeat: int = 3,
    quick: bool = False,
    calls: bool = True,
    links: int = 2000,
    events: int = 3000,
) -> int:
    with tempfile.TemporaryDirectory(prefix="bench-store-") as tmp_text:
        tmp = Path(tmp_text)
        results, notes = processes(tmp, 1 if quick else repeat, quick)
        print_processes(results, 1 if quick else repeat, quick)
        if calls:
            notes += store_calls(
                tmp,
                links // 4 if quick else links,
                events // 4 if quick else events,
                1 if quick else repeat,
            )
    print(
        "\n(PostgreSQL: a local throw-away cluster, loopback TCP, fsync off: round trips and"
        " CPU, not a durable disk)"
    )
    for note in notes:
        print(note)
    return 0
