"""The httpx clients' TLS trust, loaded on the first TLS connection (gateway.trust):
the same checks as httpx's default, against a real TLS server on 127.0.0.1 with a test
CA (tests/data/tls), and nothing loaded before."""

from __future__ import annotations

import functools
import ssl
from pathlib import Path

import certifi
import httpx
import pytest
import trio

from gateway.trust import trust_problem, verify_context
from gateway.upstream import new_client, translate

TLS = Path(__file__).parent.parent / "data" / "tls"
ANSWER = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok"


async def _serve_tls(nursery: trio.Nursery) -> int:
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

    serve = functools.partial(trio.serve_ssl_over_tcp, host="127.0.0.1")
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


async def test_a_client_trusts_on_first_tls_connection(monkeypatch: pytest.MonkeyPatch) -> None:
    _trust_only(monkeypatch, TLS / "ca.pem")  # as httpx: SSL_CERT_FILE first
    async with trio.open_nursery() as nursery:
        port = await _serve_tls(nursery)
        client = new_client(connect_timeout=5)
        try:
            transport: httpx.AsyncHTTPTransport = client._transport  # type: ignore[assignment]
            ctx = transport._pool._ssl_context
            assert isinstance(ctx, ssl.SSLContext)
            assert ctx.cert_store_stats()["x509_ca"] == 0  # nothing loaded for plain HTTP
            for host in ("localhost", "127.0.0.1"):
                resp = await client.get(f"https://{host}:{port}/")
                assert (resp.status_code, resp.text) == (200, "ok")
            assert ctx.cert_store_stats()["x509_ca"] == 1  # the test CA, and only it
        finally:
            await client.aclose()
        nursery.cancel_scope.cancel()


@pytest.mark.parametrize("trust", ["certifi", "dir"])
async def test_a_certificate_not_trusted_is_refused(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, trust: str
) -> None:
    if trust == "certifi":
        _trust_only(monkeypatch, None)
    else:  # SSL_CERT_DIR: a folder that holds no CA
        _trust_only(monkeypatch, None)
        monkeypatch.setenv("SSL_CERT_DIR", str(tmp_path))
    async with trio.open_nursery() as nursery:
        port = await _serve_tls(nursery)
        client = new_client(connect_timeout=5)
        try:
            with pytest.raises(httpx.ConnectError) as err:
                await client.get(f"https://localhost:{port}/")
            assert _verify_failure(err.value)
        finally:
            await client.aclose()
        nursery.cancel_scope.cancel()


async def test_the_hostname_is_checked(monkeypatch: pytest.MonkeyPatch) -> None:
    _trust_only(monkeypatch, TLS / "ca.pem")
    async with trio.open_nursery() as nursery:
        port = await _serve_tls(nursery)
        client = new_client(connect_timeout=5)
        try:
            # the certificate names localhost and 127.0.0.1, not example.com
            with pytest.raises(httpx.ConnectError) as err:
                await client.get(
                    f"https://127.0.0.1:{port}/", extensions={"sni_hostname": "example.com"}
                )
            assert "Hostname mismatch" in str(_verify_failure(err.value))
        finally:
            await client.aclose()
        nursery.cancel_scope.cancel()


async def test_a_trust_file_that_cannot_be_loaded_is_said_once_and_retried(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A missing ``SSL_CERT_FILE`` fails each TLS connection's certificate check (the
    usual connect error, its socket closed; clients read no host path), one log line
    names the file, and once the file is there the next connection works, no restart."""
    cafile = tmp_path / "ca.pem"
    _trust_only(monkeypatch, cafile)  # not there yet
    async with trio.open_nursery() as nursery:
        port = await _serve_tls(nursery)
        client = new_client(connect_timeout=5)
        try:
            for _ in range(3):
                with pytest.raises(httpx.ConnectError) as err:
                    await client.get(f"https://localhost:{port}/")
                assert _verify_failure(err.value)
                public = translate(err.value)
                assert public.code == "upstream_unreachable"
                assert str(tmp_path) not in public.message
            lines = [r.getMessage() for r in caplog.records if r.name == "gateway.trust"]
            assert len(lines) == 1 and f"SSL_CERT_FILE={cafile}" in lines[0]
            cafile.write_bytes((TLS / "ca.pem").read_bytes())
            resp = await client.get(f"https://localhost:{port}/")
            assert (resp.status_code, resp.text) == (200, "ok")
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
