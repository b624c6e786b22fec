"""The Open WebUI runs proxy (``gateway proxy``): identity and link mode in, chat out.

Open WebUI calls this service as an OpenAI-compatible connection. For each chat
request the proxy

1. authenticates Open WebUI by one of ``proxy.client_keys``;
2. derives the owner ``openwebui:<user id>``: from ``X-OpenWebUI-User-Jwt`` (HS256,
   verified with ``proxy.openwebui_jwt_secret``; ``exp`` and ``iss = open-webui``
   checked; an invalid token is 401, never a silent fallback), else from
   ``X-OpenWebUI-User-Id`` when ``proxy.trust_user_headers``;
3. takes ``download_link_mode`` from the top-level body field (where Open WebUI's
   per-model custom params and filters put it) or ``metadata.hermes`` (direct API
   clients), validated; no identity with a private mode is a 400 (a private link
   nobody could open helps no one);
4. starts a run on the gateway with its proxy key, asserting owner and mode, and
   streams the run's events back as ``chat.completion.chunk``s shaped for Open WebUI
   (one-line ``data``, LF, final chunk, ``[DONE]``, connection closed after it);
   errors become a final chunk with an ``error`` object. In private mode, when links
   were minted, one short note says they open only for this user;
5. runs its own name-only rewriter over everything it relays (defence in depth: a
   gateway bug still cannot leak a path through the proxy).

Client disconnect stops the run on the gateway.
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import hmac
import json
import logging
import math
import secrets
import time
import urllib.parse
from collections.abc import AsyncGenerator, Callable
from dataclasses import dataclass, field
from typing import Any

import httpx
import trio
from quart import Response, request
from quart_trio import QuartTrio

from gateway import __version__
from gateway.app import (
    SAMPLING_KEYS,
    ChannelBody,
    install_common,
    json_body,
    json_response,
)
from gateway.auth import LINK_MODES
from gateway.config import Config
from gateway.errors import AuthError, GatewayError, RequestError, UpstreamError
from gateway.paths import DEFAULT_MAX_PATH_CHARS
from gateway.rewrite import StreamRewriter, rewrite
from gateway.sse import DONE, SSEDecoder, encode_comment, encode_json

log = logging.getLogger("gateway.proxy")

PRIVATE_NOTE = "\n\n_These download links open only for you. Ask for a public link if you want to share a file._"
SSE_HEADERS = {
    "Content-Type": "text/event-stream; charset=utf-8",
    "Cache-Control": "no-cache",
    "X-Accel-Buffering": "no",
}
JWT_LEEWAY_SECONDS = 30


# -- identity ----------------------------------------------------------------------


def _b64url_decode(part: str) -> bytes:
    return base64.urlsafe_b64decode(part + "=" * (-len(part) % 4))


def verify_openwebui_jwt(token: str, secret: str, now: float) -> dict[str, Any]:
    """Verify an Open WebUI user JWT (HS256); return its claims or raise 401."""

    def bad(why: str) -> AuthError:
        return AuthError(f"The Open WebUI user token is not valid: {why}.", code="invalid_user_jwt")

    parts = token.strip().split(".")
    if len(parts) != 3:
        raise bad("it is not a JWT")
    try:
        header = json.loads(_b64url_decode(parts[0]))
        claims = json.loads(_b64url_decode(parts[1]))
        signature = _b64url_decode(parts[2])
    except (ValueError, UnicodeDecodeError):
        raise bad("it cannot be decoded") from None
    if not isinstance(header, dict) or header.get("alg") != "HS256":
        raise bad("only HS256 is accepted")
    expected = hmac.new(secret.encode(), f"{parts[0]}.{parts[1]}".encode(), hashlib.sha256).digest()
    if not hmac.compare_digest(signature, expected):
        raise bad("the signature does not match proxy.openwebui_jwt_secret")
    if not isinstance(claims, dict):
        raise bad("its claims are not an object")
    exp = claims.get("exp")
    if not isinstance(exp, int | float) or isinstance(exp, bool):
        raise bad("it has no expiry")
    if exp + JWT_LEEWAY_SECONDS < now:
        raise bad("it has expired")
    if claims.get("iss") != "open-webui":
        raise bad("it was not issued by open-webui")
    sub = claims.get("sub")
    if not isinstance(sub, str) or not sub:
        raise bad("it names no user")
    return claims


def owner_for(user_id: str) -> str:
    """``openwebui:<id>``; ids outside the principal alphabet are hashed, not rejected."""
    if user_id and len(user_id) <= 128 and all(c.isalnum() or c in "._:@-" for c in user_id):
        return "openwebui:" + user_id
    return "openwebui:h-" + hashlib.sha256(user_id.encode()).hexdigest()[:32]


@dataclass(frozen=True)
class Identity:
    owner: str | None
    source: str  # "jwt" | "headers" | "none"
    email: str | None = None
    name: str | None = None


def identify(headers: Any, config: Config, now: float) -> Identity:
    token = headers.get("X-OpenWebUI-User-Jwt")
    secret = config.proxy.openwebui_jwt_secret
    if token is not None:
        if not secret:
            raise AuthError(
                "Open WebUI sent a user JWT but proxy.openwebui_jwt_secret is not set; "
                "configure the shared secret.",
                code="jwt_not_configured",
            )
        claims = verify_openwebui_jwt(token, secret, now)
        return Identity(owner_for(claims["sub"]), "jwt", claims.get("email"), claims.get("name"))
    if config.proxy.trust_user_headers:
        user_id = headers.get("X-OpenWebUI-User-Id")
        if user_id:
            email = headers.get("X-OpenWebUI-User-Email")
            name = headers.get("X-OpenWebUI-User-Name")
            return Identity(
                owner_for(urllib.parse.unquote(user_id)),
                "headers",
                urllib.parse.unquote(email) if email else None,
                urllib.parse.unquote(name) if name else None,
            )
    return Identity(None, "none")


def requested_mode(body: dict[str, Any]) -> str | None:
    value: Any = body.get("download_link_mode")
    if value is None:
        meta = body.get("metadata")
        hermes = meta.get("hermes") if isinstance(meta, dict) else None
        value = hermes.get("download_link_mode") if isinstance(hermes, dict) else None
    if value is None:
        return None
    if value not in LINK_MODES:
        raise RequestError(
            "download_link_mode must be 'private' or 'public'.", code="invalid_download_link_mode"
        )
    return str(value)


# -- the Open WebUI-shaped chat stream ---------------------------------------------


class OwuiChat:
    """Turns run events into chat-completion chunks (and a whole completion)."""

    def __init__(
        self,
        model: str,
        mode: str,
        *,
        extra_roots: tuple[str, ...] = (),
        max_path_chars: int = DEFAULT_MAX_PATH_CHARS,
    ) -> None:
        self.id = "chatcmpl-" + secrets.token_hex(12)
        self.created = int(time.time())
        self.model = model
        self.mode = mode
        # name-only: defence in depth. It must know the configured artifact roots and
        # mount prefixes (e.g. /workspace), which are not among the usual host roots.
        self.extra_roots = extra_roots
        self.rewriter = StreamRewriter(extra_roots=extra_roots, max_path_chars=max_path_chars)
        self.text: list[str] = []
        self.finished = False
        self.manifest: dict[str, Any] | None = None
        self.usage: dict[str, Any] | None = None
        self.error: dict[str, Any] | None = None

    def chunk(self, delta: dict[str, Any], finish: str | None = None, **extra: Any) -> bytes:
        obj = {
            "id": self.id,
            "object": "chat.completion.chunk",
            "created": self.created,
            "model": self.model,
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
            **extra,
        }
        return encode_json(obj)

    def on_event(self, ev: dict[str, Any]) -> bytes:
        kind = ev.get("event")
        if kind == "run.started":
            return self.chunk({"role": "assistant", "content": ""})
        if kind == "message.delta":
            text = self.rewriter.feed(str(ev.get("delta", "")))
            self.text.append(text)
            return self.chunk({"content": text}) if text else b""
        if kind == "run.completed":
            return self._end(ev, failed=False)
        if kind in ("run.failed", "run.cancelled"):
            return self._end(ev, failed=True)
        return b""

    def _end(self, ev: dict[str, Any], *, failed: bool) -> bytes:
        self.finished = True
        rest = self.rewriter.flush()
        manifest = ev.get("gateway")
        self.manifest = manifest if isinstance(manifest, dict) else None
        if isinstance(ev.get("usage"), dict):
            self.usage = ev["usage"]
        if (
            not failed
            and self.mode == "private"
            and self.manifest is not None
            and self.manifest.get("artifacts")
        ):
            rest += PRIVATE_NOTE
        self.text.append(rest)
        extra: dict[str, Any] = {}
        if self.manifest is not None:
            extra["gateway"] = self.manifest
        if failed:
            err = ev.get("error") if isinstance(ev.get("error"), dict) else None
            if err is None:
                err = {"code": "run_cancelled", "message": "The run was stopped."}
            code = str(err.get("code") or "run_failed")
            message = rewrite(
                str(err.get("message") or "The run failed."), extra_roots=self.extra_roots
            )
            self.error = {"message": message, "type": code, "code": code}
            extra["error"] = self.error
            return self.chunk({"content": rest} if rest else {}, "error", **extra) + DONE
        if self.usage is not None:
            extra["usage"] = self.usage
        return self.chunk({"content": rest} if rest else {}, "stop", **extra) + DONE

    def failure(self, code: str, message: str) -> bytes:
        """The gateway went away mid-stream: end properly anyway."""
        return self._end(
            {"event": "run.failed", "error": {"code": code, "message": message}}, failed=True
        )

    def completion(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "object": "chat.completion",
            "created": self.created,
            "model": self.model,
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": "".join(self.text)},
                    "finish_reason": "stop",
                }
            ],
            "usage": self.usage,
            "gateway": self.manifest or {"download_link_mode": self.mode, "artifacts": []},
        }


# -- the app -------------------------------------------------------------------------


@dataclass
class ProxyState:
    config: Config
    client: httpx.AsyncClient
    draining: trio.Event = field(default_factory=trio.Event)
    clock: Callable[[], float] = time.time

    @property
    def extra_roots(self) -> tuple[str, ...]:
        """Configured artifact roots and mount prefixes: paths too, for the scrubbers."""
        arts = self.config.artifacts
        return (*(str(r) for r in arts.roots), *(m.agent_prefix for m in arts.mounts))

    def chat(self, model: str, mode: str) -> OwuiChat:
        return OwuiChat(
            model,
            mode,
            extra_roots=self.extra_roots,
            max_path_chars=self.config.limits.max_path_chars,
        )

    def gateway_headers(self, owner: str | None = None, mode: str | None = None) -> dict[str, str]:
        h = {"Authorization": f"Bearer {self.config.proxy.gateway_key}"}
        if owner is not None:
            h["X-Gateway-Owner"] = owner
        if mode is not None:
            h["X-Gateway-Link-Mode"] = mode
        return h


def _gateway_down(exc: Exception) -> UpstreamError:
    return UpstreamError(
        "The artifact gateway behind this proxy is not answering; check that `gateway run` is up.",
        code="gateway_unreachable",
    )


async def _gateway_error(resp: httpx.Response, roots: tuple[str, ...] = ()) -> GatewayError:
    if resp.status_code in (401, 403):
        # The gateway refused *our* key (or its assertions): passing its 401 on would
        # tell Open WebUI that its own connection key is wrong.
        return UpstreamError(
            "The artifact gateway refused this proxy's key; check that proxy.gateway_key "
            'is a role = "proxy" key in the gateway\'s [[auth.keys]].',
            code="gateway_auth_failed",
        )
    try:
        data = json.loads(await resp.aread())
        err = data.get("error", {}) if isinstance(data, dict) else {}
        err = err if isinstance(err, dict) else {}
    except ValueError:
        err = {}
    code = str(err.get("code") or f"gateway_http_{resp.status_code}")
    message = rewrite(
        str(err.get("message") or "The gateway refused the request."), extra_roots=roots
    )
    status = resp.status_code if 400 <= resp.status_code < 500 else 502
    return GatewayError(message, code=code, status=status)


def create_proxy_app(
    config: Config,
    *,
    transport: httpx.AsyncBaseTransport | None = None,
    clock: Callable[[], float] = time.time,
) -> QuartTrio:
    app = QuartTrio("gateway-proxy")
    install_common(app, config, "proxy")
    client = httpx.AsyncClient(
        base_url=config.proxy.gateway_url,
        timeout=httpx.Timeout(10.0, read=None),
        transport=transport,
        # one gateway connection per relayed stream: httpx's default cap (100) made
        # stream 101 wait for a slot and fail as gateway_unreachable after 10 s; the
        # proxy's own server.max_connections bounds this pool
        limits=httpx.Limits(max_connections=None, max_keepalive_connections=100),
    )
    ps = ProxyState(config, client, clock=clock)
    app.proxy = ps  # type: ignore[attr-defined]
    client_keys = {hashlib.sha256(k.encode()).digest() for k in config.proxy.client_keys}

    def authenticate() -> None:
        auth = request.headers.get("Authorization", "")
        scheme, _, token = auth.partition(" ")
        if not auth:
            raise AuthError(
                "Missing bearer key: send 'Authorization: Bearer <key>'.", code="missing_api_key"
            )
        digest = hashlib.sha256(token.strip().encode()).digest()
        if scheme.lower() != "bearer" or digest not in client_keys:
            raise AuthError(
                "The bearer key is not one of proxy.client_keys.", code="invalid_api_key"
            )

    @app.after_serving
    async def _close() -> None:
        await client.aclose()

    @app.get("/health")
    async def health() -> Response:
        try:
            r = await client.get("/health", timeout=2.0)
            gw = "ok" if r.status_code == 200 else f"http {r.status_code}"
        except httpx.HTTPError:
            gw = "unreachable"
        return json_response(
            {
                "status": "ok",
                "version": __version__,
                "gateway": gw,
                "draining": ps.draining.is_set(),
            }
        )

    @app.get("/v1/models")
    async def models() -> Response:
        authenticate()
        try:
            r = await client.get("/v1/models", headers=ps.gateway_headers())
        except httpx.HTTPError as exc:
            raise _gateway_down(exc) from exc
        if r.status_code != 200:
            raise await _gateway_error(r, ps.extra_roots)
        return json_response(r.json())

    @app.post("/v1/chat/completions")
    async def chat() -> Response:
        authenticate()
        body = await json_body()
        model = body.get("model")
        messages = body.get("messages")
        if not isinstance(model, str) or not model:
            raise RequestError("'model' must be a non-empty string.", code="missing_model")
        if not isinstance(messages, list) or not messages:
            raise RequestError("'messages' must be a non-empty list.", code="missing_messages")
        stream = body.get("stream", False)
        if not isinstance(stream, bool):
            raise RequestError("'stream' must be true or false.", code="invalid_stream")
        ident = identify(request.headers, config, ps.clock())
        request.scope["gateway.principal"] = ident.owner or "-"  # type: ignore[typeddict-unknown-key]
        mode = requested_mode(body) or config.artifacts.default_link_mode
        if ident.owner is None and mode == "private":
            raise RequestError(
                "Private download links need to know the Open WebUI user: enable "
                "ENABLE_FORWARD_USER_INFO_HEADERS (or a JWT secret), or ask for public links.",
                code="identity_required",
            )
        owner = ident.owner or "openwebui:anonymous"
        run_body = {"model": model, "messages": messages}
        # Open WebUI's per-model params (temperature, max_tokens...) reach the upstream
        run_body.update({k: body[k] for k in SAMPLING_KEYS if k in body})
        try:
            r = await client.post(
                "/v1/runs", json=run_body, headers=ps.gateway_headers(owner, mode)
            )
        except httpx.HTTPError as exc:
            raise _gateway_down(exc) from exc
        if r.status_code != 202:
            raise await _gateway_error(r, ps.extra_roots)
        run_id = r.json()["run_id"]
        owui = ps.chat(model, mode)
        if not stream:
            async with relay_run(ps, run_id, owner, owui) as chunks:
                async for _ in chunks:
                    pass
            if owui.error is not None:
                raise GatewayError(owui.error["message"], code=owui.error["code"], status=502)
            return json_response(owui.completion())
        body_ = ChannelBody(relay_run(ps, run_id, owner, owui))
        response = Response(body_, status=200, headers=SSE_HEADERS)
        response.timeout = None
        return response

    return app


async def _watch_drain(
    draining: trio.Event, send: trio.MemorySendChannel[bytes | httpx.HTTPError | None]
) -> None:
    """Put ``None`` into the channel when the proxy starts draining."""
    with send:
        await draining.wait()
        with contextlib.suppress(trio.BrokenResourceError, trio.ClosedResourceError):
            send.send_nowait(None)


async def _read_body(
    resp: httpx.Response, send: trio.MemorySendChannel[bytes | httpx.HTTPError | None]
) -> None:
    """Copy a response body into an unbounded channel.

    This task only ever waits inside httpx's read, so when it is cancelled (the proxy's
    client went away, or the terminal event arrived) the cancellation runs through
    httpx's chain of async generators and finishes them. Iterating ``aiter_bytes()``
    in a generator that stops at a ``yield`` or returns early instead leaves that chain
    suspended: trio then warns for each one when it is garbage collected. The channel is
    bounded in practice by the run's event log (``limits.run_log_max_events``).
    """
    with send:
        try:
            async for data in resp.aiter_bytes():
                send.send_nowait(data)
        except httpx.HTTPError as exc:
            send.send_nowait(exc)


@trio.as_safe_channel
async def relay_run(
    ps: ProxyState, run_id: str, owner: str, owui: OwuiChat
) -> AsyncGenerator[bytes, None]:
    """Follow a run's events (reconnecting with Last-Event-ID) as Open WebUI chunks."""
    last_seq = 0
    failures = 0
    headers = ps.gateway_headers(owner)
    try:
        while not owui.finished:
            try:
                async with ps.client.stream(
                    "GET",
                    f"/v1/runs/{run_id}/events",
                    headers={**headers, "Last-Event-ID": str(last_seq)},
                ) as resp:
                    if resp.status_code != 200:
                        err = await _gateway_error(resp, ps.extra_roots)
                        yield owui.failure(err.code, err.message)
                        return
                    decoder = SSEDecoder()
                    send, recv = trio.open_memory_channel[bytes | httpx.HTTPError | None](math.inf)
                    broken: httpx.HTTPError | None = None
                    async with trio.open_nursery() as reader:
                        reader.start_soon(_watch_drain, ps.draining, send.clone())
                        reader.start_soon(_read_body, resp, send)
                        async for data in recv:
                            if data is None:
                                yield owui.failure(
                                    "gateway_draining",
                                    "The proxy is restarting; the response was cut short, please retry.",
                                )
                                break
                            if isinstance(data, httpx.HTTPError):
                                broken = data
                                break
                            out: list[bytes] = []
                            for ev in decoder.feed(data):
                                try:
                                    obj = json.loads(ev.data)
                                except ValueError:
                                    continue
                                if not isinstance(obj, dict):
                                    continue
                                seq = obj.get("seq")
                                if isinstance(seq, int):
                                    if seq <= last_seq:
                                        continue
                                    last_seq = seq
                                out.append(owui.on_event(obj))
                                if owui.finished:
                                    break
                            yield b"".join(out) or encode_comment()
                            if owui.finished:
                                break
                        reader.cancel_scope.cancel()
                    if broken is not None:
                        raise broken
            except httpx.HTTPError:
                failures += 1
                if failures >= 3:
                    yield owui.failure(
                        "gateway_unreachable",
                        "The connection to the artifact gateway broke and could not be resumed.",
                    )
                    return
                await trio.sleep(0.2 * failures)
                continue
            if not owui.finished:
                failures += 1
                if failures >= 3:
                    yield owui.failure(
                        "gateway_disconnected", "The artifact gateway ended the stream early."
                    )
                    return
    finally:
        if not owui.finished:
            with trio.move_on_after(2) as scope:
                scope.shield = True
                with contextlib.suppress(httpx.HTTPError):
                    await ps.client.post(f"/v1/runs/{run_id}/stop", headers=headers)
