"""The route halves of the native relay: an agent's own Responses and runs APIs.

Used by :mod:`gateway.api.routes.responses` and :mod:`gateway.api.routes.runs` when
:class:`gateway.stream.native.NativeApis` says the upstream has them. What goes upstream is
built here: the new input with the requester's own links mapped back to the agent's
paths, the conversation the gateway holds, the upstream's own id of the previous
response (looked up under the requester: another principal's is a 404); the
upstream client adds the requester's headers (``Upstream.principal_headers``). The client never sees an upstream id: the
gateway's fronts write their own (see docs/api.md, "Native relay").
"""

from __future__ import annotations

import contextlib
import json
import logging
from collections.abc import Awaitable, Callable, Iterator
from typing import Any, TypeGuard

import trio

from gateway.api.history import link_pattern
from gateway.api.state import GatewayState
from gateway.clients.upstream import StreamResponse
from gateway.core.checks import check_id
from gateway.core.errors import GatewayError, NotFound, RunInterrupted, UpstreamError
from gateway.core.events import Event, Text
from gateway.core.sse import SSEEvent
from gateway.fronts.runs import RunEncoder
from gateway.links.artifacts import ResponseLinks
from gateway.store import RunRecord
from gateway.stream.native import ResponsesEventsPipeline, RunEventsPipeline
from gateway.stream.pipeline import LinkResolver
from gateway.stream.relay import CANCELLED

__all__ = [
    "NativeRun",
    "adopted_runs",
    "native_responses_body",
    "native_run_body",
    "open_native_response",
    "responses_pipeline",
    "runs_pipeline",
    "stop_upstream_response",
]

log = logging.getLogger("gateway.native")

#: how often an adopted run's upstream state is asked for
POLL_SECONDS = 2.0
#: bounds of a best-effort call (a stop, a delete) at the end of something
CLEANUP_SECONDS = 5.0


def _conversation(messages: list[dict[str, Any]]) -> list[dict[str, str]]:
    """Chat messages as the plain ``{role, content}`` list an agent's API takes."""
    out = []
    for m in messages:
        content = m.get("content")
        if isinstance(content, str) and m.get("role") in ("user", "assistant", "system"):
            out.append({"role": str(m["role"]), "content": content})
    return out


def native_responses_body(
    b: dict[str, Any],
    new: list[dict[str, Any]],
    history: list[dict[str, Any]],
    upstream_previous: str | None,
) -> dict[str, Any]:
    """The upstream's own ``POST /responses`` body (always streamed: a non-streamed
    request is collected by the gateway). ``new`` and ``history`` are prepared
    (own links mapped back); an explicit ``conversation_history`` wins over the
    upstream's ``previous_response_id`` there, so it is sent only when the gateway
    holds turns the upstream does not (a session, an emulated predecessor)."""
    body: dict[str, Any] = {"model": b["model"], "input": _conversation(new), "stream": True}
    if history:
        body["conversation_history"] = _conversation(history)
    elif upstream_previous is not None:
        body["previous_response_id"] = upstream_previous
    for key in ("instructions", "temperature", "top_p", "max_output_tokens"):
        if key in b:
            body[key] = b[key]
    return body


def native_run_body(
    b: dict[str, Any], model: str, new: list[dict[str, Any]], history: list[dict[str, Any]]
) -> dict[str, Any]:
    """The upstream's own ``POST /runs`` body: the new input, the session's history."""
    body: dict[str, Any] = {"model": model, "input": _conversation(new)}
    if history:
        body["conversation_history"] = _conversation(history)
    if isinstance(b.get("instructions"), str):
        body["instructions"] = b["instructions"]
    return body


def responses_pipeline(st: GatewayState, resolver: LinkResolver) -> ResponsesEventsPipeline:
    return ResponsesEventsPipeline(resolver, st.settings, pause=trio.lowlevel.checkpoint)


def runs_pipeline(st: GatewayState, resolver: LinkResolver) -> RunEventsPipeline:
    return RunEventsPipeline(resolver, st.settings, pause=trio.lowlevel.checkpoint)


@contextlib.contextmanager
def native_route() -> Iterator[None]:
    """Around the first call of a native relay: a route the upstream does not have
    (``upstream_wrong_path``) may be a wrong ``base_url``, or an upstream whose
    capabilities document promised APIs it lacks: the message names both fixes."""
    try:
        yield
    except UpstreamError as exc:
        if exc.code == "upstream_wrong_path":
            exc.message += (
                " If this upstream has no Responses and runs APIs of its own, set"
                ' upstream.apis = "chat".'
            )
            exc.args = (exc.message,)
        raise


