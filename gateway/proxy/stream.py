"""The proxy's stream: the gateway's run events → neutral events, through the one relay.

* :class:`RemoteRunSource` reads ``GET /v1/runs/{id}/events`` from the gateway (SSE),
  resumes with ``Last-Event-ID`` after a broken connection (a few tries with backoff),
  drops events it has already seen, and — when the client leaves before the run ended
  — stops the run on the gateway.
* :class:`RunEventStage` turns run events into neutral events with its own name-only
  rewriter (defence in depth: a gateway bug still cannot leak a path through the
  proxy), takes the manifest from ``run.completed`` (checked field by field) and turns
  ``run.failed`` / ``run.cancelled`` into the error that ends the stream (after the
  text that came before it).
"""

from __future__ import annotations

import contextlib
import json
import re
import urllib.parse
from dataclasses import dataclass
from typing import Any

import httpx
import trio

from gateway.clients.httpclient import report
from gateway.clients.sources import abandon
from gateway.clients.upstream import retry_after_seconds
from gateway.core.checks import check_name, check_usage, loads_bounded
from gateway.core.errors import GatewayError, UpstreamError, UpstreamHTTPError
from gateway.core.events import Attachments, Event, Text, ToolProgress, Usage
from gateway.core.paths import DEFAULT_MAX_PATH_CHARS
from gateway.core.rewrite import StreamRewriter, rewrite
from gateway.core.sse import SSEDecoder
from gateway.proxy.delivery import Delivery

__all__ = ["RemoteRunSource", "RunEventStage", "gateway_down", "gateway_error"]

_CODE = re.compile(r"[a-z][a-z0-9_]{0,63}")
#: an artifact id: random base64url (it may start with - or _)
_ARTIFACT_ID = re.compile(r"[A-Za-z0-9_-]{16,64}")


def _message(err: dict[str, Any], default: str) -> str:
    """An error's message when it is a string (the repr of anything else doubles its
    backslashes: a path in it would be read one JSON level too deep), else ``default``.
    Callers rewrite it whole and then cut it: a path cut short keeps a folder as name."""
    message = err.get("message")
    return message if isinstance(message, str) and message else default


def gateway_down(base_url: object, exc: BaseException) -> UpstreamError:
    """502 ``gateway_unreachable`` naming the gateway's URL (``proxy.gateway_url``,
    without credentials), logged once per URL every minute with the cause."""
    parts = urllib.parse.urlsplit(str(base_url))
    url = urllib.parse.urlunsplit(parts._replace(netloc=parts.netloc.rpartition("@")[2]))
    err = UpstreamError(
        f"The artifact gateway behind this proxy ({url}) is not answering; check that "
        "`gateway run` is up there, or proxy.gateway_url.",
        code="gateway_unreachable",
    )
    report(err, url, f"{type(exc).__name__}: {exc}"[:300])
    return err


async def gateway_error(resp: httpx.Response, scrub: Any = rewrite) -> GatewayError:
    """The gateway's error answer as an error of the proxy (its key refused → 502)."""
    if resp.status_code in (401, 403):
        # The gateway refused *our* key (or its assertions): passing its 401 on would
        # tell Open WebUI that its own connection key is wrong.
        return UpstreamError(
            "The artifact gateway refused this proxy's key; check that proxy.gateway_key "
            'is a role = "proxy" key in the gateway\'s [[auth.keys]].',
            code="gateway_auth_failed",
        )
    err: dict[str, Any] = {}
    with contextlib.suppress(ValueError, httpx.HTTPError):
        data = loads_bounded(await resp.aread(), 16)
        if isinstance(data, dict) and isinstance(data.get("error"), dict):
            err = data["error"]
    raw_code = err.get("code")
    code = raw_code if isinstance(raw_code, str) and _CODE.fullmatch(raw_code) else ""
    code = code or f"gateway_http_{resp.status_code}"
    message = scrub(_message(err, "The gateway refused the request."))[:500]
    status = resp.status_code if 400 <= resp.status_code < 500 else 502
    # a quota refusal (429) or an overload (503) keeps its Retry-After for Open WebUI
    retry_after = retry_after_seconds(resp.headers.get("Retry-After"))
    return UpstreamHTTPError(message, code=code, status=status, retry_after=retry_after)


