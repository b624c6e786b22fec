"""Load and validate the gateway configuration.

The configuration is one TOML file plus a few environment overrides. The key names
are a stable contract (docs/design.md, "Configuration"). The schema is stated once, in the
dataclasses below: every field is made with :func:`gateway.ops.schema.setting` and carries
its default, a one-line doc, its validation, its environment variable and whether it is
secret. ``gateway config example`` prints it as a commented TOML file,
``docs/configuration.md`` explains every key, and ``gateway config check`` shows what a
file resolves to.

Precedence, lowest to highest: built-in defaults, the TOML file (``load_config(path)``,
else ``$GATEWAY_CONFIG``, else none), environment overrides (:data:`ENV_OVERRIDES`; a
variable that is set but empty counts as unset).

Normalisation: ``~`` is expanded in every host path and paths are made absolute and
resolved (symlinks included; a relative path is taken from the working directory);
trailing slashes are stripped from URLs and from mount prefixes; derived defaults
(``proxy.trust_user_headers``) become plain values; the deprecated
``limits.run_retention_seconds`` becomes ``retention.runs_seconds``.

Validation is all-or-nothing: the whole configuration is checked before a
:class:`Config` exists, and the first problem raises :class:`~gateway.core.errors.ConfigError`
whose ``key`` is the dotted key (``"server.bind"``, ``"auth.keys[1].role"``, or
``"<file>"`` for an unreadable or malformed file). A bad environment override names the
variable in the message. Messages never echo a key or secret.
"""

from __future__ import annotations

import ipaddress
import os
import re
import tomllib
import unicodedata
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal
from urllib.parse import parse_qsl, urlencode, urlsplit

from gateway.core.errors import ConfigError
from gateway.ops import schema
from gateway.ops.schema import Ctx, setting

__all__ = [
    "DEFAULT_DENIED",
    "DEPRECATED_ALIASES",
    "ENV_OVERRIDES",
    "MIN_KEY_CHARS",
    "OPENWEBUI_OWNER_PREFIX",
    "ArtifactsConfig",
    "AuthConfig",
    "Config",
    "DatabaseConfig",
    "KeyEntry",
    "LimitsConfig",
    "LinkMode",
    "LoadedConfig",
    "LogConfig",
    "LogFormat",
    "LogLevel",
    "Mount",
    "OutputConfig",
    "ProxyConfig",
    "QuotasConfig",
    "RetentionConfig",
    "Role",
    "RunsConfig",
    "ServerConfig",
    "UpstreamConfig",
    "config_file_warning",
    "config_from_dict",
    "config_source",
    "exposed_secrets",
    "extra_roots",
    "inspect_config",
    "load_config",
    "mask_database_url",
    "parse_bind",
    "parse_config_text",
    "read_config_file",
]

LinkMode = Literal["private", "public"]
Role = Literal["user", "proxy"]
LogFormat = Literal["text", "json"]
UpstreamApis = Literal["auto", "chat", "native"]
LogLevel = Literal["debug", "info", "warning", "error"]

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
    ".pgpass",
    ".git-credentials",
    ".kube",
    ".env",
    ".env.*",  # .env.local, .env.production
    "*.env",  # prod.env
    "id_rsa",
    "id_dsa",
    "id_ecdsa",
    "id_ed25519",
    # agents' homes and the files that hold their state or credentials (the Hermes
    # agent's: ~/.hermes, a profile's auth.json, state.db; docs/security.md); an agent
    # home under another name is recognised by its contents (gateway/links/agenthome.py)
    ".hermes",
    ".hermes-tmp.*",
    "auth.json",
    "state.db",
    "state.db-*",
    "response_store.db*",
    "kanban.db*",
    ".codex",
    ".claude",
    ".openhands",
)

#: Deprecated dotted key -> the key it is read as.
DEPRECATED_ALIASES: Mapping[str, str] = {
    "limits.run_retention_seconds": "retention.runs_seconds",
}

#: the owner name of an Open WebUI user (``openwebui:<id>``): a verified browser session
#: and the runs proxy act as it, so no bearer key may have a principal in this space
OPENWEBUI_OWNER_PREFIX = "openwebui:"

_PRINCIPAL_RE = re.compile(r"[A-Za-z0-9._:@-]+")
_HOSTNAME_RE = re.compile(r"[A-Za-z0-9._-]+")
_WINDOWS_ABS_RE = re.compile(r"[A-Za-z]:[\\/]")
_IDENTIFIER_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


# --------------------------------------------------------------------------- binds


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


# --------------------------------------------------------------------------- checks
# Each check gets the converted value, its dotted key and the context; it returns the
# (possibly normalised) value or raises ctx.error(key, ...). None echoes a secret.