async def open_native_response(
    st: GatewayState, body: dict[str, Any], pid: str, *, route: bool = True
) -> StreamResponse:
    """The upstream's own Responses stream for ``body`` (``route``: a 404 means a wrong
    ``base_url``; with ``previous_response_id``, pass False: it may be that response's)."""
    with native_route():
        return await st.upstream.open_sse("POST", "/responses", pid, body=body, route=route)


async def stop_upstream_response(st: GatewayState, upstream_id: str, pid: str) -> None:
    """Delete the upstream's copy of a response (best effort: logged, never raised)."""
    with trio.move_on_after(CLEANUP_SECONDS):
        try:
            await st.upstream.request_json("DELETE", f"/responses/{upstream_id}", pid, route=False)
        except GatewayError as exc:
            log.info("the upstream's copy of a response was not deleted: %s", exc.code)


@contextlib.contextmanager
def about_upstream(uid: str, kind: str) -> Iterator[None]:
    """Around a call about one of the agent's own objects (``kind``: "run",
    "response"): its id, which no client ever sees, is masked in the error's message;
    a 404 is ``upstream_lost`` (the agent restarted or forgot it), not the agent's own
    code about an object the client never named."""
    try:
        yield
    except GatewayError as exc:
        if exc.status == 404:
            raise UpstreamError(
                f"The upstream agent no longer has this {kind} (it restarted, or forgot it).",
                code="upstream_lost",
            ) from None
        if uid in exc.message:
            exc.message = exc.message.replace(uid, f"<the agent's {kind} id>")
            exc.args = (exc.message,)
        raise


class NativeRun:
    """A run the upstream runs itself: ``POST /runs`` (its id noted in the run's record,
    so another instance can follow it if this one stops), then its events. ``hidden``:
    the stage's list of ids to mask (the run's id goes in it)."""

    def __init__(
        self, st: GatewayState, rec: RunRecord, body: dict[str, Any], pid: str, hidden: list[str]
    ) -> None:
        self.st = st
        self.rec = rec
        self.body = body
        self.pid = pid
        self.hidden = hidden
        self.upstream_id: str | None = None

    async def open(self) -> StreamResponse:
        st, pid = self.st, self.pid
        with native_route():
            answer = await st.upstream.request_json("POST", "/runs", pid, body=self.body)
        del self.body  # (not held for the run's length)
        uid = check_id(answer.data.get("run_id"))
        if uid is None:
            raise UpstreamError(
                "The upstream agent started a run but gave no run id that can be followed.",
                code="upstream_bad_response",
            )
        self.upstream_id = uid
        self.hidden.append(uid)
        await st.runs.note_upstream(self.rec, uid)
        with about_upstream(uid, "run"):
            return await st.upstream.open_sse("GET", f"/runs/{uid}/events", pid, route=False)

    async def ended(self, outcome: object) -> None:
        """The run ended here: unless it completed, stop it upstream too (a stop, a
        drain, a log that is full, an error of ours: the agent must not go on)."""
        if outcome != "completed" and self.upstream_id is not None:
            await stop_upstream_run(self.st, self.upstream_id, self.pid)


async def stop_upstream_run(st: GatewayState, upstream_id: str, pid: str) -> None:
    with trio.move_on_after(CLEANUP_SECONDS):
        try:
            await st.upstream.request_json("POST", f"/runs/{upstream_id}/stop", pid, route=False)
        except GatewayError as exc:
            log.info("run %s: not stopped upstream (%s)", upstream_id, exc.code)


# -- runs adopted from an instance that stopped -----------------------------------------


def adopted_runs(
    st: GatewayState,
    start: Callable[..., None],
    summarize: Callable[[list[dict[str, Any]]], dict[str, Any]],
) -> Callable[[list[RunRecord]], None]:
    """The lease watcher's ``follow``: each adopted run followed to its end upstream."""

    def follow(recs: list[RunRecord]) -> None:
        for rec in recs:
            watch = _watcher(st)
            start(st.runs.follow_adopted, rec, watch, summarize)

    return follow