class RemoteRunSource:
    """A run's events from the gateway, resumed after a broken connection."""

    def __init__(
        self,
        client: httpx.AsyncClient,
        run_id: str,
        headers: dict[str, str],
        *,
        max_failures: int = 3,
        max_event_bytes: int = 1 << 20,
        scrub: Any = rewrite,
    ) -> None:
        self._client = client
        self._run_id = run_id
        self._headers = headers
        self._max_failures = max_failures
        self._max_event_bytes = max_event_bytes
        self._scrub = scrub
        self._resp: httpx.Response | None = None
        self._chunks: Any = None
        self._decoder = SSEDecoder(max_event_bytes=max_event_bytes)
        self.last_seq = 0
        self.ended = False  # the terminal event was seen
        self._failures = 0

    async def _open(self) -> None:
        req = self._client.build_request(
            "GET",
            f"/v1/runs/{self._run_id}/events",
            headers={**self._headers, "Last-Event-ID": str(self.last_seq)},
        )
        try:
            resp = await self._client.send(req, stream=True)
        except httpx.HTTPError as exc:
            raise gateway_down(self._client.base_url, exc) from exc
        if resp.status_code != 200:
            try:
                raise await gateway_error(resp, self._scrub)
            finally:
                await resp.aclose()
        self._resp = resp
        self._chunks = resp.aiter_raw()
        self._decoder = SSEDecoder(max_event_bytes=self._max_event_bytes)

    async def _broken(self, why: str) -> None:
        await self._close_response()
        self._failures += 1
        if self._failures >= self._max_failures:
            raise UpstreamError(why, code="gateway_disconnected")
        await trio.sleep(0.2 * self._failures)

    async def read(self) -> list[dict[str, Any]] | None:
        while True:
            if self.ended:
                return None
            if self._resp is None:
                try:
                    await self._open()
                except UpstreamError:
                    await self._broken("The artifact gateway could not be reached again.")
                    continue
            try:
                data = await self._chunks.__anext__()
            except StopAsyncIteration:
                await self._broken("The artifact gateway ended the stream early.")
                continue
            except httpx.HTTPError:
                await self._broken(
                    "The connection to the artifact gateway broke and could not be resumed."
                )
                continue
            return self._events(data)

    def _events(self, data: bytes) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = []
        for ev in self._decoder.feed(data):
            try:
                obj = loads_bounded(ev.data, 64)
            except ValueError:
                continue
            seq = obj.get("seq") if isinstance(obj, dict) else None
            if not isinstance(seq, int) or seq <= self.last_seq:
                continue
            self.last_seq = seq
            out.append(obj)
            if obj.get("event") in ("run.completed", "run.failed", "run.cancelled"):
                self.ended = True
                break
        return out

    async def _close_response(self) -> None:
        resp, self._resp = self._resp, None
        chunks, self._chunks = self._chunks, None
        if chunks is not None:
            await abandon(chunks)
        if resp is not None:
            with trio.move_on_after(2) as scope:
                scope.shield = True
                with contextlib.suppress(Exception):
                    await resp.aclose()

    async def aclose(self) -> None:
        await self._close_response()
        if not self.ended:
            self.ended = True
            with trio.move_on_after(2) as scope:  # the client left: stop the run
                scope.shield = True
                with contextlib.suppress(httpx.HTTPError):
                    await self._client.post(f"/v1/runs/{self._run_id}/stop", headers=self._headers)


@dataclass
class Step:
    """What run events became; ``error`` when the run failed or was cancelled (the
    events before it in the same read still go out)."""

    events: list[Event]
    done: bool = False
    error: GatewayError | None = None


def _artifact_url(url: str, artifact_id: str) -> bool:
    """An http(s) URL of the gateway's download route for this artifact (no credentials)."""
    try:
        parts = urllib.parse.urlsplit(url)
    except ValueError:
        return False
    return (
        parts.scheme in ("http", "https")
        and bool(parts.hostname)
        and "@" not in parts.netloc
        and parts.path.endswith(f"/v1/artifacts/{artifact_id}")
    )


def _manifest_entry(a: Any, base_url: str, scrub: Any) -> dict[str, Any] | None:
    if not isinstance(a, dict):
        return None
    url, artifact_id, size = a.get("url"), a.get("id"), a.get("bytes")
    if not isinstance(artifact_id, str) or not _ARTIFACT_ID.fullmatch(artifact_id):
        return None
    if not isinstance(url, str) or not _artifact_url(url, artifact_id):
        return None
    if not isinstance(size, int) or isinstance(size, bool):
        return None
    mode = a.get("link_mode") if a.get("link_mode") in ("private", "public") else "private"
    filename = a.get("filename")
    name = scrub(filename if isinstance(filename, str) and filename else "file")[:255]
    return {"id": artifact_id, "filename": name, "url": url, "link_mode": mode, "bytes": size}


