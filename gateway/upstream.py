"""The upstream (OpenAI-compatible model server) client, over httpx.

Every httpx error is translated here into :class:`gateway.errors.UpstreamError` (or
:class:`~gateway.errors.Overloaded`) with a stable ``code``:

    upstream_unreachable   connect failed (502)
    upstream_timeout       connect timed out, no answer within first_byte_timeout_seconds,
                           or silence inside a stream (504)
    upstream_disconnected  the connection broke mid-response (502)
    upstream_bad_response  an answer that is not what was asked for: not JSON, not an
                           event stream for a streaming request, a redirect (502)
    upstream_rate_limited  upstream 429 (429; a valid Retry-After passed on as seconds)
    upstream_auth_failed   upstream 401/403: it refused the gateway's upstream key (502)
    upstream_error         upstream 5xx, or an error reported inside a stream (502)
    <upstream's own code>  upstream 4xx with an OpenAI error body (same status), when the
                           code is a plain identifier, e.g. model_not_found; else
                           upstream_http_<status>
    gateway_overloaded     this process ran out of file descriptors (503)

Messages say what happened in one sentence and never contain the upstream's body
verbatim: its ``error.message`` is rewritten with the configured roots and mount
prefixes (file names only) before it is quoted. The client keeps no cookies: one
cookie jar would be shared by every principal. Also here: ``/models`` with a cache
that keeps serving the last good list while the upstream is down, model ids rewritten
(vLLM names a model by its host path) and mapped back on the way in.
"""

from __future__ import annotations

import contextlib
import email.utils
import errno
import http.cookiejar
import json
import logging
import re
import time
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import httpx
import trio

from gateway.config import UpstreamConfig
from gateway.errors import GatewayError, Overloaded, UpstreamError, UpstreamHTTPError
from gateway.leanclient import SAFE_VALUE, LeanPool, LeanResponse
from gateway.leanclient import available as lean_available
from gateway.rewrite import rewrite, scrub_identifier
from gateway.trust import verify_context

__all__ = [
    "MAX_ERROR_BODY",
    "Models",
    "StreamResponse",
    "Upstream",
    "close_quietly",
    "retry_after_seconds",
    "translate",
]

log = logging.getLogger("gateway.upstream")
R = TypeVar("R")

MAX_ERROR_BODY = 64 * 1024
MAX_RETRY_AFTER = 86400
_CODE = re.compile(r"[A-Za-z][A-Za-z0-9_.-]{0,63}")
#: the fields of a model object relayed from ``/models`` (strings rewritten)
MODEL_FIELDS = ("id", "object", "created", "owned_by", "root", "parent", "max_model_len")
#: the model fields that name a model (a path glued after a word in them is a path)
IDENTIFIER_FIELDS = frozenset({"id", "root", "parent"})

Scrub = Callable[[str], str]
#: an open upstream stream: httpx's, or the lean client's (:mod:`gateway.leanclient`)
StreamResponse = httpx.Response | LeanResponse

#: the codes this module gives (an upstream's own 4xx codes are not among them)
OWN_CODES = frozenset(
    {
        "upstream_unreachable",
        "upstream_timeout",
        "upstream_disconnected",
        "upstream_bad_response",
        "upstream_rate_limited",
        "upstream_error",
        "gateway_overloaded",
    }
)


def metric_code(exc: GatewayError) -> str:
    """A bounded label for an upstream failure: an upstream's own code (any text it
    chose) counts as ``upstream_http_4xx``, so a hostile upstream cannot grow /metrics."""
    return exc.code if exc.code in OWN_CODES else "upstream_http_4xx"


def fds_exhausted(exc: BaseException) -> bool:
    """Is ``exc``, or anything it was raised from or groups, EMFILE/ENFILE?

    httpx wraps the OSError in ``ConnectError``; trio's ``open_tcp_stream`` wraps the
    failed attempts in an ``OSError`` raised from an exception group.
    """
    seen: set[int] = set()
    todo: list[BaseException] = [exc]
    while todo:
        e = todo.pop()
        if id(e) in seen:
            continue
        seen.add(id(e))
        if isinstance(e, OSError) and e.errno in (errno.EMFILE, errno.ENFILE):
            return True
        if isinstance(e, BaseExceptionGroup):
            todo.extend(e.exceptions)
        todo.extend(x for x in (e.__cause__, e.__context__) if x is not None)
    return False


