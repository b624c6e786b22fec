"""Load and validate the gateway configuration.

The configuration is one TOML file plus a few environment overrides. The key names
are a stable contract (see DESIGN.md, "Configuration"); every key is optional and
defaults as listed below.

Keys (``[section]``, key = default)::

    state_dir = "~/.local/state/artifact-gateway"   sqlite db, signing secret

    [server]
    bind = "127.0.0.1:8642"                   host:port, IPv6 as "[::1]:8642"
    public_base_url = "http://127.0.0.1:8642" origin (optionally a path prefix) of links
    keepalive_seconds = 15.0                  SSE keep-alive comment interval
    drain_timeout_seconds = 10.0              SIGTERM drain budget
    max_body_bytes = 4194304                  largest accepted request body (4 MiB)
    write_timeout_seconds = 10.0              give up on a client that stops reading

    [upstream]
    base_url = "http://127.0.0.1:9000/v1"     OpenAI-compatible server
    api_key = ""                              optional bearer sent upstream
    connect_timeout_seconds = 10.0
    idle_timeout_seconds = 300.0              longest silence inside a stream
    models_cache_seconds = 60.0               0 disables the /v1/models cache

    [artifacts]
    roots = ["~/.agent/artifacts"]            only files under these roots get links
    default_link_mode = "private"             private | public
    public_ttl_seconds = 604800               lifetime of a public link (7 days)
    max_bytes = 104857600                     largest file that gets a link (100 MiB)
    denied = [".ssh", ".gnupg", ...]          see DEFAULT_DENIED
    [[artifacts.mounts]]                      agent-visible prefix -> host directory
    agent_prefix = "/workspace"               absolute: "/..." or "C:\\..."
    host_dir = "/srv/agent/workspace"         absolute after "~" expansion

    [[auth.keys]]                             bearer keys of the API server (none by default)
    key = "..."                               >= 16 visible ASCII characters, unique
    principal = "alice"                       [A-Za-z0-9._:@-]+
    role = "user"                             user | proxy (proxy may assert an owner)

    [proxy]
    bind = "127.0.0.1:8653"
    gateway_url = "http://127.0.0.1:8642"
    gateway_key = ""                          a role=proxy key of the gateway
    client_keys = []                          keys Open WebUI uses to call the proxy
    openwebui_jwt_secret = ""                 verifies X-OpenWebUI-User-Jwt when set
    trust_user_headers = true                 accept X-OpenWebUI-User-* without a JWT

    [limits]
    max_path_chars = 4096                     longest path candidate the rewriter holds
    max_event_bytes = 1048576                 largest SSE event (1 MiB)
    run_retention_seconds = 3600.0            how long a finished run's log is kept
    run_log_max_events = 10000                events kept per run

Precedence, lowest to highest: built-in defaults, the TOML file (``load_config(path)``,
else ``$GATEWAY_CONFIG``, else none), environment overrides:

    GATEWAY_STATE_DIR        state_dir
    GATEWAY_BIND             server.bind
    GATEWAY_PUBLIC_BASE_URL  server.public_base_url
    GATEWAY_UPSTREAM_URL     upstream.base_url
    GATEWAY_ARTIFACT_ROOTS   artifacts.roots (os.pathsep-separated; empty parts skipped)
    GATEWAY_PROXY_BIND       proxy.bind

An environment variable that is set but empty counts as unset.

Normalisation: ``~`` is expanded in every host path and paths are made absolute and
resolved (symlinks included; a relative path is taken from the working directory);
trailing slashes are stripped from URLs and from mount prefixes.

Validation is all-or-nothing: the whole configuration is checked before a
:class:`Config` exists, and the first problem raises :class:`~gateway.errors.ConfigError`
whose ``key`` is the dotted key (``"server.bind"``, ``"auth.keys[1].role"``, or
``"<file>"`` for an unreadable or malformed file). Refused: unknown keys (with a
did-you-mean hint), wrong types (a boolean is not a number, an integer key does not take
a float), non-finite numbers, a bind that is not host:port with port 0-65535, URLs that
are not absolute http(s) with a host (or carry credentials, a query or a fragment), a
link mode other than private/public, non-positive sizes, TTLs, timeouts and limits,
short or duplicate keys, bad principals and roles, relative mount prefixes or host
directories. A bad environment override names the variable in the message. Messages
never echo a key or secret.
"""

