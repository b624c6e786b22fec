"""The API server's routes (quart-trio).

Thin glue: authenticate, validate, pick the link resolver, open the upstream, and
hand the response body to :func:`gateway.relay.relay` with the right sink. Every
error leaves as JSON ``{"error": {"message", "type", "code"}}`` with a stable code;
no stack trace ever reaches a client.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import math
import re
import time
from collections.abc import AsyncGenerator, AsyncIterable, AsyncIterator, Awaitable, Callable
from contextlib import AbstractAsyncContextManager, AsyncExitStack
from dataclasses import dataclass, field
from typing import Any

import httpx
import trio
from quart import Response, request
from quart.wrappers.response import ResponseBody
from quart_trio import QuartTrio
from quart_trio.asgi import TrioASGIHTTPConnection
from werkzeug.exceptions import HTTPException

from gateway import __version__
from gateway.artifacts import (
    ArtifactService,
    FileBody,
    content_disposition,
    etag,
    parse_range,
)
from gateway.auth import Authenticator, Caller, effective_link_mode
from gateway.config import Config
from gateway.errors import GatewayError, NotFound, RequestError
from gateway.fronts.chat import ChatSink
from gateway.fronts.responses import (
    ResponsesSink,
    chat_messages_from_input,
    new_response_id,
    response_from_completion,
)
from gateway.metrics import CONTENT_TYPE, Metrics
from gateway.pipeline import ChatPipeline, LinkResolver
from gateway.relay import HookedSink, RelayOptions, Sink, close_quietly, relay
from gateway.runs import Run, RunRegistry, RunSink, new_run_id
from gateway.sessions import Sessions, session_id_from
from gateway.signing import Signer
from gateway.sse import encode_comment, encode_json
from gateway.store import SQLiteStore, open_store
from gateway.upstream import Upstream

log = logging.getLogger("gateway")
access_log = logging.getLogger("gateway.access")

SSE_HEADERS = {
    "Content-Type": "text/event-stream; charset=utf-8",
    "Cache-Control": "no-cache",
    "X-Accel-Buffering": "no",
}
#: sampling parameters a run passes on to the upstream as given
SAMPLING_KEYS = (
    "temperature",
    "top_p",
    "max_tokens",
    "max_completion_tokens",
    "stop",
    "seed",
    "presence_penalty",
    "frequency_penalty",
)
#: request-body keys that are the gateway's, not the upstream's
GATEWAY_BODY_KEYS = ("download_link_mode", "session_id")

ResolverFactory = Callable[[str, str], LinkResolver]


@dataclass
class GatewayState:
    """Everything a request handler needs, built once per app."""

    config: Config
    upstream: Upstream
    auth: Authenticator
    signer: Signer
    store: SQLiteStore
    artifacts: ArtifactService
    sessions: Sessions
    runs: RunRegistry
    metrics: Metrics = field(default_factory=Metrics)
    draining: trio.Event = field(default_factory=trio.Event)
    resolver_factory: ResolverFactory | None = None
    rewrite_enabled: bool = True  # harness-only switch (proves leaks are caught)
    started: float = field(default_factory=time.time)

    def count_rewrites(self, pipeline: ChatPipeline) -> None:
        self.metrics.rewrites.labels("link").inc(pipeline.stats.links)
        self.metrics.rewrites.labels("name_only").inc(pipeline.stats.names)

    async def aclose(self) -> None:
        """Close the upstream client and the store (idempotent)."""
        await self.upstream.aclose()
        await trio.to_thread.run_sync(self.store.close)

    @property
    def extra_roots(self) -> tuple[str, ...]:
        roots = [str(r) for r in self.config.artifacts.roots]
        roots += [m.agent_prefix for m in self.config.artifacts.mounts]
        return tuple(roots)

    def resolver(self, owner: str, mode: str) -> LinkResolver:
        if self.resolver_factory is not None:
            return self.resolver_factory(owner, mode)
        return self.artifacts.for_response(owner, mode)

    def pipeline(self, resolver: LinkResolver) -> ChatPipeline:
        return ChatPipeline(
            resolver,
            extra_roots=self.extra_roots,
            max_path_chars=self.config.limits.max_path_chars,
            enabled=self.rewrite_enabled,
        )

    def relay_options(self) -> RelayOptions:
        return RelayOptions(
            keepalive_seconds=self.config.server.keepalive_seconds,
            idle_timeout_seconds=self.config.upstream.idle_timeout_seconds,
            max_event_bytes=self.config.limits.max_event_bytes,
            draining=self.draining,
        )


class GatewayHTTPConnection(TrioASGIHTTPConnection):
    """Adds a per-request exit stack (closed even if the body never starts) and the access log."""

    async def __call__(self, receive: Any, send: Any) -> None:
        t0 = time.perf_counter()
        seen: dict[str, int] = {"status": 0, "bytes": 0}

        async def counting_send(message: Any) -> None:
            if message["type"] == "http.response.start":
                seen["status"] = message["status"]
            elif message["type"] == "http.response.body":
                seen["bytes"] += len(message.get("body", b""))
            await send(message)

        stack = AsyncExitStack()
        scope: Any = self.scope
        scope["gateway.cleanup"] = stack
        app: Any = self.app
        app.inflight_requests = getattr(app, "inflight_requests", 0) + 1
        try:
            await super().__call__(receive, counting_send)
        finally:
            app.inflight_requests -= 1
            idle = getattr(app, "no_requests", None)
            if app.inflight_requests == 0 and idle is not None:
                idle.set()
            with trio.move_on_after(5) as cs:
                cs.shield = True
                await stack.aclose()
            duration = time.perf_counter() - t0
            route = scope.get("gateway.route", "unmatched")
            state: GatewayState | None = getattr(self.app, "gateway", None)
            if state is not None:
                state.metrics.requests.labels(route, str(seen["status"])).inc()
                state.metrics.latency.labels(route).observe(duration)
                state.metrics.bytes_out.labels(route).inc(seen["bytes"])
            access_log.info(
                "principal=%s method=%s path=%s route=%s status=%d bytes=%d duration_ms=%.1f",
                scope.get("gateway.principal", "-"),
                scope.get("method", "-"),
                scope.get("path", "-"),
                route,
                seen["status"],
                seen["bytes"],
                duration * 1000,
            )


class ChannelBody(ResponseBody):
    """A response body fed by an async context manager that yields an async iterable:
    an ``@trio.as_safe_channel`` producer or a :func:`gateway.relay.relay`.

    Quart sends a body as ``async with body as it: async for chunk in it``, so
    entering the producer's context here puts its nursery in the sending task.
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


