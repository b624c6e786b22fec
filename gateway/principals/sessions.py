"""Principal-scoped conversations kept in the store.

A request that names a session (``X-Session-Id`` header, or body ``session_id``)
has the session's earlier messages put before its own, and after a successful
answer its new messages plus the assistant's *rewritten* reply are appended (so a
stored conversation never holds a raw path). Sessions are keyed by
(principal, session id): the same id string under another principal is another,
invisible session (404).

A session keeps its newest messages only: at most :data:`MAX_MESSAGES`, and at most
``limits.history_max_bytes`` of them as JSON (:func:`trim_history`, oldest dropped
first; one message larger than that is not kept), so one small turn never sends the
upstream more than that bound of history.
"""

from __future__ import annotations

import json
import re
import time
from typing import Any

import trio

from gateway.core.errors import NotFound, RequestError
from gateway.store import Store

__all__ = [
    "KIND",
    "MAX_MESSAGES",
    "Sessions",
    "message_bytes",
    "session_id_from",
    "trim_history",
    "validate_session_id",
]

KIND = "session"
MAX_MESSAGES = 500
_SESSION_RE = re.compile(r"[A-Za-z0-9._:-]{1,128}")


def validate_session_id(value: object) -> str:
    if not isinstance(value, str) or not _SESSION_RE.fullmatch(value):
        raise RequestError(
            "A session id must be 1-128 characters of A-Z a-z 0-9 . _ : -.",
            code="invalid_session_id",
        )
    return value


def session_id_from(headers_value: str | None, body: dict[str, Any]) -> str | None:
    value: object = headers_value if headers_value is not None else body.get("session_id")
    if value is None:
        return None
    return validate_session_id(value)


def message_bytes(message: object) -> int:
    """A message's weight: its compact JSON, as the store keeps it."""
    return len(json.dumps(message, separators=(",", ":"), default=str))


def trim_history(
    messages: list[dict[str, Any]], max_bytes: int, max_messages: int = MAX_MESSAGES
) -> list[dict[str, Any]]:
    """The newest messages that fit in ``max_bytes`` and ``max_messages`` (a suffix)."""
    kept: list[dict[str, Any]] = []
    total = 0
    for m in reversed(messages[-max_messages:]):
        total += message_bytes(m)
        if total > max_bytes:
            break
        kept.append(m)
    kept.reverse()
    return kept


class Sessions:
    def __init__(self, store: Store, *, max_bytes: int = 1 << 20) -> None:
        self.store = store
        self.max_bytes = max_bytes

    async def history(self, owner: str, sid: str) -> list[dict[str, Any]]:
        doc = await trio.to_thread.run_sync(self.store.get_json, KIND, owner, sid)
        if doc is None:
            return []
        messages = doc.get("messages")
        return list(messages) if isinstance(messages, list) else []

    async def append(
        self, owner: str, sid: str, new: list[dict[str, Any]], assistant_text: str
    ) -> None:
        # one atomic read-modify-write in the store (a row lock across instances): two
        # turns finishing together in one session both land, on any instance
        def add(doc: dict[str, Any] | None) -> dict[str, Any]:
            now = time.time()
            doc = dict(doc) if doc is not None else {"id": sid, "created": now, "messages": []}
            messages = [
                *doc.get("messages", []),
                *new,
                {"role": "assistant", "content": assistant_text},
            ]
            doc["messages"] = trim_history(messages, self.max_bytes)
            doc["updated"] = now
            return doc

        await trio.to_thread.run_sync(lambda: self.store.update_json(KIND, owner, sid, add))

    async def list(self, owner: str) -> list[dict[str, Any]]:
        rows = await trio.to_thread.run_sync(self.store.list_json, KIND, owner)
        return [
            {
                "id": key,
                "object": "session",
                "created": int(doc.get("created", 0)),
                "updated": int(doc.get("updated", 0)),
                "message_count": len(doc.get("messages", [])),
            }
            for key, doc in rows
        ]

    async def get(self, owner: str, sid: str) -> dict[str, Any]:
        doc = await trio.to_thread.run_sync(self.store.get_json, KIND, owner, sid)
        if doc is None:
            raise NotFound("No such session, or it is not yours.", code="session_not_found")
        return {"object": "session", **doc}

    async def delete(self, owner: str, sid: str) -> None:
        ok = await trio.to_thread.run_sync(self.store.delete_json, KIND, owner, sid)
        if not ok:
            raise NotFound("No such session, or it is not yours.", code="session_not_found")
