"""The API server: state + blueprints (``gateway run``).

The routes live in :mod:`gateway.api.routes` (one blueprint per resource), the shared HTTP
plumbing in :mod:`gateway.http`, the state in :mod:`gateway.api.state`. Every error leaves
as JSON ``{"error": {"message", "type", "code"}}`` with a stable code; no stack trace
ever reaches a client.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from functools import partial
from typing import Any

import httpx
import trio

from gateway.api.routes import blueprints, chat, health, runs
from gateway.api.routes._native import adopted_runs
from gateway.api.state import GatewayApp, GatewayState, extra_roots, make_scrub
from gateway.clients.openwebui import OpenWebUI
from gateway.clients.upstream import Upstream
from gateway.http.asgi import install_common
from gateway.http.direct import direct_route
from gateway.links.artifacts import ArtifactService
from gateway.links.signing import Signer
from gateway.ops.config import Config
from gateway.principals.auth import Authenticator
from gateway.principals.quotas import Quotas
from gateway.principals.sessions import Sessions
from gateway.runs.bus import RunBus
from gateway.runs.manager import Runs
from gateway.runs.reaper import MaintenanceSettings, new_holder_id, run_maintenance
from gateway.store import Store, open_configured_store
from gateway.stream.native import NativeApis
from gateway.stream.pipeline import PipelineSettings

__all__ = ["create_app"]


def pipeline_settings(config: Config) -> PipelineSettings:
    return PipelineSettings.build(
        extra_roots(config),
        max_path_chars=config.limits.max_path_chars,
        extra_chunk_keys=frozenset(config.output.extra_chunk_keys),
        logprobs=config.output.logprobs,
        max_json_depth=config.limits.max_json_depth,
    )


def build_state(
    config: Config,
    *,
    upstream_transport: httpx.AsyncBaseTransport | None = None,
    store: Store | None = None,
    clock: Callable[[], float] = time.time,
    settings: PipelineSettings | None = None,
) -> GatewayState:
    the_store = store if store is not None else open_configured_store(config)
    signer = Signer.from_store(the_store, state_dir=config.state_dir)
    artifacts = ArtifactService(config, the_store, signer, clock=clock)
    quotas = Quotas(the_store, config, clock=clock)
    artifacts.link_quota = quotas.take_links  # links minted per minute, per principal
    upstream = Upstream(config.upstream, transport=upstream_transport, scrub=make_scrub(config))
    st = GatewayState(
        config=config,
        upstream=upstream,
        auth=Authenticator(config.auth.keys),
        signer=signer,
        store=the_store,
        artifacts=artifacts,
        sessions=Sessions(the_store, max_bytes=config.limits.history_max_bytes),
        runs=Runs(
            the_store,
            RunBus(the_store),
            holder=new_holder_id(),
            lease_seconds=config.runs.lease_seconds,
            max_events=config.limits.run_log_max_events,
            max_event_bytes=config.limits.max_event_bytes,
            max_running=config.quotas.max_running_runs,
            max_queued=config.quotas.max_queued_runs,
        ),
        quotas=quotas,
        settings=settings or pipeline_settings(config),
        native=NativeApis(config.upstream.apis, upstream.capabilities),
        openwebui=OpenWebUI.from_config(config),
    )
    return st


def create_app(
    config: Config,
    *,
    upstream_transport: httpx.AsyncBaseTransport | None = None,
    store: Store | None = None,
    clock: Callable[[], float] = time.time,
    settings: PipelineSettings | None = None,
) -> GatewayApp:
    """Build the API server app. ``app.gateway`` is its :class:`GatewayState`.

    ``settings`` replaces the pipeline settings derived from ``config`` (the harness
    passes a detector that finds nothing, to prove that it catches leaks).
    """
    app = GatewayApp("gateway", static_folder=None)  # no /static route: nothing to serve
    install_common(app, config.server.max_body_bytes, "gateway")
    st = build_state(
        config, upstream_transport=upstream_transport, store=store, clock=clock, settings=settings
    )
    app.gateway = st
    metrics = st.metrics

    # one lookup per request instead of three ``labels()`` (a lock and a key each); the
    # routes are the app's rules and "unmatched", the statuses HTTP's: a bounded set
    children: dict[tuple[str, int], tuple[Any, Any, Any]] = {}

    def on_request(route: str, status: int, nbytes: int, seconds: float) -> None:
        child = children.get((route, status))
        if child is None:
            child = children[route, status] = (
                metrics.requests.labels(route, str(status)),
                metrics.latency.labels(route),
                metrics.bytes_out.labels(route),
            )
        child[0].inc()
        child[1].observe(seconds)
        child[2].inc(nbytes)

    app.on_request = on_request
    for bp in blueprints():
        app.register_blueprint(bp)
    # the hot routes, served without quart's request and response (gateway.http.direct)
    app.direct_routes = {
        ("POST", chat.ROUTE): direct_route(chat.ROUTE, chat.chat_reply),
        ("GET", "/health"): direct_route("/health", health.health_reply),
    }

    services = trio.CancelScope()

    async def background() -> None:
        """The run bus (wake-ups across instances) and maintenance (leases, retention)."""
        with services:
            async with trio.open_nursery() as nursery:
                await nursery.start(st.runs.bus.run)
                # runs the agent runs itself (its own runs API) outlive the instance that
                # started them: another one adopts them and follows them to their end
                follow = adopted_runs(st, app.nursery.start_soon, runs.summarize_run)
                await nursery.start(
                    partial(
                        run_maintenance,
                        st.store,
                        st.runs.bus,
                        st.signer,
                        MaintenanceSettings.from_config(config),
                        adopt=(st.runs.holder, follow),
                    )
                )

    @app.before_serving
    async def _start() -> None:
        app.nursery.start_soon(background)

    @app.after_serving
    async def _close() -> None:
        # the lifespan nursery waits for its tasks: stop the services, then close
        services.cancel()
        with trio.CancelScope(shield=True):
            await st.runs.bus.aclose()
            await st.aclose()

    return app