def check_bind(value: str, key: str, ctx: Ctx) -> str:
    try:
        parse_bind(value)
    except ValueError as exc:
        raise ctx.error(key, f"invalid bind {value!r}: {exc}") from None
    return value


def _invisible(ch: str) -> bool:
    """A control, format (bidi overrides such as U+202E), surrogate or unassigned character."""
    return unicodedata.category(ch).startswith("C")


def check_http_url(value: str, key: str, ctx: Ctx) -> str:
    """An absolute http(s) URL with a host, no credentials, query or fragment, and no
    control or format character (a U+202E in a link base would reorder what people read)."""
    if not value or any(ch.isspace() or ord(ch) < 0x20 for ch in value):
        raise ctx.error(key, "must be an absolute http(s) URL without spaces")
    if any(_invisible(ch) for ch in value):
        raise ctx.error(key, "must not contain control or format characters (such as U+202E)")
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


def check_database_url(value: str, key: str, ctx: Ctx) -> str:
    """A ``postgresql://`` or ``postgres://`` URL naming a host (or ``?host=`` a socket)."""
    if any(ch.isspace() or ord(ch) < 0x20 for ch in value):
        raise ctx.error(key, "must not contain spaces or control characters")
    try:
        parts = urlsplit(value)
        parts.port  # noqa: B018 - raises ValueError for an invalid port
        query = dict(parse_qsl(parts.query))
    except ValueError:
        raise ctx.error(key, "is not a valid URL") from None
    if parts.scheme not in ("postgresql", "postgres"):
        raise ctx.error(
            key, 'must be "" (SQLite under state_dir) or a postgresql:// or postgres:// URL'
        )
    if not parts.hostname and not query.get("host"):
        raise ctx.error(
            key, "must name a host, like postgresql://user:password@db.internal/gateway"
        )
    return value


def check_key(value: str, key: str, ctx: Ctx) -> str:
    """A bearer key: at least :data:`MIN_KEY_CHARS` visible ASCII characters."""
    if len(value) < MIN_KEY_CHARS:
        raise ctx.error(key, f"must be at least {MIN_KEY_CHARS} characters long")
    if not all(0x21 <= ord(ch) <= 0x7E for ch in value):
        raise ctx.error(key, "must contain only visible ASCII characters (no spaces)")
    return value


def check_principal(value: str, key: str, ctx: Ctx) -> str:
    if not _PRINCIPAL_RE.fullmatch(value):
        raise ctx.error(key, "must be non-empty and use only letters, digits and . _ : @ -")
    return value


def check_agent_prefix(value: str, key: str, ctx: Ctx) -> str:
    """An absolute agent-side path; trailing separators stripped (``/`` and ``C:\\`` stay)."""
    if not (value.startswith("/") or _WINDOWS_ABS_RE.match(value)):
        raise ctx.error(key, "must be an absolute path like '/workspace' or 'C:\\work'")
    stripped = value.rstrip("/\\")
    if stripped == "":
        return value[0]
    if re.fullmatch(r"[A-Za-z]:", stripped):
        return value[:3]
    return stripped


def check_identifier(value: str, key: str, ctx: Ctx) -> str:
    if not _IDENTIFIER_RE.fullmatch(value):
        raise ctx.error(key, "must be a plain identifier (letters, digits, _; not first a digit)")
    if value == "gateway":
        raise ctx.error(
            key, "'gateway' is the gateway's own manifest and cannot come from upstream"
        )
    return value


def mask_database_url(url: str) -> str:
    """``url`` with its password (in the authority or a ``password=`` parameter) as ``****``."""
    try:
        parts = urlsplit(url)
        password = parts.password
    except ValueError:
        return "****" if url else ""
    netloc = parts.netloc
    if password is not None:
        userinfo, _, hostport = netloc.rpartition("@")
        user = userinfo.partition(":")[0]
        netloc = f"{user}:****@{hostport}"
    query = parts.query
    if query:
        pairs = parse_qsl(query, keep_blank_values=True)
        query = urlencode([(k, "****" if k == "password" else v) for k, v in pairs], safe="*/")
    if not url:
        return ""
    if "://" not in url:  # not a URL with an authority: keep nothing that could be secret
        return "****"
    # by hand: urlunsplit drops "//" before an empty authority for unknown schemes
    return (
        f"{parts.scheme}://{netloc}{parts.path}"
        + (f"?{query}" if query else "")
        + (f"#{parts.fragment}" if parts.fragment else "")
    )


# --------------------------------------------------------------------------- the schema


