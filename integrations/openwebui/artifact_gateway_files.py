"""
title: Artifact gateway files
author: artifact-gateway
version: 0.1.0
license: MIT
description: Stores the files of an artifact-gateway answer in Open WebUI under the user who asked (file tiles, protected by Open WebUI's login), fetched server to server; the user's token never leaves Open WebUI.
"""

# An Open WebUI *filter* Function, for deployments where Open WebUI must not forward the
# user's session to the runs proxy (so the proxy cannot upload files as the user).
#
# How it works:
# * ``stream``: every streamed chunk passes here; the gateway's terminal chunk carries
#   the artifact manifest under ``gateway`` (``{"download_link_mode", "artifacts": [{id,
#   filename, url, link_mode, bytes}]}``). It is kept per message id.
# * ``outlet`` (after the answer, in Open WebUI's backend): for each artifact of that
#   manifest, the file is fetched from the gateway with the proxy's key asserting the
#   owner ``openwebui:<user id>`` (the gateway answers 404 for anyone else's file),
#   stored as the user's own Open WebUI file (``upload_file_handler``, no RAG
#   processing), linked to the chat message, and shown with one ``chat:message:files``
#   event.
#
# Install (admin): Workspace -> Functions -> import this file, or
# ``POST /api/v1/functions/create`` with its source; then enable it and make it global
# (``POST /api/v1/functions/id/artifact_gateway_files/toggle`` and ``.../toggle/global``),
# and set the valves: ``gateway_url`` (where Open WebUI's backend reaches ``gateway
# run``) and ``proxy_key`` (a ``role = "proxy"`` key of the gateway whose
# ``owner_prefix`` is ``openwebui:``).

from __future__ import annotations

import hashlib
import io
import logging
from typing import Any

import httpx
from pydantic import BaseModel, Field

log = logging.getLogger("artifact_gateway_files")

MAX_REMEMBERED = 1000


def owner_for_user(user_id: str) -> str:
    """The gateway's owner for an Open WebUI user (the proxy maps users the same way)."""
    if user_id and len(user_id) <= 128 and all(c.isalnum() or c in "._:@-" for c in user_id):
        return "openwebui:" + user_id
    return "openwebui:h-" + hashlib.sha256(user_id.encode()).hexdigest()[:32]


def _manifest(chunk: Any) -> dict[str, Any] | None:
    gw = chunk.get("gateway") if isinstance(chunk, dict) else None
    if isinstance(gw, dict) and isinstance(gw.get("artifacts"), list) and gw["artifacts"]:
        return gw
    return None


class Filter:
    class Valves(BaseModel):
        gateway_url: str = Field(
            default="http://127.0.0.1:8642",
            description="Where Open WebUI's backend reaches the artifact gateway (gateway run).",
        )
        proxy_key: str = Field(
            default="",
            description='A role = "proxy" key of the gateway (owner_prefix "openwebui:").',
        )
        max_files: int = Field(default=10, description="Files stored per answer at most.")
        max_bytes: int = Field(default=100 * 1024 * 1024, description="Largest file stored.")

    def __init__(self) -> None:
        self.valves = self.Valves()
        self._manifests: dict[str, dict[str, Any]] = {}

    def stream(self, event: dict[str, Any], __metadata__: dict[str, Any] | None = None) -> Any:
        manifest = _manifest(event)
        message_id = (__metadata__ or {}).get("message_id")
        if manifest is not None and message_id:
            self._manifests[str(message_id)] = manifest
            while len(self._manifests) > MAX_REMEMBERED:
                self._manifests.pop(next(iter(self._manifests)))
        return event

    async def _fetch(self, client: httpx.AsyncClient, artifact_id: str, owner: str) -> Any:
        headers = {"Authorization": f"Bearer {self.valves.proxy_key}", "X-Gateway-Owner": owner}
        async with client.stream(
            "GET",
            f"{self.valves.gateway_url.rstrip('/')}/v1/artifacts/{artifact_id}",
            headers=headers,
        ) as resp:
            if resp.status_code != 200:
                log.warning("artifact gateway answered HTTP %d for an artifact", resp.status_code)
                return None
            data = bytearray()
            async for piece in resp.aiter_bytes():
                data += piece
                if len(data) > self.valves.max_bytes:
                    return None
            ctype = resp.headers.get("content-type", "application/octet-stream").split(";")[0]
            return bytes(data), ctype.strip() or "application/octet-stream"

    async def _store(self, request: Any, user: Any, name: str, data: bytes, ctype: str) -> Any:
        from fastapi import UploadFile
        from open_webui.routers.files import upload_file_handler

        upload = UploadFile(file=io.BytesIO(data), filename=name, headers={"content-type": ctype})
        item = await upload_file_handler(
            request,
            file=upload,
            metadata={"source": "artifact-gateway"},
            process=False,
            user=user,
        )
        return {
            "type": "image" if ctype.startswith("image/") else "file",
            "id": item.id,
            "url": f"/api/v1/files/{item.id}/content",
            "name": name,
            "size": len(data),
            "content_type": ctype,
        }

    async def outlet(
        self,
        body: dict[str, Any],
        __user__: dict[str, Any] | None = None,
        __request__: Any = None,
        __metadata__: dict[str, Any] | None = None,
        __event_emitter__: Any = None,
    ) -> dict[str, Any]:
        meta = __metadata__ or {}
        message_id, chat_id = meta.get("message_id"), meta.get("chat_id")
        manifest = self._manifests.pop(str(message_id), None) if message_id else None
        if manifest is None or not __user__ or not self.valves.proxy_key or __request__ is None:
            return body
        from open_webui.models.chats import Chats
        from open_webui.models.users import Users

        user = await Users.get_user_by_id(__user__["id"])
        if user is None:
            return body
        owner = owner_for_user(str(__user__["id"]))
        entries = []
        async with httpx.AsyncClient(timeout=httpx.Timeout(10.0, read=60.0)) as client:
            for art in manifest["artifacts"][: self.valves.max_files]:
                if not isinstance(art, dict) or not isinstance(art.get("id"), str):
                    continue
                fetched = await self._fetch(client, art["id"], owner)
                if fetched is not None:
                    name = str(art.get("filename") or "file")
                    entries.append(await self._store(__request__, user, name, *fetched))
        if not entries:
            return body
        files = entries
        if chat_id and not str(chat_id).startswith("local:"):
            stored = await Chats.add_message_files_by_id_and_message_id(
                chat_id, message_id, entries
            )
            await Chats.insert_chat_files(chat_id, message_id, [e["id"] for e in entries], user.id)
            files = stored or entries
        if __event_emitter__ is not None:
            await __event_emitter__({"type": "chat:message:files", "data": {"files": files}})
        return body
