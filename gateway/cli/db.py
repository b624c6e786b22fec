"""``gateway db upgrade|check``: the state store's schema and health.

``upgrade`` applies the missing migrations to the store the config names (PostgreSQL:
under an advisory lock, so running it on several hosts at once is harmless; SQLite
migrates on open anyway). ``check`` reports backend, location, connectivity, schema
version (current/expected) and writability; exit 0 only when all are fine.

The database comes from the config's ``database_url`` (``[database] pool_size``,
``connect_timeout_seconds``), or ``$GATEWAY_DATABASE_URL`` while the config has no
such key; see :func:`gateway.store.store_settings`.
"""

from __future__ import annotations

import argparse
import json

from gateway.cli.common import Subparsers, command_group, err, subcommand
from gateway.core.errors import ConfigError


def _cmd_upgrade(args: argparse.Namespace) -> int:
    from gateway.ops.config import load_config
    from gateway.store import EXPECTED_VERSION, StoreError, open_configured_store

    cfg = load_config(args.config)
    store = open_configured_store(cfg, migrate=False)  # migrate() below says before/after
    try:
        before, after = store.migrate()
        where = store.check().location
    except StoreError as exc:
        err(f"upgrade failed: {exc.message}")
        return 1
    finally:
        store.close()
    if before == after:
        print(f"{store.backend} {where}: schema {after} is current (expected {EXPECTED_VERSION})")
    else:
        print(f"{store.backend} {where}: schema {before} -> {after} (expected {EXPECTED_VERSION})")
    return 0 if after == EXPECTED_VERSION else 1


def _cmd_check(args: argparse.Namespace) -> int:
    from gateway.ops.config import load_config
    from gateway.store import EXPECTED_VERSION, StoreCheck, open_configured_store, store_settings

    cfg = load_config(args.config)
    settings = store_settings(cfg)
    try:
        store = open_configured_store(cfg, migrate=False)
    except ConfigError as exc:
        if exc.key not in ("database_url", "state_dir"):
            raise
        from gateway.store.postgres import redact_url

        url = settings.database_url
        check = StoreCheck(
            "postgresql" if url else "sqlite",
            redact_url(url) if url else str(settings.state_dir),
            None,
            EXPECTED_VERSION,
            reachable=False,
            writable=False,
            detail=exc.message.partition(": ")[2] or exc.message,
        )
    else:
        try:
            check = store.check()
        finally:
            store.close()
    if args.json:
        import dataclasses

        print(json.dumps({**dataclasses.asdict(check), "ok": check.ok}))
        return 0 if check.ok else 1
    latency = f" ({check.latency_ms:.1f} ms)" if check.latency_ms is not None else ""
    if check.schema_version is None:
        schema = f"unknown (expected {check.expected_version})"
    elif check.schema_version < check.expected_version:
        schema = (
            f"{check.schema_version} (expected {check.expected_version}): OLD, "
            "run `gateway db upgrade`"
        )
    elif check.schema_version > check.expected_version:
        schema = (
            f"{check.schema_version} (expected {check.expected_version}): NEWER than this "
            "gateway; run the release that upgraded it"
        )
    else:
        schema = f"{check.schema_version} (expected {check.expected_version}) ok"
    lines = [
        ("backend", check.backend),
        ("location", check.location),
        ("connectivity", ("ok" + latency) if check.reachable else "FAILED"),
        ("schema", schema),
        ("writable", "yes" if check.writable else "NO"),
    ]
    if check.detail:
        lines.append(("detail", check.detail))
    lines.append(("result", "ok" if check.ok else "FAILED"))
    for name, value in lines:
        print(f"{name + ':':<14}{value}")
    return 0 if check.ok else 1


def register(sub: Subparsers[argparse.ArgumentParser]) -> None:
    group = command_group(
        sub,
        "db",
        "upgrade or check the state store (SQLite or PostgreSQL)",
        "gateway db check --config gateway.toml",
        "gateway db upgrade --config gateway.toml",
    )
    subcommand(
        group,
        "upgrade",
        _cmd_upgrade,
        "apply missing schema migrations (PostgreSQL: before a rolling restart)",
        "gateway db upgrade --config gateway.toml",
    )
    check = subcommand(
        group,
        "check",
        _cmd_check,
        "report backend, schema version, connectivity and writability (exit 0 or 1)",
        "gateway db check --config gateway.toml --json",
    )
    check.add_argument("--json", action="store_true", help="one JSON object")