@dataclass(frozen=True, slots=True, kw_only=True)
class ServerConfig(_Listener):
    """``[server]``: the API server's listener and stream behaviour."""

    bind: str = setting(
        "127.0.0.1:8642",
        'host:port the API server listens on (IPv6 as "[::1]:8642"; port 0 = any free port)',
        env="GATEWAY_BIND",
        check=check_bind,
    )
    public_base_url: str = setting(
        "http://127.0.0.1:8642",
        "absolute origin (optionally with a path prefix) used in every minted link; when "
        "not set, http://<bind> (a wildcard host as 127.0.0.1)",
        env="GATEWAY_PUBLIC_BASE_URL",
        check=check_http_url,
    )
    keepalive_seconds: float = setting(
        15.0, "interval of SSE keep-alive comments on a quiet stream"
    )
    drain_timeout_seconds: float = setting(
        10.0, "on SIGTERM, how long in-flight streams get before the process exits"
    )
    max_body_bytes: int = setting(4 * MiB, "largest request body accepted (4 MiB)")
    write_timeout_seconds: float = setting(
        10.0, "give up on a client that stops reading for this long"
    )
    header_timeout_seconds: float = setting(
        10.0, "a client must send a complete request head within this"
    )
    max_connections: int = setting(16384, "concurrent connections per process")
    listen_backlog: int = setting(4096, "connections the kernel queues before they are accepted")

    @staticmethod
    def _finish(values: dict[str, Any], given: Collection[str], prefix: str, ctx: Ctx) -> None:
        """Links follow the listener unless ``public_base_url`` is set: a gateway moved
        to another port (``--bind``, ``GATEWAY_BIND``) kept minting links to 8642."""
        if "public_base_url" not in given and "bind" in given:
            values["public_base_url"] = url_of_bind(values["bind"])


def url_of_bind(bind: str) -> str:
    """``http://host:port`` of a listener (a wildcard host as loopback, port 0 as 8642:
    the port is not known before the socket is bound)."""
    host, port = parse_bind(bind)
    if host in ("", "0.0.0.0", "::"):
        host = "127.0.0.1"
    if ":" in host:
        host = f"[{host}]"
    return f"http://{host}:{port or 8642}"


@dataclass(frozen=True, slots=True, kw_only=True)
class UpstreamConfig:
    """``[upstream]``: the OpenAI-compatible model server."""

    base_url: str = setting(
        "http://127.0.0.1:9000/v1",
        "the OpenAI-compatible server; /chat/completions and /models are called below it",
        env="GATEWAY_UPSTREAM_URL",
        check=check_http_url,
    )
    api_key: str = setting("", "optional bearer key sent upstream", secret=True)
    connect_timeout_seconds: float = setting(10.0, "connecting to the upstream")
    first_byte_timeout_seconds: float = setting(
        120.0, "the upstream must answer (headers, first byte) within this"
    )
    idle_timeout_seconds: float = setting(300.0, "longest silence inside a stream")
    models_cache_seconds: float = setting(
        60.0, "how long GET /v1/models is cached (0 = not cached)", allow_zero=True
    )
    apis: UpstreamApis = setting(
        "auto",
        "chat: /v1/responses and /v1/runs are emulated over chat completions; native: the "
        "upstream's own /responses and /runs are relayed (the Hermes agent's); auto: native "
        "when GET <base_url>/capabilities says so",
    )


@dataclass(frozen=True, slots=True, kw_only=True)
class Mount:
    """``[[artifacts.mounts]]``: the agent sees ``agent_prefix``; the files are in ``host_dir``."""

    agent_prefix: str = setting(
        doc='the path the agent sees, absolute ("/workspace" or "C:\\\\work")',
        check=check_agent_prefix,
        unique=True,
        example="/workspace",
    )
    host_dir: Path = setting(
        doc="where those files are on this host (absolute after ~ expansion)",
        absolute=True,
        example="/srv/agent/workspace",
    )


#: the placeholder of a per-principal root (a whole path component)
PRINCIPAL_PLACEHOLDER = "{principal}"


def principal_folder(principal: str) -> str | None:
    """The folder name ``{principal}`` stands for: the principal with ``:`` written as
    ``+`` (no principal holds a ``+``, so two principals never share a folder); None
    for a principal of dots only (``.``, ``..``: no folder of its own)."""
    if not principal or set(principal) <= {"."}:
        return None
    return principal.replace(":", "+")


def _check_scope_root(root: Path, key: str, ctx: Ctx) -> None:
    parts = root.parts
    if sum(PRINCIPAL_PLACEHOLDER in p for p in parts) > 1 or any(
        PRINCIPAL_PLACEHOLDER in p and p != PRINCIPAL_PLACEHOLDER for p in parts
    ):
        raise ctx.error(key, f"may hold {PRINCIPAL_PLACEHOLDER} once, as a whole folder name")


