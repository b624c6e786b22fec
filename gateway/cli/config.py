"""``gateway config example|check``: the configuration schema, for the operator.

``example`` prints every key with its default and meaning as a commented TOML file
that loads as the defaults. ``check`` validates a file and prints what it resolves to
(after the environment overrides and normalisation), secrets masked, then warnings
about settings that load but will not work as probably meant.
"""

from __future__ import annotations

import argparse
import ipaddress
import os
import sys
from dataclasses import fields
from pathlib import Path
from urllib.parse import urlsplit

from gateway.cli.common import err, help_text
from gateway.clients.trust import trust_problem
from gateway.core.errors import ConfigError
from gateway.ops.config import (
    DEPRECATED_ALIASES,
    PRINCIPAL_PLACEHOLDER,
    Config,
    LoadedConfig,
    config_file_warning,
    config_from_dict,
    config_source,
    inspect_config,
    is_multi_user,
    parse_bind,
    parse_config_text,
    read_config_file,
)
from gateway.ops.schema import render_example, render_values

__all__ = [
    "config_warnings",
    "effective_text",
    "example_text",
    "proxy_configured",
    "register",
    "role_warnings",
    "startup_warnings",
]

EXAMPLE_HEADER = (
    "artifact gateway configuration: every key at its default, with its meaning.",
    "Printed by `gateway config example`; check a file with `gateway config check --config FILE`.",
    "Every key is optional. Precedence: built-in defaults < this file (--config FILE, else",
    "$GATEWAY_CONFIG) < environment variables (named below). Reference: docs/configuration.md",
)


def example_text() -> str:
    """The commented example configuration (valid TOML; loads as the defaults)."""
    return render_example(Config, EXAMPLE_HEADER, DEPRECATED_ALIASES)


def effective_text(loaded: LoadedConfig) -> str:
    """``loaded`` as TOML, secrets masked, each value from the environment marked."""

    def note(dotted: str) -> str | None:
        if dotted in loaded.env_sources:
            return f"from ${loaded.env_sources[dotted]}"
        if dotted in loaded.renamed:
            return f"written as {loaded.renamed[dotted]} (deprecated)"
        if dotted == "proxy.trust_user_headers" and dotted not in loaded.given:
            secret = "set" if loaded.config.proxy.openwebui_jwt_secret else "empty"
            return f"default, as openwebui_jwt_secret is {secret}"
        return None

    def omit(dotted: str) -> bool:
        """``owner_prefix`` means something for a proxy key only."""
        if not dotted.startswith("auth.keys[") or not dotted.endswith("].owner_prefix"):
            return False
        index = int(dotted[len("auth.keys[") : -len("].owner_prefix")])
        return loaded.config.auth.keys[index].role != "proxy"

    source = loaded.source or "none (built-in defaults)"
    head = (
        f"# effective configuration; file: {source}\n"
        "# defaults < file < environment; paths resolved; secrets masked (for reading, not loading)\n\n"
    )
    return head + render_values(Config, loaded.config, note, omit)


def _is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def startup_warnings(cfg: Config, role: str) -> list[str]:
    """What makes ``gateway run`` (``role="api"``) or ``gateway proxy`` refuse everything."""
    out = []
    if role == "api" and not cfg.auth.keys:
        out.append(
            "no [[auth.keys]] configured: the API server will refuse every request "
            "(add one; see `gateway config example`)"
        )
    if role == "proxy" and not cfg.proxy.client_keys:
        out.append(
            "proxy.client_keys is empty: the runs proxy will refuse every request "
            "(add the key Open WebUI sends)"
        )
    tls = [
        key
        for key, url in (
            ("upstream.base_url", cfg.upstream.base_url if role == "api" else ""),
            ("proxy.gateway_url", cfg.proxy.gateway_url if role == "proxy" else ""),
            ("proxy.openwebui_url", cfg.proxy.openwebui_url),
        )
        if url.lower().startswith("https://")
    ]
    problem = trust_problem() if tls else None
    if problem:
        out.append(f"{problem}: every request to {' and '.join(tls)} will fail")
    if role == "proxy" and not cfg.proxy.gateway_key:
        out.append(
            "proxy.gateway_key is empty: the gateway will refuse every run the proxy starts "
            '(set a role = "proxy" key of the gateway)'
        )
    return out


