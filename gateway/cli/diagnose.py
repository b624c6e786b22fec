"""``gateway doctor``: try what the configuration points at and say, one line each,
whether it works and, if not, what is wrong and what to change.

Three checks, each bounded by ``seconds``: the upstream (``GET
{upstream.base_url}/models`` must answer an OpenAI model list, through the gateway's
own upstream client, so the verdict and its code are those of ``/health/ready`` and of
a client's request), Open WebUI (``GET {proxy.openwebui_url}/health`` must answer its
JSON; skipped when the key is empty) and the state store (reachable, writable, schema
current). Nothing is changed anywhere (the store is opened without migrating).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass

import trio

from gateway.clients.httpclient import HTTPClient, media_type
from gateway.clients.upstream import Upstream
from gateway.core.errors import GatewayError
from gateway.ops.config import Config

__all__ = ["Finding", "diagnose"]


@dataclass(frozen=True)
class Finding:
    """One check's verdict: ``ok`` None when it was skipped (not configured)."""

    name: str
    ok: bool | None
    text: str

    def line(self) -> str:
        mark = "ok  " if self.ok else ("skip" if self.ok is None else "FAIL")
        return f"{mark} {self.name:<9} {self.text}"


async def check_upstream(cfg: Config, seconds: float) -> Finding:
    upstream = Upstream(cfg.upstream)
    try:
        listing = await upstream.model_list(seconds)
    except GatewayError as exc:
        return Finding("upstream", False, f"{exc.code}: {exc.message}")
    finally:
        await upstream.aclose()
    ids = [m.get("id") for m in listing["data"] if isinstance(m, dict)]
    some = ", ".join(repr(i) for i in ids[:3] if isinstance(i, str))
    url = upstream.http.url("/models")
    return Finding(
        "upstream", True, f"{url} lists {len(ids)} model(s){': ' + some if some else ''}"
    )


#: what to change, by the client's code, for Open WebUI (``proxy.openwebui_url``)
_OPENWEBUI_HINTS = {
    "upstream_refused": "refused the connection: is Open WebUI running on that host and port?",
    "upstream_dns_failed": "has a host name that does not resolve",
    "upstream_tls_failed": "failed the TLS handshake (certificate not trusted, another "
    "host's name, or no TLS on that port)",
    "upstream_timeout": "did not answer in time",
}


async def check_openwebui(cfg: Config, seconds: float) -> Finding:
    base = cfg.proxy.openwebui_url
    if not base:
        return Finding("openwebui", None, "proxy.openwebui_url is empty (not used)")
    client = HTTPClient(base, connect_timeout=seconds)
    url = client.url("/health")
    try:
        resp = await client.open("GET", "/health", deadline=trio.current_time() + seconds)
        body = await resp.read(64 * 1024, idle_timeout=seconds)
        await resp.aclose()
    except GatewayError as exc:
        hint = _OPENWEBUI_HINTS.get(exc.code, "could not be asked")
        return Finding("openwebui", False, f"{exc.code}: {url} {hint}; check proxy.openwebui_url.")
    finally:
        await client.aclose()
    what = _openwebui_answer(resp.status_code, media_type(resp.headers), body)
    if what:
        return Finding("openwebui", False, f"{url} {what}; check proxy.openwebui_url.")
    return Finding("openwebui", True, f"{url} answers")


def _openwebui_answer(status: int, ctype: str, body: bytes) -> str:
    """What is wrong with Open WebUI's ``/health`` answer ("" when it is its own)."""
    if status in (401, 403):
        return f"refused the request (HTTP {status})"
    if status != 200:
        return f"answered HTTP {status}: is it Open WebUI's address (without /api)?"
    try:
        data = json.loads(body)
    except ValueError:
        kind = "an HTML page" if "html" in ctype or body.lstrip()[:1] == b"<" else "not JSON"
        return f"answered {kind}: is it Open WebUI's address (without /api)?"
    if not isinstance(data, dict) or data.get("status") is not True:
        return "answered JSON that is not Open WebUI's health: is it Open WebUI's address?"
    return ""


def check_database(cfg: Config) -> Finding:
    from gateway.store import EXPECTED_VERSION, open_configured_store

    try:
        store = open_configured_store(cfg, migrate=False)
    except GatewayError as exc:
        return Finding("database", False, exc.message)
    try:
        check = store.check()
    finally:
        store.close()
    where = f"{check.backend} {check.location}"
    if not check.reachable:
        hint = "is PostgreSQL running, and is database_url right?"
        if check.backend == "sqlite":
            hint = "can the gateway's user read and write state_dir?"
        return Finding("database", False, f"{where} cannot be opened ({check.detail}); {hint}")
    if check.schema_version != check.expected_version:
        return Finding(
            "database",
            False,
            f"{where} has schema {check.schema_version}, this version needs "
            f"{EXPECTED_VERSION}: run `gateway db upgrade`.",
        )
    if not check.writable:
        return Finding("database", False, f"{where} is not writable ({check.detail}).")
    return Finding("database", True, f"{where} (schema {check.schema_version}, writable)")


async def diagnose(
    cfg: Config, seconds: float = 5.0, say: Callable[[Finding], None] | None = None
) -> list[Finding]:
    """Run the checks in order; ``say`` is told each finding as it comes."""
    findings: list[Finding] = []
    for check in (check_upstream, check_openwebui):
        findings.append(await check(cfg, seconds))
        if say is not None:
            say(findings[-1])
    findings.append(await trio.to_thread.run_sync(check_database, cfg))
    if say is not None:
        say(findings[-1])
    return findings