@dataclass(frozen=True, slots=True, kw_only=True)
class Scope:
    """``[[artifacts.scopes]]``: the folders of one principal (in place of ``roots``)."""

    principal: str = setting(
        doc="whose folders these are: a key's principal, or openwebui:<user id>",
        check=check_principal,
        unique=True,
        example="openwebui:0b2c5f0e-1d2e-4f3a-9b8c-7d6e5f4a3b2c",
    )
    roots: tuple[Path, ...] = setting(
        doc="only files under these directories get links for this principal",
        absolute=True,
        min_items=1,
        example=("/srv/hermes/profiles/alice/work",),
    )


@dataclass(frozen=True, slots=True, kw_only=True)
class ArtifactsConfig:
    """``[artifacts]``: which files may get managed-download links, and for whom."""

    roots: tuple[Path, ...] = setting(
        (Path("~/.agent/artifacts") / PRINCIPAL_PLACEHOLDER,),
        "only files under these directories get links; {principal} stands for the "
        "requester's own folder (one per principal); a root without it is shared by every "
        "principal, which a multi-user config must say with shared_roots instead",
        env="GATEWAY_ARTIFACT_ROOTS",
    )
    shared_roots: tuple[Path, ...] = setting(
        (), "every principal may get links to the files under these (shared on purpose)"
    )
    scopes: tuple[Scope, ...] = setting(
        (), "the folders of one principal, used for it in place of roots"
    )
    default_link_mode: LinkMode = setting(
        "private", "link mode when neither the request nor the proxy says"
    )
    public_ttl_seconds: int = setting(604800, "lifetime of a public link (7 days)")
    max_bytes: int = setting(104857600, "largest file that gets a link (100 MiB)")
    allow_hard_links: bool = setting(
        False, "give links to files with more than one hard link (st_nlink > 1)"
    )
    denied: tuple[str, ...] = setting(
        DEFAULT_DENIED, "names inside the roots that never get a link (fnmatch patterns)"
    )
    mounts: tuple[Mount, ...] = setting((), "agent-visible prefixes mapped to host directories")
    agent_homes: tuple[Path, ...] = setting(
        (),
        "agents' home folders (HERMES_HOME, each profile): nothing in them is an artifact; "
        "homes named .hermes or holding Hermes's files are found without this",
    )

    @staticmethod
    def _finish(values: dict[str, Any], given: Collection[str], prefix: str, ctx: Ctx) -> None:
        if "roots" not in given and ({"shared_roots", "scopes"} & set(given)):
            values["roots"] = ()  # the folders given are the ones meant: no default too
        if not (values["roots"] or values["shared_roots"] or values["scopes"]):
            raise ctx.error(
                f"{prefix}.roots",
                "is empty while shared_roots and scopes are too: no file could get a link",
            )
        for i, root in enumerate(values["roots"]):
            _check_scope_root(root, f"{prefix}.roots[{i}]", ctx)
        for i, root in enumerate(values["shared_roots"]):
            if PRINCIPAL_PLACEHOLDER in str(root):
                raise ctx.error(
                    f"{prefix}.shared_roots[{i}]",
                    f"is shared: {PRINCIPAL_PLACEHOLDER} belongs in roots",
                )
        for i, scope in enumerate(values["scopes"]):
            for j, root in enumerate(scope.roots):
                if PRINCIPAL_PLACEHOLDER in str(root):
                    raise ctx.error(
                        f"{prefix}.scopes[{i}].roots[{j}]",
                        f"is {scope.principal}'s own: write its folder, not {PRINCIPAL_PLACEHOLDER}",
                    )


@dataclass(frozen=True, slots=True, kw_only=True)
class KeyEntry:
    """``[[auth.keys]]``: one bearer key of the API server (repeat the table per key)."""

    key: str = setting(
        doc=f"the bearer key: at least {MIN_KEY_CHARS} visible ASCII characters, unique",
        check=check_key,
        secret=True,
        unique=True,
        example="change-me-alice-0123456789",
    )
    principal: str = setting(
        doc="who the key acts as: letters, digits and . _ : @ -",
        check=check_principal,
        example="alice",
    )
    role: Role = setting("user", "a proxy key may assert the owner and link mode of a request")
    owner_prefix: str = setting(
        "openwebui:",
        "role = proxy only: every owner this key asserts starts with this",
        check=check_principal,
        commented=True,
    )

    @staticmethod
    def _finish(values: dict[str, Any], given: Collection[str], prefix: str, ctx: Ctx) -> None:
        if values["role"] != "proxy" and "owner_prefix" in given:
            raise ctx.error(f"{prefix}.owner_prefix", 'is only for a role = "proxy" key')


