"""Upstream diagnosis (issue 36) against real local servers: a refused port, a name
that does not resolve, a self-signed TLS server, an HTML page, a 401 server and a
base URL without ``/v1``. For each: the client's error code and message (naming the
URL, never the key, saying what to change), one rate-limited warning in the log,
``/health/ready``'s verdict, and ``gateway doctor``'s line."""

from __future__ import annotations

import functools
import json
import logging
import socket
import ssl
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path

import pytest
import trio

from gateway.cli.diagnose import check_database, diagnose
from gateway.clients import httpclient
from gateway.clients.upstream import Upstream
from gateway.core.errors import GatewayError
from gateway.ops.config import UpstreamConfig
from tests.conftest import ALICE_KEY, PROXY_KEY, make_config, start_demo_upstream, start_gateway

KEY = "sk-upstream-secret-0123456789"
TLS = Path(__file__).parent.parent / "data" / "tls"
MODELS = json.dumps({"object": "list", "data": [{"id": "m1", "object": "model"}]}).encode()


def answer(status: int, ctype: str, body: bytes) -> bytes:
    reason = {200: "OK", 401: "Unauthorized", 404: "Not Found"}.get(status, "X")
    return b"HTTP/1.1 %d %s\r\nContent-Type: %s\r\nContent-Length: %d\r\n\r\n%s" % (
        status,
        reason.encode(),
        ctype.encode(),
        len(body),
        body,
    )


Answer = Callable[[bytes], bytes]  # request line -> the whole answer


@asynccontextmanager
async def http_server(respond: Answer, *, tls: bool = False) -> AsyncIterator[str]:
    """A real HTTP/1.1 server on 127.0.0.1 (TLS with a self-signed certificate)."""

    async def handle(stream: trio.abc.Stream) -> None:
        try:
            buf = b""
            while b"\r\n\r\n" not in buf:
                data = await stream.receive_some(65536)
                if not data:
                    return
                buf += data
            await stream.send_all(respond(buf.split(b"\r\n", 1)[0]))
            await stream.aclose()
        except trio.BrokenResourceError:
            pass  # a client that refused the certificate

    async with trio.open_nursery() as nursery:
        if tls:
            ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
            ctx.load_cert_chain(TLS / "server.pem", TLS / "server.key")
            serve = functools.partial(trio.serve_ssl_over_tcp, host="127.0.0.1")
            listeners = await nursery.start(serve, handle, 0, ctx)
            port = listeners[0].transport_listener.socket.getsockname()[1]
        else:
            serve = functools.partial(trio.serve_tcp, host="127.0.0.1")
            listeners = await nursery.start(serve, handle, 0)
            port = listeners[0].socket.getsockname()[1]
        yield f"{'https' if tls else 'http'}://localhost:{port}"
        nursery.cancel_scope.cancel()


def refused_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def html(line: bytes) -> bytes:
    return answer(200, "text/html", b"<!DOCTYPE html><html><body>Welcome</body></html>")


def unauthorized(line: bytes) -> bytes:
    body = json.dumps({"error": {"message": "Invalid API key", "code": "invalid_api_key"}})
    return answer(401, "application/json", body.encode())


def api_at_v1(line: bytes) -> bytes:
    """An OpenAI-shaped server whose API lives under /v1 only."""
    path = line.split(b" ")[1]
    if path == b"/v1/models":
        return answer(200, "application/json", MODELS)
    body = {"error": {"message": f"Route {path.decode()} not found", "code": "not_found"}}
    return answer(404, "application/json", json.dumps(body).encode())


