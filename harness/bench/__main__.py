"""``python -m harness.bench WHAT``: see :mod:`harness.bench`."""

from __future__ import annotations

import argparse


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m harness.bench", description="benchmarks")
    sub = ap.add_subparsers(dest="what", required=True)
    r = sub.add_parser("rewriter", help="rewriter throughput vs one regex scan")
    r.add_argument("--mb", type=float, default=4.0)
    rl = sub.add_parser("relay", help="deltas/s direct vs gateway, CPU per delta and per request")
    rl.add_argument("--repeat", type=int, default=3, help="runs per scenario (median, range)")
    rl.add_argument("--quick", action="store_true", help="two scenarios, fewer requests")
    pr = sub.add_parser("profile", help="py-spy top functions of the gateway while it relays")
    pr.add_argument("--paced", action="store_true", help="one event per read (20 streams)")
    pr.add_argument("--paths", action="store_true", help="path-dense deltas (6 × 20,000)")
    pr.add_argument("--requests", action="store_true", help="1,000 sequential 1-delta streams")
    pr.add_argument(
        "--keep-alive", action="store_true", help="with --requests: on one kept-alive connection"
    )
    pr.add_argument(
        "--bytecodes",
        action="store_true",
        help="with --requests: bytecodes per request by function (exact, slow: ~1 min)",
    )
    pr.add_argument("--top", type=int, default=10, help="functions listed")
    ins = sub.add_parser(
        "instructions", help="gateway instructions per request under callgrind (noise-free)"
    )
    ins.add_argument("--requests", type=int, default=200, help="requests per figure")
    tr = sub.add_parser("traced", help="Python objects per open stream (tracemalloc)")
    tr.add_argument("--streams", type=int, default=200, help="streams held open")
    lk = sub.add_parser("links", help="link minting cost and download throughput")
    lk.add_argument("--files", type=int, default=2000, help="distinct files to mint links for")
    lk.add_argument("--mb", type=int, default=50, help="size of the downloaded file")
    lk.add_argument("--repeat", type=int, default=3, help="downloads (best is reported)")
    st = sub.add_parser(
        "store",
        help="SQLite ×1 vs PostgreSQL ×1 vs ×2 through gateway processes; the store calls alone",
    )
    st.add_argument("--repeat", type=int, default=3, help="runs per figure (median, range)")
    st.add_argument("--quick", action="store_true", help="half the load, one run each")
    st.add_argument("--no-calls", action="store_true", help="skip the in-process store calls")
    st.add_argument("--links", type=int, default=2000, help="store calls: links per pass")
    st.add_argument("--events", type=int, default=3000, help="store calls: events per pass")
    args = ap.parse_args(argv)
    if args.what == "rewriter":
        from harness.bench.rewriter import bench_rewriter

        return bench_rewriter(args.mb)
    if args.what == "relay":
        from harness.bench.relay import main as relay_main

        return relay_main(args.repeat, args.quick)
    if args.what == "profile":
        from harness.bench.profile import main as profile_main

        return profile_main(
            args.paced, args.top, args.requests, args.keep_alive, args.paths, args.bytecodes
        )
    if args.what == "instructions":
        from harness.bench.instructions import main as instructions_main

        return instructions_main(args.requests)
    if args.what == "traced":
        from harness.bench.traced import main as traced_main

        return traced_main(args.streams)
    if args.what == "store":
        from harness.bench.store import main as store_main

        return store_main(args.repeat, args.quick, not args.no_calls, args.links, args.events)
    from harness.bench.links import bench_links

    return bench_links(args.files, args.mb, args.repeat)


if __name__ == "__main__":
    raise SystemExit(main())
