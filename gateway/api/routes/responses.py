"""The Responses API: ``POST /v1/responses`` (live, stored, background), get, cancel, delete.

A live response streams through the relay with :class:`ResponsesEncoder`; ``store``
(default true) keeps the final response object, the request's own input and the id
of its predecessor, so ``previous_response_id`` rebuilds the conversation by walking
the chain back (newest first, until ``limits.history_max_bytes`` or
:data:`~gateway.principals.sessions.MAX_MESSAGES` is reached, or a predecessor is gone): each
stored response holds its own turn only, never the conversation again. Responses
stored before that (with the whole conversation under ``messages``) end the walk
with their conversation. ``background: true`` runs it as a journaled run of kind
``response``: ``GET /v1/responses/{id}`` returns its state, ``?stream=true&
starting_after=N`` replays its events after ``sequence_number`` N and follows them
live (on any instance sharing the journal), ``POST /v1/responses/{id}/cancel`` stops
it. Every read is scoped to the owner.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from functools import partial
from typing import Any

import trio
from quart import Blueprint, Response, current_app, request

from gateway.api.history import prepare_messages
from gateway.api.routes._common import (
    authenticate,
    body,
    collect,
    open_stream,
    open_upstream,
    pipeline_body,
    relay_response,
)
from gateway.api.routes._native import (
    about_upstream,
    native_responses_body,
    open_native_response,
    responses_pipeline,
    stop_upstream_response,
)
from gateway.api.state import GatewayState, current
from gateway.clients.upstream import StreamResponse
from gateway.core.checks import check_id
from gateway.core.errors import NotFound, RequestError, UpstreamError
from gateway.fronts.responses import (
    ResponsesEncoder,
    ResponsesJournalFront,
    interrupted_response,
    new_response_id,
    upstream_responses_body,
    validate_responses_body,
)
from gateway.http.asgi import cleanup_stack
from gateway.http.replies import json_response, sse_response
from gateway.principals.auth import Caller, effective_link_mode
from gateway.principals.sessions import MAX_MESSAGES, message_bytes, session_id_from, trim_history
from gateway.store import INTERRUPTED_ERROR, RunRecord, Store
from gateway.stream.pipeline import ChatPipeline

bp = Blueprint("responses", __name__)
ROUTE = "/v1/responses"
KIND = "response"


def _not_found() -> NotFound:
    return NotFound("No such stored response, or it is not yours.", code="response_not_found")


def _previous_id(b: dict[str, Any]) -> str | None:
    prev_id = b.get("previous_response_id")
    if prev_id is not None and not isinstance(prev_id, str):
        raise RequestError("'previous_response_id' must be a string.", code="invalid_request")
    return prev_id


def _chain(store: Store, owner: str, rid: str, max_bytes: int) -> list[dict[str, Any]] | None:
    """The conversation up to stored response ``rid``, walked back through its
    predecessors while it fits (blocking); None when ``rid`` itself is not there."""
    turns: list[list[dict[str, Any]]] = []
    size = count = 0
    seen: set[str] = set()
    at: str | None = rid
    while at is not None and at not in seen and size < max_bytes and count < MAX_MESSAGES:
        seen.add(at)
        doc = store.get_json(KIND, owner, at)
        if doc is None:
            if not turns:
                return None
            break  # a deleted or expired predecessor ends the conversation there
        legacy = doc.get("messages")
        if isinstance(legacy, list):  # stored with its whole conversation (before chaining)
            turns.append(legacy)
            break
        final = doc.get("response")
        text = final.get("output_text") if isinstance(final, dict) else None
        turn = [*doc.get("input", []), {"role": "assistant", "content": text or ""}]
        turns.append(turn)
        size += sum(message_bytes(m) for m in turn)
        count += len(turn)
        prev = doc.get("previous_response_id")
        at = prev if isinstance(prev, str) else None
    return [m for turn in reversed(turns) for m in turn]


async def _history(st: GatewayState, owner: str, b: dict[str, Any]) -> list[dict[str, Any]]:
    """The earlier conversation: the previous response's chain, then the session's."""
    max_bytes = st.config.limits.history_max_bytes
    history: list[dict[str, Any]] = []
    prev_id = _previous_id(b)
    if prev_id is not None:
        chain = await trio.to_thread.run_sync(_chain, st.store, owner, prev_id, max_bytes)
        if chain is None:
            raise _not_found()
        history.extend(chain)
    sid = session_id_from(request.headers.get("X-Session-Id"), b)
    if sid is not None:
        history.extend(await st.sessions.history(owner, sid))
    return trim_history(history, max_bytes)


def _stores(b: dict[str, Any], background: bool) -> bool:
    """Whether the request keeps something: the response, a session turn or a journal."""
    return bool(b.get("store", True)) or background or b.get("session_id") is not None


def _expiry(st: GatewayState) -> float | None:
    ttl = st.config.retention.responses_seconds
    return time.time() + ttl if ttl > 0 else None


async def _keep(
    st: GatewayState,
    owner: str,
    b: dict[str, Any],
    turn: tuple[str | None, list[dict[str, Any]]],
    front: ResponsesEncoder,
    upstream_id: str | None = None,
) -> None:
    """Store the response (``store``: its object, its own input, its predecessor's id
    and, relayed natively, the upstream's own id) and the session turn, once the
    answer is final."""
    text = front.text()
    final = front.final
    sid, new = turn
    if b.get("store", True) and final is not None:
        doc = {"response": final, "previous_response_id": _previous_id(b), "input": new}
        if upstream_id is not None:
            doc["upstream_id"] = upstream_id
        put = partial(st.store.put_json, KIND, owner, front.response_id, doc, expires=_expiry(st))
        await trio.to_thread.run_sync(put)
    if sid is not None and final is not None and final["status"] != "failed":
        await st.sessions.append(owner, sid, new, text)


@bp.post(ROUTE)
async def create_response() -> Response:
    st = current()
    caller = authenticate()
    b = await body()
    stream, _store, new = validate_responses_body(b)
    background = b.get("background", False)
    if not isinstance(background, bool):
        raise RequestError("'background' must be true or false.", code="invalid_request")
    mode = effective_link_mode(caller, b, st.config.artifacts.default_link_mode)
    if _stores(b, background) or request.headers.get("X-Session-Id") is not None:
        size = sum(map(message_bytes, new))
        await st.quotas.check_storage(caller.owner, size, cleanup_stack(request.scope))
    if await st.native.responses():  # the agent's own Responses API
        return await _native(st, caller, b, new, mode, stream, background)
    history = await _history(st, caller.owner, b)
    messages = await prepare_messages(st, caller.owner, [*history, *new])
    pid = st.signer.principal_id(caller.owner)
    pipeline = st.pipeline(st.resolver(caller.owner, mode, names_only=caller.names_only))
    rid = new_response_id()
    front = ResponsesEncoder(rid, b["model"], background=background)
    turn = (session_id_from(request.headers.get("X-Session-Id"), b), new)

    async def keep(outcome: object = "completed") -> None:
        await _keep(st, caller.owner, b, turn, front)

    if background:
        ubody = upstream_responses_body(b, messages, pid, stream=True)
        opener = partial(st.upstream.open_chat_stream, ubody, pid)
        return await _background(st, caller, b, front, opener, pipeline, keep, stream)

    if not stream:
        ubody = upstream_responses_body(b, messages, pid, stream=False)
        data = await st.upstream.chat(ubody, pid)
        events = [*await pipeline.completion(data), *await pipeline.finish()]
        if pipeline.failure is not None:  # (a link could not be made: as a stream ends)
            raise pipeline.failure
        front.start_events()
        front.end_events(events, pipeline.manifest())
        st.count_rewrites(pipeline)
        await keep("completed")
        assert front.final is not None
        return json_response(front.final)
    resp = await open_upstream(st, upstream_responses_body(b, messages, pid, stream=True), pid)
    return sse_response(pipeline_body(st, ROUTE, resp, pipeline, front, on_outcome=keep))


async def _background(
    st: GatewayState,
    caller: Caller,
    b: dict[str, Any],
    front: ResponsesEncoder,
    opener: Callable[[], Awaitable[StreamResponse]],
    pipeline: ChatPipeline,
    keep: Callable[[], Awaitable[None]],
    stream: bool,
) -> Response:
    """A background response: a journaled run of kind ``response`` (``front`` made with
    ``background=True``) whose stream ``opener`` opens and ``pipeline`` reads; ``keep``
    stores it once complete."""
    rec = st.runs.record(
        front.response_id, caller.owner, KIND, b["model"], pipeline.resolver.download_link_mode
    )
    await st.runs.create(rec)

    def summarize(events: list[dict[str, Any]]) -> dict[str, Any]:
        return {"response": front.final}

    current_app.nursery.start_soon(  # type: ignore[attr-defined]
        st.runs.execute,
        rec,
        opener,
        pipeline,
        ResponsesJournalFront(front),
        summarize,
        st.relay_options(),
        keep,
    )
    if stream:
        relay = st.runs.follow(rec, 0, st.relay_options())
        return relay_response(st, ROUTE, relay)
    return json_response(front.envelope("queued"))


async def _native_history(
    st: GatewayState, owner: str, b: dict[str, Any]
) -> tuple[str | None, list[dict[str, Any]]]:
    """The upstream's own id of the previous response (looked up under ``owner``: an id
    of another principal's is a 404) — or, when the gateway holds turns the upstream
    does not (a session, a predecessor answered by emulation), the conversation."""
    prev_id = _previous_id(b)
    doc = None
    if prev_id is not None:
        doc = await trio.to_thread.run_sync(st.store.get_json, KIND, owner, prev_id)
        if doc is None:
            raise _not_found()
    upstream_prev = check_id(doc.get("upstream_id")) if doc is not None else None
    sid = session_id_from(request.headers.get("X-Session-Id"), b)
    if sid is None and (prev_id is None or upstream_prev is not None):
        return upstream_prev, []
    return None, await _history(st, owner, b)


def _native_opener(
    st: GatewayState,
    owner: str,
    b: dict[str, Any],
    new: list[dict[str, Any]],
    ubody: dict[str, Any],
    pid: str,
) -> Callable[[], Awaitable[StreamResponse]]:
    """Opens the agent's stream for ``ubody``. When that names the agent's own previous
    response and the agent no longer has it (Hermes keeps its last 100 responses, of
    all users together: a 404), the request goes again with the conversation the
    gateway holds (the previous response's chain) in its place."""
    upstream_prev = ubody.get("previous_response_id")
    prev_id = _previous_id(b)
    if not isinstance(upstream_prev, str) or prev_id is None:
        return partial(open_native_response, st, ubody, pid)

    async def open_() -> StreamResponse:
        try:
            with about_upstream(upstream_prev, "response"):
                return await open_native_response(st, ubody, pid, route=False)
        except UpstreamError as exc:
            if exc.code != "upstream_lost":
                raise
        max_bytes = st.config.limits.history_max_bytes
        chain = await trio.to_thread.run_sync(_chain, st.store, owner, prev_id, max_bytes)
        history = trim_history(chain or [], max_bytes)
        prepared = await prepare_messages(st, owner, [*history, *new])
        again = native_responses_body(b, prepared[len(history) :], prepared[: len(history)], None)
        return await open_native_response(st, again, pid)

    return open_


async def _native(
    st: GatewayState,
    caller: Caller,
    b: dict[str, Any],
    new: list[dict[str, Any]],
    mode: str,
    stream: bool,
    background: bool,
) -> Response:
    """``POST /v1/responses`` relayed to the upstream's own: its tool calls and results
    and the files they wrote reach the client, rewritten; stored like any other."""
    upstream_prev, history = await _native_history(st, caller.owner, b)
    prepared = await prepare_messages(st, caller.owner, [*history, *new])
    ubody = native_responses_body(
        b, prepared[len(history) :], prepared[: len(history)], upstream_prev
    )
    pid = st.signer.principal_id(caller.owner)
    resolver = st.resolver(caller.owner, mode, names_only=caller.names_only)
    pipeline = responses_pipeline(st, resolver)
    rid = new_response_id()
    turn = (session_id_from(request.headers.get("X-Session-Id"), b), new)
    front = ResponsesEncoder(rid, b["model"], background=background)

    async def keep(outcome: object = "completed") -> None:
        await _keep(st, caller.owner, b, turn, front, pipeline.upstream_id)

    opener = _native_opener(st, caller.owner, b, new, ubody, pid)
    if background:
        return await _background(st, caller, b, front, opener, pipeline, keep, stream)
    resp = await open_stream(st, opener)
    if stream:
        return sse_response(pipeline_body(st, ROUTE, resp, pipeline, front, on_outcome=keep))
    await collect(st, resp, pipeline, front, on_outcome=keep)  # non-streamed: read whole
    assert front.final is not None
    return json_response(front.final)


def _starting_after() -> int:
    raw = request.args.get("starting_after")
    if raw is None:
        return -1  # from the first event
    if not (raw.isascii() and raw.isdigit()) or len(raw) > 12:
        raise RequestError(
            "'starting_after' must be an event sequence number.", code="invalid_starting_after"
        )
    return int(raw)


@bp.get(ROUTE + "/<response_id>")
async def get_response(response_id: str) -> Response:
    st = current()
    caller = authenticate()
    doc = await trio.to_thread.run_sync(st.store.get_json, KIND, caller.owner, response_id)
    if request.args.get("stream") == "true":
        rec = await _background_run(st, caller.owner, response_id)
        relay = st.runs.follow(rec, _starting_after() + 1, st.relay_options())
        return relay_response(st, ROUTE + "/{id}", relay)
    if doc is not None:
        return json_response(doc["response"])
    rec = await _background_run(st, caller.owner, response_id)
    return json_response(_response_object(rec))


def _response_object(rec: RunRecord) -> dict[str, Any]:
    """A background response's object as it stands (its final one once finished)."""
    final = rec.summary.get("response") if rec.finished else None
    if isinstance(final, dict):
        return final
    if rec.status == "interrupted":  # its instance stopped: the lease watcher ended it
        return interrupted_response(rec.id, rec.model, int(rec.created), INTERRUPTED_ERROR)
    env = ResponsesEncoder(rec.id, rec.model, created_at=int(rec.created), background=True)
    return env.envelope("in_progress" if rec.status == "running" else rec.status)


async def _background_run(st: GatewayState, owner: str, response_id: str) -> RunRecord:
    try:
        return await st.runs.get(response_id, owner, kind=KIND)
    except NotFound:
        raise _not_found() from None


@bp.post(ROUTE + "/<response_id>/cancel")
async def cancel_response(response_id: str) -> Response:
    st = current()
    caller = authenticate()
    rec = await _background_run(st, caller.owner, response_id)
    if not rec.finished:
        await st.runs.stop(rec)
        rec = await _background_run(st, caller.owner, response_id)
    return json_response(_response_object(rec))


@bp.delete(ROUTE + "/<response_id>")
async def delete_response(response_id: str) -> Response:
    st = current()
    caller = authenticate()
    doc = await trio.to_thread.run_sync(st.store.get_json, KIND, caller.owner, response_id)
    ok = await trio.to_thread.run_sync(st.store.delete_json, KIND, caller.owner, response_id)
    if not ok:
        raise _not_found()
    upstream_id = check_id(doc.get("upstream_id")) if doc is not None else None
    if upstream_id is not None:  # the agent's own copy (its conversation) goes too
        await stop_upstream_response(st, upstream_id, st.signer.principal_id(caller.owner))
    return json_response({"id": response_id, "object": "response.deleted", "deleted": True})
