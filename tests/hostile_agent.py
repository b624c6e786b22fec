"""A scriptable hostile agent shaped like Hermes's API server, for in-process attacks:
every route answers what the test says (the gateway's upstream client is given this
httpx transport); the capabilities document announces the native APIs."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import httpx

from harness.transport import Scripted, ScriptedTransport

UPSTREAM_SECRET_RESP = "resp_UPSTREAMSECRET0123456789"
UPSTREAM_SECRET_RUN = "run_UPSTREAMSECRET0123456789"

CAPABILITIES = {
    "object": "hermes.api_server.capabilities",
    "features": {
        f: True
        for f in (
            "responses_api",
            "responses_streaming",
            "run_submission",
            "run_events_sse",
            "run_stop",
        )
    },
}
JSON = {"content-type": "application/json"}


def sse(*events: tuple[str, dict[str, Any]] | dict[str, Any]) -> bytes:
    out = b""
    for ev in events:
        name, obj = ev if isinstance(ev, tuple) else ("", ev)
        head = f"event: {name}\n" if name else ""
        out += f"{head}data: {json.dumps(obj)}\n\n".encode()
    return out


def js(obj: Any, status: int = 200) -> Scripted:
    return Scripted([json.dumps(obj).encode()], status=status, headers=JSON)


Handler = Callable[[httpx.Request], Scripted | None]


class HostileAgent:
    """Routes (``"POST /v1/runs"``, ``"GET /v1/runs/*/events"`` ...) → handlers; the
    capabilities document is served unless a handler overrides it."""

    def __init__(self) -> None:
        self.routes: dict[str, Handler] = {}
        self.transport = ScriptedTransport(self._answer)

    @property
    def requests(self) -> list[httpx.Request]:
        return self.transport.requests

    def on(self, route: str, handler: Handler | Scripted) -> None:
        self.routes[route] = handler if callable(handler) else (lambda _r, s=handler: s)

    def _answer(self, req: httpx.Request) -> Scripted:
        path = req.url.path
        parts = path.split("/")
        keys = [f"{req.method} {path}"]
        if len(parts) >= 4:  # /v1/runs/<id>[/events]
            wild = "/".join([*parts[:3], "*", *parts[4:]])
            keys.append(f"{req.method} {wild}")
        for key in keys:
            h = self.routes.get(key)
            if h is not None:
                got = h(req)
                if got is not None:
                    return got
        if path.endswith("/capabilities"):
            return js(CAPABILITIES)
        if path.endswith("/models"):
            return js({"object": "list", "data": [{"id": "agent", "object": "model"}]})
        return js({"error": {"message": "no such route", "code": "not_found"}}, 404)


def run_started(uid: str = UPSTREAM_SECRET_RUN) -> Scripted:
    return js({"run_id": uid, "status": "started"}, 202)


def responses_ok(text: str, uid: str = UPSTREAM_SECRET_RESP) -> bytes:
    resp = {"id": uid, "object": "response", "status": "completed", "output": []}
    return sse(
        (
            "response.created",
            {"type": "response.created", "response": {**resp, "status": "in_progress"}},
        ),
        ("response.output_text.delta", {"type": "response.output_text.delta", "delta": text}),
        ("response.completed", {"type": "response.completed", "response": resp}),
    )
