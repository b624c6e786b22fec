"""The API server's state: built once per app, read by every route.

:class:`GatewayApp` is the typed app (``app.gateway`` is its :class:`GatewayState`);
routes reach the state through :func:`current`. Nothing here knows HTTP routes.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, cast

import trio
from quart import current_app

from gateway.api.metrics import Metrics
from gateway.clients.openwebui import OpenWebUI
from gateway.clients.upstream import Upstream
from gateway.core.rewrite import rewrite
from gateway.http.asgi import ServiceApp
from gateway.links.artifacts import ArtifactService, NameOnly
from gateway.links.signing import Signer
from gateway.ops.config import Config, extra_roots
from gateway.principals.auth import Authenticator
from gateway.principals.quotas import Quotas
from gateway.principals.sessions import Sessions
from gateway.runs.manager import Runs
from gateway.store import Store
from gateway.stream.native import NativeApis
from gateway.stream.pipeline import ChatPipeline, LinkResolver, PipelineSettings
from gateway.stream.relay import RelayOptions

__all__ = ["GatewayApp", "GatewayState", "current", "extra_roots", "make_scrub"]


def make_scrub(config: Config) -> Callable[[str], str]:
    """A complete string with every path reduced to its name (errors, model ids)."""
    roots = extra_roots(config)
    limit = config.limits.max_path_chars

    def scrub(text: str) -> str:
        return rewrite(text, extra_roots=roots, max_path_chars=limit)

    return scrub


@dataclass
class GatewayState:
    """Everything a request handler needs."""

    config: Config
    upstream: Upstream
    auth: Authenticator
    signer: Signer
    store: Store
    artifacts: ArtifactService
    sessions: Sessions
    runs: Runs
    quotas: Quotas
    settings: PipelineSettings
    #: which of the upstream's own APIs are relayed (``upstream.apis``)
    native: NativeApis
    #: Open WebUI, when ``proxy.openwebui_url`` is set: downloads accept its sessions
    openwebui: OpenWebUI | None = None
    metrics: Metrics = field(default_factory=Metrics)
    draining: trio.Event = field(default_factory=trio.Event)
    started: float = field(default_factory=time.time)

    @property
    def extra_roots(self) -> tuple[str, ...]:
        return extra_roots(self.config)

    def scrub(self, text: str) -> str:
        """A complete string with every path reduced to its name (errors, model ids)."""
        return self.upstream.scrub(text)

    def resolver(self, owner: str, mode: str, *, names_only: bool = False) -> LinkResolver:
        if names_only:
            return NameOnly(mode)
        return self.artifacts.for_response(owner, mode)

    def pipeline(self, resolver: LinkResolver) -> ChatPipeline:
        return ChatPipeline(resolver, self.settings, pause=trio.lowlevel.checkpoint)

    def relay_options(self, **changes: Any) -> RelayOptions:
        cfg = self.config
        return RelayOptions(
            **{
                "keepalive_seconds": cfg.server.keepalive_seconds,
                "idle_timeout_seconds": cfg.upstream.idle_timeout_seconds,
                "first_byte_seconds": self.upstream.first_byte_seconds,
                "draining": self.draining,
                **changes,
            }
        )

    def count_rewrites(self, pipeline: ChatPipeline) -> None:
        stats = pipeline.stats
        if stats.links or stats.names:  # most answers have neither: no locked increments
            links, names = self._rewrite_counters
            links.inc(stats.links)
            names.inc(stats.names)

    @functools.cached_property
    def _rewrite_counters(self) -> tuple[Any, Any]:
        """The two children once (``labels()`` takes a lock and builds a key: per stream)."""
        rewrites = self.metrics.rewrites
        return rewrites.labels("link"), rewrites.labels("name_only")

    async def aclose(self) -> None:
        """Close the upstream client and the store (idempotent)."""
        await self.upstream.aclose()
        if self.openwebui is not None:
            await self.openwebui.aclose()
        await trio.to_thread.run_sync(self.store.close)


class GatewayApp(ServiceApp):
    """The API server's app; ``gateway`` is set by :func:`gateway.api.app.create_app`."""

    gateway: GatewayState


def current() -> GatewayState:
    """The state of the app handling the current request."""
    return cast(GatewayApp, current_app).gateway
