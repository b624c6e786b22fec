"""Prometheus metrics (one registry per app, so tests can run many apps)."""

from __future__ import annotations

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