def error_response(exc: GatewayError) -> Response:
    resp = Response(json.dumps(exc.to_dict()), status=exc.status, content_type="application/json")
    retry_after = getattr(exc, "retry_after", None)
    if retry_after:
        resp.headers["Retry-After"] = str(retry_after)
    if exc.status == 401:
        resp.headers["WWW-Authenticate"] = 'Bearer realm="artifact-gateway"'
    return resp


def json_response(obj: Any, status: int = 200) -> Response:
    body = json.dumps(obj, ensure_ascii=False).encode("utf-8", "backslashreplace")
    return Response(body, status=status, content_type="application/json")


def install_common(app: QuartTrio, config: Config, what: str) -> None:
    """What the API server and the proxy share: the connection class (access log,
    per-request cleanup), no response timeout on streams, the body limit, the route
    label for metrics, and JSON errors with stable codes for every failure."""
    app.asgi_http_class = GatewayHTTPConnection
    app.config["RESPONSE_TIMEOUT"] = None
    app.config["MAX_CONTENT_LENGTH"] = config.server.max_body_bytes
    # limits.max_json_depth is being added to the config; until then, the default
    app.config["MAX_JSON_DEPTH"] = getattr(config.limits, "max_json_depth", MAX_JSON_DEPTH)
    http_codes = {
        404: ("not_found", f"No such route on this {what}; see GET /v1/models and docs/api.md."),
        405: ("method_not_allowed", "This route does not accept that HTTP method."),
        413: ("request_too_large", f"The request body is larger than the {what} accepts."),
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
        code, message = http_codes.get(status, ("http_error", "The request could not be handled."))
        return error_response(GatewayError(message, code=code, status=status))

    @app.errorhandler(Exception)
    async def _unexpected(exc: Exception) -> Response:
        log.exception("unhandled error on %s %s", request.method, request.path)
        return error_response(
            GatewayError(
                f"The {what} failed unexpectedly; the error was logged.", code="internal_error"
            )
        )


def state() -> GatewayState:
    from quart import current_app

    st: GatewayState = current_app.gateway  # type: ignore[attr-defined]
    return st


def authenticate() -> Caller:
    caller = state().auth.authenticate(request.headers)
    request.scope["gateway.principal"] = caller.owner  # type: ignore[typeddict-unknown-key]
    return caller


#: default of ``limits.max_json_depth``
MAX_JSON_DEPTH = 64
_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]")


