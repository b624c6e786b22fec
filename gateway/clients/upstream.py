"""The upstream (OpenAI-compatible model server, or an agent such as Hermes) as the API
server calls it, over the one outbound client (:mod:`gateway.clients.httpclient`).

What an answer's status and body mean is decided here; the client's own errors
(connect, TLS, timeouts, broken bodies) come from it already translated. The codes an
answer gives:

    upstream_auth_failed   upstream 401/403: it refused the gateway's upstream.api_key (502)
    upstream_wrong_path    the route is not there (404/405/501 on the gateway's own routes,
                           unless the answer is about the model) or an HTML page came back
                           where the API should answer: upstream.base_url is wrong (502)
    upstream_bad_response  an answer that is not what was asked for: not JSON, not an
                           OpenAI shape, not an event stream for a streaming request, a
                           redirect (502)
    upstream_rate_limited  upstream 429 (429; a valid Retry-After passed on as seconds)
    upstream_error         upstream 5xx, or a 200 that holds only an error (502)
    <upstream's own code>  upstream 4xx with an OpenAI error body (same status), when the
                           code is a plain identifier, e.g. model_not_found; else
                           upstream_http_<status>

Messages name the URL, say what to change in one sentence, and never contain the
upstream's body verbatim: its ``error.message`` is rewritten with the configured roots
and mount prefixes (file names only) before it is quoted. Every failure is logged by
:func:`gateway.clients.httpclient.report` (rate-limited). Also here: ``/models`` with a cache
that keeps serving the last good list while the upstream is down, model ids rewritten
(vLLM names a model by its host path) and mapped back on the way in; the readiness
probe; and the generic calls a native relay of ``/responses`` and ``/runs`` makes
(:meth:`Upstream.open_sse`, :meth:`Upstream.request_json`).
"""

from __future__ import annotations

import contextlib
import email.utils
import http.cookiejar
import json
import logging
import re
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import httpx
import trio

from gateway.clients.httpclient import (
    Headers,
    HTTPClient,
    Response,
    accept_encoding,
    media_type,
    report,
)
from gateway.clients.trust import verify_context
from gateway.core.errors import GatewayError, UpstreamError, UpstreamHTTPError
from gateway.core.rewrite import rewrite, scrub_identifier
from gateway.ops.config import UpstreamConfig

__all__ = [
    "MAX_ERROR_BODY",
    "SESSION_KEY",
    "JSONAnswer",
    "Models",
    "Readiness",
    "StreamResponse",
    "Upstream",
    "close_quietly",
    "error_for_status",
    "metric_code",
    "new_client",
    "retry_after_seconds",
]

log = logging.getLogger("gateway.upstream")

MAX_ERROR_BODY = 64 * 1024
MAX_RETRY_AFTER = 86400
#: how long a readiness answer is reused (a load balancer polls every few seconds)
READY_CACHE_SECONDS = 5.0
_CODE = re.compile(r"[A-Za-z][A-Za-z0-9_.-]{0,63}")
#: the fields of a model object relayed from ``/models`` (strings rewritten)
MODEL_FIELDS = ("id", "object", "created", "owned_by", "root", "parent", "max_model_len")
#: the model fields that name a model (a path glued after a word in them is a path)
IDENTIFIER_FIELDS = frozenset({"id", "root", "parent"})

Scrub = Callable[[str], str]
#: an open upstream answer (:class:`gateway.clients.httpclient.Response`)
StreamResponse = Response

#: the codes this module and the client give (an upstream's own 4xx codes are not)
OWN_CODES = frozenset(
    {
        "upstream_refused",
        "upstream_dns_failed",
        "upstream_unreachable",
        "upstream_tls_failed",
        "upstream_timeout",
        "upstream_disconnected",
        "upstream_bad_response",
        "upstream_wrong_path",
        "upstream_auth_failed",
        "upstream_rate_limited",
        "upstream_error",
        "gateway_overloaded",
    }
)


def metric_code(exc: GatewayError) -> str:
    """A bounded label for an upstream failure: an upstream's own code (any text it
    chose) counts as ``upstream_http_4xx``, so a hostile upstream cannot grow /metrics."""
    return exc.code if exc.code in OWN_CODES else "upstream_http_4xx"


