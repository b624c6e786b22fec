"""The upstream (OpenAI-compatible model server) client, over httpx.

Every httpx error is translated here into :class:`gateway.errors.UpstreamError`
with a stable ``code``:

    upstream_unreachable   connect failed (502)
    gateway_overloaded     connect failed because this process is out of file
                           descriptors, EMFILE/ENFILE (503, Retry-After: 1)
    upstream_timeout       connect/read timed out (504)
    upstream_disconnected  the connection broke mid-response (502)
    upstream_bad_response  the upstream answered something that is not JSON (502)
    upstream_rate_limited  upstream 429 (429, Retry-After passed on)
    upstream_error         upstream 5xx (502)
    <upstream's own code>  upstream 4xx with an OpenAI error body (same status),
                           e.g. model_not_found (404); else upstream_http_<status>

Messages say what happened in one sentence and never contain the upstream's body
verbatim (it could carry paths) beyond its scrubbed ``error.message``.
"""

from __future__ import annotations

import errno
import json
import time
from typing import Any

import httpx

from gateway.config import UpstreamConfig
from gateway.errors import UpstreamError
from gateway.rewrite import rewrite

MAX_ERROR_BODY = 64 * 1024


class UpstreamHTTPError(UpstreamError):
    """The upstream answered with an HTTP error status."""

    def __init__(
        self, message: str, *, code: str, status: int, retry_after: str | None = None
    ) -> None:
        super().__init__(message, code=code, status=status)
        self.retry_after = retry_after


class GatewayOverloaded(UpstreamError):
    """The gateway itself ran out of file descriptors while connecting upstream."""

    retry_after = "1"

    def __init__(self) -> None:
        super().__init__(
            "The gateway has too many open connections (out of file descriptors) to reach "
            "the upstream model server; retry shortly. Operators: raise LimitNOFILE / "
            "NumberOfFiles or lower server.max_connections.",
            code="gateway_overloaded",
            status=503,
        )


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


def translate(exc: Exception) -> UpstreamError:
    """Map an httpx exception to an :class:`UpstreamError`."""
    if isinstance(exc, UpstreamError):
        return exc
    if isinstance(exc, httpx.ConnectError | OSError) and fds_exhausted(exc):
        return GatewayOverloaded()
    if isinstance(exc, httpx.ConnectError | httpx.ConnectTimeout):
        if isinstance(exc, httpx.ConnectTimeout):
            return UpstreamError(
                "The upstream model server did not accept the connection in time.",
                code="upstream_timeout",
                status=504,
            )
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
    if isinstance(exc, httpx.HTTPError):
        return UpstreamError(
            "The request to the upstream model server failed.", code="upstream_error"
        )
    return UpstreamError("The upstream model server failed unexpectedly.", code="upstream_error")


def _error_from_body(status: int, body: bytes, retry_after: str | None) -> UpstreamHTTPError:
    message = ""
    code = ""
    try:
        data = json.loads(body)
        err = data.get("error") if isinstance(data, dict) else None
        if isinstance(err, dict):
            message = str(err.get("message") or "")
            code = str(err.get("code") or err.get("type") or "")
        elif isinstance(err, str):
            message = err
    except ValueError:
        pass
    message = rewrite(message)[:500]  # never relay a raw path from an error body
    if status == 429:
        return UpstreamHTTPError(
            "The upstream model server is rate limiting requests; retry later."
            + (f" ({message})" if message else ""),
            code="upstream_rate_limited",
            status=429,
            retry_after=retry_after,
        )
    if status >= 500:
        return UpstreamHTTPError(
            f"The upstream model server failed with HTTP {status}."
            + (f" ({message})" if message else ""),
            code="upstream_error",
            status=502,
        )
    if not code or not all(c.isalnum() or c in "_-." for c in code):
        code = f"upstream_http_{status}"
    return UpstreamHTTPError(
        message or f"The upstream model server refused the request with HTTP {status}.",
        code=code,
        status=status,
    )


