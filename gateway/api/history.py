"""Requests going upstream: the requester's own links become the paths they came from.

A conversation sent back on the next turn holds the gateway's managed-download links
(and, through the proxy, the gateway's notes) instead of the paths the agent wrote, so
"zip that report" could not work. Before a request goes upstream every link of *this
requester's* artifacts (``{public_base_url}/v1/artifacts/<id>``, with or without a
public signature) is replaced by the path as the agent knows it (a mount's agent
prefix again, not the host directory), a markdown link ``[name](link)`` by the path
alone, and the gateway's own notes are removed. Links of other owners, revoked links
and unknown ids are left as they are: the requester cannot learn another owner's path.
"""

from __future__ import annotations

import functools
import re
from typing import TYPE_CHECKING, Any

import trio

from gateway.fronts.openwebui import NOTE_PATTERN

if TYPE_CHECKING:
    from gateway.api.state import GatewayState

__all__ = ["GATEWAY_NOTES", "prepare_messages"]

#: notes the gateway or the proxy appends to answers; removed from history
GATEWAY_NOTES: tuple[re.Pattern[str], ...] = (NOTE_PATTERN,)


@functools.lru_cache(maxsize=8)  # one base URL per server: built once, not per request
def link_pattern(base_url: str) -> re.Pattern[str]:
    base = re.escape(base_url.rstrip("/"))
    # a share page's URL is the file's too (".../share", in a note or pasted)
    url = base + r"/v1/artifacts/(?P<id>[A-Za-z0-9_-]{16,64})(?:/share)?(?:\?[^\s)\]>\"'`]*)?"
    return re.compile(
        r"\[(?:[^\[\]\n]|\\[\[\]]){0,300}\]\(<?"
        + f"(?P<md>{url})"
        + r">?\)|"
        + url.replace("?P<id>", "?P<bare>")
    )


async def prepare_messages(
    st: GatewayState, owner: str, messages: list[dict[str, Any]]
) -> list[dict[str, Any]]:
    """``messages`` with ``owner``'s links mapped back to agent paths, notes removed."""
    pattern = link_pattern(st.config.server.public_base_url)
    ids: set[str] = set()
    for m in messages:
        for text in _texts(m.get("content")):
            for match in pattern.finditer(text):
                ids.add(match.group("id") or match.group("bare"))
    if not ids and not any(_has_note(m) for m in messages):
        return messages
    paths = await trio.to_thread.run_sync(_own_paths, st, owner, ids)
    return [_rewrite_message(m, pattern, paths) for m in messages]


def _own_paths(st: GatewayState, owner: str, ids: set[str]) -> dict[str, str]:
    out: dict[str, str] = {}
    for artifact_id in ids:
        rec = st.store.get_artifact(artifact_id)
        if rec is not None and rec.owner == owner and not rec.revoked:
            out[artifact_id] = st.artifacts.agent_path(rec.path)
    return out


def _texts(content: Any) -> list[str]:
    if isinstance(content, str):
        return [content]
    if isinstance(content, list):
        return [
            p["text"] for p in content if isinstance(p, dict) and isinstance(p.get("text"), str)
        ]
    return []


def _has_note(m: dict[str, Any]) -> bool:
    return any(note.search(text) for text in _texts(m.get("content")) for note in GATEWAY_NOTES)


def _rewrite_text(text: str, pattern: re.Pattern[str], paths: dict[str, str]) -> str:
    def sub(match: re.Match[str]) -> str:
        artifact_id = match.group("id") or match.group("bare")
        path = paths.get(artifact_id)
        return match.group(0) if path is None else path

    # first the notes, in any role: Open WebUI's title, tag and follow-up prompts quote
    # the chat history (notes included) inside a user message
    for note in GATEWAY_NOTES:
        text = note.sub("", text)
    if paths:
        text = pattern.sub(sub, text)
    return text


def _rewrite_message(
    m: dict[str, Any], pattern: re.Pattern[str], paths: dict[str, str]
) -> dict[str, Any]:
    content = m.get("content")
    if isinstance(content, str):
        return {**m, "content": _rewrite_text(content, pattern, paths)}
    if isinstance(content, list):
        parts = [
            {**p, "text": _rewrite_text(p["text"], pattern, paths)}
            if isinstance(p, dict) and isinstance(p.get("text"), str)
            else p
            for p in content
        ]
        return {**m, "content": parts}
    return m
