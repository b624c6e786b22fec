"""The clients' TLS trust, loaded on the first TLS connection (gateway.clients.trust): the
upstream client (gateway.clients.httpclient) and the httpx clients of the proxy and Open WebUI
make the same checks as httpx's default, against a real TLS server on 127.0.0.1 with a
test CA (tests/data/tls), and load nothing before."""

from __future__ import annotations

import functools
import ssl
from pathlib import Path

import certifi
import httpx
import pytest
import trio

from gateway.clients.httpclient import HTTPClient
from gateway.clients.trust import trust_problem, verify_context
from gateway.clients.upstream import new_client
from gateway.core.errors import GatewayError

TLS = Path(__file__).parent.parent / "data" / "tls"
ANSWER = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok"


async def _serve_tls(nursery: trio.Nursery, host: str = "127.0.0.1") -> int:
    """A TLS server on 127.0.0.1 answering every request with ``ok``; its port."""
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ctx.load_cert_chain(TLS / "server.pem", TLS / "server.key")

    async def answer(stream: trio.SSLStream[trio.SocketStream]) -> None:
        try:
            async with stream:
                await stream.receive_some(65536)
                await stream.send_all(ANSWER)
        except trio.BrokenResourceError:
            pass  # a client that refused the certificate

    serve = functools.partial(trio.serve_ssl_over_tcp, host=host)
    listeners = await nursery.start(serve, answer, 0, ctx)
    port: int = listeners[0].transport_listener.socket.getsockname()[1]
    return port


def _verify_failure(exc: BaseException | None) -> ssl.SSLCertVerificationError | None:
    """The certificate check's failure behind ``exc`` (httpx, trio wrap it), if any."""
    while exc is not None and not isinstance(exc, ssl.SSLCertVerificationError):
        exc = exc.__cause__ or exc.__context__
    return exc


def _trust_only(monkeypatch: pytest.MonkeyPatch, cafile: Path | None) -> None:
    monkeypatch.delenv("SSL_CERT_DIR", raising=False)
    if cafile is None:
        monkeypatch.delenv("SSL_CERT_FILE", raising=False)
    else:
        monkeypatch.setenv("SSL_CERT_FILE", str(cafile))


