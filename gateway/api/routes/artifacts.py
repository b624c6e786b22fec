"""Managed downloads: ``GET /v1/artifacts/{id}``, the owner's list, revoke, share.

Who may download a private link: its owner, proven by the owner's bearer key, the proxy
asserting the owner, or — so that a link opens in the browser with no other login — the
owner's **Open WebUI session** (the ``token`` cookie, or that token as a bearer),
verified against ``proxy.openwebui_url`` and mapped to ``openwebui:<user id>``. A public
link needs its signature instead. Browsers (``Accept: text/html``) get a small readable
page for 401/404/410; API clients keep JSON. Every download answer carries
:data:`DOWNLOAD_POLICY` (a sandbox for a file the browser renders anyway, no Referer)
and :func:`resource_policy` (who may embed it), and honours its ``ETag``
(:func:`precondition`, :func:`range_applies`).

``GET /v1/artifacts/{id}/share`` (the owner) offers to turn a private link into a public
one; ``POST`` makes it (a new public record for the same file, valid
``artifacts.public_ttl_seconds``) and answers with the link: the "ask for a public link"
that the private-mode note points to, usable from the browser.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from typing import Any

import trio
from quart import Blueprint, Response, request
from werkzeug.datastructures import ETags
from werkzeug.http import parse_etags, parse_if_range_header, unquote_etag

from gateway.api.routes._common import authenticate
from gateway.api.state import GatewayState, current
from gateway.clients.openwebui import owner_for_user
from gateway.core.errors import AuthError, GatewayError, NotFound
from gateway.http.asgi import cleanup_stack
from gateway.http.replies import bearer_token, error_response, json_response
from gateway.links.artifacts import (
    FileBody,
    content_disposition,
    download_content_type,
    etag,
    parse_range,
)
from gateway.links.pages import (
    download_link,
    error_page,
    share_done_page,
    share_page,
    wants_html,
)
from gateway.store import ArtifactRecord

bp = Blueprint("artifacts", __name__)

#: what a browser may do with our pages: nothing but show them and post the share form
PAGE_POLICY = "default-src 'none'; style-src 'unsafe-inline'; form-action 'self'"


def _html(status: int, page: str) -> Response:
    resp = Response(page, status=status, content_type="text/html; charset=utf-8")
    resp.headers["Content-Security-Policy"] = PAGE_POLICY
    resp.headers["Cache-Control"] = "no-store"
    resp.headers["X-Content-Type-Options"] = "nosniff"
    return resp


def browser_errors(
    handler: Callable[..., Awaitable[Response]],
) -> Callable[..., Awaitable[Response]]:
    """Errors of ``handler`` as an HTML page when a browser asked, JSON otherwise."""

    async def wrapped(*args: Any, **kw: Any) -> Response:
        try:
            return await handler(*args, **kw)
        except GatewayError as exc:
            if not wants_html(request.headers):
                raise
            cfg = current().config
            # the link from the validated id alone: never the request's path or Host
            link = download_link(cfg.server.public_base_url, kw.get("artifact_id"))
            page = error_page(exc, cfg.proxy.openwebui_url, link)
            resp = _html(exc.status, page)
            if exc.status == 401:
                resp.headers["WWW-Authenticate"] = 'Bearer realm="artifact-gateway"'
            if exc.retry_after is not None:  # 429 too_many_session_checks, a share quota
                resp.headers["Retry-After"] = str(exc.retry_after)
            return resp

    wrapped.__name__ = handler.__name__
    return wrapped


def _client_address() -> str:
    """The caller's address (its throttle bucket for session checks)."""
    client = request.scope.get("client")
    return str(client[0]) if client else ""


async def owner() -> str:
    """The principal of this request: a gateway key, else an Open WebUI session."""
    st = current()
    token = bearer_token(request.headers)
    if (token is not None and st.auth.knows(token)) or st.openwebui is None:
        return authenticate().owner
    session = token or request.cookies.get("token")
    if not session:
        return authenticate().owner  # 401 missing_api_key, with the usual hint
    user = await st.openwebui.verify(session, _client_address())
    if user is None:
        raise AuthError(
            "Neither a key of this gateway nor a valid Open WebUI session; sign in to Open "
            "WebUI again, or send 'Authorization: Bearer <key>'.",
            code="invalid_session" if token is None else "invalid_api_key",
        )
    who = owner_for_user(user.id)
    request.scope["gateway.principal"] = who  # type: ignore[typeddict-unknown-key]
    return who


async def _authorize(st: GatewayState, artifact_id: str) -> ArtifactRecord:
    args = request.args
    if "sig" in args or "exp" in args:
        return await st.artifacts.authorize_public(
            artifact_id, args.get("exp", ""), args.get("sig", "")
        )
    return await st.artifacts.authorize_owner(artifact_id, await owner())


#: on every download answer. A file opened in the browser anyway (a PDF, an SVG, HTML
#: saved by the agent) runs nothing and reaches nothing: ``sandbox`` gives it a unique
#: origin without scripts, forms or plugins. No Referer leaves with the link in it.
DOWNLOAD_POLICY = {
    "Content-Security-Policy": "sandbox",
    "Referrer-Policy": "no-referrer",
    "X-Content-Type-Options": "nosniff",
}


def resource_policy(rec: ArtifactRecord) -> str:
    """``Cross-Origin-Resource-Policy``: ``same-origin`` (no other page may embed the
    file), except for images, which Open WebUI shows inline (``![chart](link)``) from
    its own origin: ``cross-origin``. ``same-site`` would not do: browsers count neither
    another port of an IP address (Chromium, seen) nor a sibling of ``localhost`` as the
    same site. Private images stay private: the session cookie is ``SameSite=Lax``, so
    another site's page gets 401; a public link is a capability already."""
    return "cross-origin" if rec.content_type.startswith("image/") else "same-origin"


