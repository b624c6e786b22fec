"""Request bodies and replies both services share (thin quart glue).

* JSON bodies (:func:`json_body`: size, nesting and text checked), JSON and error
  responses with the gateway's stable codes, the bearer token of a request;
* :class:`ChannelBody` — a response body fed by an async context manager (a
  :class:`gateway.stream.relay.Relay`), entered and exited by the task that sends the
  body; on the gateway's connections it joins what is ready together into one write
  (the ``gateway.writes`` extension of :mod:`gateway.http.exchange`); SSE headers.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import AsyncIterable, Callable
from contextlib import AbstractAsyncContextManager
from typing import Any

import trio
from quart import Response, has_request_context, request
from quart.wrappers.response import ResponseBody

from gateway.core.checks import JSONTooDeep, loads_bounded
from gateway.core.errors import AuthError, GatewayError, RequestError
from gateway.core.sse import UNPAIRED
from gateway.http.exchange import WRITES

__all__ = [
    "SSE_HEAD",
    "SSE_HEADERS",
    "ChannelBody",
    "bearer_token",
    "body_timeout_message",
    "error_parts",
    "error_response",
    "json_body",
    "json_bytes",
    "json_response",
    "max_json_depth",
    "parse_json_object",
    "sse_response",
    "too_large_message",
    "unexpected_message",
]

SSE_HEADERS = {
    "Content-Type": "text/event-stream; charset=utf-8",
    "Cache-Control": "no-cache",
    "X-Accel-Buffering": "no",
}
SSE_HEAD = [(k.lower().encode("latin-1"), v.encode("latin-1")) for k, v in SSE_HEADERS.items()]
_LONE_SURROGATE = re.compile(r"[\ud800-\udfff]")


def too_large_message(what: str) -> str:
    return f"The request body is larger than the {what} accepts."


def unexpected_message(what: str) -> str:
    return f"The {what} failed unexpectedly; the error was logged."


def body_timeout_message(seconds: float | None) -> str:
    return f"The request body did not arrive within {seconds or math.inf:g} s."


class ChannelBody(ResponseBody):
    """A response body fed by an async context manager that yields an async iterable.

    Quart sends a body as ``async with body as it: async for chunk in it``, so entering
    the relay here puts its nursery in the sending task. On the gateway's connections
    (the request's ``gateway.writes``) what the channel has ready together leaves in one
    write: the head with the chunks already there, the last chunks with the body's end;
    nothing ever waits for more (when the channel is not ``ready``, what is kept is
    written before the next wait).
    """

    def __init__(
        self,
        channel: AbstractAsyncContextManager[AsyncIterable[bytes]],
        on_close: Callable[[], None] | None = None,
    ) -> None:
        self._cm = channel
        self._it: Any = None
        self._on_close = on_close
        self.writes: Any = None
        if has_request_context():  # a quart route: its request's connection
            self.writes = request.scope.get("extensions", {}).get(WRITES)

    async def __aenter__(self) -> ChannelBody:
        """Enter the channel and take its first step. If that fails or is cancelled (the
        client left at that moment), the channel is exited here: ``async with`` does not
        call ``__aexit__`` when the entry fails, and a relay left entered would leave
        its nursery open in the request's task."""
        writes = self.writes
        if writes is not None:
            writes.cork()
        try:
            self._it = (await self._cm.__aenter__()).__aiter__()
        except BaseException:
            self.discard()
            raise
        try:
            await self.first_step()  # what is here already goes out with the head
            if writes is not None and not self.ready():
                await writes.flush()
        except BaseException as exc:
            await self.__aexit__(type(exc), exc, exc.__traceback__)
            raise
        return self

    async def __aexit__(self, exc_type: Any, exc_value: Any, tb: Any) -> None:
        try:
            await self._cm.__aexit__(exc_type, exc_value, tb)
        finally:
            self.discard()

    def discard(self) -> None:
        """Run ``on_close`` (once): at the body's end, or for a body never entered (the
        request ended before it was sent)."""
        on_close, self._on_close = self._on_close, None
        if on_close is not None:
            on_close()

    def __aiter__(self) -> ChannelBody:
        return self

    async def __anext__(self) -> bytes:
        writes = self.writes
        if writes is not None and not self.ready():
            await writes.flush()  # the chunk sent last, before waiting for the next
        chunk: bytes = await self._it.__anext__()
        return chunk

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