def _invalid_json(message: str) -> RequestError:
    return RequestError(message, code="invalid_json")


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise _invalid_json(f"The request body holds a number too large for JSON ({text[:20]}).")
    return value


def _no_constant(name: str) -> Any:
    raise _invalid_json(f"The request body holds {name}, which is not JSON.")


def parse_json_object(raw: bytes, *, max_depth: int = MAX_JSON_DEPTH) -> dict[str, Any]:
    """The request body as a JSON object, or :class:`RequestError` ``invalid_json`` whose
    sentence says what was wrong: not UTF-8, not JSON, not an object, nested deeper than
    ``max_depth``, a lone surrogate escape (``"\\ud800"``: not Unicode, cannot be sent
    on), ``NaN``/``Infinity`` or a number beyond a double (cannot be sent on either).
    """
    if not raw:
        raise _invalid_json("The request body must be a JSON object.")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise _invalid_json("The request body is not valid UTF-8.") from exc
    text = text.removeprefix("\ufeff")
    try:
        body = json.loads(text, parse_float=_finite_float, parse_constant=_no_constant)
    except RecursionError as exc:
        raise _invalid_json(f"The request body nests deeper than {max_depth} levels.") from exc
    except ValueError as exc:  # JSONDecodeError, and ints beyond Python's digit limit
        raise _invalid_json("The request body is not valid JSON.") from exc
    if not isinstance(body, dict):
        raise _invalid_json("The request body must be a JSON object.")
    # cheap tests first: a deep value needs many brackets, a surrogate needs an escape
    deep = text.count("[") + text.count("{") > max_depth
    if deep or _SURROGATE_ESCAPE.search(text):
        _check_json_value(body, max_depth)
    return body


def _check_json_value(value: Any, max_depth: int) -> None:
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, str):
            try:
                item.encode("utf-8")
            except UnicodeEncodeError as exc:
                raise _invalid_json(
                    "The request body holds a lone UTF-16 surrogate escape (such as "
                    "\\ud800), which is not Unicode text."
                ) from exc
            continue
        if not isinstance(item, dict | list):
            continue
        if depth > max_depth:
            raise _invalid_json(f"The request body nests deeper than {max_depth} levels.")
        if isinstance(item, dict):
            stack.extend((k, depth) for k in item)
            stack.extend((v, depth + 1) for v in item.values())
        else:
            stack.extend((v, depth + 1) for v in item)


async def json_body() -> dict[str, Any]:
    from quart import current_app

    raw = await request.get_data(cache=True, as_text=False, parse_form_data=False)
    return parse_json_object(
        raw, max_depth=current_app.config.get("MAX_JSON_DEPTH", MAX_JSON_DEPTH)
    )


