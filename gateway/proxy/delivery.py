"""Native delivery: the answer's files into Open WebUI's own file store, as the user.

When Open WebUI forwards the user's session (a connection of auth type "session"), the
proxy knows who the user is *and* holds a token that acts as them. Once the run has
completed and its manifest is known, each artifact is fetched from the gateway server to
server (the proxy's key asserting the owner) and uploaded with the user's token
(``POST /api/v1/files/?process=false``): the file is then the user's own Open WebUI
file, shown as a tile and fetched with Open WebUI's login. The stream then carries
exactly one ``files`` event (see :mod:`gateway.fronts.openwebui`). A file that cannot be
delivered stays a link in the text (which opens in the browser for its owner); the
failure is logged without the token.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

import httpx

from gateway.clients.openwebui import OpenWebUI
from gateway.core.errors import GatewayError

__all__ = ["Delivery"]

log = logging.getLogger("gateway.proxy")


@dataclass
class Delivery:
    """Delivers one answer's artifacts for one user."""

    gateway: httpx.AsyncClient
    gateway_headers: dict[str, str]  # the proxy key, asserting the owner
    openwebui: OpenWebUI
    token: str  # the user's own Open WebUI session token
    max_bytes: int

    async def _fetch(self, artifact_id: str) -> tuple[bytes, str] | None:
        try:
            async with self.gateway.stream(
                "GET", f"/v1/artifacts/{artifact_id}", headers=self.gateway_headers
            ) as resp:
                if resp.status_code != 200:
                    log.warning("native delivery: the gateway answered HTTP %d", resp.status_code)
                    return None
                data = bytearray()
                async for piece in resp.aiter_bytes():
                    data += piece
                    if len(data) > self.max_bytes:
                        log.warning("native delivery: a file is larger than artifacts.max_bytes")
                        return None
                ctype = resp.headers.get("content-type", "application/octet-stream")
                return bytes(data), ctype.split(";")[0].strip() or "application/octet-stream"
        except httpx.HTTPError as exc:
            log.warning(
                "native delivery: fetching from the gateway failed (%s)", type(exc).__name__
            )
            return None

    async def one(self, artifact: dict[str, Any]) -> dict[str, Any] | None:
        """Upload one manifest entry; its ``files`` entry, or None if it stays a link."""
        fetched = await self._fetch(artifact["id"])
        if fetched is None:
            return None
        data, ctype = fetched
        try:
            record = await self.openwebui.upload(self.token, artifact["filename"], ctype, data)
        except GatewayError as exc:
            log.warning("native delivery: %s", exc.message)
            return None
        meta = record.get("meta")
        if isinstance(meta, dict) and isinstance(meta.get("content_type"), str):
            ctype = meta["content_type"]
        file_id = record["id"]
        return {
            "type": "image" if ctype.startswith("image/") else "file",
            "id": file_id,
            "url": f"/api/v1/files/{file_id}/content",
            "name": artifact["filename"],
            "size": len(data),
            "content_type": ctype,
        }

    async def all(self, manifest: dict[str, Any]) -> list[dict[str, Any]]:
        files = []
        for artifact in manifest.get("artifacts") or ():
            entry = await self.one(artifact)
            if entry is not None:
                files.append(entry)
        return files