class Upstream:
    """One shared httpx client to the configured upstream."""

    def __init__(
        self, cfg: UpstreamConfig, *, transport: httpx.AsyncBaseTransport | None = None
    ) -> None:
        self.cfg = cfg
        self.base_url = cfg.base_url.rstrip("/")
        headers = {"Authorization": f"Bearer {cfg.api_key}"} if cfg.api_key else {}
        self._client = httpx.AsyncClient(
            timeout=httpx.Timeout(cfg.connect_timeout_seconds, read=None),
            headers=headers,
            transport=transport,
            # one connection per relayed stream: a pool cap below server.max_connections
            # made streams queue for a slot and fail as upstream_timeout (the server's
            # own connection limit bounds this pool)
            limits=httpx.Limits(max_connections=None, max_keepalive_connections=100),
        )
        self._models: tuple[float, dict[str, Any]] | None = None

    async def aclose(self) -> None:
        await self._client.aclose()

    def _headers(self, principal_id: str) -> dict[str, str]:
        return {"X-Gateway-Principal": principal_id}

    async def open_chat_stream(self, body: dict[str, Any], principal_id: str) -> httpx.Response:
        """Start a streaming chat completion; the caller must ``aclose()`` the response.

        HTTP error statuses are read (bounded), the response closed, and raised as
        :class:`UpstreamHTTPError` before anything is streamed to the client.
        """
        req = self._client.build_request(
            "POST",
            self.base_url + "/chat/completions",
            json=body,
            headers={**self._headers(principal_id), "Accept": "text/event-stream"},
        )
        try:
            resp = await self._client.send(req, stream=True)
        except Exception as exc:  # httpx errors and OS errors alike
            raise translate(exc) from exc
        if resp.status_code >= 400:
            try:
                data = await _read_bounded(resp)
            finally:
                await resp.aclose()
            raise _error_from_body(resp.status_code, data, resp.headers.get("retry-after"))
        return resp

    async def chat(self, body: dict[str, Any], principal_id: str) -> dict[str, Any]:
        """A non-streaming chat completion."""
        try:
            resp = await self._client.post(
                self.base_url + "/chat/completions",
                json=body,
                headers=self._headers(principal_id),
                timeout=httpx.Timeout(
                    self.cfg.connect_timeout_seconds, read=self.cfg.idle_timeout_seconds
                ),
            )
        except Exception as exc:
            raise translate(exc) from exc
        return _json_object(resp, "answer")

    async def models(self) -> dict[str, Any]:
        """``GET /models``, cached for ``models_cache_seconds``."""
        now = time.monotonic()
        if self._models is not None and now - self._models[0] < self.cfg.models_cache_seconds:
            return self._models[1]
        try:
            resp = await self._client.get(self.base_url + "/models", timeout=10.0)
        except Exception as exc:
            raise translate(exc) from exc
        data = _json_object(resp, "model list")
        if self.cfg.models_cache_seconds > 0:
            self._models = (now, data)
        return data

    async def reachable(self, limit_seconds: float = 2.0) -> bool:
        """Readiness probe: does the upstream answer ``GET /models`` at all?"""
        try:
            resp = await self._client.get(self.base_url + "/models", timeout=limit_seconds)
        except Exception:
            return False
        return resp.status_code < 500


def _json_object(resp: httpx.Response, what: str) -> dict[str, Any]:
    """The JSON object of a complete upstream response, or the matching UpstreamError."""
    if resp.status_code >= 400:
        raise _error_from_body(resp.status_code, resp.content, resp.headers.get("retry-after"))
    try:
        data = resp.json()
    except ValueError as exc:
        raise UpstreamError(
            f"The upstream model server's {what} is not JSON.", code="upstream_bad_response"
        ) from exc
    if not isinstance(data, dict):
        raise UpstreamError(
            f"The upstream model server's {what} is not a JSON object.",
            code="upstream_bad_response",
        )
    return data


async def _read_bounded(resp: httpx.Response) -> bytes:
    out = bytearray()
    try:
        async for chunk in resp.aiter_bytes():
            out += chunk
            if len(out) > MAX_ERROR_BODY:
                break
    except httpx.HTTPError:
        pass
    return bytes(out)