def validate_chat_body(body: dict[str, Any]) -> bool:
    """Check the fields the gateway relies on; return ``stream``."""
    model = body.get("model")
    if not isinstance(model, str) or not model:
        raise RequestError("'model' must be a non-empty string.", code="missing_model")
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise RequestError("'messages' must be a non-empty list.", code="missing_messages")
    if not all(isinstance(m, dict) for m in messages):
        raise RequestError("Every entry of 'messages' must be an object.", code="invalid_messages")
    stream = body.get("stream", False)
    if not isinstance(stream, bool):
        raise RequestError("'stream' must be true or false.", code="invalid_stream")
    return stream


def upstream_body(body: dict[str, Any], principal_id: str) -> dict[str, Any]:
    out = {k: v for k, v in body.items() if k not in GATEWAY_BODY_KEYS}
    out["user"] = principal_id
    return out


def stream_response(
    st: GatewayState,
    route: str,
    resp: httpx.Response,
    pipeline: ChatPipeline,
    sink: Sink,
) -> Response:
    gauge = st.metrics.open_streams.labels(route)
    gauge.inc()

    def closed() -> None:
        gauge.dec()
        st.count_rewrites(pipeline)

    held = [0]

    def on_held(chars: int) -> None:
        if chars != held[0]:
            st.metrics.held_chars.inc(chars - held[0])
            held[0] = chars

    opts = dataclasses.replace(st.relay_options(), on_held=on_held)
    body = ChannelBody(relay(resp, pipeline, sink, opts), on_close=closed)
    response = Response(body, status=200, headers=SSE_HEADERS)
    response.timeout = None  # quart's RESPONSE_TIMEOUT would cut streams at 60 s
    return response


async def open_upstream_stream(
    st: GatewayState, ubody: dict[str, Any], principal_id: str
) -> httpx.Response:
    t0 = time.perf_counter()
    try:
        resp = await st.upstream.open_chat_stream(ubody, principal_id)
    except GatewayError as exc:
        st.metrics.upstream_errors.labels(exc.code).inc()
        raise
    st.metrics.first_byte.observe(time.perf_counter() - t0)
    stack: AsyncExitStack = request.scope["gateway.cleanup"]  # type: ignore[typeddict-item]
    stack.push_async_callback(close_quietly, resp)
    return resp


