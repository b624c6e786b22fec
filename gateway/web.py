"""HTTP plumbing shared by the API server and the proxy (thin quart-trio glue).

* :class:`GatewayHTTPConnection` — quart-trio's ASGI connection with a per-request exit
  stack (closed even if the body never starts), the in-flight count the drain waits
  on, metrics and one access-log line per request;
* :class:`ChannelBody` — a response body fed by an async context manager (a
  :class:`gateway.relay.Relay`), entered and exited by the task that sends the body;
* JSON bodies (:func:`json_body`: size, nesting and text checked), JSON and error
  responses, the bearer token of a request, SSE headers;
* :func:`install_common` — what both apps install: the connection class, no response
  timeout on streams, the body limit, the route label, and JSON errors with stable
  codes for every failure (HTML pages for browsers on the download route, see
  :mod:`gateway.routes.artifacts`).
"""

from __future__ import annotations

import json
import logging
import math
import re
import time
from collections.abc import AsyncIterable, AsyncIterator, Awaitable, Callable, Mapping
from contextlib import AbstractAsyncContextManager
from types import MappingProxyType
from typing import Any

import trio
from quart import Response, request
from quart.utils import encode_headers
from quart.wrappers.response import ResponseBody
from quart_trio import QuartTrio
from quart_trio.asgi import TrioASGIHTTPConnection
from werkzeug.exceptions import HTTPException

from gateway.connections import WRITES_KEY
from gateway.errors import AuthError, GatewayError, RequestError
from gateway.logs import log_access
from gateway.shapes import JSONTooDeep, loads_bounded
from gateway.sse import UNPAIRED

__all__ = [
    "SSE_HEAD",
    "SSE_HEADERS",
    "ChannelBody",
    "GatewayHTTPConnection",
    "ServiceApp",
    "bearer_token",
    "body_timeout_message",
    "cleanup_stack",
    "error_parts",
    "error_response",
    "install_common",
    "json_body",
    "json_bytes",
    "json_response",
    "parse_json_object",
    "sse_response",
    "too_large_message",
    "unexpected_message",
]

log = logging.getLogger("gateway")
access_log = logging.getLogger("gateway.access")

SSE_HEADERS = {
    "Content-Type": "text/event-stream; charset=utf-8",
    "Cache-Control": "no-cache",
    "X-Accel-Buffering": "no",
}
SSE_HEAD = [(k.lower().encode("latin-1"), v.encode("latin-1")) for k, v in SSE_HEADERS.items()]
_LONE_SURROGATE = re.compile(r"[\ud800-\udfff]")


class ServiceApp(QuartTrio):
    """A quart-trio app that counts its requests in flight (the drain waits on them)."""

    inflight_requests: int = 0
    #: requests begun since start (:mod:`gateway.memory` trims after a busy spell)
    requests_started: int = 0
    no_requests: trio.Event | None = None
    #: called once per finished request: (route, status, bytes, seconds)
    on_request: Callable[[str, int, int, float], None] | None = None
    #: ``(method, path)`` -> a server of that request without quart (gateway.lean)
    lean_routes: Mapping[tuple[str, str], Callable[..., Awaitable[None]]] = MappingProxyType({})


