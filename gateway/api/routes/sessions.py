"""``GET /v1/sessions``, ``GET``/``DELETE /v1/sessions/{id}``: the caller's own sessions."""

from __future__ import annotations

from quart import Blueprint, Response

from gateway.api.routes._common import authenticate
from gateway.api.state import current
from gateway.http.replies import json_response

bp = Blueprint("sessions", __name__)


@bp.get("/v1/sessions")
async def list_sessions() -> Response:
    caller = authenticate()
    return json_response({"object": "list", "data": await current().sessions.list(caller.owner)})


@bp.get("/v1/sessions/<session_id>")
async def get_session(session_id: str) -> Response:
    caller = authenticate()
    return json_response(await current().sessions.get(caller.owner, session_id))


@bp.delete("/v1/sessions/<session_id>")
async def delete_session(session_id: str) -> Response:
    caller = authenticate()
    await current().sessions.delete(caller.owner, session_id)
    return json_response({"id": session_id, "object": "session.deleted", "deleted": True})