def _range_refused(rec: ArtifactRecord, headers: dict[str, str]) -> Response:
    resp = error_response(
        GatewayError(
            "The requested range is outside the file.", code="range_not_satisfiable", status=416
        )
    )
    resp.headers.update(headers)
    resp.headers["Content-Range"] = f"bytes */{rec.size}"
    return resp


def _tags(name: str) -> ETags | None:
    """An entity-tag list header (``If-Match``, ``If-None-Match``), its lines joined;
    None when absent."""
    lines = request.headers.getlist(name)
    return parse_etags(", ".join(lines)) if lines else None


def precondition(tag: str) -> int | None:
    """RFC 9110 §13.2.2 for a GET or HEAD of a file whose strong ETag is ``tag``: 412
    when ``If-Match`` names none of it (strong comparison), 304 when ``If-None-Match``
    names it (weak comparison, or ``*``), else None. The dates (``If-Modified-Since``,
    ``If-Unmodified-Since``) are ignored: downloads send no ``Last-Modified``."""
    opaque = unquote_etag(tag)[0]
    if_match = _tags("If-Match")
    if if_match is not None and not if_match.contains(opaque):
        return 412
    if_none_match = _tags("If-None-Match")
    if if_none_match is not None and if_none_match.contains_weak(opaque):
        return 304
    return None


def range_applies(tag: str) -> bool:
    """``If-Range`` (RFC 9110 §13.1.5): the Range counts only if it names this ETag
    (strong comparison); a date never matches (no ``Last-Modified`` is sent)."""
    value = request.headers.get("If-Range")
    if value is None:
        return True
    if_range = parse_if_range_header(value)
    return (
        if_range.etag is not None
        and not unquote_etag(value.strip())[1]
        and (if_range.etag == unquote_etag(tag)[0])
    )


def _not_modified(headers: dict[str, str]) -> Response:
    keep = ("ETag", "Cache-Control", "Cross-Origin-Resource-Policy", *DOWNLOAD_POLICY)
    return Response(b"", status=304, headers={k: headers[k] for k in keep})


@bp.get("/v1/artifacts/<artifact_id>")
@browser_errors
async def download(artifact_id: str) -> Response:
    """A file (or, for ``HEAD``, its head). Checked in this order: the link (owner or signature),
    the file (unchanged since the link was made, else 410), the preconditions (412,
    304), then ``Range`` (206, 416) -- a changed file is never "not modified"."""
    st = current()
    rec = await _authorize(st, artifact_id)
    fd = await st.artifacts.open_verified(rec)
    tag = etag(rec)
    status = precondition(tag)
    rng = parse_range(request.headers.get("Range"), rec.size) if range_applies(tag) else None
    start, length = (rng[0], rng[1] - rng[0] + 1) if isinstance(rng, tuple) else (0, rec.size)
    body = FileBody(fd, start, length)
    cleanup_stack().callback(body.close)  # closes the descriptor even if the body never starts
    headers = {
        **DOWNLOAD_POLICY,
        "Cross-Origin-Resource-Policy": resource_policy(rec),
        "ETag": tag,
        "Cache-Control": "private, no-store" if rec.link_mode == "private" else "private, no-cache",
    }
    if status == 412:
        raise GatewayError(
            "The file is not the version the request names (If-Match).",
            code="precondition_failed",
            status=412,
        )
    if status == 304:
        return _not_modified(headers)
    if rng is False:
        return _range_refused(rec, headers)
    headers |= {
        "Content-Type": download_content_type(rec),
        "Content-Disposition": content_disposition(rec.filename),
        "Accept-Ranges": "bytes",
        "Content-Length": str(length),
    }
    if isinstance(rng, tuple):
        headers["Content-Range"] = f"bytes {rng[0]}-{rng[1]}/{rec.size}"
    # (HEAD: quart sends the head alone; the body is never read, the cleanup closes it)
    response = Response(body, status=206 if isinstance(rng, tuple) else 200, headers=headers)
    response.timeout = None
    return response


async def _own(st: GatewayState, artifact_id: str) -> tuple[ArtifactRecord, str]:
    who = await owner()
    return await st.artifacts.authorize_owner(artifact_id, who), who


@bp.get("/v1/artifacts/<artifact_id>/share")
@browser_errors
async def share_form(artifact_id: str) -> Response:
    st = current()
    rec, who = await _own(st, artifact_id)
    token = st.signer.form_token("share", rec.id, who)
    if not wants_html(request.headers):
        return json_response({**st.artifacts.describe(rec), "share_token": token})
    ttl_days = st.config.artifacts.public_ttl_seconds / 86400
    page = share_page(rec.filename, rec.size, request.path, token, ttl_days)
    return _html(200, page)


@bp.post("/v1/artifacts/<artifact_id>/share")
@browser_errors
async def share(artifact_id: str) -> Response:
    st = current()
    rec, who = await _own(st, artifact_id)
    if bearer_token(request.headers) is None:
        # a browser with a session cookie: the form's token proves the owner sent it
        form = await request.form
        if not st.signer.check_form_token(form.get("token", ""), "share", rec.id, who):
            raise AuthError(
                "The share form is out of date; open the share page again.",
                code="invalid_form_token",
                status=403,
            )
    await st.quotas.take_link_or_refuse(who)
    public = await trio.to_thread.run_sync(st.artifacts.share, rec)
    url = st.artifacts.url(public)
    expires = int(public.expires or 0)
    if wants_html(request.headers):
        when = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(expires))
        return _html(200, share_done_page(rec.filename, url, when))
    return json_response({**st.artifacts.describe(public), "expires": expires}, 201)


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