def retry_after_seconds(value: str | None, now: float | None = None) -> int | None:
    """A valid ``Retry-After`` (delay-seconds or HTTP-date) as seconds, else None."""
    if not value:
        return None
    value = value.strip()
    if value.isascii() and value.isdigit() and len(value) <= 10:
        return min(int(value), MAX_RETRY_AFTER)
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError, IndexError):
        return None
    if when is None or when.tzinfo is None:
        return None
    delta = when.timestamp() - (time.time() if now is None else now)
    return int(min(max(delta, 0), MAX_RETRY_AFTER))


def _error_text(body: bytes, scrub: Scrub) -> tuple[str, str]:
    """(message, code) of an OpenAI-style error body (``{"error": {...}}``, a string, or
    vLLM's ``{"object": "error", "message": ...}``); "" for what it does not hold."""
    message = code = ""
    try:
        data = json.loads(body)
        err = data.get("error") if isinstance(data, dict) else None
        if isinstance(data, dict) and data.get("object") == "error":
            err = data
        if isinstance(err, dict):
            raw = err.get("message")
            # a string only: the repr of a list or dict doubles every backslash (one JSON
            # level more than a path is read at)
            message = raw if isinstance(raw, str) else ""
            code = str(err.get("code") or err.get("type") or "")
        elif isinstance(err, str):
            message = err
    except (ValueError, RecursionError):
        pass
    # never relay a raw path from an error body; rewritten whole (the body is bounded by
    # MAX_ERROR_BODY), then cut: a path cut short would keep a folder as its "name"
    return scrub(message)[:500], code


def _is_html(ctype: str, body: bytes) -> bool:
    head = body[:512].lstrip().lower()
    return ctype in ("text/html", "application/xhtml+xml") or head.startswith(
        (b"<!doctype html", b"<html")
    )


_MODEL_WORD = re.compile(r"(?<![/\w-])model\b", re.IGNORECASE)


def _about_model(message: str, code: str) -> bool:
    """Is a 404's error about the model asked for ("The model `x` does not exist",
    ``model_not_found``), not about the route ("Route /models not found")?"""
    return "model" in code.lower() or _MODEL_WORD.search(message) is not None


def wrong_path(url: str, what: str) -> UpstreamHTTPError:
    return UpstreamHTTPError(
        f"The upstream {url} {what}: does upstream.base_url point at the OpenAI-compatible "
        "API (it usually ends in /v1)?",
        code="upstream_wrong_path",
        status=502,
    )


def error_for_status(
    status: int,
    body: bytes,
    headers: Headers,
    url: str,
    scrub: Scrub,
    *,
    route: bool = True,
) -> UpstreamHTTPError:
    """The error for an answer with ``status`` (not 2xx) and ``body`` (bounded) at
    ``url``, logged. ``route``: ``url`` is one of the API's fixed routes, so a 404 that
    is not about the model means the route is missing (``upstream_wrong_path``); for
    an object's URL (``/responses/{id}``) a 404 is passed on like any other 4xx."""
    exc = _status_error(status, body, headers, url, scrub, route)
    report(exc, url, f"HTTP {status}")
    if 300 <= status < 400:
        where = str(headers.get("location", ""))
        log.info("upstream %s redirects to %s", url, scrub(where.split("?", 1)[0])[:200])
    return exc


