"""``/health``, ``/health/ready``, ``/metrics`` and ``/v1/models``."""

from __future__ import annotations

import trio
from quart import Blueprint, Response

from gateway import __version__
from gateway.api.metrics import CONTENT_TYPE
from gateway.api.routes._common import QuartIncoming, authenticate, to_response
from gateway.api.state import GatewayState, current
from gateway.http.direct import Incoming, JSONReply, Reply
from gateway.http.replies import json_response

bp = Blueprint("health", __name__)


async def health_reply(st: GatewayState, req: Incoming) -> Reply:
    """Served without quart (gateway.http.direct); the quart route answers the same."""
    return JSONReply({"status": "ok", "version": __version__})


@bp.get("/health")
async def health() -> Response:
    return to_response(await health_reply(current(), QuartIncoming()))


@bp.get("/health/ready")
async def ready() -> Response:
    st = current()
    upstream = await st.upstream.probe()
    store_ok = await trio.to_thread.run_sync(st.store.check_writable)
    checks: dict[str, object] = {"upstream": upstream.code}
    if not upstream.ok:  # what is wrong and what to change, in one sentence
        checks["upstream_detail"] = upstream.detail
    checks["store"] = "ok" if store_ok else "not writable"
    checks["draining"] = st.draining.is_set()
    ok = upstream.ok and store_ok and not st.draining.is_set()
    return json_response(
        {"status": "ready" if ok else "unready", "version": __version__, "checks": checks},
        200 if ok else 503,
    )


@bp.get("/metrics")
async def metrics() -> Response:
    return Response(current().metrics.render(), content_type=CONTENT_TYPE)


@bp.get("/v1/models")
async def models() -> Response:
    authenticate()
    return json_response(await current().upstream.models())
