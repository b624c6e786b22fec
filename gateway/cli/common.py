"""What every ``gateway`` subcommand shares: the error line and the config option."""

from __future__ import annotations

import argparse
import sys


def err(message: str) -> None:
    """One line on stderr, prefixed ``gateway:``."""
    print(f"gateway: {message}", file=sys.stderr, flush=True)


def add_config_option(parser: argparse.ArgumentParser, what: str | None = None) -> None:
    parser.add_argument(
        "--config",
        metavar="FILE",
        help=what or "TOML config file (else $GATEWAY_CONFIG, else built-in defaults)",
    )
