"""The proxy's front: neutral events → chat chunks shaped for Open WebUI (sans-IO).

Open WebUI 0.12.4 splits the stream on LF, JSON-parses each ``data:`` line alone and
acts on chunk keys besides ``choices`` (an ``event`` key is a UI event; one of type
``execute`` runs JavaScript; ``tool_calls`` make it call tools itself): this front
writes only ``choices`` chunks with text, the terminal chunk with ``usage`` and the
``gateway`` manifest, and — when the proxy delivered the answer's files into Open
WebUI's own file store (:class:`~gateway.core.events.Attachments`) — exactly one ``files``
event (the frontend replaces the message's file list with each event's list while the
socket handler appends the stored ones: one event avoids both duplicates and losses).
Named upstream events and tool calls are not relayed.

In private mode, when links were minted and not delivered as files, one short note
says the truth about them: they open only for this user, in the browser where they are
signed in to Open WebUI, and each file has a share link that makes a public one.
"""

from __future__ import annotations

import re
import secrets
import time
from typing import Any

from gateway.core.errors import GatewayError
from gateway.core.events import Attachments, Event, Extra, Meta, Role, Text, ToolCall, ToolProgress
from gateway.core.rewrite import md_escape
from gateway.core.sse import encode_json
from gateway.fronts.chat import ChatEncoder

__all__ = ["NOTE_PATTERN", "OpenWebUIEncoder", "ends_with_note", "private_note"]

NOTE_START = "\n\n_These links open only for you"
#: the note in a conversation sent back (the gateway removes it before the upstream)
NOTE_PATTERN = re.compile(re.escape(NOTE_START) + r"[^\n]*_")


def ends_with_note(messages: list[Any]) -> bool:
    """Whether the conversation's last message is an answer of ours that ends with the
    note: Open WebUI's "Continue Response" appends the new text to it."""
    last = messages[-1] if messages else None
    if not isinstance(last, dict) or last.get("role") != "assistant":
        return False
    content = last.get("content")
    if not isinstance(content, str):
        return False
    text = content.rstrip()
    start = text.rfind(NOTE_START)
    return start >= 0 and NOTE_PATTERN.fullmatch(text, start) is not None


def _share_url(url: str) -> str:
    return url.split("?", 1)[0] + "/share"


def private_note(artifacts: list[dict[str, Any]]) -> str:
    """The note under a private answer: true about the links, and a working way to share."""
    shares = ", ".join(
        f"[{md_escape(a['filename'])}]({_share_url(a['url'])})" for a in artifacts[:10]
    )
    return (
        f"{NOTE_START}, in the browser where you are signed in to Open WebUI. "
        f"To share a file, make a public link: {shares}._"
    )


class OpenWebUIEncoder(ChatEncoder):
    """A chat stream for Open WebUI: no named events or tool calls, a note, ``files``."""

    def __init__(self, model: str, mode: str, *, after_note: bool = False) -> None:
        super().__init__(relay_named=False, usage_on_finish=True, keep_text=False)
        #: the answer continues a message that ends with a note ("Continue Response"):
        #: Open WebUI appends to it, so the new text starts a paragraph of its own
        self.after_note = after_note
        self.meta = Meta(
            id="chatcmpl-" + secrets.token_hex(12), created=int(time.time()), model=model
        )
        self.mode = mode
        self.files: list[dict[str, Any]] = []

    def start(self) -> bytes:
        lead = "\n\n" if self.after_note else ""
        return self.encode([Role(0, "assistant"), Text(0, "content", lead)])

    def encode(self, events: list[Event]) -> bytes:
        kept: list[Event] = []
        status: list[bytes] = []
        for e in events:
            if isinstance(e, Attachments):
                self.files.extend(e.files)
            elif type(e) is ToolProgress:
                status.append(self._status(e))
            elif type(e) is not Meta and type(e) is not ToolCall and type(e) is not Extra:
                # the model is the one Open WebUI asked for, whatever the gateway reports;
                # no operator extra keys either (Open WebUI acts on chunk keys besides
                # choices)
                kept.append(e)
        return super().encode(kept) + b"".join(status)

    def _status(self, ev: ToolProgress) -> bytes:
        """An Open WebUI ``status`` event (shown above the answer while it runs): the
        tool's name and what it works on (names only: the proxy's stage rewrote it)."""
        what = f"{ev.name}: {ev.preview}" if ev.preview else ev.name
        data = {"description": what[:200], "done": ev.status != "started"}
        chunk = {
            "id": self.meta.id,
            "object": "chat.completion.chunk",
            "created": self.meta.created,
            "model": self.meta.model,
            "choices": [],
            "event": {"type": "status", "data": data},
        }
        return encode_json(chunk)

    def _footer(self, manifest: dict[str, Any]) -> list[Event]:
        artifacts = manifest.get("artifacts") or []
        if self.mode == "private" and artifacts and not self.files:
            return [Text(0, "content", private_note(artifacts))]
        return []

    def _files_event(self) -> bytes:
        if not self.files:
            return b""
        chunk = {
            "id": self.meta.id,
            "object": "chat.completion.chunk",
            "created": self.meta.created,
            "model": self.meta.model,
            "choices": [],
            "event": {"type": "files", "data": {"files": self.files}},
        }
        return encode_json(chunk)

    def end(self, events: list[Event], manifest: dict[str, Any]) -> bytes:
        body = self.encode(events)  # takes the Attachments out first
        return body + self._files_event() + super().end(self._footer(manifest), manifest)

    def fail(self, events: list[Event], error: GatewayError, manifest: dict[str, Any]) -> bytes:
        return super().fail([e for e in events if type(e) is not Attachments], error, manifest)
