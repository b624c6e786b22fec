"""``POST /v1/chat/completions``: the chat relay, streamed or not.

Served without quart (:mod:`gateway.http.direct`, registered by :func:`gateway.api.app.create_app`);
the quart route answers the same through the same :func:`chat_reply` (quart's test
client, and any way in that is not the gateway's own connection class).
"""

from __future__ import annotations

from typing import Any

from quart import Blueprint, Response

from gateway.api.history import prepare_messages
from gateway.api.routes._common import (
    QuartIncoming,
    authenticate_from,
    collect,
    open_upstream,
    pipeline_body,
    to_response,
)
from gateway.api.state import GatewayState, current
from gateway.core.errors import UpstreamError
from gateway.fronts.chat import (
    MAX_COLLECTED_CHARS,
    ChatCollector,
    ChatEncoder,
    completion_object,
    upstream_chat_body,
    validate_chat_body,
)
from gateway.http.asgi import cleanup_stack
from gateway.http.direct import Incoming, JSONReply, Reply, StreamReply
from gateway.principals.auth import effective_link_mode
from gateway.principals.sessions import message_bytes, session_id_from

bp = Blueprint("chat", __name__)
ROUTE = "/v1/chat/completions"


@bp.post(ROUTE)
async def chat_completions() -> Response:
    return to_response(await chat_reply(current(), QuartIncoming()))


async def chat_reply(st: GatewayState, req: Incoming) -> Reply:
    caller = authenticate_from(st, req)
    b = await req.json(st.config.limits.max_json_depth)
    stream = validate_chat_body(b)
    mode = effective_link_mode(caller, b, st.config.artifacts.default_link_mode)
    resolver = st.resolver(caller.owner, mode, names_only=caller.names_only)
    pipeline = st.pipeline(resolver)
    pid = st.signer.principal_id(caller.owner)
    sid = session_id_from(req.headers.get("X-Session-Id"), b)
    new_messages: list[dict[str, Any]] = list(b["messages"])
    history: list[dict[str, Any]] = []
    if sid is not None:  # the session stores the turn
        size = sum(map(message_bytes, new_messages))
        await st.quotas.check_storage(caller.owner, size, cleanup_stack(req.scope))
        history = await st.sessions.history(caller.owner, sid)
    messages = await prepare_messages(st, caller.owner, [*history, *new_messages])
    ubody = upstream_chat_body({**b, "messages": messages}, pid)
    front = ChatEncoder(keep_text=sid is not None)  # a session stores the answer
    # the request's messages are kept for the answer's end only when a session stores
    # them (a conversation can be megabytes, and an answer streams for minutes)
    stored = (sid, new_messages) if sid is not None else None
    del new_messages

    async def remember(outcome: object) -> None:
        if stored is not None and outcome == "completed":
            await st.sessions.append(caller.owner, stored[0], stored[1], front.text(0))

    if not stream and await st.native.agent():
        # an agent reports the files its tools write only in its stream: read it whole
        ubody = {**ubody, "stream": True, "stream_options": {"include_usage": True}}
        resp = await open_upstream(st, st.upstream.chat_content(ubody), pid, req)
        collector = ChatCollector(front)
        await collect(st, resp, pipeline, collector, on_outcome=remember)
        if collector.final is None:  # (too large to hold)
            raise UpstreamError(
                f"The upstream's answer is longer than {MAX_COLLECTED_CHARS:,} characters; "
                "ask for it streamed (stream: true).",
                code="upstream_bad_response",
            )
        return JSONReply(collector.final)
    if not stream:
        data = await st.upstream.chat(ubody, pid)
        events = [*await pipeline.completion(data), *await pipeline.finish()]
        if pipeline.failure is not None:  # (a link could not be made: as a stream ends)
            raise pipeline.failure
        out = completion_object(front, events, pipeline.manifest())
        st.count_rewrites(pipeline)
        await remember("completed")
        return JSONReply(out)
    # the parsed request is let go while the upstream thinks (a conversation can be
    # megabytes of objects, and 500 requests waiting for their first byte held them
    # all): only its encoded bytes are kept, until sent
    content = st.upstream.chat_content(ubody)
    del b, messages, history, ubody
    req.release()
    resp = await open_upstream(st, content, pid, req)
    # (nothing to remember without a session: no callback kept for the stream's length)
    on_outcome = remember if stored is not None else None
    return StreamReply(pipeline_body(st, ROUTE, resp, pipeline, front, on_outcome=on_outcome))
