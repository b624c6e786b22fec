"""``POST /v1/chat/completions``: the chat relay, streamed or not."""

from __future__ import annotations

from typing import Any

from quart import Blueprint, Response, request

from gateway.auth import effective_link_mode
from gateway.fronts.chat import (
    ChatEncoder,
    completion_object,
    upstream_chat_body,
    validate_chat_body,
)
from gateway.history import prepare_messages
from gateway.routes._common import authenticate, body, open_upstream, stream_pipeline
from gateway.sessions import session_id_from
from gateway.state import current
from gateway.web import json_response

bp = Blueprint("chat", __name__)
ROUTE = "/v1/chat/completions"


@bp.post(ROUTE)
async def chat_completions() -> Response:
    st = current()
    caller = authenticate()
    b = await body()
    stream = validate_chat_body(b)
    mode = effective_link_mode(caller, b, st.config.artifacts.default_link_mode)
    resolver = st.resolver(caller.owner, mode, names_only=caller.names_only)
    pipeline = st.pipeline(resolver)
    pid = st.signer.principal_id(caller.owner)
    sid = session_id_from(request.headers.get("X-Session-Id"), b)
    new_messages: list[dict[str, Any]] = list(b["messages"])
    history = await st.sessions.history(caller.owner, sid) if sid is not None else []
    messages = await prepare_messages(st, caller.owner, [*history, *new_messages])
    ubody = upstream_chat_body({**b, "messages": messages}, pid)
    front = ChatEncoder()

    async def remember(outcome: object) -> None:
        if sid is not None and outcome == "completed":
            await st.sessions.append(caller.owner, sid, new_messages, front.text(0))

    if not stream:
        data = await st.upstream.chat(ubody, pid)
        events = [*await pipeline.completion(data), *await pipeline.finish()]
        out = completion_object(front, events, pipeline.manifest())
        st.count_rewrites(pipeline)
        await remember("completed")
        return json_response(out)
    resp = await open_upstream(st, ubody, pid)
    opts = st.relay_options(on_outcome=remember)
    return stream_pipeline(st, ROUTE, resp, pipeline, front, opts)