class GatewayHTTPConnection(TrioASGIHTTPConnection):
    """Adds a per-request exit stack, the in-flight count, metrics and the access log."""

    #: the answer's status once its head was sent (0 before), and its body's bytes
    status_sent = 0
    bytes_sent = 0

    async def __call__(self, receive: Any, send: Any) -> None:
        t0 = time.perf_counter()
        self._send = send
        stack = Cleanup()
        scope: Any = self.scope
        scope["gateway.cleanup"] = stack
        app: Any = self.app
        app.inflight_requests += 1
        app.requests_started += 1
        try:
            # quart-trio's ``__call__`` with the request handled in this task (it started
            # one task for the messages and one for the request, and waited for both):
            # the body of a nursery is inside its cancel scope, so a disconnect seen by
            # the message task still cancels the request, and the request's end the
            # messages. A lean route is served without quart's request and response.
            lean = getattr(app, "lean_routes", None)
            serve = lean.get((scope["method"], scope["path"])) if lean else None
            if serve is not None:
                await serve(self, receive, self._counting_send, scope.get(WRITES_KEY))
            else:
                request = self._create_request_from_scope(self._counting_send)
                async with trio.open_nursery() as nursery:
                    nursery.start_soon(self.handle_messages, nursery, request, receive)
                    await self.handle_request(nursery, request, self._counting_send)
        finally:
            app.inflight_requests -= 1
            if app.inflight_requests == 0 and app.no_requests is not None:
                app.no_requests.set()
            if stack and not stack.close_nowait():
                with trio.CancelScope(deadline=trio.current_time() + 5, shield=True):
                    await stack.aclose()
            self._finished(scope, self.status_sent, self.bytes_sent, time.perf_counter() - t0)

    async def _counting_send(self, message: Any) -> None:
        """The server's ``send``, counting what the access log and metrics report (a
        method, not a closure: an open stream holds it)."""
        if message["type"] == "http.response.body":
            self.bytes_sent += len(message.get("body", b""))
        elif message["type"] == "http.response.start":
            self.status_sent = message["status"]
        await self._send(message)

    async def _send_response(self, send: Any, response: Any) -> None:
        body = getattr(response, "response", None)
        writes = self.scope.get(WRITES_KEY)
        if type(body) is not ChannelBody or writes is None:
            await super()._send_response(send, response)
            return
        headers = encode_headers(response.headers)
        await self.send_stream(send, response.status_code, body, writes, headers)

    async def send_stream(
        self,
        send: Any,
        status: int,
        body: ChannelBody,
        writes: Any,
        headers: list[tuple[bytes, bytes]] | None = None,
    ) -> None:
        """quart's ``_send_response`` for a relayed stream, its writes joined: what is
        ready together leaves in one write (the head with the events already relayed,
        the last events with the body's end), and nothing ever waits for more.
        ``writes``: the connection's (``scope[WRITES_KEY]``), None where there is none
        (quart's test client); ``headers``: :data:`SSE_HEADERS` unless given."""
        if writes is None:
            writes = _NoJoin()
        writes.cork()
        try:
            head = SSE_HEAD if headers is None else headers
            await send({"type": "http.response.start", "status": status, "headers": head})
            async with body as chunks:
                await body.first_step()  # what is here already goes out with the head
                if not body.ready():
                    await writes.flush()
                async for data in chunks:
                    await send({"type": "http.response.body", "body": data, "more_body": True})
                    if not body.ready():
                        await writes.flush()
            await send({"type": "http.response.body", "body": b"", "more_body": False})
        finally:
            await writes.flush(uncork=True)

    def _finished(self, scope: Any, status: int, nbytes: int, seconds: float) -> None:
        route = scope.get("gateway.route", "unmatched")
        hook = getattr(self.app, "on_request", None)
        if hook is not None:
            hook(route, status, nbytes, seconds)
        if access_log.isEnabledFor(logging.INFO):
            log_access(
                access_log,
                scope.get("gateway.principal", "-"),
                scope.get("method", "-"),
                scope.get("path", "-"),
                route,
                status,
                nbytes,
                seconds * 1000,
            )


class _NoJoin:
    """Writes that cannot be joined (no gateway connection under the app)."""

    def cork(self) -> None:
        pass

    async def flush(self, *, uncork: bool = False) -> None:
        pass


def too_large_message(what: str) -> str:
    return f"The request body is larger than the {what} accepts."


def unexpected_message(what: str) -> str:
    return f"The {what} failed unexpectedly; the error was logged."


def body_timeout_message(seconds: float | None) -> str:
    return f"The request body did not arrive within {seconds or math.inf:g} s."


class Cleanup:
    """What a request leaves to close when it is over, last in first out: the part of
    :class:`contextlib.AsyncExitStack` a request uses (``callback``,
    ``push_async_callback``) in a list (the stack's deque was ≈ 0.7 KiB a stream). Every
    callback runs; the first error is raised after the last one."""

    __slots__ = ("_callbacks",)

    def __init__(self) -> None:
        self._callbacks: list[
            tuple[Callable[..., Any], tuple[Any, ...], bool, Callable[[], bool] | None]
        ] = []

    def __bool__(self) -> bool:
        return bool(self._callbacks)

    def callback(self, fn: Callable[..., Any], *args: Any) -> None:
        self._callbacks.append((fn, args, False, None))

    def push_async_callback(
        self, fn: Callable[..., Awaitable[Any]], *args: Any, done: Callable[[], bool] | None = None
    ) -> None:
        """``fn(*args)`` awaited at the end; ``done``: whether it has nothing left to do
        (then :meth:`close_nowait` may skip it)."""
        self._callbacks.append((fn, args, True, done))

    def close_nowait(self) -> bool:
        """Close without a wait when that is all there is to do (every async callback
        says it is done): True; else False and nothing done (:meth:`aclose` does it)."""
        callbacks = self._callbacks
        if any(is_async and (done is None or not done()) for _, _, is_async, done in callbacks):
            return False
        self._callbacks = []
        first: BaseException | None = None
        for fn, args, is_async, _ in reversed(callbacks):
            if not is_async:
                try:
                    fn(*args)
                except BaseException as exc:
                    if first is None:
                        first = exc
        if first is not None:
            raise first
        return True

    async def aclose(self) -> None:
        first: BaseException | None = None
        callbacks, self._callbacks = self._callbacks, []
        for fn, args, is_async, _ in reversed(callbacks):
            try:
                if is_async:
                    await fn(*args)
                else:
                    fn(*args)
            except BaseException as exc:
                if first is None:
                    first = exc
        if first is not None:
            raise first