def _status_error(
    status: int, body: bytes, headers: Headers, url: str, scrub: Scrub, route: bool
) -> UpstreamHTTPError:
    message, code = _error_text(body, scrub)
    quoted = f" ({message})" if message else ""
    if status == 429:
        return UpstreamHTTPError(
            f"The upstream {url} is rate limiting requests; retry later." + quoted,
            code="upstream_rate_limited",
            status=429,
            retry_after=retry_after_seconds(headers.get("retry-after")),
        )
    if status >= 500 and status != 501:
        return UpstreamHTTPError(
            f"The upstream {url} failed with HTTP {status}." + quoted,
            code="upstream_error",
            status=502,
        )
    if status in (401, 403):
        # the gateway's own upstream key was refused: not the client's key, so not a 401
        return UpstreamHTTPError(
            f"The upstream {url} refused the gateway's key (HTTP {status}); check "
            "upstream.api_key." + quoted,
            code="upstream_auth_failed",
            status=502,
        )
    if _is_html(media_type(headers), body):
        return wrong_path(url, f"answered with an HTML page (HTTP {status}), not the API")
    if status < 400:
        return UpstreamHTTPError(
            f"The upstream {url} answered with a redirect (HTTP {status}); set "
            "upstream.base_url to the address it redirects to (logged).",
            code="upstream_bad_response",
            status=502,
        )
    if route and status in (404, 405, 501) and not _about_model(message, code):
        return wrong_path(url, f"has no such route (HTTP {status}){quoted}")
    if not _CODE.fullmatch(code) or code.startswith("gateway_"):
        code = f"upstream_http_{status}"
    return UpstreamHTTPError(
        message or f"The upstream {url} refused the request with HTTP {status}.",
        code=code,
        status=status,
    )


def new_client(
    *,
    connect_timeout: float,
    transport: httpx.AsyncBaseTransport | None = None,
    headers: dict[str, str] | None = None,
    base_url: str = "",
) -> httpx.AsyncClient:
    """An httpx client for the proxy's calls to the gateway and for Open WebUI: no read
    timeout, TLS trust loaded on the first TLS connection (gateway.clients.trust), and a cookie
    jar that refuses every cookie (one client serves every principal)."""
    return httpx.AsyncClient(
        base_url=base_url,
        verify=verify_context(),
        timeout=httpx.Timeout(connect_timeout, read=None),
        headers=headers,
        transport=transport,
        limits=httpx.Limits(max_connections=None, max_keepalive_connections=100),
        cookies=http.cookiejar.CookieJar(http.cookiejar.DefaultCookiePolicy(allowed_domains=[])),
    )


class Models:
    """The upstream's model list: cached, rewritten, and mapped back on the way in."""

    def __init__(self, cache_seconds: float, scrub: Scrub) -> None:
        self.cache_seconds = cache_seconds
        self._scrub = scrub
        self._at = -float("inf")
        self._listing: dict[str, Any] | None = None
        self._real: dict[str, str] = {}  # shown id -> upstream's id

    def fresh(self, now: float) -> dict[str, Any] | None:
        if self._listing is not None and now - self._at < self.cache_seconds:
            return self._listing
        return None

    @property
    def last_good(self) -> dict[str, Any] | None:
        return self._listing

    def store(self, data: dict[str, Any], now: float) -> dict[str, Any]:
        models = data.get("data")
        shown: list[dict[str, Any]] = []
        real: dict[str, str] = {}
        for m in models if isinstance(models, list) else ():
            if isinstance(m, dict) and isinstance(m.get("id"), str) and m["id"]:
                entry = self._model(m)
                real[entry["id"]] = m["id"]
                shown.append(entry)
        self._listing = {"object": "list", "data": shown}
        self._real = real
        self._at = now
        return self._listing

    def _model(self, m: dict[str, Any]) -> dict[str, Any]:
        out: dict[str, Any] = {"object": "model"}
        for key in MODEL_FIELDS:
            value = m.get(key)
            if isinstance(value, str) and key in IDENTIFIER_FIELDS:
                out[key] = scrub_identifier(value, self._scrub)
            elif isinstance(value, str) and key != "object":
                out[key] = self._scrub(value)
            elif isinstance(value, int) and not isinstance(value, bool):
                out[key] = value
        return out

    def upstream_id(self, shown: str) -> str:
        """The upstream's own id for a model id a client got from ``/models``."""
        return self._real.get(shown, shown)


@dataclass(frozen=True)
class Readiness:
    """What the readiness probe found: ``code`` is ``"ok"`` or an error code."""

    code: str
    detail: str

    @property
    def ok(self) -> bool:
        return self.code == "ok"


@dataclass(frozen=True)
class JSONAnswer:
    """A complete 2xx JSON answer: its status, headers (``X-Hermes-Session-Id``...) and
    object."""

    status: int
    headers: Headers
    data: dict[str, Any]


_SSE = (("Accept", "text/event-stream"), ("Accept-Encoding", "identity"))


