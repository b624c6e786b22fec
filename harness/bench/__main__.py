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
    lk = sub.add_parser("links", help="link minting cost and download throughput")
    lk.add_argument("--files", type=int, default=2000, help="distinct files to mint links for")
    lk.add_argument("--mb", type=int, default=50, help="size of the downloaded file")
    lk.add_argument("--repeat", type=int, default=3, help="downloads (best is reported)")
    args = ap.parse_args(argv)
    if args.what == "rewriter":
        from harness.bench.rewriter import bench_rewriter

        return bench_rewriter(args.mb)
    if args.what == "relay":
        from harness.bench.relay import main as relay_main

        return relay_main(args.repeat, args.quick)
    from harness.bench.links import bench_links

    return bench_links(args.files, args.mb, args.repeat)


if __name__ == "__main__":
    raise SystemExit(main())
