"""The ``gateway`` command line: one module per group of subcommands.

Exit status: 0 success; 1 a failed check or runtime error; 2 bad configuration or a
refused invocation (``--replace`` under a supervisor); 3 another instance already
holds the state directory (:data:`gateway.lock.EXIT_ALREADY_RUNNING`).
"""

from __future__ import annotations

import argparse
import logging
import sys

from gateway import __version__
from gateway.cli import db, keys, ops, serve, service
from gateway.cli.common import err
from gateway.errors import ConfigError
from gateway.lock import EXIT_USAGE

__all__ = ["build_parser", "main"]

#: subcommands that serve (they log their work); the others print their own results
SERVING = ("run", "proxy", "demo")


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="gateway", description="artifact gateway")
    ap.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    sub = ap.add_subparsers(dest="command", required=True)
    for module in (serve, ops, service, db, keys):
        module.register(sub)
    return ap


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    level = logging.INFO if args.command in SERVING else logging.WARNING
    logging.basicConfig(level=level, format="%(asctime)s %(levelname)s %(name)s %(message)s")
    try:
        rc: int = args.func(args)
        return rc
    except ConfigError as exc:
        err(exc.message)
        return EXIT_USAGE


if __name__ == "__main__":
    sys.exit(main())
