"""Talking to Open WebUI itself: who a session token belongs to, and uploading files.

Open WebUI's own login protects what its users see. Two places use it:

* the download route (``gateway run``) accepts an Open WebUI session — the ``token``
  cookie a browser sends to every port of the same host, or that token as a bearer —
  so a private link opens for its owner in the browser with no other login;
* the runs proxy accepts a connection of auth type "session" (Open WebUI forwards the
  user's own token as the bearer): the strongest identity there is, and it can upload
  the answer's files into Open WebUI's file store as that user (native file tiles).

A token is never decoded here and never trusted as such: validity is Open WebUI's
server-side state (a password change or a logout revokes it), so it is checked by asking
Open WebUI (``GET /api/v1/auths/``). Answers are cached by the token's SHA-256 for
``proxy.session_cache_seconds`` (refusals for at most 5 s); the token itself is never
stored or logged.
"""

from __future__ import annotations

import hashlib
import re
import time
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

import httpx

from gateway.errors import UpstreamError
from gateway.shapes import loads_bounded
from gateway.upstream import new_client

__all__ = ["OpenWebUI", "OpenWebUIUser", "owner_for_user"]

#: refusals are cached briefly: a token may become valid (a login) any moment
NEGATIVE_CACHE_SECONDS = 5.0
CACHE_ENTRIES = 10_000


@dataclass(frozen=True, slots=True)
class OpenWebUIUser:
    id: str
    email: str | None = None
    name: str | None = None
    role: str | None = None


#: the principal alphabet (ASCII: the owner travels in a header), at most 128 long
_PLAIN_ID = re.compile(r"[A-Za-z0-9._:@-]{1,128}")
#: the owner of requests with no known user; a user id spelled so is hashed
ANONYMOUS = "anonymous"
#: the hashed form; an id spelled like it is hashed too, so no two ids share an owner
_HASHED_ID = re.compile(r"h-[0-9a-f]{32}")


def owner_for_user(user_id: str) -> str:
    """``openwebui:<id>``; ids outside the principal alphabet (any non-ASCII letter
    too) are hashed, not rejected."""
    if _PLAIN_ID.fullmatch(user_id) and not _HASHED_ID.fullmatch(user_id) and user_id != ANONYMOUS:
        return "openwebui:" + user_id
    raw = user_id.encode("utf-8", "surrogatepass")
    return "openwebui:h-" + hashlib.sha256(raw).hexdigest()[:32]


def _unreachable() -> UpstreamError:
    return UpstreamError(
        "Open WebUI could not be asked who this session belongs to; check proxy.openwebui_url.",
        code="openwebui_unreachable",
    )


def _user(data: Any) -> OpenWebUIUser | None:
    if not isinstance(data, dict):
        return None
    uid = data.get("id")
    if not isinstance(uid, str) or not uid:
        return None

    def text(key: str) -> str | None:
        value = data.get(key)
        return value if isinstance(value, str) else None

    return OpenWebUIUser(uid, text("email"), text("name"), text("role"))


class OpenWebUI:
    """A client of one Open WebUI (``proxy.openwebui_url``)."""

    def __init__(
        self,
        base_url: str,
        client: httpx.AsyncClient,
        *,
        cache_seconds: float = 60.0,
        clock: Any = time.monotonic,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self._client = client
        self._cache_seconds = cache_seconds
        self._clock = clock
        self._cache: OrderedDict[bytes, tuple[float, OpenWebUIUser | None]] = OrderedDict()

    @classmethod
    def from_config(cls, config: Any) -> OpenWebUI | None:
        """The client of ``proxy.openwebui_url``, or None when it is not configured."""
        url = config.proxy.openwebui_url
        if not url:
            return None
        client = new_client(connect_timeout=config.upstream.connect_timeout_seconds)
        return cls(url, client, cache_seconds=config.proxy.session_cache_seconds)

    async def aclose(self) -> None:
        await self._client.aclose()

    def _cached(self, key: bytes) -> tuple[bool, OpenWebUIUser | None]:
        hit = self._cache.get(key)
        if hit is None or hit[0] < self._clock():
            return False, None
        return True, hit[1]

    def _remember(self, key: bytes, user: OpenWebUIUser | None) -> None:
        ttl = self._cache_seconds if user is not None else min(5.0, self._cache_seconds)
        self._cache[key] = (self._clock() + ttl, user)
        self._cache.move_to_end(key)
        while len(self._cache) > CACHE_ENTRIES:
            self._cache.popitem(last=False)

    async def verify(self, token: str) -> OpenWebUIUser | None:
        """The user of a session token, or None when Open WebUI refuses it."""
        if not token or len(token) > 8192 or not token.isascii():
            return None
        key = hashlib.sha256(token.encode()).digest()
        hit, user = self._cached(key)
        if hit:
            return user
        try:
            resp = await self._client.get(
                self.base_url + "/api/v1/auths/",
                headers={"Authorization": f"Bearer {token}"},
                timeout=10.0,
            )
        except httpx.HTTPError as exc:
            raise _unreachable() from exc
        if resp.status_code in (401, 403):
            user = None
        elif resp.status_code == 200:
            try:
                user = _user(loads_bounded(resp.content, 16))
            except ValueError:
                user = None
        else:
            raise _unreachable()
        self._remember(key, user)
        return user

    async def upload(
        self, token: str, filename: str, content_type: str, data: bytes
    ) -> dict[str, Any]:
        """Store a file in Open WebUI as the token's user (no RAG processing); its record."""
        try:
            resp = await self._client.post(
                self.base_url + "/api/v1/files/",
                params={"process": "false"},
                headers={"Authorization": f"Bearer {token}"},
                files={"file": (filename, data, content_type)},
                timeout=httpx.Timeout(10.0, read=60.0, write=60.0),
            )
        except httpx.HTTPError as exc:
            raise _unreachable() from exc
        if resp.status_code != 200:
            raise UpstreamError(
                f"Open WebUI refused the file upload (HTTP {resp.status_code}).",
                code="openwebui_upload_failed",
            )
        try:
            record = loads_bounded(resp.content, 16)
        except ValueError:
            record = None
        if not isinstance(record, dict) or not isinstance(record.get("id"), str):
            raise UpstreamError(
                "Open WebUI's answer to a file upload has no file id.",
                code="openwebui_upload_failed",
            )
        return record
