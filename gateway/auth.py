"""Bearer-key authentication and the proxy's owner / link-mode assertions.

Keys are looked up by their SHA-256 digest (a dict lookup does not leak how much
of a wrong key matched) and never logged. A ``role = "proxy"`` key may assert
``X-Gateway-Owner`` and ``X-Gateway-Link-Mode``; a user key that sends either gets
403 ``forbidden_assertion``.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Protocol

from gateway.config import KeyEntry
from gateway.errors import AuthError, RequestError

LINK_MODES = ("private", "public")
_PRINCIPAL_RE = re.compile(r"[A-Za-z0-9._:@-]{1,200}")


@dataclass(frozen=True, slots=True)
class Caller:
    """Who is asking: the key's principal, and whom the request acts for."""

    key_principal: str
    role: str
    owner: str  # the principal that owns what this request creates / may read
    asserted_mode: str | None = None


class HeaderLookup(Protocol):
    """Case-insensitive header access (werkzeug/quart ``Headers``, or a test double)."""

    def get(self, key: str, /) -> str | None: ...


def _digest(key: str) -> bytes:
    return hashlib.sha256(key.encode("utf-8", "surrogatepass")).digest()


class Authenticator:
    def __init__(self, keys: tuple[KeyEntry, ...]) -> None:
        self._by_digest = {_digest(k.key): k for k in keys}

    def authenticate(self, headers: HeaderLookup) -> Caller:
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
        entry = self._by_digest.get(_digest(token.strip()))
        if entry is None:
            raise AuthError("The bearer key is not valid for this gateway.", code="invalid_api_key")
        owner = entry.principal
        asserted_owner = headers.get("X-Gateway-Owner")
        asserted_mode = headers.get("X-Gateway-Link-Mode")
        if asserted_owner is not None or asserted_mode is not None:
            if entry.role != "proxy":
                raise AuthError(
                    "Only a proxy key may send X-Gateway-Owner or X-Gateway-Link-Mode.",
                    code="forbidden_assertion",
                    status=403,
                )
            if asserted_owner is not None:
                if not _PRINCIPAL_RE.fullmatch(asserted_owner):
                    raise RequestError(
                        "X-Gateway-Owner must be 1-200 characters of A-Z a-z 0-9 . _ : @ -.",
                        code="invalid_owner",
                    )
                owner = asserted_owner
            if asserted_mode is not None and asserted_mode not in LINK_MODES:
                raise RequestError(
                    "X-Gateway-Link-Mode must be 'private' or 'public'.",
                    code="invalid_download_link_mode",
                )
        return Caller(entry.principal, entry.role, owner, asserted_mode)


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