def role_warnings(cfg: Config, role: str) -> list[str]:
    """What ``gateway run`` (``role="api"``) or ``gateway proxy`` logs at start, and
    ``gateway config check`` prints: settings that load but will probably not work as
    meant, one sentence each."""
    out = startup_warnings(cfg, role)
    if role == "proxy":
        out += _key_warnings(cfg)
        if 0 < len(cfg.proxy.openwebui_jwt_secret.encode()) < 32:
            out.append(
                "proxy.openwebui_jwt_secret is shorter than 32 bytes: too short for HS256 "
                "(RFC 7518 3.2; Open WebUI's PyJWT warns too); use a longer random secret "
                "on both sides"
            )
        if cfg.proxy.openwebui_jwt_secret and cfg.proxy.trust_user_headers:
            out.append(
                "proxy.trust_user_headers is true although openwebui_jwt_secret is set: a "
                "request without a JWT can still claim any user by its X-OpenWebUI-User-* "
                "headers; set it to false"
            )
        return out
    bind_host = parse_bind(cfg.server.bind)[0]
    link_host = _url_host(cfg.server.public_base_url)
    if _is_loopback(link_host) and not _is_loopback(bind_host):
        out.append(
            f"server.public_base_url points at loopback ({link_host}) while server.bind "
            f"listens on {bind_host}: links will not open on other machines; set the "
            "address clients use"
        )
    return out + _root_warnings(cfg) + _scope_warnings(cfg)


def _root_warnings(cfg: Config) -> list[str]:
    """Roots that are no folder, and folders shared by every user of several."""
    arts, out = cfg.artifacts, []
    for i, root in enumerate(arts.roots):
        text = str(root)
        folder = (
            Path(text.split(PRINCIPAL_PLACEHOLDER, 1)[0]) if PRINCIPAL_PLACEHOLDER in text else root
        )
        if not folder.is_dir():
            out.append(
                f"artifacts.roots[{i}] ({folder}) is not a directory: no file there gets a link"
            )
    for i, root in enumerate(arts.shared_roots):
        if not root.is_dir():
            out.append(
                f"artifacts.shared_roots[{i}] ({root}) is not a directory: no file there gets a link"
            )
        elif is_multi_user(cfg.auth):
            out.append(
                f"artifacts.shared_roots[{i}] ({root}) is shared by every user of this multi-user "
                "configuration: each can get a link to any file there, another's too; give "
                "each a folder ({principal} in roots, or [[artifacts.scopes]]) unless that is meant"
            )
    return out


def file_warnings(source: str | None) -> list[str]:
    """The config file itself readable by other users while it holds a secret."""
    exposed = config_file_warning(source) if source not in (None, "<stdin>") else None
    return [exposed] if exposed else []


def proxy_configured(cfg: Config) -> bool:
    """The file sets a ``[proxy]`` key to something else than its default (the example,
    which writes every default, does not)."""
    default = config_from_dict({}).proxy
    return any(
        getattr(cfg.proxy, f.name) != getattr(default, f.name)
        for f in fields(cfg.proxy)
        if f.name != "trust_user_headers"  # derived from openwebui_jwt_secret
    )


def config_warnings(loaded: LoadedConfig) -> list[str]:
    """``gateway run``'s start-up warnings, ``gateway proxy``'s too when the file
    configures the proxy, and the deprecations."""
    cfg = loaded.config
    out = role_warnings(cfg, "api") + file_warnings(loaded.source)
    if proxy_configured(cfg):
        out += [w for w in role_warnings(cfg, "proxy") if w not in out]
    return out + list(loaded.notes)


