"""The Open WebUI runs proxy (``gateway proxy``): identity and link mode in, chat out.

Open WebUI calls this service as an OpenAI-compatible connection. For each chat
request the proxy

1. authenticates Open WebUI by one of ``proxy.client_keys``;
2. learns the user (:mod:`gateway.proxy.identity`) and the owner ``openwebui:<id>``;
3. takes ``download_link_mode`` from the top-level body field (where Open WebUI's
   per-model custom params and filters put it) or ``metadata.hermes`` (direct API
   clients), validated; no identity with a private mode is a 400 (a private link
   nobody could open helps no one);
4. streams: starts a run on the gateway with its proxy key, asserting owner and mode,
   and relays the run's events through the one relay (:mod:`gateway.proxy.stream`)
   into chat chunks shaped for Open WebUI (:mod:`gateway.fronts.openwebui`);
   not streamed (Open WebUI's background tasks — titles, tags, follow-ups): one
   non-streaming chat completion on the gateway with ``X-Gateway-Links: names``, so a
   title never gets a link or a note, only file names.

Client disconnect stops the run on the gateway.
"""

from __future__ import annotations

import hashlib
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import httpx
import trio
from quart import Response, request

from gateway.clients.openwebui import ANONYMOUS, OpenWebUI, owner_for_user
from gateway.clients.upstream import new_client
from gateway.core.checks import check_id, check_usage, loads_bounded
from gateway.core.errors import AuthError, GatewayError, RequestError
from gateway.core.rewrite import rewrite, scrub_identifier
from gateway.fronts.chat import SAMPLING_KEYS, validate_chat_body
from gateway.fronts.openwebui import OpenWebUIEncoder, ends_with_note
from gateway.http.asgi import ServiceApp, install_common
from gateway.http.replies import (
    ChannelBody,
    bearer_token,
    json_body,
    json_response,
    max_json_depth,
    sse_response,
)
from gateway.ops.config import Config, extra_roots
from gateway.proxy.delivery import Delivery
from gateway.proxy.health import GatewayHealth, install_operator_routes
from gateway.proxy.identity import Identity, identify, identity_hint, requested_mode
from gateway.proxy.stream import RemoteRunSource, RunEventStage, gateway_down, gateway_error
from gateway.stream.relay import Relay, RelayOptions

__all__ = ["ProxyApp", "ProxyState", "create_proxy_app"]

log = logging.getLogger("gateway.proxy")


@dataclass
class ProxyState:
    config: Config
    client: httpx.AsyncClient
    draining: trio.Event = field(default_factory=trio.Event)
    clock: Callable[[], float] = time.time
    #: Open WebUI itself (``proxy.openwebui_url``): verifies forwarded sessions
    openwebui: OpenWebUI | None = None
    #: the last model list the gateway gave (served while the gateway is down)
    models: dict[str, Any] | None = None

    @property
    def extra_roots(self) -> tuple[str, ...]:
        return extra_roots(self.config)

    def scrub(self, text: str) -> str:
        return rewrite(
            text, extra_roots=self.extra_roots, max_path_chars=self.config.limits.max_path_chars
        )

    def gateway_headers(
        self, owner: str | None = None, mode: str | None = None, *, names: bool = False
    ) -> dict[str, str]:
        h = {"Authorization": f"Bearer {self.config.proxy.gateway_key}"}
        if owner is not None:
            h["X-Gateway-Owner"] = owner
        if mode is not None:
            h["X-Gateway-Link-Mode"] = mode
        if names:
            h["X-Gateway-Links"] = "names"
        return h

    async def aclose(self) -> None:
        """Close the client of the gateway and the one of Open WebUI (idempotent)."""
        await self.client.aclose()
        if self.openwebui is not None:
            await self.openwebui.aclose()

    def relay_options(self) -> RelayOptions:
        return RelayOptions(
            keepalive_seconds=self.config.server.keepalive_seconds,
            idle_timeout_seconds=float("inf"),  # the gateway's run bounds the silence
            draining=self.draining,
        )


