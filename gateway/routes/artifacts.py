"""Managed downloads: ``GET /v1/artifacts/{id}``, ``GET /v1/artifacts``, revoke."""

from __future__ import annotations

import trio
from quart import Blueprint, Response, request

from gateway.artifacts import (
    FileBody,
    content_disposition,
    download_content_type,
    etag,
    parse_range,
)
from gateway.errors import GatewayError, NotFound
from gateway.routes._common import authenticate
from gateway.state import current
from gateway.store import ArtifactRecord
from gateway.web import cleanup_stack, error_response, json_response

bp = Blueprint("artifacts", __name__)


async def _authorize(artifact_id: str) -> ArtifactRecord:
    st = current()
    args = request.args
    if "sig" in args or "exp" in args:
        return await st.artifacts.authorize_public(
            artifact_id, args.get("exp", ""), args.get("sig", "")
        )
    caller = authenticate()
    return await st.artifacts.authorize_owner(artifact_id, caller.owner)


@bp.get("/v1/artifacts/<artifact_id>")
async def download(artifact_id: str) -> Response:
    st = current()
    rec = await _authorize(artifact_id)
    rng = parse_range(request.headers.get("Range"), rec.size)
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
    fd = await st.artifacts.open_verified(rec)
    start, length = (rng[0], rng[1] - rng[0] + 1) if isinstance(rng, tuple) else (0, rec.size)
    body = FileBody(fd, start, length)
    cleanup_stack().callback(body.close)  # closes the descriptor even if the body never starts
    headers = {
        "Content-Type": download_content_type(rec),
        "Content-Disposition": content_disposition(rec.filename),
        "ETag": etag(rec),
        "Accept-Ranges": "bytes",
        "X-Content-Type-Options": "nosniff",
        "Cache-Control": "private, no-store" if rec.link_mode == "private" else "private, no-cache",
        "Content-Length": str(length),
    }
    status = 200
    if isinstance(rng, tuple):
        headers["Content-Range"] = f"bytes {rng[0]}-{rng[1]}/{rec.size}"
        status = 206
    response = Response(body, status=status, headers=headers)
    response.timeout = None
    return response


@bp.get("/v1/artifacts")
async def list_artifacts() -> Response:
    st = current()
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


@bp.delete("/v1/artifacts/<artifact_id>")
async def revoke_artifact(artifact_id: str) -> Response:
    st = current()
    caller = authenticate()
    ok = await trio.to_thread.run_sync(st.store.revoke_artifact, artifact_id, caller.owner)
    if not ok:
        raise NotFound("No such artifact, or it is not yours.", code="artifact_not_found")
    return json_response({"id": artifact_id, "object": "artifact", "revoked": True})
