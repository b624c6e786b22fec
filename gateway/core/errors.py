"""The gateway's exception tree: one vocabulary for HTTP errors and stream endings.

Every error the gateway raises on purpose derives from :class:`GatewayError` and
carries a stable machine-readable ``code``, an HTTP ``status`` hint and one sentence
for humans. The same classes end streams: a relay that fails hands the error to its
front, which writes it as the stream's terminal event (chat: a final chunk with
``finish_reason: "error"``; Responses: ``response.failed``; runs: ``run.failed``).
Library errors are translated at the boundary with ``raise ... from exc``.

    GatewayError
    ├── ProtocolError            malformed input from a peer (502: it came from upstream)
    │   └── SSEEventTooLarge     an incomplete SSE event grew past the bound
    ├── ConfigError              a bad configuration key (names the key)
    ├── RequestError             a client request we refuse (4xx)
    │   ├── AuthError            401/403
    │   ├── NotFound             404 (also hides other principals' objects)
    │   ├── Gone                 410: an artifact link that can no longer be served
    │   └── Throttled            429 with Retry-After: too many of something, for now
    │       └── QuotaExceeded    a principal reached one of its [quotas]
    ├── UpstreamError            the upstream failed (502/504)
    │   └── UpstreamHTTPError    it answered with an HTTP error status (its status kept)
    ├── StoreError               the state store failed (503)
    ├── LeaseLost                this instance no longer holds a run (409, internal)
    ├── Overloaded               the gateway is out of a resource (503: connections, files)
    ├── RunLogFull               a run outgrew limits.run_log_max_events (507, run.failed)
    └── Interrupted              the gateway stopped the stream itself
        ├── Draining             this instance is restarting (``gateway_draining``)
        └── RunInterrupted       the instance running a run stopped (``run_interrupted``)

Every ``code`` the code can emit is listed in ``docs/api.md`` (a test compares them).
The messages never contain a host-local path, a bearer key or a stack trace.
"""

from __future__ import annotations

import math

__all__ = [
    "AuthError",
    "ConfigError",
    "Draining",
    "GatewayError",
    "Gone",
    "Interrupted",
    "LeaseLost",
    "NotFound",
    "Overloaded",
    "ProtocolError",
    "QuotaExceeded",
    "RequestError",
    "RunInterrupted",
    "RunLogFull",
    "SSEEventTooLarge",
    "StoreError",
    "Throttled",
    "UpstreamError",
    "UpstreamHTTPError",
]


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
        return {"error": self.error_object()}

    def error_object(self) -> dict[str, str]:
        """``{"message", "type", "code"}``: the ``error`` member of bodies and terminal events."""
        return {"message": self.message, "type": self.code, "code": self.code}

    @property
    def retry_after(self) -> int | None:
        """Seconds a client should wait before retrying (``Retry-After``), if known."""
        return None


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


class Gone(RequestError):
    """The link existed but can no longer be served (expired, revoked, file changed)."""

    code = "artifact_gone"
    status = 410


class Throttled(RequestError):
    """Too many requests of a kind for now: 429, always with its own ``code`` and a
    ``Retry-After`` (whole seconds, at least 1)."""

    status = 429

    def __init__(self, message: str, *, code: str, retry_after: float) -> None:
        super().__init__(message, code=code)
        self._retry_after = max(1, math.ceil(retry_after))

    @property
    def retry_after(self) -> int | None:
        return self._retry_after


class QuotaExceeded(Throttled):
    """A principal reached one of its quotas (``[quotas]``); other principals are not
    affected."""


class UpstreamError(GatewayError):
    """The upstream model server failed or could not be reached."""

    code = "upstream_error"
    status = 502


class UpstreamHTTPError(UpstreamError):
    """The upstream answered with an HTTP error status."""

    def __init__(
        self, message: str, *, code: str, status: int, retry_after: int | None = None
    ) -> None:
        super().__init__(message, code=code, status=status)
        self._retry_after = retry_after

    @property
    def retry_after(self) -> int | None:
        return self._retry_after


class StoreError(GatewayError):
    """The state store failed (disk, lock, network, server down); retry later."""

    code = "store_unavailable"
    status = 503


class LeaseLost(GatewayError):
    """The caller no longer holds a run's lease (another instance interrupted it, or it
    is finished): stop running it, send nothing more."""

    code = "run_lease_lost"
    status = 409


class Overloaded(GatewayError):
    """The gateway ran out of a resource (connections, file descriptors); retry later."""

    code = "gateway_overloaded"
    status = 503

    @property
    def retry_after(self) -> int | None:
        return 1


class RunLogFull(GatewayError):
    """A run produced more events than ``limits.run_log_max_events``: it was stopped."""

    code = "run_log_full"
    status = 507

    def __init__(
        self,
        message: str = "The run produced more events than the gateway keeps "
        "(limits.run_log_max_events).",
    ) -> None:
        super().__init__(message)


class Interrupted(GatewayError):
    """The gateway ended a stream itself, before the upstream did."""

    code = "interrupted"
    status = 503


class Draining(Interrupted):
    """This instance is restarting; in-flight streams end with this error."""

    code = "gateway_draining"

    def __init__(
        self,
        message: str = "The gateway is restarting; the response was cut short, please retry.",
    ) -> None:
        super().__init__(message)


class RunInterrupted(Interrupted):
    """The instance that ran a background run stopped before the run ended."""

    code = "run_interrupted"

    def __init__(
        self,
        message: str = "The gateway instance running this run stopped; the run was interrupted.",
    ) -> None:
        super().__init__(message)