def test_the_context_is_httpx_default_but_holds_nothing_until_used(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    _trust_only(monkeypatch, None)
    lazy, default = verify_context(), ssl.create_default_context(cafile=certifi.where())
    for attr in (
        "protocol",
        "options",
        "verify_mode",
        "verify_flags",
        "check_hostname",
        "minimum_version",
        "maximum_version",
        "hostname_checks_common_name",
    ):
        assert getattr(lazy, attr) == getattr(default, attr), attr
    assert lazy.get_ciphers() == default.get_ciphers()
    assert lazy.cert_store_stats()["x509_ca"] == 0
    lazy.load_trust()
    lazy.load_trust()  # once
    assert lazy.cert_store_stats() == default.cert_store_stats()


async def _get(url: str) -> tuple[int, bytes]:
    """GET ``url`` with the upstream client (its own pool: a fresh connection)."""
    client = HTTPClient(url)
    try:
        resp = await client.open("GET", "/")
        body = await resp.read(1 << 16)
        await resp.aclose()
        return resp.status_code, body
    finally:
        await client.aclose()


async def test_a_client_trusts_on_first_tls_connection(monkeypatch: pytest.MonkeyPatch) -> None:
    _trust_only(monkeypatch, TLS / "ca.pem")  # as httpx: SSL_CERT_FILE first
    async with trio.open_nursery() as nursery:
        port = await _serve_tls(nursery)
        client = HTTPClient(f"https://localhost:{port}")
        ctx = client._ssl
        assert ctx is not None and ctx.cert_store_stats()["x509_ca"] == 0  # nothing yet
        resp = await client.open("GET", "/")
        assert (resp.status_code, await resp.read(100)) == (200, b"ok")
        await resp.aclose()
        await client.aclose()
        assert ctx.cert_store_stats()["x509_ca"] == 1  # the test CA, and only it
        for host in ("localhost", "127.0.0.1"):
            assert await _get(f"https://{host}:{port}") == (200, b"ok")
        httpx_client = new_client(connect_timeout=5)  # the proxy's and Open WebUI's
        try:
            resp2 = await httpx_client.get(f"https://localhost:{port}/")
            assert (resp2.status_code, resp2.text) == (200, "ok")
        finally:
            await httpx_client.aclose()
        assert HTTPClient(f"http://localhost:{port}")._ssl is None  # plain: no context
        nursery.cancel_scope.cancel()


@pytest.mark.parametrize("trust", ["certifi", "dir"])
async def test_a_certificate_not_trusted_is_refused(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, trust: str
) -> None:
    _trust_only(monkeypatch, None)
    if trust == "dir":  # SSL_CERT_DIR: a folder that holds no CA
        monkeypatch.setenv("SSL_CERT_DIR", str(tmp_path))
    async with trio.open_nursery() as nursery:
        port = await _serve_tls(nursery)
        with pytest.raises(GatewayError) as err:
            await _get(f"https://localhost:{port}")
        assert err.value.code == "upstream_tls_failed"
        assert "certificate" in err.value.message and "SSL_CERT_FILE" in err.value.message
        assert _verify_failure(err.value)
        client = new_client(connect_timeout=5)
        try:
            with pytest.raises(httpx.ConnectError) as failed:
                await client.get(f"https://localhost:{port}/")
            assert _verify_failure(failed.value)
        finally:
            await client.aclose()
        nursery.cancel_scope.cancel()


async def test_the_hostname_is_checked(monkeypatch: pytest.MonkeyPatch) -> None:
    _trust_only(monkeypatch, TLS / "ca.pem")
    async with trio.open_nursery() as nursery:
        # the certificate names localhost and 127.0.0.1, not 127.0.0.2 (loopback too)
        port = await _serve_tls(nursery, host="127.0.0.2")
        with pytest.raises(GatewayError) as err:
            await _get(f"https://127.0.0.2:{port}")
        assert err.value.code == "upstream_tls_failed"
        assert "mismatch" in str(_verify_failure(err.value))
        nursery.cancel_scope.cancel()


async def test_a_trust_file_that_cannot_be_loaded_is_said_once_and_retried(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A missing ``SSL_CERT_FILE`` fails each TLS connection's certificate check (the
    usual TLS error, its socket closed; clients read no host path), one log line
    names the file, and once the file is there the next connection works, no restart."""
    cafile = tmp_path / "ca.pem"
    _trust_only(monkeypatch, cafile)  # not there yet
    async with trio.open_nursery() as nursery:
        port = await _serve_tls(nursery)
        client = HTTPClient(f"https://localhost:{port}")
        try:
            for _ in range(3):
                with pytest.raises(GatewayError) as err:
                    await client.open("GET", "/")
                assert _verify_failure(err.value)
                assert err.value.code == "upstream_tls_failed"
                assert str(tmp_path) not in err.value.message
            lines = [r.getMessage() for r in caplog.records if r.name == "gateway.trust"]
            assert len(lines) == 1 and f"SSL_CERT_FILE={cafile}" in lines[0]
            cafile.write_bytes((TLS / "ca.pem").read_bytes())
            resp = await client.open("GET", "/")
            assert (resp.status_code, await resp.read(100)) == (200, b"ok")
            await resp.aclose()
        finally:
            await client.aclose()
        nursery.cancel_scope.cancel()


def test_start_up_warns_when_an_https_url_cannot_be_verified(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    from gateway.cli.config import startup_warnings
    from tests.conftest import make_config

    empty = tmp_path / "empty.pem"
    empty.write_text("no certificate here\n")
    https = make_config(tmp_path, "https://models.example/v1")
    plain = make_config(tmp_path, "http://127.0.0.1:9/v1")
    for cafile in (tmp_path / "missing.pem", empty):
        _trust_only(monkeypatch, cafile)
        assert trust_problem() is not None
        warned = [w for w in startup_warnings(https, "api") if "TLS trust" in w]
        assert len(warned) == 1 and str(cafile) in warned[0]
        assert "upstream.base_url" in warned[0]
        assert not [w for w in startup_warnings(plain, "api") if "TLS trust" in w]
    _trust_only(monkeypatch, None)
    monkeypatch.setenv("SSL_CERT_DIR", str(tmp_path / "no-such-folder"))
    warned = [w for w in startup_warnings(https, "api") if "TLS trust" in w]
    assert len(warned) == 1 and "SSL_CERT_DIR" in warned[0]
    _trust_only(monkeypatch, TLS / "ca.pem")
    assert trust_problem() is None
    assert not [w for w in startup_warnings(https, "api") if "TLS trust" in w]
