"""What the API server's routes share: who is asking, the upstream stream, the SSE reply.

A handler that is also served without quart (:mod:`gateway.http.direct`) reads its
request through :class:`gateway.http.direct.Incoming`; :class:`QuartIncoming` is quart's request
seen that way, :func:`to_response` turns its :data:`gateway.http.direct.Reply` into quart's.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Awaitable, Callable
from typing import Any

from quart import Response, has_request_context, request

from gateway.api.state import GatewayState, current
from gateway.clients.sources import SSESource
from gateway.clients.upstream import StreamResponse, close_quietly, metric_code
from gateway.core.errors import GatewayError
from gateway.http.asgi import cleanup_stack
from gateway.http.direct import Incoming, Reply, StreamReply
from gateway.http.replies import (
    ChannelBody,
    json_body,
    json_response,
    max_json_depth,
    sse_response,
)
from gateway.principals.auth import Caller
from gateway.stream.pipeline import ChatPipeline
from gateway.stream.relay import Front, OnOutcome, Relay, drain_outputs

__all__ = [
    "QuartIncoming",
    "authenticate",
    "authenticate_from",
    "body",
    "open_stream",
    "open_upstream",
    "pipeline_body",
    "relay_body",
    "relay_response",
    "to_response",
]


class QuartIncoming(Incoming):
    """quart's current request, as a handler of :mod:`gateway.http.direct` reads it."""

    def __init__(self) -> None:
        self.headers = request.headers
        self.scope = request.scope  # type: ignore[assignment]

    async def json(self, max_depth: int) -> dict[str, Any]:
        return await json_body(max_depth)


def to_response(reply: Reply) -> Response:
    if isinstance(reply, StreamReply):
        return sse_response(reply.body)
    return json_response(reply.obj, reply.status)


def authenticate_from(st: GatewayState, req: Incoming) -> Caller:
    caller = st.auth.authenticate(req.headers)
    req.scope["gateway.principal"] = caller.owner
    return caller


def authenticate() -> Caller:
    """:func:`authenticate_from` for quart's current request."""
    return authenticate_from(current(), QuartIncoming())


async def body() -> dict[str, Any]:
    return await json_body(max_json_depth(current().config))


async def open_upstream(
    st: GatewayState, ubody: dict[str, Any] | bytes, pid: str, req: Incoming | None = None
) -> StreamResponse:
    """Open the upstream chat stream (closed with the request, whatever happens)."""
    return await open_stream(st, functools.partial(st.upstream.open_chat_stream, ubody, pid), req)


async def open_stream(
    st: GatewayState,
    opener: Callable[[], Awaitable[StreamResponse]],
    req: Incoming | None = None,
) -> StreamResponse:
    """Open an upstream stream with ``opener`` (closed with the request, whatever
    happens; counted in the upstream metrics)."""
    t0 = time.perf_counter()
    try:
        resp = await opener()
    except GatewayError as exc:
        st.metrics.upstream_errors.labels(metric_code(exc)).inc()
        raise
    st.metrics.first_byte.observe(time.perf_counter() - t0)
    scope: Any = req.scope if req is not None else request.scope
    cleanup_stack(scope).push_async_callback(close_quietly, resp)
    return resp


def relay_body(
    st: GatewayState, route: str, relay: Relay[Any, Any, bytes], on_close: Any = None
) -> ChannelBody:
    """An SSE body that is ``relay`` (counted as an open stream)."""
    gauge = st.metrics.open_streams_of(route)
    gauge.inc()

    def closed() -> None:
        gauge.dec()
        if on_close is not None:
            on_close()

    body = ChannelBody(relay, on_close=closed)
    if has_request_context():  # a quart route: closed even if the body is never sent
        cleanup_stack().callback(body.discard)
    return body


def relay_response(
    st: GatewayState, route: str, relay: Relay[Any, Any, bytes], on_close: Any = None
) -> Response:
    """An SSE response whose body is ``relay`` (counted as an open stream)."""
    return sse_response(relay_body(st, route, relay, on_close))


async def collect(
    st: GatewayState,
    resp: StreamResponse,
    pipeline: ChatPipeline,
    front: Front[Any, bytes],
    on_outcome: OnOutcome | None = None,
) -> None:
    """Relay an upstream stream through ``pipeline`` to ``front`` to its end, for a
    non-streamed answer (the front keeps what it needs); the stream's error is raised."""
    source = SSESource.from_response(resp, max_event_bytes=st.config.limits.max_event_bytes)
    relay: Relay[Any, Any, bytes] = Relay(
        source, pipeline, front, st.relay_options(on_outcome=on_outcome)
    )
    async with relay as outputs:
        await drain_outputs(outputs)
    st.count_rewrites(pipeline)
    if isinstance(relay.outcome, GatewayError):
        raise relay.outcome


def pipeline_body(
    st: GatewayState,
    route: str,
    resp: StreamResponse,
    pipeline: ChatPipeline,
    front: Front[Any, bytes],
    on_outcome: OnOutcome | None = None,
) -> ChannelBody:
    """Relay an upstream stream through ``pipeline`` to ``front`` (an SSE body);
    ``on_outcome``: the relay's (:class:`gateway.stream.relay.RelayOptions`)."""
    held = [0]

    def on_held(chars: int) -> None:
        if chars != held[0]:
            st.metrics.held_chars.inc(chars - held[0])
            held[0] = chars

    opts = st.relay_options(on_held=on_held, on_outcome=on_outcome)
    source = SSESource.from_response(resp, max_event_bytes=st.config.limits.max_event_bytes)
    relay: Relay[Any, Any, bytes] = Relay(source, pipeline, front, opts)
    return relay_body(st, route, relay, on_close=functools.partial(st.count_rewrites, pipeline))
