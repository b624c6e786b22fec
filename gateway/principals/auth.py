"""Bearer-key authentication and the proxy's owner / link-mode assertions.

Keys are looked up by their SHA-256 digest (a dict lookup does not leak how much
of a wrong key matched) and never logged; a key once found is remembered by its text
(at most one entry per configured key: a wrong key is never remembered, and a lookup
by text compares only on a full 64-bit match of Python's salted string hash). A ``role = "proxy"`` key may assert
``X-Gateway-Owner`` (only owners inside its namespace, ``owner_prefix``, default
``openwebui:``), ``X-Gateway-Link-Mode`` and ``X-Gateway-Links: names`` (file names
only, no links minted: Open WebUI's background tasks); a user key that sends any of
them gets 403 ``forbidden_assertion``.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Protocol

from gateway.core.errors import AuthError, RequestError
from gateway.ops.config import KeyEntry

LINK_MODES = ("private", "public")
DEFAULT_OWNER_PREFIX = "openwebui:"
_PRINCIPAL_RE = re.compile(r"[A-Za-z0-9._:@-]{1,200}")


@dataclass(frozen=True, slots=True)
class Caller:
    """Who is asking: the key's principal, and whom the request acts for."""

    key_principal: str
    role: str
    owner: str  # the principal that owns what this request creates / may read
    asserted_mode: str | None = None
    names_only: bool = False  # no links: every path becomes its file name


class HeaderLookup(Protocol):
    """Case-insensitive header access (werkzeug/quart ``Headers``, or a test double)."""

    def get(self, key: str, /) -> str | None: ...

    def getlist(self, key: str, /) -> list[str]: ...


def _digest(key: str) -> bytes:
    return hashlib.sha256(key.encode("utf-8", "surrogatepass")).digest()


class Authenticator:
    def __init__(self, keys: tuple[KeyEntry, ...]) -> None:
        self._by_digest = {_digest(k.key): k for k in keys}
        #: keys found before, by their text (a SHA-256 per request is ~10 k instructions)
        self._known: dict[str, KeyEntry] = {}

    def knows(self, token: str) -> bool:
        """Is ``token`` one of this gateway's bearer keys?"""
        return _digest(token.strip()) in self._by_digest

    def _entry(self, token: str) -> KeyEntry | None:
        entry = self._known.get(token)
        if entry is None:
            entry = self._by_digest.get(_digest(token))
            if entry is not None:
                self._known[token] = entry  # one text per key: bounded by the keys
        return entry

    def authenticate(self, headers: HeaderLookup) -> Caller:
        if len(headers.getlist("Authorization")) > 1:  # which one would a proxy check?
            raise AuthError("Send one Authorization header, not several.", code="invalid_api_key")
        auth = headers.get("Authorization") or ""
        scheme, _, token = auth.partition(" ")
        if not auth:
            raise AuthError(
                "Missing bearer key: send 'Authorization: Bearer <key>'.", code="missing_api_key"
            )
        if scheme.lower() != "bearer" or not token.strip():
            raise AuthError(
                "The Authorization header must be 'Bearer <key>'.", code="invalid_api_key"
            )
        entry = self._entry(token.strip())
        if entry is None:
            raise AuthError("The bearer key is not valid for this gateway.", code="invalid_api_key")
        asserted_owner = headers.get("X-Gateway-Owner")
        asserted_mode = headers.get("X-Gateway-Link-Mode")
        links = headers.get("X-Gateway-Links")
        if asserted_owner is None and asserted_mode is None and links is None:
            return Caller(entry.principal, entry.role, entry.principal)
        if entry.role != "proxy":
            raise AuthError(
                "Only a proxy key may send X-Gateway-Owner, X-Gateway-Link-Mode or "
                "X-Gateway-Links.",
                code="forbidden_assertion",
                status=403,
            )
        owner = entry.principal if asserted_owner is None else _owner(entry, asserted_owner)
        if asserted_mode is not None and asserted_mode not in LINK_MODES:
            raise RequestError(
                "X-Gateway-Link-Mode must be 'private' or 'public'.",
                code="invalid_download_link_mode",
            )
        if links not in (None, "names"):
            raise RequestError("X-Gateway-Links must be 'names'.", code="invalid_links_header")
        return Caller(entry.principal, entry.role, owner, asserted_mode, links == "names")


def _owner(entry: KeyEntry, asserted: str) -> str:
    if not _PRINCIPAL_RE.fullmatch(asserted):
        raise RequestError(
            "X-Gateway-Owner must be 1-200 characters of A-Z a-z 0-9 . _ : @ -.",
            code="invalid_owner",
        )
    prefix = entry.owner_prefix or DEFAULT_OWNER_PREFIX
    if not asserted.startswith(prefix) or asserted == prefix:
        raise AuthError(
            f"This proxy key may only act for owners named {prefix}<id>.",
            code="forbidden_owner",
            status=403,
        )
    return asserted


def effective_link_mode(caller: Caller, body: Mapping[str, object], default: str) -> str:
    """``download_link_mode`` precedence: proxy header > body > metadata.hermes > default."""
    if caller.asserted_mode is not None:
        return caller.asserted_mode
    for value in (body.get("download_link_mode"), _hermes_mode(body)):
        if value is None:
            continue
        if value not in LINK_MODES:
            raise RequestError(
                "download_link_mode must be 'private' or 'public'.",
                code="invalid_download_link_mode",
            )
        return str(value)
    return default


def _hermes_mode(body: Mapping[str, object]) -> object:
    meta = body.get("metadata")
    if isinstance(meta, Mapping):
        hermes = meta.get("hermes")
        if isinstance(hermes, Mapping):
            return hermes.get("download_link_mode")
    return None
