"""What every ``gateway`` subcommand shares: the error line, help texts, common options."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
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


Subparsers = argparse._SubParsersAction  # the type add_subparsers returns


def command_group(
    sub: Subparsers[argparse.ArgumentParser], name: str, summary: str, *examples: str
) -> Subparsers[argparse.ArgumentParser]:
    """``gateway NAME COMMAND``: a command of subcommands; returns where they go."""
    group = sub.add_parser(name, **help_text(summary, *examples))
    return group.add_subparsers(dest=f"{name}_command", required=True, metavar="COMMAND")


def subcommand(
    group: Subparsers[argparse.ArgumentParser],
    name: str,
    func: Callable[[argparse.Namespace], int],
    summary: str,
    *examples: str,
    details: str = "",
    config: bool = True,
) -> argparse.ArgumentParser:
    """One subcommand running ``func``, with its help and (``config``) ``--config``."""
    parser = group.add_parser(name, **help_text(summary, *examples, details=details))
    if config:
        add_config_option(parser)
    parser.set_defaults(func=func)
    return parser


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
