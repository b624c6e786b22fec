"""Prometheus metrics (one registry per app, so tests can run many apps)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


class Metrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.open_streams = Gauge(
            "gateway_open_streams", "Streams being relayed right now", ["route"], registry=r
        )
        self.requests = Counter(
            "gateway_requests", "HTTP requests by route and status", ["route", "status"], registry=r
        )
        self.rewrites = Counter(
            "gateway_paths_rewritten", "Host paths rewritten, by result", ["result"], registry=r
        )
        self.held_chars = Gauge(
            "gateway_held_chars", "Characters held back by rewriters right now", registry=r
        )
        self.upstream_errors = Counter(
            "gateway_upstream_errors", "Upstream failures by code", ["code"], registry=r
        )
        self.latency = Histogram(
            "gateway_request_seconds",
            "Time from request to the end of the response",
            ["route"],
            registry=r,
            buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300),
        )
        self.first_byte = Histogram(
            "gateway_upstream_first_byte_seconds",
            "Time until the upstream answered a streaming request",
            registry=r,
            buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30),
        )
        self.bytes_out = Counter(
            "gateway_response_bytes", "Response body bytes sent", ["route"], registry=r
        )

        self._open: dict[str, Any] = {}

    def open_streams_of(self, route: str) -> Any:
        """The open-streams gauge of ``route`` (``labels()`` takes a lock and builds a
        key; the routes are the app's own: a bounded set)."""
        gauge = self._open.get(route)
        if gauge is None:
            gauge = self._open[route] = self.open_streams.labels(route)
        return gauge

    def render(self) -> bytes:
        return generate_latest(self.registry)


RequestHook = Callable[[str, int, int, float], None]


def request_hook(requests: Counter, latency: Histogram, bytes_out: Counter) -> RequestHook:
    """A ``ServiceApp.on_request`` that counts each request by route and status, times it
    and adds its bytes: one lookup per request instead of three ``labels()`` (a lock and
    a key each); the routes are the app's rules and "unmatched", the statuses HTTP's: a
    bounded set."""
    children: dict[tuple[str, int], tuple[Any, Any, Any]] = {}

    def on_request(route: str, status: int, nbytes: int, seconds: float) -> None:
        child = children.get((route, status))
        if child is None:
            child = children[route, status] = (
                requests.labels(route, str(status)),
                latency.labels(route),
                bytes_out.labels(route),
            )
        child[0].inc()
        child[1].observe(seconds)
        child[2].inc(nbytes)

    return on_request


class ProxyMetrics:
    """The runs proxy's ``/metrics`` (``proxy_*``; the API server's are ``gateway_*``)."""

    def __init__(self) -> None:
        self.registry = r = CollectorRegistry()
        self.requests = Counter(
            "proxy_requests", "HTTP requests by route and status", ["route", "status"], registry=r
        )
        self.latency = Histogram(
            "proxy_request_seconds",
            "Time from request to the end of the response",
            ["route"],
            registry=r,
            buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300),
        )
        self.bytes_out = Counter(
            "proxy_response_bytes", "Response body bytes sent", ["route"], registry=r
        )
        self.draining = Gauge("proxy_draining", "1 while the proxy drains", registry=r)
        self.gateway_up = Gauge(
            "proxy_gateway_up",
            "1 when the gateway behind the proxy answered its last /health check",
            registry=r,
        )

    def on_request(self) -> RequestHook:
        return request_hook(self.requests, self.latency, self.bytes_out)

    def render(self) -> bytes:
        return generate_latest(self.registry)