def translate(exc: BaseException) -> GatewayError:
    """Map an httpx (or OS) exception to a :class:`GatewayError`."""
    if isinstance(exc, GatewayError):
        return exc
    if fds_exhausted(exc):
        return Overloaded(
            "The gateway has too many open connections (out of file descriptors) to reach "
            "the upstream model server; retry shortly. Operators: raise LimitNOFILE / "
            "NumberOfFiles or lower server.max_connections."
        )
    if isinstance(exc, httpx.ConnectTimeout):
        return UpstreamError(
            "The upstream model server did not accept the connection in time.",
            code="upstream_timeout",
            status=504,
        )
    if isinstance(exc, httpx.ConnectError):
        return UpstreamError(
            "The upstream model server could not be reached; check [upstream] base_url.",
            code="upstream_unreachable",
        )
    if isinstance(exc, httpx.TimeoutException):
        return UpstreamError(
            "The upstream model server stopped answering in time.",
            code="upstream_timeout",
            status=504,
        )
    if isinstance(exc, httpx.RemoteProtocolError | httpx.ReadError | httpx.WriteError):
        return UpstreamError(
            "The upstream model server closed the connection in the middle of the response.",
            code="upstream_disconnected",
        )
    return UpstreamError("The request to the upstream model server failed.", code="upstream_error")


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


def _error_from_body(
    status: int, body: bytes, retry_after: str | None, scrub: Scrub
) -> UpstreamHTTPError:
    message, code = _error_text(body, scrub)
    quoted = f" ({message})" if message else ""
    if status in (404, 405, 501) and not message:
        # no OpenAI-style error: not a model server's answer about the request, but a
        # server (or a path) without this route
        return UpstreamHTTPError(
            f"The upstream server has no such route (HTTP {status}); check [upstream] "
            "base_url (OpenAI-compatible servers usually end it in /v1).",
            code="upstream_bad_response",
            status=502,
        )
    if status == 429:
        return UpstreamHTTPError(
            "The upstream model server is rate limiting requests; retry later." + quoted,
            code="upstream_rate_limited",
            status=429,
            retry_after=retry_after_seconds(retry_after),
        )
    if status >= 500:
        return UpstreamHTTPError(
            f"The upstream model server failed with HTTP {status}." + quoted,
            code="upstream_error",
            status=502,
        )
    if status < 400:
        return UpstreamHTTPError(
            f"The upstream model server answered with a redirect (HTTP {status}); "
            "check [upstream] base_url.",
            code="upstream_bad_response",
            status=502,
        )
    if status in (401, 403):
        # the gateway's own upstream key was refused: not the client's key, so not a 401
        return UpstreamHTTPError(
            f"The upstream model server refused the gateway's key (HTTP {status}); "
            "check [upstream] api_key." + quoted,
            code="upstream_auth_failed",
            status=502,
        )
    if not _CODE.fullmatch(code) or code.startswith("gateway_"):
        code = f"upstream_http_{status}"
    return UpstreamHTTPError(
        message or f"The upstream model server refused the request with HTTP {status}.",
        code=code,
        status=status,
    )


class _NoCookies(httpx.Cookies):
    """A jar that never reads ``Set-Cookie``: httpx's extraction builds two urllib
    stand-ins and runs the stdlib cookie parser on every response (~80 µs of a
    request's CPU here) only for the refusing policy to drop the result."""

    def extract_cookies(self, response: httpx.Response) -> None:
        return None


def _refuse_cookies(client: httpx.AsyncClient) -> httpx.AsyncClient:
    """Make ``client``'s jar refuse every cookie (the client serves every principal).

    The jar is the client's own (httpx copies a jar handed to it): one that never
    extracts, with a policy that refuses every cookie should one be set anyway."""
    jar = _NoCookies()
    jar.jar.set_policy(http.cookiejar.DefaultCookiePolicy(allowed_domains=[]))
    client._cookies = jar
    return client


def new_client(
    *,
    connect_timeout: float,
    transport: httpx.AsyncBaseTransport | None = None,
    headers: dict[str, str] | None = None,
    base_url: str = "",
) -> httpx.AsyncClient:
    """An httpx client as the gateway uses them: no read timeout, no cookies, TLS trust
    loaded on the first TLS connection (gateway.trust)."""
    client = httpx.AsyncClient(
        base_url=base_url,
        verify=verify_context(),
        timeout=httpx.Timeout(connect_timeout, read=None),
        headers=headers,
        transport=transport,
        limits=httpx.Limits(max_connections=None, max_keepalive_connections=100),
    )
    return _refuse_cookies(client)


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


