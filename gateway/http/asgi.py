"""The quart side both services share: the app class, per-request accounting, errors.

* :class:`ServiceApp` — a quart-trio app that counts its requests (the drain waits for
  the in-flight ones; :mod:`gateway.ops.memory` trims after a busy spell) and may serve
  some routes straight from the ASGI scope (``direct_routes``, :mod:`gateway.http.direct`);
* :class:`Accounting` — the ASGI middleware :func:`install_common` puts around quart's
  ``asgi_app`` (quart's own way to wrap an app): per request an exit stack
  (:func:`cleanup_stack`, closed when the request is over, even if its body never
  started), the in-flight count, the route label, metrics and one access-log line; a
  direct route is dispatched there, anything else goes on to quart;
* :func:`install_common` — no response timeout on streams, the body limit, and JSON
  errors with stable codes for every failure (HTML pages for browsers on the download
  route, see :mod:`gateway.api.routes.artifacts`).
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Awaitable, Callable, Mapping
from types import MappingProxyType
from typing import Any

import trio
from quart import Response, request
from quart_trio import QuartTrio
from werkzeug.exceptions import HTTPException

from gateway.core.errors import GatewayError
from gateway.http.replies import (
    body_timeout_message,
    error_response,
    too_large_message,
    unexpected_message,
)
from gateway.ops.logs import log_access

__all__ = ["CLEANUP", "Accounting", "ServiceApp", "cleanup_stack", "install_common"]

log = logging.getLogger("gateway")
access_log = logging.getLogger("gateway.access")

#: the scope key of the request's exit stack
CLEANUP = "gateway.cleanup"
#: how long a request's cleanups may take once it is over
CLEANUP_SECONDS = 5.0


class ServiceApp(QuartTrio):
    """A quart-trio app that counts its requests in flight (the drain waits on them)."""

    inflight_requests: int = 0
    #: requests begun since start (:mod:`gateway.ops.memory` trims after a busy spell)
    requests_started: int = 0
    no_requests: trio.Event | None = None
    #: called once per finished request: (route, status, bytes, seconds)
    on_request: Callable[[str, int, int, float], None] | None = None
    #: ``(method, path)`` -> a server of that request without quart (gateway.http.direct)
    direct_routes: Mapping[tuple[str, str], Callable[..., Awaitable[None]]] = MappingProxyType({})


class _Counted:
    """The server's ``send``, counting what the access log and metrics report."""

    __slots__ = ("bytes", "send", "status")

    def __init__(self, send: Callable[[Any], Awaitable[None]]) -> None:
        self.send = send
        self.status = 0
        self.bytes = 0

    async def __call__(self, message: Any) -> None:
        if message["type"] == "http.response.body":
            self.bytes += len(message.get("body", b""))
        elif message["type"] == "http.response.start":
            self.status = message["status"]
        await self.send(message)


class Accounting:
    """ASGI middleware around quart's ``asgi_app`` (module docstring)."""

    def __init__(self, app: ServiceApp, inner: Callable[..., Awaitable[None]]) -> None:
        self.app = app
        self.inner = inner

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.inner(scope, receive, send)
            return
        app = self.app
        t0 = time.perf_counter()
        counted = _Counted(send)
        app.inflight_requests += 1
        app.requests_started += 1
        try:
            direct = app.direct_routes.get((scope["method"], scope["path"]))
            if direct is not None:
                await direct(app, scope, receive, counted)
            else:
                await self.inner(scope, receive, counted)
        except BaseException:
            await _clean_up(scope, shielded=True)  # (cancelled, or failed: shielded)
            raise
        else:
            await _clean_up(scope, shielded=False)
        finally:
            app.inflight_requests -= 1
            if app.inflight_requests == 0 and app.no_requests is not None:
                app.no_requests.set()
            self._finished(scope, counted.status, counted.bytes, time.perf_counter() - t0)

    def _finished(self, scope: Any, status: int, nbytes: int, seconds: float) -> None:
        route = scope.get("gateway.route", "unmatched")
        hook = self.app.on_request
        if hook is not None:
            hook(route, status, nbytes, seconds)
        if access_log.isEnabledFor(logging.INFO):
            log_access(
                access_log,
                scope.get("gateway.principal", "-"),
                scope.get("method", "-"),
                scope.get("path", "-"),
                route,
                status,
                nbytes,
                seconds * 1000,
            )


async def _clean_up(scope: Any, *, shielded: bool) -> None:
    """Close the request's exit stack, if it has one; ``shielded``: although the request
    is being cancelled (then within :data:`CLEANUP_SECONDS`)."""
    stack: contextlib.AsyncExitStack | None = scope.get(CLEANUP)
    if stack is None:
        return
    if not shielded:
        await stack.aclose()
        return
    with trio.CancelScope(deadline=trio.current_time() + CLEANUP_SECONDS, shield=True):
        await stack.aclose()


def cleanup_stack(scope: Any = None) -> contextlib.AsyncExitStack:
    """The exit stack of a request (quart's current one unless ``scope`` is given),
    closed when the request is over (made on first use)."""
    if scope is None:
        scope = request.scope
    stack: contextlib.AsyncExitStack | None = scope.get(CLEANUP)
    if stack is None:
        stack = scope[CLEANUP] = contextlib.AsyncExitStack()
    return stack


def install_common(app: ServiceApp, max_body_bytes: int, what: str) -> None:
    """What the API server and the proxy share (see the module docstring)."""
    app.asgi_app = Accounting(app, app.asgi_app)  # type: ignore[method-assign]
    app.config["RESPONSE_TIMEOUT"] = None
    app.config["MAX_CONTENT_LENGTH"] = max_body_bytes
    http_codes = {
        404: ("not_found", f"No such route on this {what}; see docs/api.md."),
        405: ("method_not_allowed", "This route does not accept that HTTP method."),
        413: ("request_too_large", too_large_message(what)),
    }

    @app.before_request
    async def _route_label() -> None:
        rule = request.url_rule
        request.scope["gateway.route"] = rule.rule if rule is not None else "unmatched"  # type: ignore[typeddict-unknown-key]

    @app.errorhandler(GatewayError)
    async def _gateway_error(exc: GatewayError) -> Response:
        return error_response(exc)

    @app.errorhandler(HTTPException)
    async def _http_error(exc: HTTPException) -> Response:
        status = exc.code or 500
        code, message = http_codes.get(
            status, ("bad_request", "The request could not be understood.")
        )
        if status == 408:  # quart's BODY_TIMEOUT: the direct routes' sentence
            code, message = "request_timeout", body_timeout_message(app.config["BODY_TIMEOUT"])
        if status >= 500:
            code, message = "internal_error", f"The {what} failed unexpectedly."
        return error_response(GatewayError(message, code=code, status=status))

    @app.errorhandler(Exception)
    async def _unexpected(exc: Exception) -> Response:
        log.exception("unhandled error on %s %s", request.method, request.path)
        return error_response(GatewayError(unexpected_message(what), code="internal_error"))