from __future__ import annotations

import difflib
import ipaddress
import math
import os
import re
import tomllib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, cast
from urllib.parse import urlsplit

from gateway.errors import ConfigError

__all__ = [
    "DEFAULT_DENIED",
    "ENV_OVERRIDES",
    "MIN_KEY_CHARS",
    "ArtifactsConfig",
    "AuthConfig",
    "Config",
    "KeyEntry",
    "LimitsConfig",
    "LinkMode",
    "Mount",
    "ProxyConfig",
    "Role",
    "ServerConfig",
    "UpstreamConfig",
    "config_from_dict",
    "load_config",
    "parse_bind",
]

LinkMode = Literal["private", "public"]
Role = Literal["user", "proxy"]

MiB = 1024 * 1024
MIN_KEY_CHARS = 16

#: Names that never get a link even when they sit inside an artifact root. Each entry
#: is matched against the path components below the root, case-insensitively: an entry
#: without "/" matches any single component (file or directory, ``fnmatch`` wildcards
#: allowed, e.g. ``"*.pem"``); an entry with "/" matches that run of consecutive
#: components (``".config/gcloud"``). A file inside a denied directory is denied too.
DEFAULT_DENIED: tuple[str, ...] = (
    ".ssh",
    ".gnupg",
    ".aws",
    ".config/gcloud",
    ".netrc",
    ".env",
    "id_rsa",
    "id_ed25519",
)

#: Environment variable -> dotted key it overrides.
ENV_OVERRIDES: Mapping[str, str] = {
    "GATEWAY_STATE_DIR": "state_dir",
    "GATEWAY_BIND": "server.bind",
    "GATEWAY_PUBLIC_BASE_URL": "server.public_base_url",
    "GATEWAY_UPSTREAM_URL": "upstream.base_url",
    "GATEWAY_ARTIFACT_ROOTS": "artifacts.roots",
    "GATEWAY_PROXY_BIND": "proxy.bind",
}

_DEFAULT_STATE_DIR = "~/.local/state/artifact-gateway"
_DEFAULT_BIND = "127.0.0.1:8642"
_DEFAULT_PUBLIC_BASE_URL = "http://127.0.0.1:8642"
_DEFAULT_UPSTREAM_URL = "http://127.0.0.1:9000/v1"
_DEFAULT_ROOTS = ("~/.agent/artifacts",)
_DEFAULT_PROXY_BIND = "127.0.0.1:8653"
_DEFAULT_GATEWAY_URL = "http://127.0.0.1:8642"

_PRINCIPAL_RE = re.compile(r"[A-Za-z0-9._:@-]+")
_HOSTNAME_RE = re.compile(r"[A-Za-z0-9._-]+")
_WINDOWS_ABS_RE = re.compile(r"[A-Za-z]:[\\/]")


# --------------------------------------------------------------------------- model


def parse_bind(bind: str) -> tuple[str, int]:
    """Split ``"host:port"`` (IPv6 as ``"[::1]:8642"``) into ``(host, port)``.

    The IPv6 host comes back without brackets. Raises :class:`ValueError` with a
    short reason when ``bind`` is not host:port with a port in 0-65535.
    """
    if bind.startswith("["):
        end = bind.find("]")
        if end == -1:
            raise ValueError("missing ']' after the IPv6 address")
        host, rest = bind[1:end], bind[end + 1 :]
        if not rest.startswith(":"):
            raise ValueError("expected host:port, like [::1]:8642")
        port_text = rest[1:]
        try:
            ipaddress.IPv6Address(host)
        except ValueError:
            raise ValueError("the bracketed host is not an IPv6 address") from None
    else:
        host, sep, port_text = bind.rpartition(":")
        if not sep:
            raise ValueError("expected host:port, like 127.0.0.1:8642")
        if ":" in host:
            raise ValueError("an IPv6 host must be bracketed, like [::1]:8642")
        if not host:
            raise ValueError("the host is empty")
        if not _HOSTNAME_RE.fullmatch(host):
            raise ValueError("the host is not a hostname or IP address")
    if not (port_text.isascii() and port_text.isdigit() and len(port_text) <= 5):
        raise ValueError("the port must be a number from 0 to 65535")
    port = int(port_text)
    if port > 65535:
        raise ValueError("the port must be a number from 0 to 65535")
    return host, port


