"""Who is asking the proxy: the Open WebUI user, from a signed JWT or forwarded headers.

* ``X-OpenWebUI-User-Jwt``, verified by PyJWT (what Open WebUI signs it with) with
  ``proxy.openwebui_jwt_secret``: the algorithm pinned to HS256 (the token's header
  cannot choose), ``exp``, ``iat``, ``iss = open-webui`` and ``sub`` required, ``exp``,
  ``nbf`` (when present) and ``iat`` checked against this host's clock with
  :data:`JWT_LEEWAY_SECONDS` of leeway for clock skew; an invalid token is 401
  ``invalid_user_jwt`` saying why, never a silent fallback;
* else ``X-OpenWebUI-User-Id`` when ``proxy.trust_user_headers`` (default: only when
  no JWT secret is configured — with a secret, bare headers are refused: anyone who
  can reach the proxy with the client key could claim any user).

The owner is ``openwebui:<user id>`` (ids outside the principal alphabet are hashed).
A verified Open WebUI *session* (the user's own token forwarded by a connection of
auth type "session") is stronger still: see :mod:`gateway.clients.openwebui`.
"""

from __future__ import annotations

import urllib.parse
import warnings
from dataclasses import dataclass
from typing import Any

import jwt

from gateway.clients.openwebui import owner_for_user
from gateway.core.errors import AuthError, RequestError
from gateway.ops.config import Config
from gateway.principals.auth import LINK_MODES

__all__ = ["Identity", "identify", "owner_for", "requested_mode", "verify_openwebui_jwt"]

#: clock skew tolerated between Open WebUI's host and this one, on exp, nbf and iat
JWT_LEEWAY_SECONDS = 30
#: the only algorithm accepted: the token's own header never chooses
JWT_ALGORITHMS = ["HS256"]
JWT_ISSUER = "open-webui"
#: Open WebUI 0.12.4 writes sub, email, name, role, iss, iat and exp
JWT_REQUIRED = ["exp", "iat", "iss", "sub"]

_WHY: tuple[tuple[type[jwt.PyJWTError], str], ...] = (
    (jwt.ExpiredSignatureError, "it has expired"),
    (jwt.ImmatureSignatureError, "it is not valid yet (nbf or iat lies in the future)"),
    (jwt.InvalidIssuerError, "it was not issued by open-webui"),
    (jwt.InvalidSignatureError, "the signature does not match proxy.openwebui_jwt_secret"),
    (jwt.InvalidAlgorithmError, "only HS256 is accepted"),
    (jwt.DecodeError, "it cannot be decoded"),
)


def verify_openwebui_jwt(token: str, secret: str) -> dict[str, Any]:
    """Verify an Open WebUI user JWT; return its claims or raise 401 ``invalid_user_jwt``."""

    def bad(why: str) -> AuthError:
        return AuthError(f"The Open WebUI user token is not valid: {why}.", code="invalid_user_jwt")

    try:
        with warnings.catch_warnings():
            # a secret under 32 bytes: warned once by `gateway proxy` and config check
            warnings.simplefilter("ignore", jwt.InsecureKeyLengthWarning)
            claims = jwt.decode(
                token.strip(),
                secret,
                algorithms=JWT_ALGORITHMS,
                issuer=JWT_ISSUER,
                leeway=JWT_LEEWAY_SECONDS,
                options={"require": JWT_REQUIRED},
            )
    except jwt.MissingRequiredClaimError as exc:
        raise bad(f"it has no {exc.claim!r} claim") from None
    except jwt.PyJWTError as exc:
        why = next((w for kind, w in _WHY if isinstance(exc, kind)), "its claims are malformed")
        raise bad(why) from None
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


def identify(headers: Any, config: Config) -> Identity:
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
        claims = verify_openwebui_jwt(token, secret)
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


def identity_hint(config: Config, mode: str = "private") -> str:
    """What to configure so the proxy learns the user (the ``identity_required`` sentence)."""
    what = (
        "Private download links need"
        if mode == "private"
        else "Every user would be the same anonymous one (one folder and one quota for "
        "all) unless proxy.allow_anonymous is set, so the gateway needs"
    )
    if config.proxy.openwebui_jwt_secret:
        return (
            f"{what} to know the Open WebUI user: set Open WebUI's FORWARD_USER_INFO_HEADER "
            "JWT secret to proxy.openwebui_jwt_secret (bare user headers are not trusted "
            "while a secret is set), or forward the user's session."
        )
    return (
        f"{what} to know the Open WebUI user: enable ENABLE_FORWARD_USER_INFO_HEADERS in "
        "Open WebUI (or a JWT secret, or session forwarding)."
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
