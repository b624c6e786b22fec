"""Routes served straight from the ASGI scope: no quart request, context or response.

The API server's hot routes (``POST /v1/chat/completions``, ``GET /health``) are served
here (``ServiceApp.direct_routes``, dispatched by :class:`gateway.http.asgi.Accounting`)
by the same handler code the quart routes call (:class:`Incoming` is what a handler
reads, :data:`Reply` what it returns), so both ways answer alike:

* the body: ``server.max_body_bytes`` (413 ``request_too_large``, at once when the
  declared length is larger), quart's ``BODY_TIMEOUT`` for the whole body (408
  ``request_timeout``), a client gone while it arrives ends the request silently; a
  body that came with the head is taken whole (the ``gateway.body`` extension);
* once the body is read, a client that disconnects cancels the request (the upstream
  stream is closed), as quart-trio's message task does: on the gateway's connections
  by the request's :class:`~gateway.http.exchange.Disconnect` callback, with no task
  waiting for the ``http.disconnect`` message (elsewhere, one task does);
* every :class:`~gateway.core.errors.GatewayError` leaves as the JSON error of
  :func:`gateway.http.replies.error_parts`; anything else is logged and answered 500
  ``internal_error`` without details (a failure after the answer started closes the
  connection, as it does through quart).

A client that half-closes its side after a complete request is, on quart's way, a
client that left: quart-trio cancels at once; here the disconnect is watched from the
end of the body on, so an answer already complete by then still goes out.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import trio

from gateway.core.errors import GatewayError, RequestError
from gateway.http.exchange import BODY, DISCONNECT, WRITES, Disconnect
from gateway.http.replies import (
    SSE_HEAD,
    ChannelBody,
    body_timeout_message,
    error_parts,
    json_bytes,
    parse_json_object,
    too_large_message,
    unexpected_message,
)

__all__ = [
    "DirectRequest",
    "DirectRoute",
    "Incoming",
    "JSONReply",
    "Reply",
    "ScopeHeaders",
    "StreamReply",
    "direct_route",
    "serve_direct",
]

log = logging.getLogger("gateway")
#: what the answers call this server (the direct routes are the API server's)
WHAT = "gateway"


@dataclass
class JSONReply:
    """A JSON answer."""

    obj: Any
    status: int = 200


@dataclass
class StreamReply:
    """An SSE answer whose body is a relay (``gateway.http.replies.SSE_HEADERS``)."""

    body: ChannelBody


Reply = JSONReply | StreamReply


class Incoming:
    """What a route handler reads of its request, whichever way it came."""

    headers: Any  # gateway.principals.auth.HeaderLookup
    scope: dict[str, Any]

    async def json(self, max_depth: int) -> dict[str, Any]:
        """The request's JSON object body (``RequestError`` when it is not one)."""
        raise NotImplementedError

    def release(self) -> None:
        """The handler is done with the request's body (nothing to do by default)."""


class ScopeHeaders:
    """Case-insensitive ``get``/``getlist`` over ASGI headers (latin-1, as werkzeug's);
    indexed by name on the first look-up (a request looks up half a dozen)."""

    __slots__ = ("_index", "_raw")

    def __init__(self, raw: list[tuple[bytes, bytes]]) -> None:
        self._raw = raw
        self._index: dict[bytes, list[bytes]] | None = None

    def _values(self, key: str) -> list[bytes]:
        index = self._index
        if index is None:
            index = self._index = {}
            for name, value in self._raw:
                index.setdefault(name.lower(), []).append(value)
        return index.get(key.lower().encode("latin-1"), [])

    def forget(self) -> None:
        """Drop the index (built again on the next look-up): a request whose answer
        streams for minutes need not hold it)."""
        self._index = None

    def getlist(self, key: str, /) -> list[str]:
        return [v.decode("latin-1") for v in self._values(key)]

    def get(self, key: str, default: str | None = None, /) -> str | None:
        values = self._values(key)
        return values[0].decode("latin-1") if values else default


class _Gone(Exception):
    """The client disconnected while its request body arrived."""