@dataclass(frozen=True, slots=True, kw_only=True)
class AuthConfig:
    """``[auth]``: the bearer keys the API server accepts (none by default)."""

    keys: tuple[KeyEntry, ...] = setting((), "bearer keys of the API server")

    @staticmethod
    def _finish(values: dict[str, Any], given: Collection[str], prefix: str, ctx: Ctx) -> None:
        """A key's principal must not be a name others own: Open WebUI users' (a browser
        session opens that owner's private links), or a proxy key's owner space (that
        proxy could act as the key's user)."""
        keys: tuple[KeyEntry, ...] = values["keys"]
        for i, entry in enumerate(keys):
            if entry.principal.startswith(OPENWEBUI_OWNER_PREFIX):
                raise ctx.error(
                    f"auth.keys[{i}].principal",
                    f"starts with {OPENWEBUI_OWNER_PREFIX!r}, the owner name of Open WebUI "
                    "users (their browser sessions and the proxy's runs), so that user would "
                    "share this key's links; rename the principal",
                )
        proxies = [(i, k) for i, k in enumerate(keys) if k.role == "proxy"]
        _check_owner_spaces(proxies, ctx)
        for i, entry in enumerate(keys):
            for j, proxy in proxies:
                if i != j and entry.principal.startswith(proxy.owner_prefix):
                    raise ctx.error(
                        f"auth.keys[{i}].principal",
                        f"starts with {proxy.owner_prefix!r}, the owner_prefix of the proxy "
                        f"key auth.keys[{j}], so that proxy could act as this key's principal; "
                        "rename the principal or give the proxy key another owner_prefix",
                    )


def _check_owner_spaces(proxies: list[tuple[int, KeyEntry]], ctx: Ctx) -> None:
    """Two proxy keys' owner spaces are the same or apart; one that holds Open WebUI's
    users (``openwebui:...``) without being theirs could act for any of them."""
    for i, proxy in proxies:
        space = proxy.owner_prefix
        if space != OPENWEBUI_OWNER_PREFIX and OPENWEBUI_OWNER_PREFIX.startswith(space):
            raise ctx.error(
                f"auth.keys[{i}].owner_prefix",
                f"{space!r} holds every Open WebUI user ({OPENWEBUI_OWNER_PREFIX}<id>), so this "
                f"proxy could act for them; write {OPENWEBUI_OWNER_PREFIX!r} if it is Open "
                "WebUI's proxy, or a prefix of its own",
            )
        for j, other in proxies:
            if (
                j > i
                and space != other.owner_prefix
                and (space.startswith(other.owner_prefix) or other.owner_prefix.startswith(space))
            ):
                raise ctx.error(
                    f"auth.keys[{j}].owner_prefix",
                    f"{other.owner_prefix!r} overlaps {space!r} of auth.keys[{i}]: one proxy "
                    "could act for the other's owners; give each its own prefix",
                )


@dataclass(frozen=True, slots=True, kw_only=True)
class ProxyConfig(_Listener):
    """``[proxy]``: the Open WebUI runs proxy (``gateway proxy``)."""

    bind: str = setting(
        "127.0.0.1:8653",
        "host:port the proxy listens on",
        env="GATEWAY_PROXY_BIND",
        check=check_bind,
    )
    gateway_url: str = setting(
        "http://127.0.0.1:8642", "the API server the proxy calls", check=check_http_url
    )
    gateway_key: str = setting(
        "", "a role = proxy key of the gateway", check=check_key, optional=True, secret=True
    )
    client_keys: tuple[str, ...] = setting(
        (), "keys Open WebUI uses to call the proxy", check=check_key, unique=True, secret=True
    )
    openwebui_jwt_secret: str = setting(
        "", "verifies X-OpenWebUI-User-Jwt when set (HS256 shared secret)", secret=True
    )
    trust_user_headers: bool = setting(
        True,
        "accept X-OpenWebUI-User-* headers without a verified JWT",
        default_doc="true when openwebui_jwt_secret is empty, false when it is set",
    )
    openwebui_url: str = setting(
        "",
        "Open WebUI's own origin, to verify forwarded sessions and upload files",
        env="GATEWAY_OPENWEBUI_URL",
        check=check_http_url,
        optional=True,
    )
    session_cache_seconds: float = setting(
        60.0,
        "how long a verified Open WebUI session is cached, by token hash (0 = not cached)",
        allow_zero=True,
    )
    native_delivery: bool = setting(
        True, "upload artifacts into Open WebUI when a user session is forwarded"
    )
    allow_anonymous: bool = setting(
        False,
        "serve chats that name no Open WebUI user (public links only) as one principal, "
        "openwebui:anonymous: every such user shares its folder and its quota",
    )
    session_checks_per_second: float = setting(
        2.0,
        "Open WebUI sessions not seen before that may be checked per second (bursts of 10); "
        "beyond it 429 too_many_session_checks",
    )

    @staticmethod
    def _finish(values: dict[str, Any], given: Collection[str], prefix: str, ctx: Ctx) -> None:
        if "trust_user_headers" not in given:
            values["trust_user_headers"] = not values["openwebui_jwt_secret"]