class _Listener:
    """``host``/``port`` of a section's ``bind`` (IPv6 without brackets; port 0 is ephemeral)."""

    __slots__ = ()
    bind: str

    @property
    def host(self) -> str:
        return parse_bind(self.bind)[0]

    @property
    def port(self) -> int:
        return parse_bind(self.bind)[1]


@dataclass(frozen=True, slots=True)
class ServerConfig(_Listener):
    """``[server]``: the API server's listener and stream behaviour."""

    bind: str
    public_base_url: str
    keepalive_seconds: float = 15.0
    drain_timeout_seconds: float = 10.0
    max_body_bytes: int = 4 * MiB
    write_timeout_seconds: float = 10.0


@dataclass(frozen=True, slots=True)
class UpstreamConfig:
    """``[upstream]``: the OpenAI-compatible model server."""

    base_url: str
    api_key: str = field(repr=False)
    connect_timeout_seconds: float = 10.0
    idle_timeout_seconds: float = 300.0
    models_cache_seconds: float = 60.0


@dataclass(frozen=True, slots=True)
class Mount:
    """``[[artifacts.mounts]]``: the agent sees ``agent_prefix``; the files are in ``host_dir``."""

    agent_prefix: str
    host_dir: Path


@dataclass(frozen=True, slots=True)
class ArtifactsConfig:
    """``[artifacts]``: which files may get managed-download links, and how."""

    roots: tuple[Path, ...]
    default_link_mode: LinkMode
    public_ttl_seconds: int
    max_bytes: int
    mounts: tuple[Mount, ...] = ()
    denied: tuple[str, ...] = DEFAULT_DENIED


@dataclass(frozen=True, slots=True)
class KeyEntry:
    """``[[auth.keys]]``: one bearer key of the API server."""

    key: str = field(repr=False)
    principal: str
    role: Role


@dataclass(frozen=True, slots=True)
class AuthConfig:
    """``[auth]``: the bearer keys the API server accepts (none by default)."""

    keys: tuple[KeyEntry, ...] = ()


@dataclass(frozen=True, slots=True)
class ProxyConfig(_Listener):
    """``[proxy]``: the Open WebUI runs proxy."""

    bind: str
    gateway_url: str
    gateway_key: str = field(repr=False)
    client_keys: tuple[str, ...] = field(repr=False)
    openwebui_jwt_secret: str = field(repr=False)
    trust_user_headers: bool = True


@dataclass(frozen=True, slots=True)
class LimitsConfig:
    """``[limits]``: resource bounds."""

    max_path_chars: int = 4096
    max_event_bytes: int = 1 * MiB
    run_retention_seconds: float = 3600.0
    run_log_max_events: int = 10000


@dataclass(frozen=True, slots=True)
class Config:
    """The whole, validated gateway configuration."""

    state_dir: Path
    server: ServerConfig
    upstream: UpstreamConfig
    artifacts: ArtifactsConfig
    auth: AuthConfig
    proxy: ProxyConfig
    limits: LimitsConfig


# --------------------------------------------------------------------------- schema

_SECTION_KEYS: dict[str, tuple[str, ...]] = {
    "server": (
        "bind",
        "public_base_url",
        "keepalive_seconds",
        "drain_timeout_seconds",
        "max_body_bytes",
        "write_timeout_seconds",
    ),
    "upstream": (
        "base_url",
        "api_key",
        "connect_timeout_seconds",
        "idle_timeout_seconds",
        "models_cache_seconds",
    ),
    "artifacts": (
        "roots",
        "default_link_mode",
        "public_ttl_seconds",
        "max_bytes",
        "mounts",
        "denied",
    ),
    "auth": ("keys",),
    "proxy": (
        "bind",
        "gateway_url",
        "gateway_key",
        "client_keys",
        "openwebui_jwt_secret",
        "trust_user_headers",
    ),
    "limits": (
        "max_path_chars",
        "max_event_bytes",
        "run_retention_seconds",
        "run_log_max_events",
    ),
}
_TOP_LEVEL_KEYS: tuple[str, ...] = ("state_dir", *_SECTION_KEYS)
_MOUNT_KEYS = ("agent_prefix", "host_dir")
_AUTH_KEY_KEYS = ("key", "principal", "role")


