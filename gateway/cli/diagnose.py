"""``gateway doctor``: try what the configuration points at and say, one line each,
whether it works and, if not, what is wrong and what to change.

Four checks, each bounded by ``seconds``: the upstream (``GET
{upstream.base_url}/models`` must answer an OpenAI model list, through the gateway's
own upstream client, so the verdict and its code are those of ``/health/ready`` and of
a client's request), the proxy's gateway (``proxy.gateway_url`` with its key, when a
proxy is configured), Open WebUI (``GET {proxy.openwebui_url}/health`` must answer its
JSON; skipped when the key is empty) and the state store (reachable, writable, schema
current; before the first start an SQLite file not made yet is fine when its folder can
be made). Nothing is changed anywhere (the store is opened without migrating).
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

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


#: what to change, by the client's code, for the proxy's gateway (``proxy.gateway_url``)
_GATEWAY_HINTS = {
    **_OPENWEBUI_HINTS,
    "upstream_refused": "refused the connection: is `gateway run` running on that host and port?",
}


async def check_gateway(cfg: Config, seconds: float) -> Finding:
    """The proxy's gateway: ``GET /health`` answers the gateway's own JSON and
    ``proxy.gateway_key`` is accepted (``GET /v1/models``). Skipped without a key."""
    if not cfg.proxy.gateway_key:
        return Finding("gateway", None, "proxy.gateway_key is empty (no proxy configured)")
    client = HTTPClient(cfg.proxy.gateway_url, connect_timeout=seconds)
    url = client.url("/health")
    try:
        status, body = await _get(client, "/health", seconds, ())
        if status == 200 and _gateway_health(body):
            auth = (("Authorization", f"Bearer {cfg.proxy.gateway_key}"),)
            status, body = await _get(client, "/v1/models", seconds, auth)
            if status in (401, 403):
                return Finding("gateway", False, f"{url} refused proxy.gateway_key (HTTP {status})")
            return Finding("gateway", True, f"{url} answers and accepts proxy.gateway_key")
    except GatewayError as exc:
        hint = _GATEWAY_HINTS.get(exc.code, "could not be asked")
        return Finding("gateway", False, f"{exc.code}: {url} {hint}; check proxy.gateway_url.")
    finally:
        await client.aclose()
    return Finding(
        "gateway", False, f"{url} answered HTTP {status}, not the gateway; check proxy.gateway_url."
    )


async def _get(
    client: HTTPClient, path: str, seconds: float, headers: tuple[tuple[str, str], ...]
) -> tuple[int, bytes]:
    resp = await client.open("GET", path, headers=headers, deadline=trio.current_time() + seconds)
    try:
        return resp.status_code, await resp.read(64 * 1024, idle_timeout=seconds)
    finally:
        await resp.aclose()


def _gateway_health(body: bytes) -> bool:
    try:
        data = json.loads(body)
    except ValueError:
        return False
    return isinstance(data, dict) and data.get("status") == "ok" and "version" in data


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
    from gateway.store import EXPECTED_VERSION, open_configured_store, store_settings

    settings = store_settings(cfg)
    if not settings.database_url.strip():  # SQLite: made at the first start, not here
        fresh = _fresh_sqlite(Path(settings.state_dir))
        if fresh is not None:
            return fresh
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


def _fresh_sqlite(state_dir: Path) -> Finding | None:
    """Before the first start there is no database yet: fine when ``gateway run`` can
    make it (its folder, or the nearest existing parent, writable); nothing is created."""
    from gateway.store import DB_FILE_NAME

    path = state_dir.expanduser() / DB_FILE_NAME
    if path.exists():
        return None
    parent = path.parent
    while not parent.exists() and parent != parent.parent:
        parent = parent.parent
    if os.access(parent, os.W_OK | os.X_OK):
        return Finding("database", True, f"sqlite {path}: not made yet; `gateway run` makes it")
    return Finding(
        "database",
        False,
        f"sqlite {path}: not made yet, and {parent} is not writable by this user; "
        "change state_dir or its permissions",
    )


async def diagnose(
    cfg: Config, seconds: float = 5.0, say: Callable[[Finding], None] | None = None
) -> list[Finding]:
    """Run the checks in order; ``say`` is told each finding as it comes."""
    findings: list[Finding] = []
    for check in (check_upstream, check_openwebui, check_gateway):
        findings.append(await check(cfg, seconds))
        if say is not None:
            say(findings[-1])
    findings.append(await trio.to_thread.run_sync(check_database, cfg))
    if say is not None:
        say(findings[-1])
    return findings