def create_app(
    config: Config,
    *,
    upstream_transport: httpx.AsyncBaseTransport | None = None,
    store: SQLiteStore | None = None,
    clock: Callable[[], float] = time.time,
) -> QuartTrio:
    """Build the API server app. ``app.gateway`` is its :class:`GatewayState`."""
    app = QuartTrio("gateway")
    install_common(app, config, "gateway")
    signer = Signer.load_or_create(config.state_dir)
    the_store = store if store is not None else open_store(config.state_dir)
    st = GatewayState(
        config=config,
        upstream=Upstream(config.upstream, transport=upstream_transport),
        auth=Authenticator(config.auth.keys),
        signer=signer,
        store=the_store,
        artifacts=ArtifactService(config, the_store, signer, clock=clock),
        sessions=Sessions(the_store),
        runs=RunRegistry(config.limits.run_retention_seconds),
    )
    app.gateway = st  # type: ignore[attr-defined]

    reaper_scope = trio.CancelScope()

    async def reap_runs() -> None:
        with reaper_scope:
            await st.runs.reaper()

    @app.before_serving
    async def _start_services() -> None:
        app.nursery.start_soon(reap_runs)

    @app.after_serving
    async def _close() -> None:
        # the lifespan nursery waits for its tasks: the reaper would hold shutdown
        # until BACKGROUND_TASK_SHUTDOWN_TIMEOUT; runs end by themselves on drain
        reaper_scope.cancel()
        await st.aclose()

    @app.get("/health")
    async def health() -> Response:
        return json_response({"status": "ok", "version": __version__})

    @app.get("/health/ready")
    async def ready() -> Response:
        upstream_ok = await st.upstream.reachable()
        store_ok = await trio.to_thread.run_sync(st.store.check_writable)
        checks = {
            "upstream": "ok" if upstream_ok else "unreachable",
            "store": "ok" if store_ok else "not writable",
            "draining": st.draining.is_set(),
        }
        ok = upstream_ok and store_ok and not st.draining.is_set()
        return json_response(
            {"status": "ready" if ok else "unready", "version": __version__, "checks": checks},
            200 if ok else 503,
        )

    @app.get("/metrics")
    async def metrics() -> Response:
        return Response(st.metrics.render(), content_type=CONTENT_TYPE)

    @app.get("/v1/models")
    async def models() -> Response:
        authenticate()
        return json_response(await st.upstream.models())

    @app.post("/v1/chat/completions")
    async def chat_completions() -> Response:
        caller = authenticate()
        body = await json_body()
        stream = validate_chat_body(body)
        mode = effective_link_mode(caller, body, st.config.artifacts.default_link_mode)
        resolver = st.resolver(caller.owner, mode)
        pipeline = st.pipeline(resolver)
        pid = st.signer.principal_id(caller.owner)
        sid = session_id_from(request.headers.get("X-Session-Id"), body)
        ubody = upstream_body(body, pid)
        new_messages = list(body["messages"])
        if sid is not None:
            ubody["messages"] = [*await st.sessions.history(caller.owner, sid), *new_messages]

        async def remember(pl: ChatPipeline) -> None:
            if sid is not None:
                await st.sessions.append(caller.owner, sid, new_messages, pl.content(0))

        if not stream:
            data = await st.upstream.chat(ubody, pid)
            out = await pipeline.rewrite_completion(data)
            out["gateway"] = resolver.manifest()
            st.count_rewrites(pipeline)
            await remember(pipeline)
            return json_response(out)
        resp = await open_upstream_stream(st, ubody, pid)
        sink: Sink = HookedSink(ChatSink(), remember) if sid is not None else ChatSink()
        return stream_response(st, "/v1/chat/completions", resp, pipeline, sink)

    @app.post("/v1/responses")
    async def create_response() -> Response:
        caller = authenticate()
        body = await json_body()
        model = body.get("model")
        if not isinstance(model, str) or not model:
            raise RequestError("'model' must be a non-empty string.", code="missing_model")
        stream = body.get("stream", False)
        store_it = body.get("store", True)
        if not isinstance(stream, bool) or not isinstance(store_it, bool):
            raise RequestError(
                "'stream' and 'store' must be true or false.", code="invalid_request"
            )
        if "input" not in body:
            raise RequestError(
                "'input' is required (a string or a list of items).", code="missing_input"
            )
        try:
            new_messages = chat_messages_from_input(body["input"])
        except ValueError as exc:
            raise RequestError(str(exc), code="invalid_input") from exc
        mode = effective_link_mode(caller, body, st.config.artifacts.default_link_mode)
        sid = session_id_from(request.headers.get("X-Session-Id"), body)
        history: list[dict[str, Any]] = []
        prev_id = body.get("previous_response_id")
        if prev_id is not None:
            if not isinstance(prev_id, str):
                raise RequestError(
                    "'previous_response_id' must be a string.", code="invalid_request"
                )
            prev = await trio.to_thread.run_sync(
                st.store.get_json, "response", caller.owner, prev_id
            )
            if prev is None:
                raise NotFound(
                    "No such stored response, or it is not yours.", code="response_not_found"
                )
            history.extend(prev.get("messages", []))
        if sid is not None:
            history.extend(await st.sessions.history(caller.owner, sid))
        messages = [*history, *new_messages]
        instructions = body.get("instructions")
        system = (
            [{"role": "system", "content": instructions}]
            if isinstance(instructions, str) and instructions
            else []
        )
        pid = st.signer.principal_id(caller.owner)
        ubody: dict[str, Any] = {
            "model": model,
            "messages": [*system, *messages],
            "stream": stream,
            "user": pid,
        }
        for key in ("temperature", "top_p"):
            if key in body:
                ubody[key] = body[key]
        if isinstance(body.get("max_output_tokens"), int):
            ubody["max_tokens"] = body["max_output_tokens"]
        if stream:
            ubody["stream_options"] = {"include_usage": True}
        resolver = st.resolver(caller.owner, mode)
        pipeline = st.pipeline(resolver)
        rid = new_response_id()
        sink = ResponsesSink(rid, model)

        async def remember(pl: ChatPipeline) -> None:
            text = sink.text()
            if store_it and sink.final is not None:
                doc = {
                    "response": sink.final,
                    "messages": [*messages, {"role": "assistant", "content": text}],
                }
                await trio.to_thread.run_sync(st.store.put_json, "response", caller.owner, rid, doc)
            if sid is not None:
                await st.sessions.append(caller.owner, sid, new_messages, text)

        if not stream:
            data = await st.upstream.chat(ubody, pid)
            out = await pipeline.rewrite_completion(data)
            st.count_rewrites(pipeline)
            env = response_from_completion(sink, out, resolver.manifest())
            await remember(pipeline)
            return json_response(env)
        resp = await open_upstream_stream(st, ubody, pid)
        return stream_response(st, "/v1/responses", resp, pipeline, HookedSink(sink, remember))

    @app.get("/v1/responses/<response_id>")
    async def get_response(response_id: str) -> Response:
        caller = authenticate()
        doc = await trio.to_thread.run_sync(
            st.store.get_json, "response", caller.owner, response_id
        )
        if doc is None:
            raise NotFound(
                "No such stored response, or it is not yours.", code="response_not_found"
            )
        return json_response(doc["response"])

    @app.delete("/v1/responses/<response_id>")
    async def delete_response(response_id: str) -> Response:
        caller = authenticate()
        ok = await trio.to_thread.run_sync(
            st.store.delete_json, "response", caller.owner, response_id
        )
        if not ok:
            raise NotFound(
                "No such stored response, or it is not yours.", code="response_not_found"
            )
        return json_response({"id": response_id, "object": "response.deleted", "deleted": True})

    @app.post("/v1/runs")
    async def start_run() -> Response:
        caller = authenticate()
        body = await json_body()
        model = body.get("model")
        if model is None:
            listing = await st.upstream.models()
            ids = [m.get("id") for m in listing.get("data", []) if isinstance(m, dict)]
            model = next((i for i in ids if isinstance(i, str)), None)
            if model is None:
                raise RequestError(
                    "'model' is required: the upstream lists no models.", code="missing_model"
                )
        if not isinstance(model, str) or not model:
            raise RequestError("'model' must be a non-empty string.", code="missing_model")
        if "messages" in body:
            new_messages = body["messages"]
            if (
                not isinstance(new_messages, list)
                or not new_messages
                or not all(isinstance(m, dict) for m in new_messages)
            ):
                raise RequestError(
                    "'messages' must be a non-empty list of objects.", code="invalid_messages"
                )
        elif isinstance(body.get("input"), str) and body["input"]:
            new_messages = [{"role": "user", "content": body["input"]}]
        else:
            raise RequestError(
                "A run needs 'input' (a string) or 'messages' (a list).", code="missing_input"
            )
        mode = effective_link_mode(caller, body, st.config.artifacts.default_link_mode)
        sid = session_id_from(request.headers.get("X-Session-Id"), body)
        history = await st.sessions.history(caller.owner, sid) if sid is not None else []
        pid = st.signer.principal_id(caller.owner)
        ubody = {
            "model": model,
            "messages": [*history, *new_messages],
            "stream": True,
            "user": pid,
            "stream_options": {"include_usage": True},
        }
        for key in SAMPLING_KEYS:
            if key in body:
                ubody[key] = body[key]
        run = Run(new_run_id(), caller.owner, model, mode, st.config.limits.run_log_max_events)
        st.runs.add(run)
        pipeline = st.pipeline(st.resolver(caller.owner, mode))

        async def remember() -> None:
            if sid is not None:
                await st.sessions.append(caller.owner, sid, new_messages, "".join(run.output))

        app.nursery.start_soon(execute_run, st, run, ubody, pid, pipeline, remember)
        return json_response({"run_id": run.id, "object": "run", "status": run.status}, 202)

    @app.get("/v1/runs/<run_id>")
    async def get_run(run_id: str) -> Response:
        caller = authenticate()
        return json_response(_run_or_404(st, run_id, caller.owner).summary())

    @app.post("/v1/runs/<run_id>/stop")
    async def stop_run(run_id: str) -> Response:
        caller = authenticate()
        run = _run_or_404(st, run_id, caller.owner)
        run.cancel_scope.cancel()
        with trio.move_on_after(5):
            while not run.done:
                await run.wait_changed()
        return json_response(run.summary())

    @app.get("/v1/runs/<run_id>/events")
    async def run_events(run_id: str) -> Response:
        caller = authenticate()
        run = _run_or_404(st, run_id, caller.owner)
        raw = request.headers.get("Last-Event-ID") or request.args.get("after") or "0"
        if not raw.isdigit() or len(raw) > 12:
            raise RequestError(
                "Last-Event-ID must be a run event sequence number.", code="invalid_last_event_id"
            )
        gauge = st.metrics.open_streams.labels("/v1/runs/{id}/events")
        gauge.inc()
        body = ChannelBody(
            follow_run(run, int(raw), st.config.server.keepalive_seconds, st.draining),
            on_close=gauge.dec,
        )
        response = Response(body, status=200, headers=SSE_HEADERS)
        response.timeout = None
        return response

    @app.get("/v1/sessions")
    async def list_sessions() -> Response:
        caller = authenticate()
        return json_response({"object": "list", "data": await st.sessions.list(caller.owner)})

    @app.get("/v1/sessions/<session_id>")
    async def get_session(session_id: str) -> Response:
        caller = authenticate()
        return json_response(await st.sessions.get(caller.owner, session_id))

    @app.delete("/v1/sessions/<session_id>")
    async def delete_session(session_id: str) -> Response:
        caller = authenticate()
        await st.sessions.delete(caller.owner, session_id)
        return json_response({"id": session_id, "object": "session.deleted", "deleted": True})

    @app.get("/v1/artifacts/<artifact_id>")
    async def download(artifact_id: str) -> Response:
        args = request.args
        if "sig" in args or "exp" in args:
            rec = await st.artifacts.authorize_public(
                artifact_id, args.get("exp", ""), args.get("sig", "")
            )
        else:
            caller = authenticate()
            rec = await st.artifacts.authorize_owner(artifact_id, caller.owner)
        rng = parse_range(request.headers.get("Range"), rec.size)
        fd = await st.artifacts.open_verified(rec)
        start, length = (rng[0], rng[1] - rng[0] + 1) if isinstance(rng, tuple) else (0, rec.size)
        body = FileBody(fd, start, length)
        stack: AsyncExitStack = request.scope["gateway.cleanup"]  # type: ignore[typeddict-item]
        stack.callback(body.close)  # closes the descriptor even if the body never starts
        headers = {
            "Content-Type": rec.content_type,
            "Content-Disposition": content_disposition(rec.filename),
            "ETag": etag(rec),
            "Accept-Ranges": "bytes",
            "X-Content-Type-Options": "nosniff",
            "Cache-Control": "private, no-store"
            if rec.link_mode == "private"
            else "private, no-cache",
        }
        if rng is False:
            resp = error_response(
                GatewayError(
                    "The requested range is outside the file.",
                    code="range_not_satisfiable",
                    status=416,
                )
            )
            resp.headers["Content-Range"] = f"bytes */{rec.size}"
            return resp
        status = 200
        if isinstance(rng, tuple):
            headers["Content-Range"] = f"bytes {rng[0]}-{rng[1]}/{rec.size}"
            status = 206
        headers["Content-Length"] = str(length)
        response = Response(body, status=status, headers=headers)
        response.timeout = None
        return response

    @app.get("/v1/artifacts")
    async def list_artifacts() -> Response:
        caller = authenticate()
        recs = await trio.to_thread.run_sync(st.store.list_artifacts, caller.owner)
        data = [
            {
                **st.artifacts.describe(r),
                "created": int(r.created),
                "expires": int(r.expires) if r.expires is not None else None,
                "revoked": r.revoked,
            }
            for r in recs
        ]
        return json_response({"object": "list", "data": data})

    @app.delete("/v1/artifacts/<artifact_id>")
    async def revoke_artifact(artifact_id: str) -> Response:
        caller = authenticate()
        ok = await trio.to_thread.run_sync(st.store.revoke_artifact, artifact_id, caller.owner)
        if not ok:
            raise NotFound("No such artifact, or it is not yours.", code="artifact_not_found")
        return json_response({"id": artifact_id, "object": "artifact", "revoked": True})

    from gateway.smoke import install_selftest_route

    install_selftest_route(app)  # POST /v1/selftest, used by `gateway smoke`
    return app