# --------------------------------------------------------------------------- helpers


class _Ctx:
    """Validation context: remembers which keys came from the environment."""

    def __init__(self) -> None:
        self.sources: dict[str, str] = {}

    def error(self, key: str, message: str) -> ConfigError:
        for dotted, var in self.sources.items():
            if key == dotted or key.startswith((dotted + "[", dotted + ".")):
                return ConfigError(key, f"{message} (from environment variable {var})")
        return ConfigError(key, message)


def _type_name(value: object) -> str:
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int):
        return "an integer"
    if isinstance(value, float):
        return "a float"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, Mapping):
        return "a table"
    if isinstance(value, list | tuple):
        return "an array"
    return f"a {type(value).__name__}"


def _join(prefix: str, key: str) -> str:
    return f"{prefix}.{key}" if prefix else key


def _check_keys(table: Mapping[Any, Any], known: Sequence[str], prefix: str) -> None:
    for raw in table:
        key = str(raw)
        if key in known:
            continue
        hint = ""
        close = difflib.get_close_matches(key, known, n=1, cutoff=0.6)
        if close:
            hint = f"; did you mean {_join(prefix, close[0])!r}?"
        elif not prefix:
            homes = [s for s, keys in _SECTION_KEYS.items() if key in keys]
            if homes:
                hint = f"; did you mean {key!r} under [{homes[0]}]?"
        raise ConfigError(_join(prefix, key), f"unknown key{hint}")


def _table(value: object, key: str, ctx: _Ctx) -> Mapping[Any, Any]:
    if not isinstance(value, Mapping):
        raise ctx.error(key, f"expected a table, got {_type_name(value)}")
    return value


def _str(table: Mapping[str, object], name: str, prefix: str, default: str, ctx: _Ctx) -> str:
    key = _join(prefix, name)
    value = table.get(name, default)
    if not isinstance(value, str):
        raise ctx.error(key, f"expected a string, got {_type_name(value)}")
    return value


def _required_str(table: Mapping[str, object], name: str, prefix: str, ctx: _Ctx) -> str:
    if name not in table:
        raise ctx.error(_join(prefix, name), "is required")
    return _str(table, name, prefix, "", ctx)


def _bool(table: Mapping[str, object], name: str, prefix: str, default: bool, ctx: _Ctx) -> bool:
    value = table.get(name, default)
    if not isinstance(value, bool):
        raise ctx.error(_join(prefix, name), f"expected a boolean, got {_type_name(value)}")
    return value


def _int(table: Mapping[str, object], name: str, prefix: str, default: int, ctx: _Ctx) -> int:
    key = _join(prefix, name)
    value = table.get(name, default)
    if isinstance(value, bool) or not isinstance(value, int):
        raise ctx.error(key, f"expected an integer, got {_type_name(value)}")
    if value <= 0:
        raise ctx.error(key, "must be positive")
    return value


def _float(
    table: Mapping[str, object],
    name: str,
    prefix: str,
    default: float,
    ctx: _Ctx,
    *,
    allow_zero: bool = False,
) -> float:
    key = _join(prefix, name)
    value = table.get(name, default)
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ctx.error(key, f"expected a number, got {_type_name(value)}")
    number = float(value)
    if not math.isfinite(number):
        raise ctx.error(key, "must be a finite number")
    if number < 0 or (number == 0 and not allow_zero):
        raise ctx.error(key, "must not be negative" if allow_zero else "must be positive")
    return number


def _array(value: object, key: str, ctx: _Ctx) -> Sequence[object]:
    if not isinstance(value, list | tuple):
        raise ctx.error(key, f"expected an array, got {_type_name(value)}")
    return cast(Sequence[object], value)


def _str_array(
    table: Mapping[str, object], name: str, prefix: str, default: Sequence[str], ctx: _Ctx
) -> list[str]:
    key = _join(prefix, name)
    items = _array(table.get(name, default), key, ctx)
    out: list[str] = []
    for i, item in enumerate(items):
        if not isinstance(item, str):
            raise ctx.error(f"{key}[{i}]", f"expected a string, got {_type_name(item)}")
        if not item:
            raise ctx.error(f"{key}[{i}]", "must not be empty")
        out.append(item)
    return out