@dataclass
class DirectRequest(Incoming):
    scope: dict[str, Any]
    receive: Callable[[], Awaitable[Any]]
    max_body_bytes: int
    body_timeout: float
    #: called once the body is read: from then on a client that leaves cancels the request
    watch: Callable[[], object]
    headers: ScopeHeaders = field(init=False)
    _body: bytes | None = None

    def __post_init__(self) -> None:
        self.headers = ScopeHeaders(self.scope["headers"])

    async def body(self) -> bytes:
        if self._body is None:
            take = self.scope["extensions"].get(BODY)
            whole: bytes | None = take() if take is not None else None
            if whole is None:
                self._body = await self._read_body()
            elif len(whole) > self.max_body_bytes:
                raise self._too_large()
            else:
                self._body = whole  # it came with the head: no wait, no timer
            self.watch()
        return self._body

    async def json(self, max_depth: int) -> dict[str, Any]:
        return parse_json_object(await self.body(), max_depth=max_depth)

    def release(self) -> None:
        """The handler is done with the request (its answer is a stream that may last
        long): let the body's bytes go (a conversation's can be megabytes, per stream)
        and the headers' index."""
        self.headers.forget()
        self._body = None

    def _too_large(self) -> GatewayError:
        return RequestError(too_large_message(WHAT), code="request_too_large", status=413)

    async def _read_body(self) -> bytes:
        declared = self.headers.get("content-length")
        if declared is not None and declared.isdigit() and int(declared) > self.max_body_bytes:
            raise self._too_large()
        parts: list[bytes] = []
        size = 0
        with trio.move_on_after(self.body_timeout) as waited:
            while True:
                message = await self.receive()
                if message["type"] != "http.request":
                    raise _Gone
                data = message.get("body", b"")
                if data:
                    size += len(data)
                    if size > self.max_body_bytes:
                        raise self._too_large()
                    parts.append(data)
                if not message.get("more_body", False):
                    break
        if waited.cancelled_caught:
            raise RequestError(
                body_timeout_message(self.body_timeout), code="request_timeout", status=408
            )
        return parts[0] if len(parts) == 1 else b"".join(parts)


async def _watch_disconnect(
    receive: Callable[[], Awaitable[Any]], cancel: trio.CancelScope
) -> None:
    """Where the server gives no :class:`~gateway.http.exchange.Disconnect`: wait for
    the ``http.disconnect`` message (the request body is read by then)."""
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            cancel.cancel()
            return


#: a direct route: the app's state and the request -> the reply
DirectRoute = Callable[[Any, Incoming], Awaitable[Reply]]


def direct_route(route: str, handler: DirectRoute) -> Callable[..., Awaitable[None]]:
    """What ``ServiceApp.direct_routes`` maps a ``(method, path)`` to: serve it with
    ``handler``, labelled ``route`` (``app, scope, receive, send``)."""
    return functools.partial(serve_direct, route=route, handler=handler)


async def serve_direct(
    app: Any, scope: Any, receive: Any, send: Any, *, route: str, handler: DirectRoute
) -> None:
    """Serve one request with ``handler``."""
    scope["gateway.route"] = route
    limits = int(app.config["MAX_CONTENT_LENGTH"]), float(app.config["BODY_TIMEOUT"] or "inf")
    gone: Disconnect | None = scope.get("extensions", {}).get(DISCONNECT)
    with trio.CancelScope() as cancel:  # cancelled when the client leaves after its body
        if gone is not None:  # the gateway's connections: a callback, no task
            try:
                req = DirectRequest(
                    scope, receive, *limits, functools.partial(gone.on, cancel.cancel)
                )
                await _answer(app, handler, req, send)
            finally:
                gone.on(None)
            return
        async with trio.open_nursery() as nursery:

            def watch() -> None:
                nursery.start_soon(_watch_disconnect, receive, cancel)

            await _answer(app, handler, DirectRequest(scope, receive, *limits, watch), send)
            nursery.cancel_scope.cancel()


async def _answer(app: Any, handler: DirectRoute, req: DirectRequest, send: Any) -> None:
    """The handler's reply sent, or the error it raised before the answer began."""
    started = False
    reply: Reply | None = None
    try:
        reply = await handler(app.gateway, req)
        if isinstance(reply, StreamReply):
            req.release()
            body = reply.body
            body.writes = req.scope.get("extensions", {}).get(WRITES)
            started = True
            await send({"type": "http.response.start", "status": 200, "headers": SSE_HEAD})
            async with body as chunks:
                async for data in chunks:
                    await send({"type": "http.response.body", "body": data, "more_body": True})
            await send({"type": "http.response.body", "body": b"", "more_body": False})
        else:
            started = True
            await _send_json(send, reply.status, [], json_bytes(reply.obj))
    except _Gone:
        pass
    except Exception as exc:
        if started:
            raise
        await _send_json(send, *error_parts(_as_gateway_error(exc, req.scope)))
    finally:
        if isinstance(reply, StreamReply):
            reply.body.discard()  # (a body never entered: its close still runs, once)


def _as_gateway_error(exc: Exception, scope: dict[str, Any]) -> GatewayError:
    """The error to answer with: quart-trio's rule, the first exception of a group (an
    error raised in a nursery), then a ``GatewayError`` as it is, anything else logged
    and answered ``internal_error`` without details."""
    first: BaseException = exc
    while isinstance(first, BaseExceptionGroup) and first.exceptions:
        first = first.exceptions[0]
    if isinstance(first, GatewayError):
        return first
    log.exception("unhandled error on %s %s", scope.get("method"), scope.get("path"))
    return GatewayError(unexpected_message(WHAT), code="internal_error")


_JSON_HEAD = [(b"content-type", b"application/json")]


async def _send_json(
    send: Any, status: int, headers: list[tuple[bytes, bytes]], body: bytes
) -> None:
    head = [*_JSON_HEAD, (b"content-length", b"%d" % len(body)), *headers]
    await send({"type": "http.response.start", "status": status, "headers": head})
    await send({"type": "http.response.body", "body": body, "more_body": False})