def _run_or_404(st: GatewayState, run_id: str, owner: str) -> Run:
    run = st.runs.get(run_id, owner)
    if run is None:
        raise NotFound("No such run, or it is not yours.", code="run_not_found")
    return run


async def execute_run(
    st: GatewayState,
    run: Run,
    ubody: dict[str, Any],
    pid: str,
    pipeline: ChatPipeline,
    after: Callable[[], Awaitable[None]],
) -> None:
    """Run one background run to its end (in the app's service nursery)."""
    sink = RunSink(run, before_complete=after)
    try:
        with run.cancel_scope:
            try:
                resp = await st.upstream.open_chat_stream(ubody, pid)
            except GatewayError as exc:
                st.metrics.upstream_errors.labels(exc.code).inc()
                sink.start()
                await sink.fail(pipeline, exc.code, exc.message)
                return
            try:
                async with relay(resp, pipeline, sink, st.relay_options()) as chunks:
                    async for _ in chunks:
                        pass
            finally:
                await close_quietly(resp)
        if not run.done:
            await sink.cancelled(pipeline)
    except Exception:
        log.exception("run failed unexpectedly")
        run.finish(
            "failed",
            "run.failed",
            error={
                "code": "internal_error",
                "message": "The run failed unexpectedly; the error was logged.",
            },
        )


