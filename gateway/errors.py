"""The gateway's exception tree.

Every error the gateway raises on purpose derives from :class:`GatewayError` and
carries a stable machine-readable ``code``, an HTTP ``status`` hint and one
sentence for humans. Library errors are translated at the boundary with
``raise ... from exc``.

    GatewayError
    ├── ProtocolError            malformed input from a peer (status 502 if upstream)
    │   └── SSEEventTooLarge     an incomplete SSE event grew past the bound
    ├── ConfigError              a bad configuration key (names the key)
    ├── RequestError             a client request we refuse (4xx)
    │   ├── AuthError            401/403
    │   └── NotFound             404 (also used to hide other principals' objects)
    └── UpstreamError            the upstream failed (502/504)

The messages never contain a host-local path, a bearer key or a stack trace.
"""

from __future__ import annotations


class GatewayError(Exception):
    """Base of every deliberate gateway error."""

    code: str = "gateway_error"
    status: int = 500

    def __init__(self, message: str, *, code: str | None = None, status: int | None = None):
        super().__init__(message)
        self.message = message
        if code is not None:
            self.code = code
        if status is not None:
            self.status = status

    def to_dict(self) -> dict[str, object]:
        """The body of an OpenAI-style error response."""
        return {"error": {"message": self.message, "type": self.code, "code": self.code}}


class ProtocolError(GatewayError):
    """A peer sent bytes that do not follow the protocol."""

    code = "protocol_error"
    status = 502


class SSEEventTooLarge(ProtocolError):
    """An incomplete SSE event exceeded the decoder's size bound."""

    code = "sse_event_too_large"


class ConfigError(GatewayError):
    """The configuration is invalid; ``key`` names the offending key."""

    code = "invalid_config"

    def __init__(self, key: str, message: str):
        # "<file>" (the file itself is unreadable or malformed) is not a key to name
        super().__init__(message if key == "<file>" else f"config key {key!r}: {message}")
        self.key = key


class RequestError(GatewayError):
    """A client request the gateway refuses."""

    code = "invalid_request"
    status = 400


class AuthError(RequestError):
    """Missing or wrong credentials, or a forbidden assertion."""

    code = "unauthorized"
    status = 401


class NotFound(RequestError):
    """Unknown object, or one that belongs to another principal."""

    code = "not_found"
    status = 404


class UpstreamError(GatewayError):
    """The upstream model server failed or could not be reached."""

    code = "upstream_error"
    status = 502