def _bind(value: str, key: str, ctx: _Ctx) -> str:
    try:
        parse_bind(value)
    except ValueError as exc:
        raise ctx.error(key, f"invalid bind {value!r}: {exc}") from None
    return value


def _url(value: str, key: str, ctx: _Ctx) -> str:
    if not value or any(ch.isspace() or ord(ch) < 0x20 for ch in value):
        raise ctx.error(key, "must be an absolute http(s) URL without spaces")
    try:
        parts = urlsplit(value)
        parts.port  # noqa: B018 - raises ValueError for an invalid port
    except ValueError:
        raise ctx.error(key, "is not a valid URL") from None
    if parts.scheme not in ("http", "https"):
        raise ctx.error(key, "must be an absolute http:// or https:// URL")
    if not parts.hostname:
        raise ctx.error(key, "must include a host")
    if parts.username is not None or parts.password is not None:
        raise ctx.error(key, "must not contain credentials")
    if parts.query or parts.fragment or value.endswith(("?", "#")):
        raise ctx.error(key, "must not contain a query or fragment")
    return value.rstrip("/")


def _host_path(value: str, key: str, ctx: _Ctx, *, must_be_absolute: bool = False) -> Path:
    if not value:
        raise ctx.error(key, "must not be empty")
    try:
        path = Path(value).expanduser()
    except RuntimeError:
        raise ctx.error(key, "cannot expand '~': the home directory is unknown") from None
    if must_be_absolute and not path.is_absolute():
        raise ctx.error(key, "must be an absolute path (after '~' expansion)")
    try:
        return path.resolve()
    except (OSError, ValueError, RuntimeError) as exc:
        raise ctx.error(key, f"cannot resolve path: {type(exc).__name__}") from None


def _is_agent_absolute(prefix: str) -> bool:
    return prefix.startswith("/") or _WINDOWS_ABS_RE.match(prefix) is not None


def _strip_separators(prefix: str) -> str:
    stripped = prefix.rstrip("/\\")
    if stripped == "":
        return prefix[0]  # "/" itself
    if re.fullmatch(r"[A-Za-z]:", stripped):
        return prefix[:3]  # "C:\" itself
    return stripped


def _key_value(value: str, key: str, ctx: _Ctx) -> str:
    if len(value) < MIN_KEY_CHARS:
        raise ctx.error(key, f"must be at least {MIN_KEY_CHARS} characters long")
    if not all(0x21 <= ord(ch) <= 0x7E for ch in value):
        raise ctx.error(key, "must contain only visible ASCII characters (no spaces)")
    return value


# --------------------------------------------------------------------------- sections


def _server(t: Mapping[str, object], ctx: _Ctx) -> ServerConfig:
    p = "server"
    return ServerConfig(
        bind=_bind(_str(t, "bind", p, _DEFAULT_BIND, ctx), "server.bind", ctx),
        public_base_url=_url(
            _str(t, "public_base_url", p, _DEFAULT_PUBLIC_BASE_URL, ctx),
            "server.public_base_url",
            ctx,
        ),
        keepalive_seconds=_float(t, "keepalive_seconds", p, 15.0, ctx),
        drain_timeout_seconds=_float(t, "drain_timeout_seconds", p, 10.0, ctx),
        max_body_bytes=_int(t, "max_body_bytes", p, 4 * MiB, ctx),
        write_timeout_seconds=_float(t, "write_timeout_seconds", p, 10.0, ctx),
    )


def _upstream(t: Mapping[str, object], ctx: _Ctx) -> UpstreamConfig:
    p = "upstream"
    return UpstreamConfig(
        base_url=_url(_str(t, "base_url", p, _DEFAULT_UPSTREAM_URL, ctx), "upstream.base_url", ctx),
        api_key=_str(t, "api_key", p, "", ctx),
        connect_timeout_seconds=_float(t, "connect_timeout_seconds", p, 10.0, ctx),
        idle_timeout_seconds=_float(t, "idle_timeout_seconds", p, 300.0, ctx),
        models_cache_seconds=_float(t, "models_cache_seconds", p, 60.0, ctx, allow_zero=True),
    )