#: the header that scopes the Hermes agent's long-term memory (one scope per principal)
SESSION_KEY = "X-Hermes-Session-Key"


class Upstream:
    """The configured upstream, through one :class:`~gateway.clients.httpclient.HTTPClient`.

    ``transport``: an ``httpx.AsyncBaseTransport`` answering instead of the network
    (tests and the harness's replay)."""

    def __init__(
        self,
        cfg: UpstreamConfig,
        *,
        transport: httpx.AsyncBaseTransport | None = None,
        scrub: Scrub = rewrite,
    ) -> None:
        self.cfg = cfg
        self.base_url = cfg.base_url.rstrip("/")
        self.scrub = scrub
        auth = [("Authorization", f"Bearer {cfg.api_key}")] if cfg.api_key else []
        self.http = HTTPClient(
            self.base_url,
            headers=auth,
            connect_timeout=cfg.connect_timeout_seconds,
            transport=transport,
        )
        self.models_cache = Models(cfg.models_cache_seconds, scrub)
        self.first_byte_seconds = cfg.first_byte_timeout_seconds
        self._chat_headers = (("Content-Type", "application/json"), *_SSE)
        self._json_headers = (
            ("Accept", "application/json"),
            ("Accept-Encoding", accept_encoding()),
        )
        self._ready: tuple[float, Readiness] | None = None
        self._ready_lock = trio.Lock()
        self._session_keys = bool(cfg.api_key)

    def principal_headers(self, principal_id: str) -> list[tuple[str, str]]:
        """The headers naming the requester to the upstream: ``X-Gateway-Principal``
        and, when the gateway authenticates to it, :data:`SESSION_KEY` (the Hermes
        agent scopes its long-term memory by it and refuses it, 403, from a client
        without its API key). Every request on a principal's behalf carries them."""
        if not principal_id:
            return []
        named = [("X-Gateway-Principal", principal_id)]
        if self._session_keys:
            named.append((SESSION_KEY, principal_id))
        return named

    async def aclose(self) -> None:
        await self.http.aclose()

    def _body(self, body: dict[str, Any]) -> dict[str, Any]:
        model = body.get("model")
        if isinstance(model, str):
            return {**body, "model": self.models_cache.upstream_id(model)}
        return body

    def _deadline(self, seconds: float | None = None) -> float:
        return trio.current_time() + (self.first_byte_seconds if seconds is None else seconds)

    def chat_content(self, body: dict[str, Any]) -> bytes:
        """A streaming request's body as :meth:`open_chat_stream` sends it: a caller that
        encodes it first can let the parsed request go before the upstream answers (a
        conversation can be megabytes of objects, its first byte take seconds)."""
        return _json_bytes(self._body(body))

    async def open_chat_stream(
        self, body: dict[str, Any] | bytes, principal_id: str
    ) -> StreamResponse:
        """Start a streaming chat completion (``body``: the request, or its
        :meth:`chat_content`); the caller must ``aclose()`` the response.

        Anything but ``200 text/event-stream`` is read (bounded), closed and raised as an
        :class:`UpstreamHTTPError` before anything is streamed to the client.
        """
        content = body if isinstance(body, bytes) else self.chat_content(body)
        del body  # (not held while the upstream thinks)
        resp = await self.http.open(
            "POST",
            "/chat/completions",
            content=content,
            headers=(*self._chat_headers, *self.principal_headers(principal_id)),
            key=principal_id,
            deadline=self._deadline(),
        )
        return await self._event_stream(resp, route=True)

    async def open_sse(
        self,
        method: str,
        path: str,
        principal_id: str,
        *,
        body: dict[str, Any] | bytes | None = None,
        headers: Sequence[tuple[str, str]] = (),
        route: bool = True,
    ) -> StreamResponse:
        """An event stream at ``path`` below ``base_url`` (``POST /responses`` with
        ``stream: true``, ``GET /runs/{id}/events``): ``200 text/event-stream`` or the
        mapped error (``route``: see :func:`error_for_status`). The caller reads it
        (``SSESource.from_response``) and must ``aclose()`` it; its headers are
        ``resp.headers``."""
        resp = await self._send(method, path, principal_id, body, (*_SSE, *headers))
        return await self._event_stream(resp, route=route)

    async def request_json(
        self,
        method: str,
        path: str,
        principal_id: str,
        *,
        body: dict[str, Any] | bytes | None = None,
        headers: Sequence[tuple[str, str]] = (),
        route: bool = True,
        limit: int = 64 * 1024 * 1024,
    ) -> JSONAnswer:
        """``method path`` below ``base_url`` with a JSON ``body`` (``POST /runs``,
        ``GET /responses/{id}``, ``DELETE ...``, ``POST /runs/{id}/stop``): a 2xx JSON
        object, else the mapped error (for an object's URL pass ``route=False``: its
        404 is then ``upstream_http_404`` or the upstream's own code, status 404)."""
        resp = await self._send(method, path, principal_id, body, (*self._json_headers, *headers))
        data = await self._complete(resp, "answer", route=route, limit=limit)
        if not isinstance(data, dict):
            raise self._not_openai(resp.url, "answer is not a JSON object")
        return JSONAnswer(resp.status_code, resp.headers, data)

    async def _send(
        self,
        method: str,
        path: str,
        principal_id: str,
        body: dict[str, Any] | bytes | None,
        headers: Sequence[tuple[str, str]],
        seconds: float | None = None,
        timeout_name: str = "upstream.first_byte_timeout_seconds",
    ) -> Response:
        content = b""
        extra = [*headers, *self.principal_headers(principal_id)]
        if body is not None:
            content = body if isinstance(body, bytes) else _json_bytes(self._body(body))
            extra.append(("Content-Type", "application/json"))
        return await self.http.open(
            method,
            path,
            content=content,
            headers=extra,
            key=principal_id,
            deadline=self._deadline(seconds),
            timeout_name=timeout_name,
        )

    async def _event_stream(self, resp: Response, *, route: bool) -> Response:
        ctype = media_type(resp.headers)
        if resp.status_code == 200 and ctype == "text/event-stream":
            return resp
        try:
            data = await resp.read_prefix(MAX_ERROR_BODY)
        finally:
            await resp.aclose()
        if resp.status_code != 200:
            raise error_for_status(
                resp.status_code, data, resp.headers, resp.url, self.scrub, route=route
            )
        if _is_html(ctype, data):
            raise _reported(wrong_path(resp.url, "answered with an HTML page, not the API"), resp)
        raise self._not_openai(
            resp.url, f"answered a streaming request with {ctype or 'no content type'}"
        )

    def _not_openai(self, url: str, what: str) -> UpstreamError:
        exc = UpstreamError(
            f"The upstream {url} {what}, not what an OpenAI-compatible API sends; check "
            "upstream.base_url.",
            code="upstream_bad_response",
        )
        report(exc, url)
        return exc

    async def capabilities(self) -> dict[str, Any] | None:
        """``GET {base_url}/capabilities`` (the Hermes agent's API server documents its
        APIs there), or None when the upstream has no such document or fails."""
        try:
            resp = await self._send("GET", "/capabilities", "", None, self._json_headers)
        except GatewayError:  # (the connection's failure is reported like any other)
            return None
        try:  # an upstream without the document (a 404, an HTML page) is no failure
            if resp.status_code != 200:
                return None
            body = await resp.read(1 << 20, idle_timeout=self.cfg.idle_timeout_seconds)
        except GatewayError:
            return None
        finally:
            await resp.aclose()
        try:
            data = json.loads(body)
        except (ValueError, RecursionError):
            return None
        return data if isinstance(data, dict) else None

    async def chat(self, body: dict[str, Any], principal_id: str) -> dict[str, Any]:
        """A non-streaming chat completion."""
        resp = await self._send("POST", "/chat/completions", principal_id, body, self._json_headers)
        data = await self._complete(resp, "answer")
        return self._answer(resp, data, "answer")

    async def models(self) -> dict[str, Any]:
        """``GET /models``, cached; the last good list while the upstream is down."""
        now = time.monotonic()
        cache = self.models_cache
        fresh = cache.fresh(now)
        if fresh is not None:
            return fresh
        try:
            listing = await self.model_list(10.0)
        except GatewayError:
            if cache.last_good is not None:
                log.warning("the upstream's model list is unavailable; serving the last good one")
                return cache.last_good
            raise
        return cache.store(listing, now)

    async def model_list(self, seconds: float) -> dict[str, Any]:
        """``GET /models`` checked for an OpenAI model list (``{"data": [...]}``)."""
        resp = await self._send(
            "GET", "/models", "", None, self._json_headers, seconds, f"a {seconds:g} s bound"
        )
        data = await self._complete(resp, "model list", limit=8 * 1024 * 1024)
        listing = self._answer(resp, data, "model list")
        if not isinstance(listing.get("data"), list):
            raise self._not_openai(resp.url, "answered without a model list (no data: [...])")
        return listing

    async def probe(self, limit_seconds: float = 2.0) -> Readiness:
        """Readiness: does ``base_url`` answer an OpenAI-shaped model list within
        ``limit_seconds``? The answer is reused for :data:`READY_CACHE_SECONDS` (one
        probe at a time, whoever asks)."""
        async with self._ready_lock:
            now = trio.current_time()
            if self._ready is not None and now - self._ready[0] < READY_CACHE_SECONDS:
                return self._ready[1]
            try:
                with trio.fail_after(limit_seconds * 2):  # (the client bounds it first)
                    await self.model_list(limit_seconds)
                found = Readiness("ok", "")
            except GatewayError as exc:
                found = Readiness(exc.code, exc.message)
            except trio.TooSlowError:
                found = Readiness("upstream_timeout", "the readiness probe timed out")
            self._ready = (trio.current_time(), found)
            return found

    async def _complete(
        self, resp: Response, what: str, *, route: bool = True, limit: int = 64 * 1024 * 1024
    ) -> Any:
        """The JSON of a complete answer (each read within the idle timeout), or the
        matching error; the response is closed."""
        try:
            if resp.status_code >= 300:
                body = await resp.read_prefix(MAX_ERROR_BODY)
                raise error_for_status(
                    resp.status_code, body, resp.headers, resp.url, self.scrub, route=route
                )
            body = await resp.read(limit, idle_timeout=self.cfg.idle_timeout_seconds)
        finally:
            await resp.aclose()
        try:
            return json.loads(body)
        except RecursionError as exc:
            raise self._not_openai(resp.url, f"sent a {what} nested too deeply to read") from exc
        except ValueError as exc:
            if _is_html(media_type(resp.headers), body):
                raise _reported(
                    wrong_path(resp.url, "answered with an HTML page, not the API"), resp
                ) from exc
            raise self._not_openai(resp.url, f"sent a {what} that is not JSON") from exc

    def _answer(self, resp: Response, data: Any, what: str) -> dict[str, Any]:
        """``data`` as an answer object, or the matching error."""
        if not isinstance(data, dict):
            raise self._not_openai(resp.url, f"sent a {what} that is not a JSON object")
        answered = bool(data.get("choices")) or "output" in data or "data" in data
        if not answered and (data.get("error") is not None or data.get("object") == "error"):
            # HTTP 200 with only an error: a failure, not an empty success
            message = _error_text(json.dumps(data).encode(), self.scrub)[0]
            exc = UpstreamHTTPError(
                f"The upstream {resp.url} sent an error as its {what}."
                + (f" ({message})" if message else ""),
                code="upstream_error",
                status=502,
            )
            raise _reported(exc, resp)
        return data


def _reported(exc: UpstreamHTTPError, resp: Response) -> UpstreamHTTPError:
    report(exc, resp.url)
    return exc


#: httpx's ``json=`` encoding, made once (``json.dumps`` with options makes one a call)
_REQUEST_JSON = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"), allow_nan=False)


def _json_bytes(body: dict[str, Any]) -> bytes:
    """A request body as httpx's ``json=`` encodes it."""
    return _REQUEST_JSON.encode(body).encode()


async def close_quietly(resp: StreamResponse, limit_seconds: float = 2.0) -> None:
    """Close an upstream response even while being cancelled (bounded)."""
    if resp.is_closed:
        return  # closed already (a relay's source closes it; the request's stack again)
    with trio.move_on_after(limit_seconds) as scope:
        scope.shield = True
        with contextlib.suppress(Exception):
            await resp.aclose()
