"""Shared fixtures: real hypercorn servers on 127.0.0.1 with ephemeral ports.

Servers run in pytest-trio's per-test ``nursery`` fixture, which is cancelled when
the test ends, so no server or task outlives its test.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

import httpx
import pytest
import trio

from gateway.app import create_app
from gateway.config import Config, config_from_dict
from gateway.demo_upstream import DemoUpstreamApp, create_demo_upstream_app, serve_demo_upstream
from gateway.server import serve_app

ALICE_KEY = "test-alice-key-0123456789"
BOB_KEY = "test-bob-key-0123456789ab"
PROXY_KEY = "test-proxy-key-0123456789"


def make_config(tmp: Path, upstream_url: str, **overrides: Any) -> Config:
    data: dict[str, Any] = {
        "state_dir": str(tmp / "state"),
        "server": {"bind": "127.0.0.1:0", "public_base_url": "http://127.0.0.1:8642"},
        "upstream": {"base_url": upstream_url},
        "artifacts": {"roots": [str(tmp / "artifacts")], "default_link_mode": "private"},
        "auth": {
            "keys": [
                {"key": ALICE_KEY, "principal": "alice", "role": "user"},
                {"key": BOB_KEY, "principal": "bob", "role": "user"},
                {"key": PROXY_KEY, "principal": "owui-proxy", "role": "proxy"},
            ]
        },
    }
    for section, values in overrides.items():
        if isinstance(values, dict):
            data.setdefault(section, {}).update(values)
        else:
            data[section] = values
    (tmp / "artifacts").mkdir(parents=True, exist_ok=True)
    return config_from_dict(data)


@dataclass
class Upstream:
    app: DemoUpstreamApp
    url: str  # origin, without /v1


@dataclass
class Gateway:
    app: Any
    url: str
    config: Config

    def client(self, key: str = ALICE_KEY, **kw: Any) -> httpx.AsyncClient:
        return httpx.AsyncClient(
            base_url=self.url,
            headers={"Authorization": f"Bearer {key}"},
            timeout=httpx.Timeout(10, read=30),
            **kw,
        )


async def start_demo_upstream(nursery: trio.Nursery, tmp: Path, chunk_delay: float = 0.0) -> Upstream:
    app = create_demo_upstream_app(tmp / "artifacts", outside_dir=tmp / "outside", chunk_delay=chunk_delay)
    url: str = await nursery.start(serve_demo_upstream, app)
    return Upstream(app, url)


async def start_gateway(
    nursery: trio.Nursery,
    config: Config,
    *,
    transport: httpx.AsyncBaseTransport | None = None,
    customize: Callable[[Any], None] | None = None,
) -> Gateway:
    app = create_app(config, upstream_transport=transport)
    if customize is not None:
        customize(app)
    urls: list[str] = await nursery.start(
        partial(serve_app, app, "127.0.0.1:0", shutdown_trigger=trio.sleep_forever)
    )
    nursery.start_soon(_close_when_cancelled, app)
    return Gateway(app, urls[0], config)


async def _close_when_cancelled(app: Any) -> None:
    try:
        await trio.sleep_forever()
    finally:
        with trio.CancelScope(shield=True):
            await app.gateway.aclose()


@pytest.fixture
async def upstream(nursery: trio.Nursery, tmp_path: Path) -> AsyncIterator[Upstream]:
    yield await start_demo_upstream(nursery, tmp_path)


@pytest.fixture
async def gateway(nursery: trio.Nursery, upstream: Upstream, tmp_path: Path) -> AsyncIterator[Gateway]:
    yield await start_gateway(nursery, make_config(tmp_path, upstream.url + "/v1"))
