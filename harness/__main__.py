"""``python -m harness``: replay | record | capture | health-recovery.

python -m harness replay [PATHS...] [--strategy S ...] [--seed N] [--ci]
                        [--json FILE] [--no-rewrite] [--no-sdk]
python -m harness record --upstream URL --request FILE --out cassettes/NAME.yaml
python -m harness capture --sse FILE --out cassettes/NAME.yaml [--request FILE]
                         [--api chat|responses|runs] [--upstream NAME]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import asdict
from pathlib import Path

import trio
import yaml

from harness import cassette as cassette_mod
from harness.replay import Outcome, progress_printer, replay_cassette, table
from harness.strategies import (
    CI_SPLIT_LIMIT,
    CI_SPLIT_SPREAD,
    DEFAULT,
    FULL_SPLIT_LIMIT,
    STRATEGIES,
)


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
    try:
        cassettes = [cassette_mod.load(p) for p in paths]
    except (OSError, ValueError, KeyError, TypeError, yaml.YAMLError) as exc:
        print(f"cannot load a cassette: {exc}", file=sys.stderr)
        return 2
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
                    ci=args.ci,
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


def _strip_http_head(raw: bytes) -> tuple[int, bytes]:
    """A ``curl -i`` transcript starts with the status line and headers: drop them."""
    status = 200
    if raw.startswith(b"HTTP/"):
        first = raw.split(b"\n", 1)[0].split()
        if len(first) > 1 and first[1].isdigit():
            status = int(first[1])
        for sep in (b"\r\n\r\n", b"\n\n"):
            at = raw.find(sep)
            if at >= 0:
                return status, raw[at + len(sep) :]
    return status, raw


#: where each API's stream is read from (the recorded request's URI)
_API_URI = {
    "chat": ("POST", "http://127.0.0.1:9000/v1/chat/completions"),
    "responses": ("POST", "http://127.0.0.1:9000/v1/responses"),
    "runs": ("GET", "http://127.0.0.1:9000/v1/runs/run-captured/events"),
}
_API_WORDS = {
    "chat": "a chat completions stream (chat.completion.chunk objects)",
    "responses": "a Responses stream (response.* events)",
    "runs": "a runs event stream (run.*, message.delta, tool.* events)",
}


def cmd_capture(args: argparse.Namespace) -> int:
    status, raw = _strip_http_head(Path(args.sse).read_bytes())
    body = raw.decode("utf-8", "replace")
    found = cassette_mod.detect_api(raw)
    if found not in (None, args.api):
        what = _API_WORDS.get(found, "a stream that mixes APIs")
        print(
            f"capture: {args.sse} is {what}, not {_API_WORDS[args.api]}: "
            + (
                f"pass --api {found} (it is kept, not replayed, until the native relay)"
                if found in _API_WORDS
                else "capture one API's stream per cassette"
            ),
            file=sys.stderr,
        )
        return 2
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
    out.parent.mkdir(parents=True, exist_ok=True)
    looks_sse = body.lstrip().startswith(("data:", "event:", ":", "id:", "retry:"))
    method, uri = _API_URI[args.api]
    cassette_mod.write(
        out,
        request_body=request,
        body=body,
        status=status,
        content_type="text/event-stream" if looks_sse else "application/json",
        uri=uri,
        method=method,
        source={"api": args.api, "upstream": args.upstream},
    )
    exp = cassette_mod.write_expectation_template(out)
    print(f"wrote {out}; fill in {exp} (see docs/runbooks/incident-replay.md)")
    return 0


def cmd_record(args: argparse.Namespace) -> int:
    import httpx
    import vcr

    request = json.loads(Path(args.request).read_text())
    my_vcr = vcr.VCR(
        serializer=cassette_mod.SERIALIZER_NAME,
        record_mode="all",
        match_on=["method", "scheme", "path", "query"],
        filter_headers=["authorization", "cookie"],
        drop_unused_requests=True,
    )
    cassette_mod.register(my_vcr)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    # identity: vcrpy stores the raw body, and a compressed one is not text
    headers = {"Accept-Encoding": "identity", "Accept": "text/event-stream"}
    if args.api_key:
        headers["Authorization"] = f"Bearer {args.api_key}"
    with my_vcr.use_cassette(str(out)), httpx.Client(timeout=httpx.Timeout(30, read=600)) as client:
        r = client.post(
            args.upstream.rstrip("/") + "/chat/completions", json=request, headers=headers
        )
        print(f"upstream answered HTTP {r.status_code}, {len(r.content)} bytes")
    text = out.read_text(encoding="utf-8")
    if args.api_key:
        out.write_text(text.replace(args.api_key, "REDACTED"), encoding="utf-8")
    exp = cassette_mod.write_expectation_template(out)
    print(f"wrote {out}; fill in {exp} (see docs/runbooks/incident-replay.md)")
    return 0


def cmd_health_recovery(args: argparse.Namespace) -> int:
    from harness.recovery import run

    return run(interval=args.interval, tries=args.tries)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m harness")
    sub = ap.add_subparsers(dest="cmd", required=True)
    rp = sub.add_parser("replay", help="replay cassettes through the real servers")
    rp.add_argument("paths", nargs="*")
    rp.add_argument(
        "--strategy", action="append", help=f"one of {', '.join(STRATEGIES)} (repeatable)"
    )
    rp.add_argument("--seed", type=int, default=0)
    rp.add_argument(
        "--ci",
        action="store_true",
        help=f"CI profile of every-split: every split point up to {CI_SPLIT_LIMIT} bytes "
        f"(not {FULL_SPLIT_LIMIT}), above that {CI_SPLIT_SPREAD} spread points plus every "
        "point inside a path",
    )
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
    cp.add_argument(
        "--api",
        choices=sorted(_API_URI),
        default="chat",
        help="which API the transcript is a stream of (checked against its events)",
    )
    cp.add_argument(
        "--upstream", default="unknown", help="what answered, e.g. 'hermes-agent 0.19.0'"
    )
    cp.set_defaults(func=cmd_capture)
    hr = sub.add_parser(
        "health-recovery", help="kill/restart the real gateway and proxy, poll /health each second"
    )
    hr.add_argument("--interval", type=float, default=1.0)
    hr.add_argument("--tries", type=int, default=30)
    hr.set_defaults(func=cmd_health_recovery)
    args = ap.parse_args(argv)
    rc_: int = args.func(args)
    return rc_


if __name__ == "__main__":
    raise SystemExit(main())
