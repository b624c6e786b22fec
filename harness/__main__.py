"""``python -m harness``: replay | record | capture | health-recovery.

python -m harness replay [PATHS...] [--strategy S ...] [--seed N] [--json FILE] [--no-rewrite]
python -m harness record --upstream URL --request FILE --out cassettes/NAME.yaml
python -m harness capture --sse FILE --out cassettes/NAME.yaml [--request FILE]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import asdict
from pathlib import Path

import trio

from harness import cassette as cassette_mod
from harness.replay import Outcome, progress_printer, replay_cassette, table
from harness.strategies import DEFAULT, STRATEGIES


def cmd_replay(args: argparse.Namespace) -> int:
    paths = cassette_mod.discover(args.paths or ["cassettes"])
    if not paths:
        print("no cassettes found", file=sys.stderr)
        return 2
    strategies = args.strategy or DEFAULT
    unknown = [s for s in strategies if s not in STRATEGIES]
    if unknown:
        print(f"unknown strategy {unknown}; known: {', '.join(STRATEGIES)}", file=sys.stderr)
        return 2
    cassettes = [cassette_mod.load(p) for p in paths]
    tick = progress_printer(len(cassettes) * len(strategies))
    outcomes: list[Outcome] = []
    t0 = time.perf_counter()

    async def main() -> None:
        for cas in cassettes:
            outcomes.extend(
                await replay_cassette(
                    cas,
                    strategies,
                    seed=args.seed,
                    rewrite=not args.no_rewrite,
                    sdk=not args.no_sdk,
                    on_progress=tick,
                )
            )

    trio.run(main)
    elapsed = time.perf_counter() - t0
    print(table(outcomes))
    replays = sum(o.replays for o in outcomes)
    failed = [o for o in outcomes if not o.ok]
    print(
        f"\n{len(cassettes)} cassettes, {len(strategies)} strategies, {replays} replays in {elapsed:.1f} s: "
        f"{len(outcomes) - len(failed)} passed, {len(failed)} failed"
    )
    if args.json:
        Path(args.json).write_text(json.dumps([asdict(o) for o in outcomes], indent=1))
    return 1 if failed else 0


def cmd_capture(args: argparse.Namespace) -> int:
    body = Path(args.sse).read_bytes().decode("utf-8", "replace")
    request = (
        json.loads(Path(args.request).read_text())
        if args.request
        else {
            "model": "captured",
            "stream": True,
            "messages": [{"role": "user", "content": "(captured incident)"}],
        }
    )
    out = Path(args.out)
    cassette_mod.write(out, request_body=request, body=body)
    exp = out.with_name(out.stem + ".expect.yaml")
    if not exp.exists():
        exp.write_text(
            "# fill in: what the client must see (see harness/cassette.py)\n"
            "front: chat\nprincipal: alice\nlink_mode: null\nmode_via: default\n"
            "mounts: {}\nfiles: {}\nexpect:\n  never: []\n  names_only: []\n"
        )
    print(f"wrote {out} and {exp}")
    return 0


def cmd_record(args: argparse.Namespace) -> int:
    import httpx
    import vcr

    request = json.loads(Path(args.request).read_text())
    my_vcr = vcr.VCR(
        serializer=cassette_mod.SERIALIZER_NAME,
        record_mode="all",
        match_on=["method", "scheme", "path", "query"],
    )
    cassette_mod.register(my_vcr)
    out = Path(args.out)
    headers = {"Authorization": f"Bearer {args.api_key}"} if args.api_key else {}
    with my_vcr.use_cassette(str(out)), httpx.Client(timeout=httpx.Timeout(30, read=600)) as client:
        r = client.post(
            args.upstream.rstrip("/") + "/chat/completions", json=request, headers=headers
        )
        print(f"upstream answered HTTP {r.status_code}, {len(r.content)} bytes")
    text = out.read_text()
    if args.api_key:
        out.write_text(text.replace(args.api_key, "REDACTED"))
    print(
        f"wrote {out}; add {out.stem}.expect.yaml beside it (see docs/runbooks/incident-replay.md)"
    )
    return 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m harness")
    sub = ap.add_subparsers(dest="cmd", required=True)
    rp = sub.add_parser("replay", help="replay cassettes through the real servers")
    rp.add_argument("paths", nargs="*")
    rp.add_argument(
        "--strategy", action="append", help=f"one of {', '.join(STRATEGIES)} (repeatable)"
    )
    rp.add_argument("--seed", type=int, default=0)
    rp.add_argument("--json")
    rp.add_argument(
        "--no-rewrite", action="store_true", help="harness-only: disable the rewriter (must fail)"
    )
    rp.add_argument("--no-sdk", action="store_true", help="skip the openai SDK parse")
    rp.set_defaults(func=cmd_replay)
    rc = sub.add_parser("record", help="record a live upstream interaction")
    rc.add_argument(
        "--upstream", required=True, help="OpenAI base URL, e.g. http://127.0.0.1:9000/v1"
    )
    rc.add_argument("--request", required=True, help="JSON request body file")
    rc.add_argument("--out", required=True)
    rc.add_argument("--api-key", default="")
    rc.set_defaults(func=cmd_record)
    cp = sub.add_parser("capture", help="turn a raw SSE transcript into a cassette")
    cp.add_argument("--sse", required=True)
    cp.add_argument("--out", required=True)
    cp.add_argument("--request")
    cp.set_defaults(func=cmd_capture)
    args = ap.parse_args(argv)
    rc_: int = args.func(args)
    return rc_


if __name__ == "__main__":
    raise SystemExit(main())
