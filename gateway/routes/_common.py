"""What the API server's routes share: who is asking, the upstream stream, the SSE reply."""

from __future__ import annotations

import time
from typing import Any

from quart import Response, request

from gateway.auth import Caller
from gateway.errors import GatewayError
from gateway.pipeline import ChatPipeline
from gateway.relay import Front, Relay, RelayOptions
from gateway.sources import SSESource
from gateway.state import GatewayState, current
from gateway.upstream import StreamResponse, close_quietly, metric_code
from gateway.web import ChannelBody, cleanup_stack, json_body, max_json_depth, sse_response

__all__ = ["authenticate", "body", "open_upstream", "relay_response", "stream_pipeline"]


def authenticate() -> Caller:
    caller = current().auth.authenticate(request.headers)
    request.scope["gateway.principal"] = caller.owner  # type: ignore[typeddict-unknown-key]
    return caller


async def body() -> dict[str, Any]:
    return await json_body(max_json_depth(current().config))


async def open_upstream(st: GatewayState, ubody: dict[str, Any], pid: str) -> StreamResponse:
    """Open the upstream stream (closed with the request, whatever happens)."""
    t0 = time.perf_counter()
    try:
        resp = await st.upstream.open_chat_stream(ubody, pid)
    except GatewayError as exc:
        st.metrics.upstream_errors.labels(metric_code(exc)).inc()
        raise
    st.metrics.first_byte.observe(time.perf_counter() - t0)
    cleanup_stack().push_async_callback(close_quietly, resp)
    return resp


def relay_response(
    st: GatewayState, route: str, relay: Relay[Any, Any, bytes], on_close: Any = None
) -> Response:
    """An SSE response whose body is ``relay`` (counted as an open stream)."""
    gauge = st.metrics.open_streams.labels(route)
    gauge.inc()

    def closed() -> None:
        gauge.dec()
        if on_close is not None:
            on_close()

    return sse_response(ChannelBody(relay, on_close=closed))


def stream_pipeline(
    st: GatewayState,
    route: str,
    resp: StreamResponse,
    pipeline: ChatPipeline,
    front: Front[Any, bytes],
    opts: RelayOptions | None = None,
) -> Response:
    """Relay an upstream stream through ``pipeline`` to ``front`` as the response body."""
    held = [0]

    def on_held(chars: int) -> None:
        if chars != held[0]:
            st.metrics.held_chars.inc(chars - held[0])
            held[0] = chars

    opts = opts or st.relay_options()
    if opts.on_held is None:
        from dataclasses import replace

        opts = replace(opts, on_held=on_held)
    source = SSESource.from_response(resp, max_event_bytes=st.config.limits.max_event_bytes)
    relay: Relay[Any, Any, bytes] = Relay(source, pipeline, front, opts)
    return relay_response(st, route, relay, on_close=lambda: st.count_rewrites(pipeline))
