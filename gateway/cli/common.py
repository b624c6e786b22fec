"""What every ``gateway`` subcommand shares: the error line, help texts, common options."""

from __future__ import annotations

import argparse
import sys
from typing import Any


def err(message: str) -> None:
    """One line on stderr, prefixed ``gateway:``."""
    print(f"gateway: {message}", file=sys.stderr, flush=True)


def help_text(summary: str, *examples: str, details: str = "") -> dict[str, Any]:
    """``add_parser`` keywords: a one-line ``summary`` (the command list and ``--help``),
    optional ``details`` (more of ``--help``) and examples, one per line, unwrapped.

    ``summary`` is lower case without a full stop: it reads in the command list.
    """
    description = summary[0].upper() + summary[1:] + "."
    if details:
        description += "\n\n" + details
    label = "example:" if len(examples) == 1 else "examples:"
    return {
        "help": summary,
        "description": description,
        "epilog": label + "\n" + "\n".join(f"  {e}" for e in examples) if examples else None,
        "formatter_class": argparse.RawDescriptionHelpFormatter,
    }


def add_config_option(parser: argparse.ArgumentParser, what: str | None = None) -> None:
    parser.add_argument(
        "--config",
        metavar="FILE",
        help=what or "TOML config file (else $GATEWAY_CONFIG, else built-in defaults)",
    )


def add_log_format_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--log-format",
        choices=["text", "json"],
        help="log lines on stderr: text for people, json for log shippers "
        "(default: [log] format, $GATEWAY_LOG_FORMAT, else text)",
    )
