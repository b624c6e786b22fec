"""``gateway keys list|rotate|retire KID``: the link-signing keys in the state store.

Every instance on the same store sees a change made here: verification reads keys from
the store each time (a retired key stops verifying at once), signing picks up a new
active key within :data:`gateway.links.signing.ACTIVE_KEY_MAX_AGE` seconds. ``list`` shows
kid, creation time and which key is active, never a secret. A store without keys is
seeded first, exactly as ``gateway run`` would (importing ``signing-keys.json``).
"""

from __future__ import annotations

import argparse
import datetime as dt
from typing import Any

from gateway.cli.common import Subparsers, command_group, err, subcommand


def _signer(args: argparse.Namespace) -> tuple[Any, Any, Any]:
    from gateway.links.signing import Signer
    from gateway.ops.config import load_config
    from gateway.store import open_configured_store

    cfg = load_config(args.config)
    store = open_configured_store(cfg)
    try:
        return cfg, store, Signer.from_store(store, state_dir=cfg.state_dir)
    except BaseException:
        store.close()
        raise


def _when(stamp: int) -> str:
    if not stamp:
        return "-"
    return dt.datetime.fromtimestamp(stamp, dt.UTC).strftime("%Y-%m-%d %H:%M:%SZ")


def _cmd_list(args: argparse.Namespace) -> int:
    _, store, _ = _signer(args)
    try:
        keys = store.list_signing_keys()
    finally:
        store.close()
    print(f"{'KID':<10}{'CREATED (UTC)':<22}ACTIVE")
    for key in keys:
        print(f"{key.kid:<10}{_when(key.created):<22}{'yes' if key.active else ''}")
    return 0


def _cmd_rotate(args: argparse.Namespace) -> int:
    from gateway.links.signing import ACTIVE_KEY_MAX_AGE

    cfg, store, signer = _signer(args)
    try:
        old = signer.active_kid
        new = signer.rotate()
    finally:
        store.close()
    print(new)
    err(
        f"new active key {new}; every instance signs with it within {ACTIVE_KEY_MAX_AGE:.0f} s. "
        f"Links signed by {old} keep working until you retire it: after "
        f"artifacts.public_ttl_seconds ({cfg.artifacts.public_ttl_seconds} s) run "
        f"`gateway keys retire {old}`."
    )
    return 0


def _cmd_retire(args: argparse.Namespace) -> int:
    _, store, signer = _signer(args)
    try:
        signer.retire(args.kid)
    except ValueError as exc:
        err(f"cannot retire {args.kid}: {exc}")
        return 1
    finally:
        store.close()
    err(f"retired {args.kid}: links it signed answer 404 on every instance from now on")
    return 0


def register(sub: Subparsers[argparse.ArgumentParser]) -> None:
    group = command_group(
        sub,
        "keys",
        "the keys that sign public links: list, rotate, retire",
        "gateway keys list --config gateway.toml",
        "gateway keys rotate --config gateway.toml",
    )
    subcommand(
        group,
        "list",
        _cmd_list,
        "show each key's kid, creation time and whether it signs (never the secret)",
        "gateway keys list --config gateway.toml",
    )
    subcommand(
        group,
        "rotate",
        _cmd_rotate,
        "add a new signing key; links signed with older keys keep working",
        "gateway keys rotate --config gateway.toml",
    )
    retire = subcommand(
        group,
        "retire",
        _cmd_retire,
        "delete an older key: the public links it signed stop working at once",
        "gateway keys retire 3f9a1c0e --config gateway.toml",
    )
    retire.add_argument(
        "kid", metavar="KID", help="the kid of the key to delete (see `gateway keys list`)"
    )