@dataclass(frozen=True, slots=True, kw_only=True)
class OutputConfig:
    """``[output]``: what may leave the gateway besides the wire formats' own fields."""

    extra_chunk_keys: tuple[str, ...] = setting(
        (),
        "extra top-level chunk keys relayed from upstream (each a plain identifier)",
        check=check_identifier,
        unique=True,
    )
    logprobs: bool = setting(False, "relay logprobs (rewritten) instead of dropping them")


@dataclass(frozen=True, slots=True, kw_only=True)
class LimitsConfig:
    """``[limits]``: resource bounds."""

    max_path_chars: int = setting(4096, "longest path candidate the rewriter holds back")
    max_event_bytes: int = setting(1 * MiB, "largest SSE event accepted from upstream (1 MiB)")
    max_json_depth: int = setting(64, "deepest JSON nesting accepted from clients and upstream")
    run_log_max_events: int = setting(10000, "events journaled per run")
    history_max_bytes: int = setting(
        1 * MiB,
        "earlier conversation put before a request's messages (a session's history, a "
        "previous_response_id chain), in bytes of JSON; older messages are dropped first",
    )


@dataclass(frozen=True, slots=True, kw_only=True)
class RetentionConfig:
    """``[retention]``: how long finished things are kept."""

    runs_seconds: float = setting(86400.0, "run journals are kept this long after the run ends")
    responses_seconds: float = setting(
        2592000.0,
        "stored responses are kept this long (30 days; 0 = never expire)",
        allow_zero=True,
    )
    reaper_interval_seconds: float = setting(60.0, "how often expired entries are removed")


@dataclass(frozen=True, slots=True, kw_only=True)
class DatabaseConfig:
    """``[database]``: the PostgreSQL store (used when database_url is set)."""

    pool_size: int = setting(8, "PostgreSQL connections per process")
    connect_timeout_seconds: float = setting(5.0, "connecting to PostgreSQL")


@dataclass(frozen=True, slots=True, kw_only=True)
class RunsConfig:
    """``[runs]``: background runs."""

    lease_seconds: float = setting(
        15.0, "a running run's lease; an instance that stops renewing it loses the run"
    )


@dataclass(frozen=True, slots=True, kw_only=True)
class QuotasConfig:
    """``[quotas]``: what one principal may use of a shared gateway; every principal has its own."""

    max_running_runs: int = setting(
        4, "background runs and background responses a principal has running at once"
    )
    max_queued_runs: int = setting(
        8,
        "more background runs a principal may start, waiting for a running slot; beyond "
        "them 429 run_quota_exceeded (0 = no queue)",
        allow_zero=True,
    )
    max_stored_bytes: int = setting(
        100 * MiB,
        "stored responses, sessions and run journals of a principal; a request that would "
        "store more while at it gets 429 storage_quota_exceeded",
    )
    links_per_minute: int = setting(
        600, "links a principal may mint per minute; beyond it a path becomes its file name"
    )
    selftests_per_hour: int = setting(
        30, "POST /v1/selftest calls of a principal per hour (each writes a file)"
    )


@dataclass(frozen=True, slots=True, kw_only=True)
class LogConfig:
    """``[log]``: the serving commands' log lines (on stderr)."""

    format: LogFormat = setting(
        "text",
        "text for people, json (one object per line) for log shippers",
        env="GATEWAY_LOG_FORMAT",
    )
    level: LogLevel = setting("info", "the least severe level written", env="GATEWAY_LOG_LEVEL")


