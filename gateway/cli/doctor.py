"""``gateway doctor``: try the configured upstream, Open WebUI and database."""

from __future__ import annotations

import argparse
import logging

import trio

from gateway.cli.common import add_config_option, help_text


def _cmd_doctor(args: argparse.Namespace) -> int:
    from gateway.cli.diagnose import Finding, diagnose
    from gateway.ops.config import load_config

    cfg = load_config(args.config)
    # each check prints one line; the client's own warning of the same failure (worded
    # for the upstream, whichever server failed) would only repeat it
    logging.getLogger("gateway.upstream").setLevel(logging.ERROR)

    def say(finding: Finding) -> None:
        print(finding.line(), flush=True)

    findings = trio.run(diagnose, cfg, args.timeout, say)
    return 1 if any(f.ok is False for f in findings) else 0


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    doctor = sub.add_parser(
        "doctor",
        **help_text(
            "try the configured upstream, Open WebUI, the proxy's gateway and database, one line each",
            "gateway doctor --config gateway.toml",
            details="Each line says ok, or what is wrong and what to change (refused,\n"
            "DNS, TLS, 401, wrong path, an HTML page, ...). Exit 0 when nothing failed.",
        ),
    )
    add_config_option(doctor)
    doctor.add_argument("--timeout", type=float, default=5.0, help="seconds per check")
    doctor.set_defaults(func=_cmd_doctor)
