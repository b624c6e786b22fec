"""The ``gateway`` command line: one module per group of subcommands.

Exit status: 0 success; 1 a failed check or runtime error; 2 bad configuration or a
refused invocation (``--replace`` under a supervisor); 3 another instance already
holds the state directory (:data:`gateway.ops.lock.EXIT_ALREADY_RUNNING`).
"""

from __future__ import annotations

import argparse
import os
import signal
import sys

from gateway import __version__
from gateway.cli import config, db, doctor, keys, ops, serve, service
from gateway.cli.common import err
from gateway.core.errors import ConfigError
from gateway.ops.lock import EXIT_USAGE
from gateway.ops.logs import configure_logging

__all__ = ["build_parser", "main"]

DESCRIPTION = """\
artifact gateway: relays an agent's SSE streams to its clients and turns the host
paths it mentions into managed-download links."""

EPILOG = """\
examples:
  gateway demo                                  demo upstream + gateway + proxy, no LLM
  gateway config example > gateway.toml         every key, its default and meaning
  gateway config check --config gateway.toml    validate; print the effective settings
  gateway run --config gateway.toml             the API server
  gateway health http://127.0.0.1:8642/health --wait
  gateway doctor --config gateway.toml          upstream, Open WebUI, database: ok?

exit status: 0 ok; 1 a failed check or runtime error; 2 bad configuration or
invocation; 3 another instance already holds the state directory.
`gateway COMMAND --help` describes each command."""


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(
        prog="gateway",
        description=DESCRIPTION,
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    ap.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    sub = ap.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for module in (serve, config, db, keys, ops, service, doctor):
        module.register(sub)
    return ap


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    # the serving commands reconfigure this from [log] once their config is loaded
    configure_logging("gateway", "text", "warning")
    try:
        rc: int = args.func(args)
        return rc
    except ConfigError as exc:
        err(exc.message)
        return EXIT_USAGE
    except KeyboardInterrupt:
        # Ctrl-C before a server's own signal handling is in place (while it loads):
        # end as an interrupted program does, without a traceback
        sys.stderr.flush()
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGINT)
        return 128 + signal.SIGINT


if __name__ == "__main__":
    sys.exit(main())
