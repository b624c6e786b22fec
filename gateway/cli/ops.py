"""``gateway health`` and ``gateway smoke``: client commands against a running service."""

from __future__ import annotations

import argparse
import os
import sys

from gateway.cli.common import err, help_text
from gateway.ops.lock import EXIT_USAGE


def _cmd_health(args: argparse.Namespace) -> int:
    from gateway.cli.healthpoll import poll_health

    tries = args.tries if args.tries is not None else (30 if args.wait else 1)

    def progress(n: int, outcome: str) -> None:
        if tries > 1:
            print(f"try {n}/{tries}: {outcome}", file=sys.stderr, flush=True)

    result = poll_health(
        args.url, tries=tries, interval=args.interval, timeout=args.timeout, on_try=progress
    )
    print(result.summary(args.url, tries), flush=True)
    return 0 if result.healthy else 1


def _cmd_smoke(args: argparse.Namespace) -> int:
    from gateway.api.smoke import Check, run_smoke

    key = args.key or os.environ.get("GATEWAY_SMOKE_KEY", "")
    if not key:
        err("pass --key KEY (or set GATEWAY_SMOKE_KEY): any key of the gateway's [[auth.keys]]")
        return EXIT_USAGE
    modes = ("private", "public") if args.mode == "both" else (args.mode,)

    def say(check: Check) -> None:
        mark = "ok  " if check.ok else "FAIL"
        print(f"{mark} {check.name}" + (f"  ({check.detail})" if check.detail else ""), flush=True)

    report = run_smoke(args.base_url, key, modes=modes, timeout=args.timeout, say=say)
    failed = [c for c in report.checks if not c.ok]
    if report.ok:
        print(f"smoke: all {len(report.checks)} checks passed", flush=True)
        return 0
    print(f"smoke: {len(failed)} of {len(report.checks)} checks FAILED", flush=True)
    return 1


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    health = sub.add_parser(
        "health",
        **help_text(
            "poll a health URL until it answers 2xx",
            "gateway health http://127.0.0.1:8642/health --wait",
            "gateway health http://127.0.0.1:8653/health --tries 5 --interval 0.5",
            details="Exit 0 once it answers 2xx, 1 when the tries run out.",
        ),
    )
    health.add_argument("url", help="e.g. http://127.0.0.1:8642/health")
    health.add_argument("--wait", action="store_true", help="keep trying (default 30 tries)")
    health.add_argument("--interval", type=float, default=1.0, help="seconds between tries")
    health.add_argument("--tries", type=int, default=None, help="how many tries at most")
    health.add_argument("--timeout", type=float, default=2.0, help="seconds per try")
    health.set_defaults(func=_cmd_health)

    smoke = sub.add_parser(
        "smoke",
        **help_text(
            "end-to-end self-test of a running API server",
            'gateway smoke http://127.0.0.1:8642 --key "$GATEWAY_SMOKE_KEY"',
            "GATEWAY_SMOKE_KEY=... gateway smoke http://127.0.0.1:8642 --mode private",
            details="Checks /health, then streams the built-in self-test (POST /v1/selftest):\n"
            "a host path must become a link that downloads for its owner only. The\n"
            "upstream is not needed. Point it at the API server, not the runs proxy.",
        ),
    )
    smoke.add_argument(
        "base_url", help="the API server (not the proxy), e.g. http://127.0.0.1:8642"
    )
    smoke.add_argument("--key", help="a bearer key of the gateway (else $GATEWAY_SMOKE_KEY)")
    smoke.add_argument(
        "--mode", choices=["private", "public", "both"], default="both", help="default both"
    )
    smoke.add_argument("--timeout", type=float, default=10.0, help="seconds per request")
    smoke.set_defaults(func=_cmd_smoke)