def _mounts(value: object, ctx: _Ctx) -> tuple[Mount, ...]:
    items = _array(value, "artifacts.mounts", ctx)
    mounts: list[Mount] = []
    seen: dict[str, int] = {}
    for i, item in enumerate(items):
        p = f"artifacts.mounts[{i}]"
        t = _table(item, p, ctx)
        _check_keys(t, _MOUNT_KEYS, p)
        prefix = _required_str(t, "agent_prefix", p, ctx)
        if not _is_agent_absolute(prefix):
            raise ctx.error(
                f"{p}.agent_prefix", "must be an absolute path like '/workspace' or 'C:\\work'"
            )
        prefix = _strip_separators(prefix)
        if prefix in seen:
            raise ctx.error(
                f"{p}.agent_prefix", f"duplicates artifacts.mounts[{seen[prefix]}].agent_prefix"
            )
        seen[prefix] = i
        host_dir = _host_path(
            _required_str(t, "host_dir", p, ctx), f"{p}.host_dir", ctx, must_be_absolute=True
        )
        mounts.append(Mount(agent_prefix=prefix, host_dir=host_dir))
    return tuple(mounts)


def _artifacts(t: Mapping[str, object], ctx: _Ctx) -> ArtifactsConfig:
    p = "artifacts"
    root_texts = _str_array(t, "roots", p, _DEFAULT_ROOTS, ctx)
    if not root_texts:
        raise ctx.error("artifacts.roots", "at least one root is required")
    roots = tuple(
        _host_path(text, f"artifacts.roots[{i}]", ctx) for i, text in enumerate(root_texts)
    )
    mode = _str(t, "default_link_mode", p, "private", ctx)
    if mode not in ("private", "public"):
        raise ctx.error(
            "artifacts.default_link_mode", f"must be 'private' or 'public', not {mode!r}"
        )
    return ArtifactsConfig(
        roots=roots,
        default_link_mode=cast(LinkMode, mode),
        public_ttl_seconds=_int(t, "public_ttl_seconds", p, 604800, ctx),
        max_bytes=_int(t, "max_bytes", p, 104857600, ctx),
        mounts=_mounts(t.get("mounts", ()), ctx),
        denied=tuple(_str_array(t, "denied", p, DEFAULT_DENIED, ctx)),
    )


def _auth(t: Mapping[str, object], ctx: _Ctx) -> AuthConfig:
    items = _array(t.get("keys", ()), "auth.keys", ctx)
    entries: list[KeyEntry] = []
    seen: dict[str, int] = {}
    for i, item in enumerate(items):
        p = f"auth.keys[{i}]"
        e = _table(item, p, ctx)
        _check_keys(e, _AUTH_KEY_KEYS, p)
        key = _key_value(_required_str(e, "key", p, ctx), f"{p}.key", ctx)
        if key in seen:
            raise ctx.error(f"{p}.key", f"duplicates auth.keys[{seen[key]}].key")
        seen[key] = i
        principal = _required_str(e, "principal", p, ctx)
        if not _PRINCIPAL_RE.fullmatch(principal):
            raise ctx.error(
                f"{p}.principal",
                "must be non-empty and use only letters, digits and . _ : @ -",
            )
        role = _str(e, "role", p, "user", ctx)
        if role not in ("user", "proxy"):
            raise ctx.error(f"{p}.role", f"must be 'user' or 'proxy', not {role!r}")
        entries.append(KeyEntry(key=key, principal=principal, role=cast(Role, role)))
    return AuthConfig(keys=tuple(entries))


def _proxy(t: Mapping[str, object], ctx: _Ctx) -> ProxyConfig:
    p = "proxy"
    gateway_key = _str(t, "gateway_key", p, "", ctx)
    if gateway_key:
        _key_value(gateway_key, "proxy.gateway_key", ctx)
    client_keys = _str_array(t, "client_keys", p, (), ctx)
    seen: dict[str, int] = {}
    for i, key in enumerate(client_keys):
        _key_value(key, f"proxy.client_keys[{i}]", ctx)
        if key in seen:
            raise ctx.error(f"proxy.client_keys[{i}]", f"duplicates proxy.client_keys[{seen[key]}]")
        seen[key] = i
    return ProxyConfig(
        bind=_bind(_str(t, "bind", p, _DEFAULT_PROXY_BIND, ctx), "proxy.bind", ctx),
        gateway_url=_url(
            _str(t, "gateway_url", p, _DEFAULT_GATEWAY_URL, ctx), "proxy.gateway_url", ctx
        ),
        gateway_key=gateway_key,
        client_keys=tuple(client_keys),
        openwebui_jwt_secret=_str(t, "openwebui_jwt_secret", p, "", ctx),
        trust_user_headers=_bool(t, "trust_user_headers", p, True, ctx),
    )