class Upstream:
    """One shared httpx client to the configured upstream."""

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
        headers = {"Authorization": f"Bearer {cfg.api_key}"} if cfg.api_key else {}
        self._client = new_client(
            connect_timeout=cfg.connect_timeout_seconds, transport=transport, headers=headers
        )
        self.models_cache = Models(cfg.models_cache_seconds, scrub)
        self.first_byte_seconds = cfg.first_byte_timeout_seconds
        # the streaming request's fixed parts, built once (build_request re-parses the
        # URL and re-merges the client's headers on every call: ~70 µs of a request)
        self._chat_url = httpx.URL(self.base_url + "/chat/completions")
        fixed = httpx.Headers(self._client.headers)
        fixed["Accept"] = "text/event-stream"
        fixed["Accept-Encoding"] = "identity"
        fixed["Content-Type"] = "application/json"
        self._stream_headers = fixed.multi_items()
        self._stream_timeout = {"timeout": self._client.timeout.as_dict()}
        self._lean = self._lean_pool(transport, cfg.connect_timeout_seconds)

    def _lean_pool(
        self, transport: httpx.AsyncBaseTransport | None, connect_timeout: float
    ) -> LeanPool | None:
        """The lean client for the streaming request, where httpx would do nothing
        more: plain HTTP, httpx's own transport, no proxy for this URL."""
        url = self._chat_url
        if transport is not None or url.scheme != "http" or not lean_available():
            return None
        client: Any = self._client
        route = getattr(client, "_transport_for_url", None)  # httpx 0.28's (private)
        if route is None or route(url) is not getattr(client, "_transport", None):
            return None  # a proxy from the environment (or an unknown httpx): httpx routes it
        fixed = [
            (k, v) for k, v in self._stream_headers if k.lower() not in ("host", "content-length")
        ]
        if not all(SAFE_VALUE.fullmatch(k) and _safe_value(v) for k, v in fixed):
            return None
        return LeanPool(url, fixed, connect_timeout=connect_timeout)

    async def aclose(self) -> None:
        if self._lean is not None:
            await self._lean.aclose()
        await self._client.aclose()

    def _headers(self, principal_id: str) -> dict[str, str]:
        return {"X-Gateway-Principal": principal_id}

    def _body(self, body: dict[str, Any]) -> dict[str, Any]:
        model = body.get("model")
        if isinstance(model, str):
            return {**body, "model": self.models_cache.upstream_id(model)}
        return body

    async def _send(self, req: httpx.Request, *, stream: bool) -> httpx.Response:
        return await self._bounded(self._client.send, req, stream=stream)

    async def _bounded(self, call: Callable[..., Awaitable[R]], *args: Any, **kw: Any) -> R:
        """``call``'s answer within ``first_byte_timeout_seconds``, errors translated."""
        try:
            with trio.fail_after(self.first_byte_seconds):
                return await call(*args, **kw)
        except trio.TooSlowError:
            raise self._too_slow() from None
        except Exception as exc:  # httpx errors and OS errors alike
            raise translate(exc) from exc

    async def _lean_post(self, content: bytes, principal_id: str) -> LeanResponse:
        """:meth:`_bounded` for the lean client, which keeps the bound itself (its wait
        for the answer's head is timed by the stream clock: no cancel scope)."""
        assert self._lean is not None
        extra = [("X-Gateway-Principal", principal_id)]
        deadline = trio.current_time() + self.first_byte_seconds
        try:
            return await self._lean.post(content, extra, principal_id, deadline=deadline)
        except trio.TooSlowError:
            raise self._too_slow() from None
        except Exception as exc:  # httpx errors and OS errors alike
            raise translate(exc) from exc

    def _too_slow(self) -> UpstreamError:
        return UpstreamError(
            f"The upstream model server did not answer within "
            f"{self.first_byte_seconds:g} s (upstream.first_byte_timeout_seconds).",
            code="upstream_timeout",
            status=504,
        )

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
        resp: StreamResponse
        if self._lean is not None and _safe_value(principal_id):
            resp = await self._lean_post(content, principal_id)
        else:
            req = httpx.Request(
                "POST",
                self._chat_url,
                content=content,
                headers=[*self._stream_headers, ("X-Gateway-Principal", principal_id)],
                extensions=dict(self._stream_timeout),
            )
            resp = await self._send(req, stream=True)
        ctype = resp.headers.get("content-type", "").split(";")[0].strip().lower()
        if resp.status_code == 200 and ctype == "text/event-stream":
            return resp
        try:
            data = await _read_bounded(resp)
        finally:
            await resp.aclose()
        if resp.status_code != 200:
            raise _error_from_body(
                resp.status_code, data, resp.headers.get("retry-after"), self.scrub
            )
        raise UpstreamError(
            f"The upstream model server answered a streaming request with "
            f"{ctype or 'no content type'}, not an event stream; check [upstream] base_url.",
            code="upstream_bad_response",
        )

    async def chat(self, body: dict[str, Any], principal_id: str) -> dict[str, Any]:
        """A non-streaming chat completion."""
        req = self._client.build_request(
            "POST",
            self.base_url + "/chat/completions",
            json=self._body(body),
            headers=self._headers(principal_id),
            timeout=httpx.Timeout(
                self.cfg.connect_timeout_seconds, read=self.cfg.idle_timeout_seconds
            ),
        )
        resp = await self._send(req, stream=True)
        try:
            data = await _read_bounded(resp, limit=64 * 1024 * 1024, strict=True)
        finally:
            await resp.aclose()
        return self._json_object(resp, data, "answer")

    async def models(self) -> dict[str, Any]:
        """``GET /models``, cached; the last good list while the upstream is down."""
        now = time.monotonic()
        cache = self.models_cache
        fresh = cache.fresh(now)
        if fresh is not None:
            return fresh
        try:
            req = self._client.build_request("GET", self.base_url + "/models", timeout=10.0)
            resp = await self._send(req, stream=True)
            try:
                data = await _read_bounded(resp, limit=8 * 1024 * 1024, strict=True)
            finally:
                await resp.aclose()
            listing = self._json_object(resp, data, "model list")
        except GatewayError:
            if cache.last_good is not None:
                log.warning("the upstream's model list is unavailable; serving the last good one")
                return cache.last_good
            raise
        return cache.store(listing, now)

    async def probe(self, limit_seconds: float = 2.0) -> str:
        """Readiness probe: ``"ok"`` when the upstream answers ``GET /models`` at all,
        ``"key refused"`` when it refuses the gateway's key (every request would fail),
        else ``"unreachable"``."""
        try:
            with trio.move_on_after(limit_seconds):
                resp = await self._client.get(self.base_url + "/models", timeout=limit_seconds)
                if resp.status_code in (401, 403):
                    return "key refused"
                return "ok" if resp.status_code < 500 else "unreachable"
        except Exception:
            return "unreachable"
        return "unreachable"

    def _json_object(self, resp: httpx.Response, body: bytes, what: str) -> dict[str, Any]:
        """The JSON object of a complete upstream response, or the matching error."""
        if resp.status_code >= 300:
            raise _error_from_body(
                resp.status_code, body, resp.headers.get("retry-after"), self.scrub
            )
        try:
            data = json.loads(body)
        except RecursionError as exc:
            raise UpstreamError(
                f"The upstream model server's {what} is nested too deeply to read.",
                code="upstream_bad_response",
            ) from exc
        except ValueError as exc:
            raise UpstreamError(
                f"The upstream model server's {what} is not JSON.", code="upstream_bad_response"
            ) from exc
        if not isinstance(data, dict):
            raise UpstreamError(
                f"The upstream model server's {what} is not a JSON object.",
                code="upstream_bad_response",
            )
        answered = bool(data.get("choices")) or "output" in data or "data" in data
        if not answered and (data.get("error") is not None or data.get("object") == "error"):
            # HTTP 200 with only an error: a failure, not an empty success
            message = _error_text(body, self.scrub)[0]
            raise UpstreamHTTPError(
                f"The upstream model server sent an error as its {what}."
                + (f" ({message})" if message else ""),
                code="upstream_error",
                status=502,
            )
        return data