def _watcher(
    st: GatewayState,
) -> Callable[[RunRecord, Any], Awaitable[tuple[list[dict[str, Any]], Any]]]:
    async def watch(rec: RunRecord, local: Any) -> tuple[list[dict[str, Any]], Any]:
        uid = str(rec.summary["upstream_run_id"])
        pid = st.signer.principal_id(rec.owner)
        front = RunEncoder(rec.id, rec.model, first_seq=rec.last_seq + 1)
        resolver = st.resolver(rec.owner, rec.link_mode)
        before = await trio.to_thread.run_sync(_journaled, st, rec, resolver)
        stage = runs_pipeline(st, resolver)
        stage.hidden.append(uid)
        state: dict[str, Any] | None = None
        with local.opening:  # a stop asked meanwhile cancels the wait
            state = await _wait_upstream_end(st, uid, pid)
        if local.stop_requested:
            await stop_upstream_run(st, uid, pid)
            return front.cancel([], stage.manifest()), CANCELLED
        return await _last_events(stage, front, state, before)

    return watch


async def _wait_upstream_end(st: GatewayState, uid: str, pid: str) -> dict[str, Any] | None:
    """The upstream run's state once it ended; None when the upstream no longer knows
    it (restarted, or kept it for less long than the gateway needed)."""
    failures = 0
    while True:
        try:
            answer = await st.upstream.request_json("GET", f"/runs/{uid}", pid, route=False)
        except NotFound:
            return None
        except GatewayError as exc:
            if getattr(exc, "status", 0) == 404:
                return None
            failures += 1
            if failures * POLL_SECONDS > st.config.upstream.idle_timeout_seconds:
                return None
        else:
            failures = 0
            if answer.data.get("status") in ("completed", "failed", "cancelled"):
                return answer.data
        await trio.sleep(POLL_SECONDS)


def _journaled(st: GatewayState, rec: RunRecord, resolver: LinkResolver) -> str:
    """The text the run's earlier instance journaled (blocking): the adopting
    ``resolver`` starts from the links in it (the client holds them already)."""
    texts: list[str] = []
    after = 0
    while batch := st.store.read_run_events(rec.id, after):
        after = int(batch[-1]["seq"])
        texts += [e["delta"] for e in batch if e.get("event") == "message.delta"]
    text = "".join(t for t in texts if isinstance(t, str))
    if isinstance(resolver, ResponseLinks):
        pattern = link_pattern(st.config.server.public_base_url)
        ids = {m.group("id") or m.group("bare") for m in pattern.finditer(text)}
        records = [st.store.get_artifact(i) for i in sorted(ids)]
        resolver.adopt(r for r in records if r is not None and r.owner == rec.owner)
    return text


async def _last_events(
    stage: RunEventsPipeline, front: RunEncoder, state: dict[str, Any] | None, before: str
) -> tuple[list[dict[str, Any]], Any]:
    """The journal's last events for an adopted run's upstream end (its output, the
    files in it and the ones it reported, the manifest). ``before``: the text the
    earlier instance journaled; only what the output holds beyond it is a delta."""
    if state is None:
        error: GatewayError = RunInterrupted()
        return front.fail(await stage.finish(failed=True), error, stage.manifest()), error
    status = state.get("status")
    if status == "cancelled":
        return front.cancel(await stage.finish(failed=True), stage.manifest()), CANCELLED
    data = {"event": "run.completed", "output": state.get("output"), "usage": state.get("usage")}
    if status == "failed":
        data = {"event": "run.failed", "error": state.get("error")}
    step = await stage.feed([SSEEvent(json.dumps(data))])
    if step.error is not None:
        events = step.events + await stage.finish(failed=True)
        return front.fail(events, step.error, stage.manifest()), step.error
    events, had = continued(step.events + await stage.finish(), before)
    front.output.insert(0, had)
    return front.end(events, stage.manifest()), None


def continued(events: list[Event], before: str) -> tuple[list[Event], str]:
    """``events`` (an adopted run's whole answer) after the text ``before`` the client
    has already, and the text they continue: the answer's text becomes what it holds
    beyond ``before``; when it does not begin with ``before`` (a path the earlier
    instance named before its file existed is a link now) nothing more is a delta and
    ``run.completed``'s ``output`` alone has the answer, whole (never the text twice)."""
    whole = "".join(e.text for e in events if _answer_text(e))
    if not whole.startswith(before):
        return [e for e in events if not _answer_text(e)], whole
    rest = whole[len(before) :]
    out: list[Event] = []
    for ev in events:
        if not _answer_text(ev):
            out.append(ev)
        elif rest:
            out.append(Text(0, "content", rest))
            rest = ""
    return out, before


def _answer_text(ev: Event) -> TypeGuard[Text]:
    return type(ev) is Text and ev.choice == 0 and ev.channel == "content"
