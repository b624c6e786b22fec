"""The proxy's front: neutral events → chat chunks shaped for Open WebUI (sans-IO).

Open WebUI 0.12.4 splits the stream on LF, JSON-parses each ``data:`` line alone and
acts on chunk keys besides ``choices`` (an ``event`` key is a UI event; one of type
``execute`` runs JavaScript): this front writes only ``choices`` chunks, the terminal
chunk with ``usage`` and the ``gateway`` manifest, and — when the proxy delivered the
answer's files into Open WebUI's own file store — exactly one ``files`` event per
message (the frontend replaces the message's file list with each event's list while
the socket handler appends the stored ones: one event avoids both duplicates and
losses). Named upstream events are not relayed. In private mode, when links were
minted, one short note explains them.
"""

from __future__ import annotations

import secrets
import time
from typing import Any

from gateway.errors import GatewayError
from gateway.events import Event, Extra, Meta, Role, Text
from gateway.fronts.chat import ChatEncoder
from gateway.sse import encode_json

__all__ = ["PRIVATE_NOTE", "OpenWebUIEncoder"]

PRIVATE_NOTE = (
    "\n\n_These download links open only for you. "
    "Ask for a public link if you want to share a file._"
)


class OpenWebUIEncoder(ChatEncoder):
    """A chat stream for Open WebUI: no named events, a note, a ``files`` event."""

    def __init__(self, model: str, mode: str) -> None:
        super().__init__(relay_named=False, usage_on_finish=True)
        self.meta = Meta(
            id="chatcmpl-" + secrets.token_hex(12), created=int(time.time()), model=model
        )
        self.mode = mode
        #: set by the proxy's stage when the answer's files were stored in Open WebUI
        self.files: list[dict[str, Any]] | None = None

    def start(self) -> bytes:
        return self.encode([Role(0, "assistant"), Text(0, "content", "")])

    def encode(self, events: list[Event]) -> bytes:
        # the model is the one Open WebUI asked for, whatever the gateway reports; no
        # operator extra keys either (Open WebUI acts on chunk keys besides choices)
        return super().encode([e for e in events if type(e) is not Meta and type(e) is not Extra])

    def _footer(self, manifest: dict[str, Any]) -> list[Event]:
        if self.mode == "private" and manifest.get("artifacts") and not self.files:
            return [Text(0, "content", PRIVATE_NOTE)]
        return []

    def end(self, events: list[Event], manifest: dict[str, Any]) -> bytes:
        head = b""
        if self.files:
            head = encode_json({"event": {"type": "files", "data": {"files": self.files}}})
        return head + super().end([*events, *self._footer(manifest)], manifest)

    def fail(self, events: list[Event], error: GatewayError, manifest: dict[str, Any]) -> bytes:
        return super().fail(events, error, manifest)