class ProxyApp(ServiceApp):
    proxy: ProxyState


def create_proxy_app(
    config: Config,
    *,
    transport: httpx.AsyncBaseTransport | None = None,
    clock: Callable[[], float] = time.time,
) -> ProxyApp:
    app = ProxyApp("gateway-proxy", static_folder=None)
    install_common(app, config.server.max_body_bytes, "proxy")
    client = new_client(
        connect_timeout=10.0, transport=transport, base_url=config.proxy.gateway_url
    )
    ps = ProxyState(config, client, clock=clock, openwebui=OpenWebUI.from_config(config))
    app.proxy = ps
    gateway_health = GatewayHealth(client)
    client_keys = {hashlib.sha256(k.encode()).digest() for k in config.proxy.client_keys}

    async def authenticate() -> Identity | None:
        """Open WebUI's connection key (None: the user comes from headers or the JWT), or
        a forwarded Open WebUI session (connection auth type "session"): its user."""
        if not request.headers.get("Authorization"):
            raise AuthError(
                "Missing bearer key: send 'Authorization: Bearer <key>'.", code="missing_api_key"
            )
        token = bearer_token(request.headers)
        if token is not None and hashlib.sha256(token.encode()).digest() in client_keys:
            return None
        if token is not None and ps.openwebui is not None:
            client = request.scope.get("client")
            user = await ps.openwebui.verify(token, str(client[0]) if client else "")
            if user is not None:
                who = owner_for_user(user.id)
                return Identity(who, "session", user.email, user.name, token=token)
        raise AuthError(
            "The bearer key is not one of proxy.client_keys"
            + (", nor a valid Open WebUI session." if ps.openwebui is not None else "."),
            code="invalid_api_key",
        )

    @app.after_serving
    async def _close() -> None:
        await ps.aclose()

    install_operator_routes(app, ps.draining, gateway_health)

    @app.get("/v1/models")
    async def models() -> Response:
        await authenticate()
        return json_response(await _model_list(ps))

    @app.post("/v1/chat/completions")
    async def chat() -> Response:
        session = await authenticate()
        body = await json_body(max_json_depth(config))
        stream = validate_chat_body(body)
        ident = session or identify(request.headers, config)
        request.scope["gateway.principal"] = ident.owner or "-"  # type: ignore[typeddict-unknown-key]
        mode = requested_mode(body) or config.artifacts.default_link_mode
        if not stream:
            return await _background_task(ps, body, ident, mode)
        if ident.owner is None and (mode == "private" or not config.proxy.allow_anonymous):
            # unknown users would all be one principal (openwebui:anonymous): one
            # folder, one quota, for everyone, unless the operator says so
            raise RequestError(identity_hint(config, mode), code="identity_required")
        return await _stream(ps, body, ident, mode)

    return app


async def _model_list(ps: ProxyState) -> dict[str, Any]:
    """The gateway's models (one list for every user: Open WebUI caches it for all);
    the last good list while the gateway is down."""
    try:
        r = await ps.client.get("/v1/models", headers=ps.gateway_headers())
        if r.status_code != 200:
            raise await gateway_error(r, ps.scrub)
        listing = _models(loads_bounded(r.content, 16), ps.scrub)
    except (httpx.HTTPError, GatewayError) as exc:
        if ps.models is not None:
            log.warning("the gateway's model list is unavailable; serving the last good one")
            return ps.models
        if isinstance(exc, GatewayError):
            raise
        raise gateway_down(ps.client.base_url, exc) from exc
    ps.models = listing
    return listing


def _models(data: Any, scrub: Callable[[str], str]) -> dict[str, Any]:
    """The gateway's model list, again field by field (it already is; defence in depth)."""
    items = data.get("data") if isinstance(data, dict) else None
    out = []
    for m in items if isinstance(items, list) else ():
        if isinstance(m, dict) and isinstance(m.get("id"), str):
            entry: dict[str, Any] = {"id": scrub_identifier(m["id"], scrub), "object": "model"}
            for key in ("created", "owned_by"):
                value = m.get(key)
                if isinstance(value, str):
                    entry[key] = scrub(value)
                elif isinstance(value, int) and not isinstance(value, bool):
                    entry[key] = value
            out.append(entry)
    return {"object": "list", "data": out}