def _scope_warnings(cfg: Config) -> list[str]:
    """A principal's folders that hold others' ({principal} folders below them), and
    principals that differ only in letter case (one folder on a case-blind disk)."""
    arts, out = cfg.artifacts, []
    parents = [
        str(r).split(PRINCIPAL_PLACEHOLDER, 1)[0].rstrip("/")
        for r in arts.roots
        if PRINCIPAL_PLACEHOLDER in str(r)
    ]
    for i, scope in enumerate(arts.scopes):
        for j, root in enumerate(scope.roots):
            mine = str(root).rstrip("/") + "/"
            if any((p + "/").startswith(mine) for p in parents):
                out.append(
                    f"artifacts.scopes[{i}].roots[{j}] ({root}) holds every principal's "
                    f"{PRINCIPAL_PLACEHOLDER} folder: {scope.principal} can get links to the "
                    "others' files"
                )
    seen: dict[str, str] = {}
    for key in cfg.auth.keys:
        low = key.principal.lower()
        if low in seen and seen[low] != key.principal:
            out.append(
                f"principals {seen[low]!r} and {key.principal!r} differ only in letter case: "
                f"on a case-blind file system they share one {PRINCIPAL_PLACEHOLDER} folder"
            )
        seen.setdefault(low, key.principal)
    return out


def _url_host(url: str) -> str:
    return urlsplit(url).hostname or ""


def _key_warnings(cfg: Config) -> list[str]:
    """The proxy's gateway_key against the [[auth.keys]] of the same file, if any."""
    if not cfg.proxy.gateway_key or not cfg.auth.keys:
        return []
    match = [k for k in cfg.auth.keys if k.key == cfg.proxy.gateway_key]
    if not match:
        return [
            "proxy.gateway_key is none of the [[auth.keys]] in this file: right only if the "
            "API server runs with another configuration"
        ]
    if match[0].role != "proxy":
        return [
            f'proxy.gateway_key is the role = "user" key of {match[0].principal!r}: the gateway '
            'will refuse the owner the proxy asserts (403); use a role = "proxy" key'
        ]
    return []


def _read(config: str | None) -> tuple[dict[str, object], str | None]:
    if config == "-":
        try:
            text = sys.stdin.buffer.read().decode("utf-8")
        except UnicodeDecodeError:
            raise ConfigError("<file>", "the config on stdin is not valid UTF-8") from None
        return parse_config_text(text, "<stdin>"), "<stdin>"
    source = config_source(config, os.environ)
    if source is None:
        return {}, None
    return read_config_file(source), str(os.path.abspath(os.path.expanduser(source)))


def _cmd_example(args: argparse.Namespace) -> int:
    sys.stdout.write(example_text())
    return 0


def _cmd_check(args: argparse.Namespace) -> int:
    data, source = _read(args.config)
    loaded = inspect_config(data, os.environ, source=source)
    sys.stdout.write(effective_text(loaded))
    sys.stdout.flush()
    warnings = config_warnings(loaded)
    for warning in warnings:
        err(f"warning: {warning}")
    tail = f" with {len(warnings)} warning(s)" if warnings else ""
    err(f"configuration is valid{tail} ({source or 'built-in defaults'})")
    return 0


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    group = sub.add_parser(
        "config",
        **help_text(
            "print the configuration schema, or check a file",
            "gateway config example > gateway.toml",
            "gateway config check --config gateway.toml",
        ),
    )
    csub = group.add_subparsers(dest="config_command", required=True, metavar="COMMAND")
    example = csub.add_parser(
        "example",
        **help_text(
            "print every key with its default and meaning",
            "gateway config example > gateway.toml",
            details="The output is a commented TOML file that loads as the built-in defaults;\n"
            "arrays of tables ([[auth.keys]], [[artifacts.mounts]]) are shown commented out.",
        ),
    )
    example.set_defaults(func=_cmd_example)
    check = csub.add_parser(
        "check",
        **help_text(
            "validate a configuration and print the effective settings",
            "gateway config check --config /etc/artifact-gateway/gateway.toml",
            "gateway config example | gateway config check --config -",
            details="The settings are printed as TOML after the environment overrides and\n"
            "normalisation, secrets masked; warnings about settings that load but will not\n"
            "work as probably meant go to stderr. Exit 0 valid, 2 invalid (one line naming\n"
            "the key).",
        ),
    )
    check.add_argument(
        "--config",
        metavar="FILE",
        help="TOML file to check, - for stdin (else $GATEWAY_CONFIG, else the built-in defaults)",
    )
    check.set_defaults(func=_cmd_check)