def cleanup_stack() -> Cleanup:
    """The current request's exit stack (closed when the request is over)."""
    stack: Cleanup = request.scope["gateway.cleanup"]  # type: ignore[typeddict-item]
    return stack


class ChannelBody(ResponseBody):
    """A response body fed by an async context manager that yields an async iterable.

    Quart sends a body as ``async with body as it: async for chunk in it``, so entering
    the relay here puts its nursery in the sending task.
    """

    def __init__(
        self,
        channel: AbstractAsyncContextManager[AsyncIterable[bytes]],
        on_close: Callable[[], None] | None = None,
    ) -> None:
        self._cm = channel
        self._recv: AsyncIterable[bytes] | None = None
        self._on_close = on_close

    async def __aenter__(self) -> ChannelBody:
        self._recv = await self._cm.__aenter__()
        return self

    async def __aexit__(self, exc_type: Any, exc_value: Any, tb: Any) -> None:
        try:
            await self._cm.__aexit__(exc_type, exc_value, tb)
        finally:
            if self._on_close is not None:
                self._on_close()

    def __aiter__(self) -> AsyncIterator[bytes]:
        assert self._recv is not None
        return self._recv.__aiter__()

    async def first_step(self) -> None:
        """Until the channel has queued what it has without waiting (a relay's
        ``first_step``); elsewhere two checkpoints: a producer started with this batch
        of runnable tasks, whose order trio randomizes, has run once the second begins."""
        first_step = getattr(self._cm, "first_step", None)
        if first_step is not None:
            await first_step()
            return
        await trio.lowlevel.checkpoint()
        await trio.lowlevel.checkpoint()

    def ready(self) -> bool:
        """Would the next chunk come without waiting (the channel's ``ready``)?"""
        ready = getattr(self._cm, "ready", None)
        return bool(ready()) if ready is not None else False


def sse_response(body: ChannelBody) -> Response:
    response = Response(body, status=200, headers=SSE_HEADERS)
    response.timeout = None  # quart's RESPONSE_TIMEOUT would cut streams at 60 s
    return response


#: ``json.dumps(obj, ensure_ascii=False)`` without an encoder made per call
_ANSWER_JSON = json.JSONEncoder(ensure_ascii=False)


def json_bytes(obj: Any) -> bytes:
    """A JSON response body (UTF-8; a lone surrogate from upstream is replaced)."""
    return _ANSWER_JSON.encode(obj).encode("utf-8", UNPAIRED)


def json_response(obj: Any, status: int = 200) -> Response:
    return Response(json_bytes(obj), status=status, content_type="application/json")


def error_parts(exc: GatewayError) -> tuple[int, list[tuple[bytes, bytes]], bytes]:
    """The status, extra headers and JSON body of an error answer."""
    headers: list[tuple[bytes, bytes]] = []
    if exc.retry_after is not None:
        headers.append((b"retry-after", str(exc.retry_after).encode()))
    if exc.status == 401:
        headers.append((b"www-authenticate", b'Bearer realm="artifact-gateway"'))
    return exc.status, headers, json_bytes(exc.to_dict())


def error_response(exc: GatewayError) -> Response:
    status, headers, body = error_parts(exc)
    resp = Response(body, status=status, content_type="application/json")
    for name, value in headers:
        resp.headers[name.decode()] = value.decode()
    return resp


def bearer_token(headers: Any) -> str | None:
    """The token of ``Authorization: Bearer <token>``; None when absent or malformed;
    several Authorization headers are refused (401 ``invalid_api_key``)."""
    if len(headers.getlist("Authorization")) > 1:
        raise AuthError("Send one Authorization header, not several.", code="invalid_api_key")
    auth = headers.get("Authorization") or ""
    scheme, _, token = auth.partition(" ")
    token = token.strip()
    if scheme.lower() != "bearer" or not token:
        return None
    return token


def _invalid_json(message: str) -> RequestError:
    return RequestError(message, code="invalid_json")


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise _invalid_json(f"The request body holds a number too large for JSON ({text[:20]}).")
    return value