async def _stream(ps: ProxyState, body: dict[str, Any], ident: Identity, mode: str) -> Response:
    owner = ident.owner or "openwebui:" + ANONYMOUS
    run_body = {"model": body["model"], "messages": body["messages"]}
    # Open WebUI's per-model params (temperature, max_tokens...) reach the upstream
    run_body.update({k: body[k] for k in SAMPLING_KEYS if k in body})
    try:
        r = await ps.client.post("/v1/runs", json=run_body, headers=ps.gateway_headers(owner, mode))
    except httpx.HTTPError as exc:
        raise gateway_down(ps.client.base_url, exc) from exc
    if r.status_code != 202:
        raise await gateway_error(r, ps.scrub)
    run_id = loads_bounded(r.content, 16)["run_id"]
    cfg = ps.config
    source = RemoteRunSource(ps.client, run_id, ps.gateway_headers(owner), scrub=ps.scrub)
    stage = RunEventStage(
        mode,
        base_url=cfg.server.public_base_url,
        extra_roots=ps.extra_roots,
        max_path_chars=cfg.limits.max_path_chars,
        delivery=_delivery(ps, ident, owner),
    )
    front = OpenWebUIEncoder(body["model"], mode, after_note=ends_with_note(body["messages"]))
    relay: Relay[Any, Any, bytes] = Relay(source, stage, front, ps.relay_options())
    return sse_response(ChannelBody(relay))


def _delivery(ps: ProxyState, ident: Identity, owner: str) -> Delivery | None:
    """Native delivery, when the user's own session came with the request."""
    if ident.token is None or ps.openwebui is None or not ps.config.proxy.native_delivery:
        return None
    return Delivery(
        ps.client,
        ps.gateway_headers(owner),
        ps.openwebui,
        ident.token,
        ps.config.artifacts.max_bytes,
    )


async def _background_task(
    ps: ProxyState, body: dict[str, Any], ident: Identity, mode: str
) -> Response:
    """A non-streamed request (Open WebUI's titles, tags, follow-ups): file names only."""
    owner = ident.owner or "openwebui:" + ANONYMOUS
    fwd = {k: body[k] for k in ("model", "messages", *SAMPLING_KEYS) if k in body}
    try:
        r = await ps.client.post(
            "/v1/chat/completions",
            json={**fwd, "stream": False},
            headers=ps.gateway_headers(owner, mode, names=True),
            timeout=httpx.Timeout(10.0, read=ps.config.upstream.idle_timeout_seconds),
        )
    except httpx.HTTPError as exc:
        raise gateway_down(ps.client.base_url, exc) from exc
    if r.status_code != 200:
        raise await gateway_error(r, ps.scrub)
    data = loads_bounded(r.content, max_json_depth(ps.config))
    out = _completion(data, body["model"], ps.scrub)
    out["gateway"] = {"download_link_mode": mode, "artifacts": []}
    return json_response(out)


def _completion(data: Any, model: str, scrub: Callable[[str], str]) -> dict[str, Any]:
    if not isinstance(data, dict):
        raise GatewayError(
            "The gateway's answer is not JSON.", code="gateway_bad_response", status=502
        )
    choices: list[dict[str, Any]] = []
    for c in data.get("choices") or ():
        msg = c.get("message") if isinstance(c, dict) else None
        text = msg.get("content") if isinstance(msg, dict) else None
        choices.append(
            {
                "index": len(choices),
                "message": {
                    "role": "assistant",
                    "content": scrub(text) if isinstance(text, str) else "",
                },
                "finish_reason": "stop",
            }
        )
    return {
        "id": check_id(data.get("id")) or "chatcmpl-proxy",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": choices
        or [{"index": 0, "message": {"role": "assistant", "content": ""}, "finish_reason": "stop"}],
        "usage": check_usage(data.get("usage")),
    }
