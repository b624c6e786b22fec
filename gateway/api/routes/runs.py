"""Background runs: ``POST /v1/runs``, ``GET /v1/runs/{id}``, ``/stop``, ``/events``."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from functools import partial
from typing import Any

from quart import Blueprint, Response, current_app, request

from gateway.api.history import prepare_messages
from gateway.api.routes._common import authenticate, body, relay_response
from gateway.api.routes._native import NativeRun, native_run_body, runs_pipeline
from gateway.api.state import GatewayState, current
from gateway.clients.upstream import StreamResponse
from gateway.core.errors import RequestError
from gateway.fronts.responses import check_options
from gateway.fronts.runs import RunEncoder, run_messages, upstream_run_body
from gateway.http.asgi import cleanup_stack
from gateway.http.replies import json_response
from gateway.principals.auth import effective_link_mode
from gateway.principals.sessions import message_bytes, session_id_from
from gateway.runs.manager import new_run_id
from gateway.store import RunRecord
from gateway.stream.pipeline import ChatPipeline, LinkResolver

bp = Blueprint("runs", __name__)
ROUTE = "/v1/runs"


async def _model(st: GatewayState, b: dict[str, Any]) -> str:
    model = b.get("model")
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
    return model


def _needs_events(rec: RunRecord) -> bool:
    """Whether the summary is made from the journal: while running, and for a run the
    lease watcher ended (its instance stopped before it could write a summary)."""
    return not rec.finished or "output" not in rec.summary


def summary(rec: RunRecord, events: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    """``GET /v1/runs/{id}``: the record, with the output so far (``events``) if running
    or interrupted by the lease watcher (then also the terminal event's error)."""
    s = dict(rec.summary)
    if events is not None and _needs_events(rec):
        s["output"] = "".join(
            e.get("delta", "") for e in events if e.get("event") == "message.delta"
        )
        if rec.finished and events and s.get("error") is None:
            s["error"] = events[-1].get("error")
    s["last_seq"] = rec.last_seq
    return {
        "id": rec.id,
        "run_id": rec.id,
        "object": "run",
        "status": rec.status,
        "model": rec.model,
        "created": int(rec.created),
        "finished_at": int(rec.finished_at) if rec.finished_at else None,
        "output": s.get("output", ""),
        "usage": s.get("usage"),
        "error": s.get("error"),
        "last_seq": s.get("last_seq", 0),
        "download_link_mode": rec.link_mode,
    }


def summarize_run(events: list[dict[str, Any]]) -> dict[str, Any]:
    """A finished run's summary, from its last event."""
    last = events[-1] if events else {}
    return {
        "output": last.get("output", ""),
        "usage": last.get("usage"),
        "error": last.get("error"),
        "last_seq": last.get("seq", 0),
    }


@bp.post(ROUTE)
async def start_run() -> Response:
    st = current()
    caller = authenticate()
    b = await body()
    model = await _model(st, b)
    new = run_messages(b)
    check_options(b)
    mode = effective_link_mode(caller, b, st.config.artifacts.default_link_mode)
    sid = session_id_from(request.headers.get("X-Session-Id"), b)
    # a run's journal is stored: its input's bytes are reserved
    size = sum(map(message_bytes, new))
    await st.quotas.check_storage(caller.owner, size, cleanup_stack(request.scope))
    history = await st.sessions.history(caller.owner, sid) if sid is not None else []
    pid = st.signer.principal_id(caller.owner)
    rec = st.runs.record(new_run_id(), caller.owner, "run", model, mode)
    await st.runs.create(rec)
    resolver = st.resolver(caller.owner, mode, names_only=caller.names_only)
    front = RunEncoder(rec.id, model, max_events=st.runs.max_events)

    async def before_complete() -> None:
        if sid is not None:
            await st.sessions.append(caller.owner, sid, new, "".join(front.output))

    opener, stage, after = await _upstream(st, rec, b, new, history, resolver, pid)
    current_app.nursery.start_soon(  # type: ignore[attr-defined]
        st.runs.execute,
        rec,
        opener,
        stage,
        front,
        summarize_run,
        st.relay_options(),
        before_complete,
        after,
    )
    return json_response({"run_id": rec.id, "object": "run", "status": rec.status}, 202)


async def _upstream(
    st: GatewayState,
    rec: RunRecord,
    b: dict[str, Any],
    new: list[dict[str, Any]],
    history: list[dict[str, Any]],
    resolver: LinkResolver,
    pid: str,
) -> tuple[Callable[[], Awaitable[StreamResponse]], ChatPipeline, After | None]:
    """How the run reaches the agent: its own runs API when it has one (its tools'
    events, the files they wrote), else a chat stream; the stage that reads it; what
    to do once the run ended here."""
    owner, model = rec.owner, rec.model
    if await st.native.runs():
        ubody = native_run_body(
            b,
            model,
            await prepare_messages(st, owner, new),
            await prepare_messages(st, owner, history),
        )
        stage = runs_pipeline(st, resolver)
        native = NativeRun(st, rec, ubody, pid, stage.hidden)
        return native.open, stage, native.ended
    messages = await prepare_messages(st, owner, [*history, *new])
    ubody = upstream_run_body(b, model, messages, pid)
    return partial(st.upstream.open_chat_stream, ubody, pid), st.pipeline(resolver), None


After = Callable[[object], Awaitable[None]]


async def _summary_response(st: GatewayState, run_id: str, owner: str) -> Response:
    """The run as ``GET /v1/runs/{id}`` shows it (its journal read when needed)."""
    rec = await st.runs.get(run_id, owner, kind="run")
    events = (
        await st.runs.read_events(rec.id, 0, st.runs.max_events + 10)
        if _needs_events(rec)
        else None
    )
    return json_response(summary(rec, events))


@bp.get(ROUTE + "/<run_id>")
async def get_run(run_id: str) -> Response:
    return await _summary_response(current(), run_id, authenticate().owner)


@bp.post(ROUTE + "/<run_id>/stop")
async def stop_run(run_id: str) -> Response:
    st = current()
    owner = authenticate().owner
    await st.runs.stop(await st.runs.get(run_id, owner, kind="run"))
    return await _summary_response(st, run_id, owner)


@bp.get(ROUTE + "/<run_id>/events")
async def run_events(run_id: str) -> Response:
    st = current()
    caller = authenticate()
    rec = await st.runs.get(run_id, caller.owner, kind="run")
    raw = request.headers.get("Last-Event-ID") or request.args.get("after") or "0"
    if not (raw.isascii() and raw.isdigit()) or len(raw) > 12:
        raise RequestError(
            "Last-Event-ID must be a run event sequence number.", code="invalid_last_event_id"
        )
    relay = st.runs.follow(rec, int(raw), st.relay_options())
    return relay_response(st, ROUTE + "/{id}/events", relay)