@dataclass(frozen=True, slots=True, kw_only=True)
class Config:
    """The whole, validated gateway configuration."""

    state_dir: Path = setting(
        Path("~/.local/state/artifact-gateway"),
        "SQLite database and signing secret (0600, made on first run)",
        env="GATEWAY_STATE_DIR",
    )
    database_url: str = setting(
        "",
        '"" = SQLite under state_dir; a postgresql:// URL = state shared by several instances',
        env="GATEWAY_DATABASE_URL",
        check=check_database_url,
        optional=True,
        mask=mask_database_url,
    )
    server: ServerConfig
    upstream: UpstreamConfig
    artifacts: ArtifactsConfig
    auth: AuthConfig
    proxy: ProxyConfig
    output: OutputConfig
    limits: LimitsConfig
    retention: RetentionConfig
    database: DatabaseConfig
    runs: RunsConfig
    quotas: QuotasConfig
    log: LogConfig

    @staticmethod
    def _finish(values: dict[str, Any], given: Collection[str], prefix: str, ctx: Ctx) -> None:
        """A root every principal shares must be said to be shared where several do."""
        arts: ArtifactsConfig = values["artifacts"]
        if not is_multi_user(values["auth"]):
            return
        for i, root in enumerate(arts.roots):
            if PRINCIPAL_PLACEHOLDER not in str(root):
                raise ctx.error(
                    f"artifacts.roots[{i}]",
                    f"({root}) has no {PRINCIPAL_PLACEHOLDER}, so in this multi-user "
                    "configuration every user could get links to every file under it: write "
                    f"{root}/{PRINCIPAL_PLACEHOLDER} (a folder per principal), list the "
                    "principals' folders in [[artifacts.scopes]], or move it to "
                    "artifacts.shared_roots to share it on purpose (docs/security.md)",
                )


def is_multi_user(auth: AuthConfig) -> bool:
    """Several principals: more than one user key's, or a proxy key (Open WebUI users)."""
    users = {k.principal for k in auth.keys if k.role == "user"}
    return len(users) > 1 or any(k.role == "proxy" for k in auth.keys)


def scope_roots_for_detection(arts: ArtifactsConfig) -> list[str]:
    """Every configured folder as the path detector should know it (a per-principal
    root up to its placeholder: the principals' folders are below it)."""
    out: list[str] = []
    for root in (*arts.roots, *arts.shared_roots, *(r for s in arts.scopes for r in s.roots)):
        text = str(root)
        if PRINCIPAL_PLACEHOLDER in text:
            text = text.split(PRINCIPAL_PLACEHOLDER, 1)[0].rstrip("/")
        if text and text != "/":  # "/" holds everything: no root to detect by
            out.append(text)
    return out


def extra_roots(config: Config) -> tuple[str, ...]:
    """The configured artifact roots and mount prefixes, and the POSIX folders that hold
    them two or more levels deep: host paths too, for every scrubber. The gateway knows
    ``/data/acme`` is a host folder when ``/data/acme/artifacts`` is a root, so
    ``/data/acme/logs/run.log`` and ``/data/acme/artifacts.bak`` are paths as well."""
    arts = config.artifacts
    given = (*scope_roots_for_detection(arts), *(m.agent_prefix for m in arts.mounts))
    out = dict.fromkeys(given)
    for root in given:
        parts = root.rstrip("/").split("/")
        if root.startswith("/"):
            out.update(dict.fromkeys("/".join(parts[:n]) for n in range(len(parts) - 1, 2, -1)))
    return tuple(out)


#: Environment variable -> dotted key it overrides.
ENV_OVERRIDES: Mapping[str, str] = schema.env_overrides(Config)


# --------------------------------------------------------------------------- entry points


@dataclass(frozen=True, slots=True)
class LoadedConfig:
    """A :class:`Config` and where its values came from (for ``gateway config check``)."""

    config: Config
    source: str | None  # the file, "<stdin>", or None (defaults only)
    env_sources: Mapping[str, str]  # dotted key -> environment variable
    given: frozenset[str]  # dotted keys set by the file or the environment
    renamed: Mapping[str, str]  # dotted key -> the deprecated key it was written as
    notes: tuple[str, ...]  # deprecations


def inspect_config(
    data: Mapping[str, Any], env: Mapping[str, str] | None = None, source: str | None = None
) -> LoadedConfig:
    """Validate ``data`` (a parsed TOML document) and say where each value came from."""
    ctx = Ctx()
    cfg = schema.load(Config, data, env or {}, ctx, aliases=DEPRECATED_ALIASES)
    return LoadedConfig(
        cfg,
        source,
        dict(ctx.env_sources),
        frozenset(ctx.given),
        dict(ctx.renames),
        tuple(ctx.notes),
    )


def config_from_dict(data: Mapping[str, Any], env: Mapping[str, str] | None = None) -> Config:
    """Validate ``data`` (a parsed TOML document) into a :class:`Config`.

    ``env`` supplies the environment overrides; unlike :func:`load_config`, ``None``
    here means *no* overrides, so tests get the same result on every machine. Raises
    :class:`ConfigError` on the first problem; nothing is built until all is valid.
    """
    return inspect_config(data, env).config


def parse_config_text(text: str, name: str) -> dict[str, Any]:
    """Parse TOML ``text`` read from ``name``; malformed TOML is a ``"<file>"`` error."""
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError("<file>", f"invalid TOML in {name}: {exc}") from None