#: (name, server answer or None, base URL maker, code, words the message must hold)
CASES = [
    ("refused", None, lambda u: f"http://127.0.0.1:{refused_port()}/v1", "upstream_refused",
     ["refused the connection", "upstream.base_url"]),
    ("dns", None, lambda u: "http://nonexistent.invalid:8000/v1", "upstream_dns_failed",
     ["could not be resolved", "nonexistent.invalid"]),
    ("tls", "tls", lambda u: u + "/v1", "upstream_tls_failed",
     ["certificate", "SSL_CERT_FILE"]),
    ("html", html, lambda u: u, "upstream_wrong_path", ["HTML page", "/v1"]),
    ("401", unauthorized, lambda u: u + "/v1", "upstream_auth_failed", ["upstream.api_key"]),
    ("no-v1", api_at_v1, lambda u: u, "upstream_wrong_path", ["no such route", "/v1"]),
]  # fmt: skip


@asynccontextmanager
async def case_url(name: str) -> AsyncIterator[str]:
    _, server, make, _, _ = next(c for c in CASES if c[0] == name)
    if server is None:
        yield make("")
        return
    respond: Answer = api_at_v1 if server == "tls" else server  # type: ignore[assignment]
    async with http_server(respond, tls=server == "tls") as url:
        yield make(url)


@pytest.fixture(autouse=True)
def _fresh_log_limits() -> None:
    httpclient._last_logged.clear()


@pytest.mark.parametrize("name", [c[0] for c in CASES])
async def test_each_cause_has_its_code_message_and_one_log_line(
    name: str, caplog: pytest.LogCaptureFixture
) -> None:
    _, _, _, code, words = next(c for c in CASES if c[0] == name)
    caplog.set_level(logging.INFO, logger="gateway.upstream")
    async with case_url(name) as base:
        u = Upstream(UpstreamConfig(base_url=base, api_key=KEY, connect_timeout_seconds=5))
        body = {"model": "m1", "messages": [{"role": "user", "content": "hi"}]}
        calls: list[Callable[[], Awaitable[object]]] = [
            lambda: u.open_chat_stream(body, "p_1"),
            lambda: u.chat(body, "p_1"),
            lambda: u.model_list(5),
        ]
        for call in calls:
            with pytest.raises(GatewayError) as info:
                await call()
            err = info.value
            assert err.code == code, (name, err.code, err.message)
            assert base.split("//")[1].split("/")[0] in err.message  # the URL's host:port
            for word in words:
                assert word in err.message, (word, err.message)
            assert KEY not in err.message
        await u.aclose()
    warnings = [
        r for r in caplog.records if r.name == "gateway.upstream" and code in r.getMessage()
    ]
    # one line per code and URL: the three calls hit two URLs (chat twice)
    assert 1 <= len(warnings) <= 2, [r.getMessage() for r in warnings]
    assert all(r.levelno == logging.WARNING for r in warnings)
    assert all(KEY not in r.getMessage() for r in caplog.records)