@trio.as_safe_channel
async def follow_run(
    run: Run, after_seq: int, keepalive: float, draining: trio.Event
) -> AsyncGenerator[bytes, None]:
    """Replay a run's events after ``after_seq``, then follow them live until the end."""
    seq = after_seq
    while True:
        changed = run.changed_event()
        events = run.after(seq)
        if events:
            seq = events[-1]["seq"]
            yield b"".join(encode_json(e, id=str(e["seq"])) for e in events)
            continue
        if run.done:
            return
        if draining.is_set():
            # the run itself ends with run.failed (interrupted) through its relay; give
            # it a moment, then stop following so the drain is not held up
            with trio.move_on_after(0.5):
                await changed.wait()
            if not run.after(seq):
                return
            continue
        woke = False
        with trio.move_on_after(keepalive):
            async with trio.open_nursery() as wait:

                async def on_change(
                    scope: trio.CancelScope = wait.cancel_scope, ev: trio.Event = changed
                ) -> None:
                    await ev.wait()
                    scope.cancel()

                async def on_drain(scope: trio.CancelScope = wait.cancel_scope) -> None:
                    await draining.wait()
                    scope.cancel()

                wait.start_soon(on_change)
                wait.start_soon(on_drain)
            woke = True
        if not woke:
            yield encode_comment()
