"""Who is asking the proxy: the Open WebUI user, from a signed JWT or forwarded headers.

* ``X-OpenWebUI-User-Jwt`` (HS256, verified with ``proxy.openwebui_jwt_secret``;
  ``exp`` and ``iss = open-webui`` checked; an invalid token is 401, never a silent
  fallback);
* else ``X-OpenWebUI-User-Id`` when ``proxy.trust_user_headers`` (default: only when
  no JWT secret is configured — with a secret, bare headers are refused: anyone who
  can reach the proxy with the client key could claim any user).

The owner is ``openwebui:<user id>`` (ids outside the principal alphabet are hashed).
A verified Open WebUI *session* (the user's own token forwarded by a connection of
auth type "session") is stronger still: see :mod:`gateway.proxy.openwebui`.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import urllib.parse
from dataclasses import dataclass
from typing import Any

from gateway.auth import LINK_MODES
from gateway.config import Config
from gateway.errors import AuthError, RequestError
from gateway.openwebui import owner_for_user

__all__ = ["Identity", "identify", "owner_for", "requested_mode", "verify_openwebui_jwt"]

JWT_LEEWAY_SECONDS = 30


def _b64url_decode(part: str) -> bytes:
    return base64.urlsafe_b64decode(part + "=" * (-len(part) % 4))


def verify_openwebui_jwt(token: str, secret: str, now: float) -> dict[str, Any]:
    """Verify an Open WebUI user JWT (HS256); return its claims or raise 401."""

    def bad(why: str) -> AuthError:
        return AuthError(f"The Open WebUI user token is not valid: {why}.", code="invalid_user_jwt")

    parts = token.strip().split(".")
    if len(parts) != 3:
        raise bad("it is not a JWT")
    try:
        header = json.loads(_b64url_decode(parts[0]))
        claims = json.loads(_b64url_decode(parts[1]))
        signature = _b64url_decode(parts[2])
    except (ValueError, UnicodeDecodeError, RecursionError):
        raise bad("it cannot be decoded") from None
    if not isinstance(header, dict) or header.get("alg") != "HS256":
        raise bad("only HS256 is accepted")
    expected = hmac.new(secret.encode(), f"{parts[0]}.{parts[1]}".encode(), hashlib.sha256).digest()
    if not hmac.compare_digest(signature, expected):
        raise bad("the signature does not match proxy.openwebui_jwt_secret")
    if not isinstance(claims, dict):
        raise bad("its claims are not an object")
    exp = claims.get("exp")
    if not isinstance(exp, int | float) or isinstance(exp, bool):
        raise bad("it has no expiry")
    if exp + JWT_LEEWAY_SECONDS < now:
        raise bad("it has expired")
    if claims.get("iss") != "open-webui":
        raise bad("it was not issued by open-webui")
    sub = claims.get("sub")
    if not isinstance(sub, str) or not sub:
        raise bad("it names no user")
    return claims


owner_for = owner_for_user


@dataclass(frozen=True)
class Identity:
    owner: str | None
    source: str  # "session" | "jwt" | "headers" | "none"
    email: str | None = None
    name: str | None = None
    token: str | None = None  # the user's own Open WebUI token (session mode only)


def _trust_headers(config: Config) -> bool:
    return bool(config.proxy.trust_user_headers)


def identify(headers: Any, config: Config, now: float) -> Identity:
    """The identity from the JWT or (when trusted) the forwarded user headers."""
    token = headers.get("X-OpenWebUI-User-Jwt")
    secret = config.proxy.openwebui_jwt_secret
    if token is not None:
        if not secret:
            raise AuthError(
                "Open WebUI sent a user JWT but proxy.openwebui_jwt_secret is not set; "
                "configure the shared secret.",
                code="jwt_not_configured",
            )
        claims = verify_openwebui_jwt(token, secret, now)
        return Identity(owner_for(claims["sub"]), "jwt", claims.get("email"), claims.get("name"))
    if _trust_headers(config):
        user_id = headers.get("X-OpenWebUI-User-Id")
        if user_id:
            email = headers.get("X-OpenWebUI-User-Email")
            name = headers.get("X-OpenWebUI-User-Name")
            return Identity(
                owner_for(urllib.parse.unquote(user_id)),
                "headers",
                urllib.parse.unquote(email) if email else None,
                urllib.parse.unquote(name) if name else None,
            )
    return Identity(None, "none")


def identity_hint(config: Config) -> str:
    """What to configure so the proxy learns the user (the ``identity_required`` sentence)."""
    if config.proxy.openwebui_jwt_secret:
        return (
            "Private download links need to know the Open WebUI user: set Open WebUI's "
            "FORWARD_USER_INFO_HEADER JWT secret to proxy.openwebui_jwt_secret (bare user "
            "headers are not trusted while a secret is set), forward the user's session, "
            "or ask for public links."
        )
    return (
        "Private download links need to know the Open WebUI user: enable "
        "ENABLE_FORWARD_USER_INFO_HEADERS in Open WebUI (or a JWT secret, or session "
        "forwarding), or ask for public links."
    )


def requested_mode(body: dict[str, Any]) -> str | None:
    value: Any = body.get("download_link_mode")
    if value is None:
        meta = body.get("metadata")
        hermes = meta.get("hermes") if isinstance(meta, dict) else None
        value = hermes.get("download_link_mode") if isinstance(hermes, dict) else None
    if value is None:
        return None
    if value not in LINK_MODES:
        raise RequestError(
            "download_link_mode must be 'private' or 'public'.", code="invalid_download_link_mode"
        )
    return str(value)