class RunEventStage:
    """Run events → neutral events (name-only rewriting); done at ``run.completed``."""

    def __init__(
        self,
        mode: str,
        *,
        base_url: str,
        extra_roots: tuple[str, ...] = (),
        max_path_chars: int = DEFAULT_MAX_PATH_CHARS,
        delivery: Delivery | None = None,
    ) -> None:
        self.mode = mode
        self.delivery = delivery
        self.base_url = base_url.rstrip("/")
        self._roots = extra_roots
        self._limit = max_path_chars
        self._rw = StreamRewriter(extra_roots=extra_roots, max_path_chars=max_path_chars)
        self._manifest: dict[str, Any] = {"download_link_mode": mode, "artifacts": []}
        self.text: list[str] = []

    @property
    def held_chars(self) -> int:
        return self._rw.held_chars

    def scrub(self, text: str) -> str:
        return rewrite(text, extra_roots=self._roots, max_path_chars=self._limit)

    async def feed(self, item: list[dict[str, Any]]) -> Step:
        events: list[Event] = []
        for ev in item:
            kind = ev.get("event")
            if kind == "message.delta" and isinstance(ev.get("delta"), str):
                text = self._rw.feed(ev["delta"])
                if text:
                    self.text.append(text)
                    events.append(Text(0, "content", text))
            elif kind in ("tool.started", "tool.completed"):
                progress = self._progress(ev)
                if progress is not None:
                    events.append(progress)
            elif kind == "run.completed":
                self._take_manifest(ev.get("gateway"))
                usage = check_usage(ev.get("usage"))
                if usage is not None:
                    events.append(Usage(usage))
                if self.delivery is not None and self._manifest["artifacts"]:
                    files = await self.delivery.all(self._manifest)
                    if files:
                        events.append(Attachments(tuple(files)))
                return Step(events, done=True)
            elif kind in ("run.failed", "run.cancelled"):
                self._take_manifest(ev.get("gateway"))
                return Step(events, error=self._error(ev))
        return Step(events)

    def _progress(self, ev: dict[str, Any]) -> ToolProgress | None:
        """The agent's tool starting or done (its name checked, its preview names only)."""
        name = check_name(ev.get("name"))
        call = ev.get("tool_call_id")
        if name is None or not isinstance(call, str) or not call.startswith("tool_"):
            return None  # a tool call the model asked the client to make: not shown
        index = call[5:]
        if not (index.isascii() and index.isdigit() and len(index) < 6):
            return None
        preview = ev.get("preview")
        text = self.scrub(preview)[:200] if isinstance(preview, str) else ""
        if ev.get("event") == "tool.started":
            return ToolProgress(int(index), name, "started", text)
        return ToolProgress(int(index), name, "failed" if ev.get("error") is True else "completed")

    def _take_manifest(self, value: Any) -> None:
        arts = value.get("artifacts") if isinstance(value, dict) else None
        entries = [_manifest_entry(a, self.base_url, self.scrub) for a in arts or ()]
        self._manifest = {
            "download_link_mode": self.mode,
            "artifacts": [e for e in entries if e is not None],
        }

    def _error(self, ev: dict[str, Any]) -> GatewayError:
        if ev.get("event") == "run.cancelled":
            return GatewayError("The run was stopped.", code="run_cancelled", status=499)
        raw = ev.get("error")
        err: dict[str, Any] = raw if isinstance(raw, dict) else {}
        raw_code = err.get("code")
        code = raw_code if isinstance(raw_code, str) and _CODE.fullmatch(raw_code) else "run_failed"
        message = self.scrub(_message(err, "The run failed."))[:500]
        return GatewayError(message, code=code, status=502)

    async def finish(self, *, failed: bool = False) -> list[Event]:
        rest = self._rw.flush()
        if rest:
            self.text.append(rest)
            return [Text(0, "content", rest)]
        return []

    def manifest(self) -> dict[str, Any]:
        return self._manifest


def decode_json(data: bytes) -> Any:
    return json.loads(data)