def _bounded_int(text: str) -> int:
    if len(text.lstrip("-")) > 4300:  # Python's own limit for int(): refused with the same sentence
        raise _invalid_json(f"The request body holds a number too large for JSON ({text[:20]}).")
    return int(text)


def _no_constant(name: str) -> Any:
    raise _invalid_json(f"The request body holds {name}, which is not JSON.")


#: the request body's decoder, made once (``json.loads`` with options makes one a call)
_REQUEST_JSON = json.JSONDecoder(
    parse_float=_finite_float, parse_int=_bounded_int, parse_constant=_no_constant
)


def parse_json_bytes(raw: bytes, max_depth: int) -> Any:
    """Decode a JSON request body, refusing what would hurt later, each with a sentence
    saying what was wrong: not UTF-8, not JSON, nested deeper than ``max_depth``, a lone
    surrogate escape (``"\\ud800"``: not Unicode, cannot be sent on), ``NaN`` /
    ``Infinity`` or a number beyond a double (cannot be sent on either)."""
    try:
        text = raw.decode("utf-8").removeprefix("\ufeff")
    except UnicodeDecodeError:
        raise _invalid_json("The request body is not valid UTF-8.") from None
    try:
        value = loads_bounded(text, max_depth, _REQUEST_JSON)
    except JSONTooDeep:
        raise _invalid_json(
            f"The request body nests JSON deeper than {max_depth} levels."
        ) from None
    except ValueError:  # JSONDecodeError
        raise _invalid_json("The request body is not valid JSON.") from None
    if "\\u" in text and _has_lone_surrogate(value):
        raise _invalid_json(
            "The request body holds a lone UTF-16 surrogate escape (such as \\ud800), "
            "which is not Unicode text."
        )
    return value


def max_json_depth(config: Any) -> int:
    """``limits.max_json_depth`` of a config."""
    return int(config.limits.max_json_depth)


def _has_lone_surrogate(value: Any) -> bool:
    stack = [value]
    while stack:
        v = stack.pop()
        if isinstance(v, str):
            if _LONE_SURROGATE.search(v):
                return True
        elif isinstance(v, dict):
            stack.extend(v.keys())
            stack.extend(v.values())
        elif isinstance(v, list):
            stack.extend(v)
    return False


def parse_json_object(raw: bytes, *, max_depth: int = 64) -> dict[str, Any]:
    """A request body that must be a JSON object (400 ``invalid_json`` otherwise)."""
    body = parse_json_bytes(raw, max_depth) if raw else None
    if not isinstance(body, dict):
        raise _invalid_json("The request body must be a JSON object.")
    return body


async def json_body(max_depth: int = 64) -> dict[str, Any]:
    """The request's JSON object body (400 ``invalid_json`` otherwise)."""
    raw = await request.get_data(cache=True, as_text=False, parse_form_data=False)
    return parse_json_object(raw, max_depth=max_depth)


def install_common(app: QuartTrio, max_body_bytes: int, what: str) -> None:
    """What the API server and the proxy share (see the module docstring)."""
    app.asgi_http_class = GatewayHTTPConnection
    app.config["RESPONSE_TIMEOUT"] = None
    app.config["MAX_CONTENT_LENGTH"] = max_body_bytes
    http_codes = {
        404: ("not_found", f"No such route on this {what}; see docs/api.md."),
        405: ("method_not_allowed", "This route does not accept that HTTP method."),
        413: ("request_too_large", too_large_message(what)),
    }

    @app.before_request
    async def _route_label() -> None:
        rule = request.url_rule
        request.scope["gateway.route"] = rule.rule if rule is not None else "unmatched"  # type: ignore[typeddict-unknown-key]

    @app.errorhandler(GatewayError)
    async def _gateway_error(exc: GatewayError) -> Response:
        return error_response(exc)

    @app.errorhandler(HTTPException)
    async def _http_error(exc: HTTPException) -> Response:
        status = exc.code or 500
        code, message = http_codes.get(
            status, ("bad_request", "The request could not be understood.")
        )
        if status == 408:  # quart's BODY_TIMEOUT: the lean routes' sentence (gateway.lean)
            code, message = "request_timeout", body_timeout_message(app.config["BODY_TIMEOUT"])
        if status >= 500:
            code, message = "internal_error", f"The {what} failed unexpectedly."
        return error_response(GatewayError(message, code=code, status=status))

    @app.errorhandler(Exception)
    async def _unexpected(exc: Exception) -> Response:
        log.exception("unhandled error on %s %s", request.method, request.path)
        return error_response(GatewayError(unexpected_message(what), code="internal_error"))
