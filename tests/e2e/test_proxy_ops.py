"""The runs proxy's operator routes, like the API server's: ``GET /health/ready`` (the
gateway answers and the proxy is not draining) and ``GET /metrics`` (Prometheus)."""

from __future__ import annotations

from pathlib import Path

import trio

from tests.conftest import Proxy, Upstream, make_config, proxy_config, start_proxy
from tests.procs import free_port


async def test_ready_while_the_gateway_answers(proxy: Proxy) -> None:
    async with proxy.client(key=None) as c:
        resp = await c.get("/health/ready")
    assert resp.status_code == 200, resp.text
    body = resp.json()
    assert body["status"] == "ready"
    assert body["checks"] == {"gateway": "ok", "draining": False}


async def test_unready_when_the_gateway_is_down(
    nursery: trio.Nursery, upstream: Upstream, tmp_path: Path
) -> None:
    dead = f"http://127.0.0.1:{free_port()}"
    px = await start_proxy(nursery, proxy_config(tmp_path, upstream.url + "/v1", dead))
    async with px.client(key=None) as c:
        resp = await c.get("/health/ready")
        metrics = (await c.get("/metrics")).text
    assert resp.status_code == 503
    assert resp.json()["status"] == "unready"
    assert resp.json()["checks"]["gateway"] == "unreachable"
    assert "proxy_gateway_up 0.0" in metrics


async def test_unready_while_draining(proxy: Proxy) -> None:
    proxy.app.proxy.draining.set()
    async with proxy.client(key=None) as c:
        resp = await c.get("/health/ready")
        metrics = (await c.get("/metrics")).text
    assert resp.status_code == 503
    assert resp.json()["checks"] == {"gateway": "ok", "draining": True}
    assert "proxy_draining 1.0" in metrics


async def test_metrics_count_requests_by_route_and_status(proxy: Proxy) -> None:
    async with proxy.client() as c:
        assert (await c.get("/v1/models")).status_code == 200
        assert (await c.get("/v1/models", headers={"Authorization": "Bearer x"})).status_code == 401
        assert (await c.get("/nowhere")).status_code == 404
        resp = await c.get("/metrics")
    assert resp.status_code == 200
    assert resp.headers["content-type"].startswith("text/plain; version=0.0.4")
    text = resp.text
    assert 'proxy_requests_total{route="/v1/models",status="200"} 1.0' in text
    assert 'proxy_requests_total{route="/v1/models",status="401"} 1.0' in text
    assert 'proxy_requests_total{route="unmatched",status="404"} 1.0' in text
    assert 'proxy_request_seconds_count{route="/v1/models"} 2.0' in text
    assert "gateway_requests_total" not in text  # the API server's own names stay its own


def test_no_static_route_on_either_app(tmp_path: Path) -> None:
    from gateway.api.app import create_app
    from gateway.proxy import create_proxy_app

    cfg = make_config(tmp_path, "http://127.0.0.1:9/v1")
    for app in (create_app(cfg), create_proxy_app(cfg)):
        assert not [r for r in app.url_map.iter_rules() if r.rule.startswith("/static")]