def _limits(t: Mapping[str, object], ctx: _Ctx) -> LimitsConfig:
    p = "limits"
    return LimitsConfig(
        max_path_chars=_int(t, "max_path_chars", p, 4096, ctx),
        max_event_bytes=_int(t, "max_event_bytes", p, 1 * MiB, ctx),
        run_retention_seconds=_float(t, "run_retention_seconds", p, 3600.0, ctx),
        run_log_max_events=_int(t, "run_log_max_events", p, 10000, ctx),
    )


# --------------------------------------------------------------------------- entry points


def config_from_dict(data: Mapping[str, Any], env: Mapping[str, str] | None = None) -> Config:
    """Validate ``data`` (a parsed TOML document) into a :class:`Config`.

    ``env`` supplies the environment overrides; unlike :func:`load_config`, ``None``
    here means *no* overrides, so tests get the same result on every machine. Raises
    :class:`ConfigError` on the first problem; nothing is built until all is valid.
    """
    ctx = _Ctx()
    root = _table(data, "<root>", ctx)
    _check_keys(root, _TOP_LEVEL_KEYS, "")
    sections: dict[str, dict[str, object]] = {}
    for name in _SECTION_KEYS:
        section = _table(root.get(name, {}), name, ctx)
        _check_keys(section, _SECTION_KEYS[name], name)
        sections[name] = {str(k): v for k, v in section.items()}
    top: dict[str, object] = {"state_dir": root.get("state_dir", _DEFAULT_STATE_DIR)}

    for var, dotted in ENV_OVERRIDES.items():
        raw = (env or {}).get(var, "")
        if not raw:
            continue
        value: object = raw
        if var == "GATEWAY_ARTIFACT_ROOTS":
            value = [part for part in raw.split(os.pathsep) if part]
        section_name, _, key = dotted.rpartition(".")
        (sections[section_name] if section_name else top)[key] = value
        ctx.sources[dotted] = var

    state_dir = _host_path(_str(top, "state_dir", "", _DEFAULT_STATE_DIR, ctx), "state_dir", ctx)
    return Config(
        state_dir=state_dir,
        server=_server(sections["server"], ctx),
        upstream=_upstream(sections["upstream"], ctx),
        artifacts=_artifacts(sections["artifacts"], ctx),
        auth=_auth(sections["auth"], ctx),
        proxy=_proxy(sections["proxy"], ctx),
        limits=_limits(sections["limits"], ctx),
    )


def load_config(
    path: str | os.PathLike[str] | None = None, env: Mapping[str, str] | None = None
) -> Config:
    """Load the configuration: ``path``, else ``$GATEWAY_CONFIG``, else defaults only.

    ``env`` defaults to :data:`os.environ` and provides both ``GATEWAY_CONFIG`` and the
    overrides listed in the module docstring. A missing, unreadable or malformed file
    raises :class:`ConfigError` with key ``"<file>"``.
    """
    environ: Mapping[str, str] = os.environ if env is None else env
    source: str | os.PathLike[str] | None = path
    if source is None and environ.get("GATEWAY_CONFIG"):
        source = environ["GATEWAY_CONFIG"]
    data: dict[str, Any] = {}
    if source is not None:
        file = Path(source).expanduser()
        try:
            with file.open("rb") as fh:
                data = tomllib.load(fh)
        except FileNotFoundError:
            raise ConfigError("<file>", f"config file not found: {file}") from None
        except IsADirectoryError:
            raise ConfigError("<file>", f"config path is a directory: {file}") from None
        except OSError as exc:
            reason = exc.strerror or type(exc).__name__
            raise ConfigError("<file>", f"cannot read config file {file}: {reason}") from None
        except tomllib.TOMLDecodeError as exc:
            raise ConfigError("<file>", f"invalid TOML in {file}: {exc}") from None
        except UnicodeDecodeError:
            raise ConfigError("<file>", f"config file {file} is not valid UTF-8") from None
    return config_from_dict(data, environ)
