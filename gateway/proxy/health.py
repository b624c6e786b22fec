"""The proxy's view of the gateway's health, and the proxy's operator routes:
``GET /health``, ``GET /health/ready``, ``GET /metrics``, ``GET /openapi.json``.

``/health`` needs no key, so each call must not cost a call to the gateway: a client
pipelining health checks would otherwise make the proxy send the gateway one request
per check. The answer is kept for :data:`FRESH_SECONDS`; while one check is in flight,
every other caller waits for its answer (one request at a time, whatever the load).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable

import httpx
import trio
from quart import Response

from gateway import __version__
from gateway.api.metrics import CONTENT_TYPE, ProxyMetrics
from gateway.api.openapi import proxy_document
from gateway.http.asgi import ServiceApp
from gateway.http.replies import json_response

__all__ = ["FRESH_SECONDS", "GatewayHealth", "install_operator_routes"]

#: how long one answer of the gateway's ``/health`` is reported
FRESH_SECONDS = 1.0


class GatewayHealth:
    def __init__(
        self,
        client: httpx.AsyncClient,
        clock: Callable[[], float] = time.monotonic,
        timeout: float = 2.0,
    ) -> None:
        self._client = client
        self._clock = clock
        self._timeout = timeout
        self._answer: tuple[float, str] | None = None
        self._pending: trio.Event | None = None

    async def status(self) -> str:
        """``"ok"``, ``"http <status>"`` or ``"unreachable"``: at most
        :data:`FRESH_SECONDS` old."""
        while True:
            answer = self._answer
            if answer is not None and self._clock() - answer[0] < FRESH_SECONDS:
                return answer[1]
            if self._pending is None:
                return await self._check()
            await self._pending.wait()

    async def _check(self) -> str:
        done = self._pending = trio.Event()
        started = self._clock()
        try:
            r = await self._client.get("/health", timeout=self._timeout)
            status = "ok" if r.status_code == 200 else f"http {r.status_code}"
        except httpx.HTTPError:
            status = "unreachable"
        finally:
            self._pending = None
            done.set()
        self._answer = (started, status)
        return status


def install_operator_routes(app: ServiceApp, draining: trio.Event, gateway: GatewayHealth) -> None:
    """The routes an operator's tools call, none needing a key: liveness (with the
    gateway's state), readiness (the gateway answers and this proxy is not draining;
    503 naming the check otherwise), Prometheus metrics, the OpenAPI document."""
    metrics = ProxyMetrics()
    app.on_request = metrics.on_request()
    metrics.draining.set_function(lambda: float(draining.is_set()))
    document = json.dumps(proxy_document(), separators=(",", ":")).encode()

    async def gateway_state() -> str:
        state = await gateway.status()
        metrics.gateway_up.set(1.0 if state == "ok" else 0.0)
        return state

    @app.get("/health")
    async def health() -> Response:
        body = {"status": "ok", "version": __version__, "gateway": await gateway_state()}
        return json_response({**body, "draining": draining.is_set()})

    @app.get("/health/ready")
    async def ready() -> Response:
        gw = await gateway_state()
        ok = gw == "ok" and not draining.is_set()
        checks = {"gateway": gw, "draining": draining.is_set()}
        body = {"status": "ready" if ok else "unready", "version": __version__, "checks": checks}
        return json_response(body, 200 if ok else 503)

    @app.get("/metrics")
    async def prometheus() -> Response:
        return Response(metrics.render(), content_type=CONTENT_TYPE)

    @app.get("/openapi.json")
    async def openapi() -> Response:
        return Response(document, content_type="application/json")
