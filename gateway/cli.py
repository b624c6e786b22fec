"""The ``gateway`` command line."""

from __future__ import annotations

import argparse
import logging
import sys
from typing import Any

import trio

from gateway import __version__
from gateway.errors import ConfigError


def _cmd_run(args: argparse.Namespace) -> int:
    from gateway.app import create_app
    from gateway.config import load_config
    from gateway.server import run_until_signalled

    cfg = load_config(args.config)
    app = create_app(cfg)

    def ready(urls: list[list[str]]) -> None:
        logging.getLogger("gateway").info("gateway %s listening on %s", __version__, urls[0][0])

    apps: list[tuple[Any, str, trio.Event | None]] = [
        (app, cfg.server.bind, app.gateway.draining)  # type: ignore[attr-defined]
    ]
    trio.run(
        lambda: run_until_signalled(
            apps, drain_timeout=cfg.server.drain_timeout_seconds, on_ready=ready
        )
    )
    return 0


def _cmd_demo(args: argparse.Namespace) -> int:
    from gateway.demo import main as demo_main

    return demo_main(port=args.port, upstream_port=args.upstream_port)


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="gateway", description="artifact gateway")
    ap.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    sub = ap.add_subparsers(dest="command", required=True)
    run = sub.add_parser("run", help="run the API server")
    run.add_argument("--config", help="TOML config file (else $GATEWAY_CONFIG, else defaults)")
    run.set_defaults(func=_cmd_run)
    demo = sub.add_parser("demo", help="run the demo upstream and the gateway in one process")
    demo.add_argument("--port", type=int, default=8642)
    demo.add_argument("--upstream-port", type=int, default=9000)
    demo.set_defaults(func=_cmd_demo)
    return ap


def main(argv: list[str] | None = None) -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s %(message)s")
    args = build_parser().parse_args(argv)
    try:
        rc: int = args.func(args)
        return rc
    except ConfigError as exc:
        print(f"gateway: {exc.message}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