async def test_a_repeated_failure_is_logged_once_then_counted(
    caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    caplog.set_level(logging.INFO, logger="gateway.upstream")
    u = Upstream(UpstreamConfig(base_url=f"http://127.0.0.1:{refused_port()}/v1"))
    for _ in range(5):
        with pytest.raises(GatewayError):
            await u.model_list(2)
    lines = [r.getMessage() for r in caplog.records if "upstream_refused" in r.getMessage()]
    assert len(lines) == 1
    monkeypatch.setattr(httpclient, "LOG_EVERY", 0.0)
    with pytest.raises(GatewayError):
        await u.model_list(2)
    lines = [r.getMessage() for r in caplog.records if "upstream_refused" in r.getMessage()]
    assert len(lines) == 2 and "4 more like it" in lines[1]
    await u.aclose()


@pytest.mark.parametrize("name", [c[0] for c in CASES])
async def test_readiness_and_doctor_say_why(
    name: str, nursery: trio.Nursery, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _, _, _, code, words = next(c for c in CASES if c[0] == name)
    async with case_url(name) as base:
        cfg = make_config(tmp_path, base, upstream={"base_url": base, "api_key": KEY})
        gw = await start_gateway(nursery, cfg)
        async with gw.client(ALICE_KEY) as c:
            ready = await c.get("/health/ready")
        assert ready.status_code == 503
        checks = ready.json()["checks"]
        assert checks["upstream"] == code
        assert all(w in checks["upstream_detail"] for w in words)
        assert KEY not in ready.text
        findings = await diagnose(cfg, 5.0)
    upstream, openwebui, gateway, database = findings
    assert gateway.ok is None  # (no proxy configured)
    assert upstream.ok is False and code in upstream.text and KEY not in upstream.text
    assert all(w in upstream.line() for w in words)
    assert openwebui.ok is None and database.ok is True


async def test_a_right_base_url_is_ready_and_doctor_says_ok(
    nursery: trio.Nursery, tmp_path: Path
) -> None:
    up = await start_demo_upstream(nursery, tmp_path)
    async with http_server(html) as page:
        cfg = make_config(tmp_path, up.url + "/v1", proxy={"openwebui_url": page})
        gw = await start_gateway(nursery, cfg)
        async with gw.client(ALICE_KEY) as c:
            ready = await c.get("/health/ready")
        assert ready.status_code == 200 and ready.json()["checks"]["upstream"] == "ok"
        assert "upstream_detail" not in ready.json()["checks"]
        upstream, openwebui, _, database = await diagnose(cfg, 5.0)
    assert upstream.ok and "model(s)" in upstream.line() and upstream.line().startswith("ok")
    # Open WebUI's URL points at a web page that is not Open WebUI: said so
    assert openwebui.ok is False and "HTML page" in openwebui.text
    assert "proxy.openwebui_url" in openwebui.text
    assert database.ok


async def test_doctor_says_when_open_webui_is_down(tmp_path: Path) -> None:
    cfg = make_config(
        tmp_path,
        f"http://127.0.0.1:{refused_port()}/v1",
        proxy={"openwebui_url": f"http://127.0.0.1:{refused_port()}"},
    )
    upstream, openwebui, _, _ = await diagnose(cfg, 2.0)
    assert upstream.ok is False and openwebui.ok is False
    assert "upstream_refused" in openwebui.text and "Open WebUI" in openwebui.text


async def test_doctor_tries_the_proxys_gateway_with_its_key(
    nursery: trio.Nursery, tmp_path: Path
) -> None:
    """With a proxy configured (``proxy.gateway_key``), doctor asks its gateway: down
    (refused, naming proxy.gateway_url), up with the key, up refusing a wrong key. The
    proxy's link to the gateway went undiagnosed before (new operator)."""
    up = await start_demo_upstream(nursery, tmp_path)
    down = f"http://127.0.0.1:{refused_port()}"
    cfg = make_config(
        tmp_path, up.url + "/v1", proxy={"gateway_url": down, "gateway_key": PROXY_KEY}
    )
    _, _, gateway, _ = await diagnose(cfg, 2.0)
    assert gateway.ok is False and "upstream_refused" in gateway.text
    assert "proxy.gateway_url" in gateway.text and "gateway run" in gateway.text
    gw = await start_gateway(nursery, cfg)
    for key, ok in ((PROXY_KEY, True), ("not-the-proxy-key-0123456789", False)):
        cfg2 = make_config(
            tmp_path, up.url + "/v1", proxy={"gateway_url": gw.url, "gateway_key": key}
        )
        _, _, gateway, _ = await diagnose(cfg2, 5.0)
        assert gateway.ok is ok, gateway.text
        assert key not in gateway.text
    assert "refused proxy.gateway_key" in gateway.text


def test_doctor_before_the_first_start_makes_nothing(tmp_path: Path) -> None:
    """No database yet (SQLite): fine, `gateway run` makes it; doctor creates neither
    the state folder nor the file (it said FAIL "schema 0" and made both)."""
    state = tmp_path / "fresh" / "state"
    cfg = make_config(tmp_path, "http://127.0.0.1:9/v1", state_dir=str(state))
    finding = check_database(cfg)
    assert finding.ok is True and "gateway run" in finding.text
    assert not (tmp_path / "fresh").exists()