def read_config_file(path: str | os.PathLike[str]) -> dict[str, Any]:
    """Read and parse one TOML file (``~`` expanded); every failure is a ``"<file>"`` error."""
    file = Path(path).expanduser()
    try:
        raw = file.read_bytes()
    except FileNotFoundError:
        raise ConfigError("<file>", f"config file not found: {file}") from None
    except IsADirectoryError:
        raise ConfigError("<file>", f"config path is a directory: {file}") from None
    except OSError as exc:
        reason = exc.strerror or type(exc).__name__
        raise ConfigError("<file>", f"cannot read config file {file}: {reason}") from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise ConfigError("<file>", f"config file {file} is not valid UTF-8") from None
    return parse_config_text(text, str(file))


def exposed_secrets(data: Mapping[str, Any]) -> list[str]:
    """The dotted keys of ``data`` (a parsed TOML document, as written) that hold a
    secret: every non-empty key declared ``secret``, and a ``database_url`` with a
    password. Nothing of the values is returned."""
    found: list[str] = []
    url = data.get("database_url")
    if isinstance(url, str) and mask_database_url(url) != url:
        found.append("database_url")
    for table in schema.tables(Config):
        # (database_url's mask hides only its password: it is looked at above)
        secret = [k.name for k in table.keys if k.setting.mask is schema.mask_secret]
        if not secret:
            continue
        node: Any = data
        for part in table.name.split(".") if table.name else ():
            node = node.get(part) if isinstance(node, Mapping) else None
        entries = list(enumerate(node)) if table.array and isinstance(node, list) else [(-1, node)]
        for i, entry in entries:
            if not isinstance(entry, Mapping):
                continue
            where = f"{table.name}[{i}]" if i >= 0 else table.name
            found += [f"{where}.{name}" if where else name for name in secret if entry.get(name)]
    return found


def config_file_warning(path: str | os.PathLike[str] | None) -> str | None:
    """One sentence when the config file at ``path`` can be read by other users of the
    host (group or other permission bits) and holds a secret; None otherwise (also for
    no file, stdin, or a platform without POSIX modes). The signing-key file in
    ``state_dir`` is refused in that state; a config file is only warned about."""
    if path is None or os.name != "posix":
        return None
    file = Path(path).expanduser()
    try:
        mode = file.stat().st_mode
        if not mode & 0o044:
            return None
        names = exposed_secrets(read_config_file(file))
    except (OSError, ConfigError):
        return None
    if not names:
        return None
    who = "every user of this host" if mode & 0o004 else "its group"
    shown = ", ".join(names[:4]) + (f" and {len(names) - 4} more" if len(names) > 4 else "")
    return (
        f"the config file {file} is readable by {who} (mode {mode & 0o777:04o}) and holds "
        f"secrets ({shown}); run `chmod 600 {file}` (the gateway's user only)"
    )


def config_source(
    path: str | os.PathLike[str] | None, env: Mapping[str, str]
) -> str | os.PathLike[str] | None:
    """The file to read: ``path``, else ``$GATEWAY_CONFIG`` (if set and not empty), else none."""
    if path is not None:
        return path
    return env.get("GATEWAY_CONFIG") or None


def load_config(
    path: str | os.PathLike[str] | None = None, env: Mapping[str, str] | None = None
) -> Config:
    """Load the configuration: ``path``, else ``$GATEWAY_CONFIG``, else defaults only.

    ``env`` defaults to :data:`os.environ` and provides both ``GATEWAY_CONFIG`` and the
    overrides (:data:`ENV_OVERRIDES`). A missing, unreadable or malformed file raises
    :class:`ConfigError` with key ``"<file>"``.
    """
    return load(path, env).config


def load(
    path: str | os.PathLike[str] | None = None,
    env: Mapping[str, str] | None = None,
    *,
    overrides: Mapping[str, Any] | None = None,
) -> LoadedConfig:
    """:func:`load_config` with where each value came from. ``overrides`` (dotted key
    -> value, e.g. ``gateway run --bind``) win over the file and the environment."""
    environ: Mapping[str, str] = os.environ if env is None else env
    source = config_source(path, environ)
    data = read_config_file(source) if source is not None else {}
    for dotted, value in (overrides or {}).items():
        section, _, key = dotted.rpartition(".")
        table = data.get(section, {}) if section else data
        if isinstance(table, dict):  # else the file's own error is reported
            data = {**data, section: {**table, key: value}} if section else {**data, key: value}
        environ = {k: v for k, v in environ.items() if ENV_OVERRIDES.get(k) != dotted}
    shown = str(Path(source).expanduser().absolute()) if source is not None else None
    return inspect_config(data, environ, source=shown)