def _safe_value(value: str) -> bool:
    """A header value the lean client writes as it is (visible ASCII, spaces inside)."""
    return bool(value) and value.isascii() and value.isprintable() and value == value.strip()


#: httpx's ``json=`` encoding, made once (``json.dumps`` with options makes one a call)
_REQUEST_JSON = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"), allow_nan=False)


def _json_bytes(body: dict[str, Any]) -> bytes:
    """A request body as httpx's ``json=`` encodes it."""
    return _REQUEST_JSON.encode(body).encode()


async def _read_bounded(
    resp: StreamResponse, limit: int = MAX_ERROR_BODY, *, strict: bool = False
) -> bytes:
    """Up to ``limit`` bytes of a body; ``strict``: a broken read is an error, not the end."""
    out = bytearray()
    try:
        async for chunk in resp.aiter_bytes():
            out += chunk
            if len(out) > limit:
                break
    except httpx.HTTPError as exc:
        if strict:
            raise translate(exc) from exc
    return bytes(out)


async def close_quietly(resp: StreamResponse, limit_seconds: float = 2.0) -> None:
    """Close an upstream response even while being cancelled (bounded)."""
    if resp.is_closed:
        return  # closed already (a relay's source closes it; the request's stack again)
    with trio.move_on_after(limit_seconds) as scope:
        scope.shield = True
        with contextlib.suppress(Exception):
            await resp.aclose()
