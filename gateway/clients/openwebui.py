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
Open WebUI (``GET /api/v1/auths/``). The token itself is never stored or logged; what is
remembered is keyed by its SHA-256.

These checks come from requests that have no credential of ours yet, so they are
bounded (:meth:`OpenWebUI.verify`):

* a token that cannot be an Open WebUI token (neither a JWT's three base64url parts nor
  an ``sk-`` API key) is refused without asking;
* verified sessions and refusals are two caches with their own bounds: a verified one is
  answered from memory for ``proxy.session_cache_seconds``, a refusal for at most 5 s,
  and a flood of refused tokens cannot push a verified session out;
* checks of a token not verified before take a token from the caller's bucket (one per
  client address: ``proxy.session_checks_per_second``, bursts of :data:`CHECK_BURST`)
  and from one of all clients together (:data:`ALL_CLIENTS` times that, Open WebUI's
  own bound); an empty bucket answers 429 ``too_many_session_checks`` with
  ``Retry-After``: a flood from one address locks out that address, not the others. A session verified
  within :data:`KNOWN_SECONDS` is checked again without the bucket: a flood delays only
  sessions never seen;
* concurrent checks of one token share one call to Open WebUI.
"""

from __future__ import annotations

import hashlib
import re
import time
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

import httpx
import trio

from gateway.clients.upstream import new_client
from gateway.core.checks import loads_bounded
from gateway.core.errors import GatewayError, Throttled, UpstreamError

__all__ = ["OpenWebUI", "OpenWebUIUser", "owner_for_user"]

#: refusals are cached briefly: a token may become valid (a login) any moment
NEGATIVE_CACHE_SECONDS = 5.0
#: bounds of the two caches (each drops its least recently used entries)
CACHE_ENTRIES = 10_000
REFUSED_ENTRIES = 10_000
#: a session verified within this long is checked again without the check bucket
KNOWN_SECONDS = 86400.0
#: checks of sessions never seen that may come at once (then the per-second rate)
CHECK_BURST = 10
#: the check rate of all clients together, in per-client rates
ALL_CLIENTS = 20
#: client addresses whose buckets are kept (the least recent forgotten)
CLIENT_ENTRIES = 4096
#: what an Open WebUI token looks like: a JWT (three base64url parts) or an API key
_TOKEN_SHAPE = re.compile(
    r"sk-[A-Za-z0-9_-]{1,200}|[A-Za-z0-9_=-]+\.[A-Za-z0-9_=-]+\.[A-Za-z0-9_=-]*"
)


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


@dataclass(slots=True)
class _Verified:
    fresh_until: float  # answered from memory until then
    known_until: float  # checked again without the bucket until then
    user: OpenWebUIUser


class _Flight:
    """One check in progress; concurrent checks of the same token wait for it."""

    __slots__ = ("done", "error", "finished", "user")

    def __init__(self) -> None:
        self.done = trio.Event()
        self.finished = False  # False when the checking request went away first
        self.user: OpenWebUIUser | None = None
        self.error: GatewayError | None = None


class _Bucket:
    """A token bucket: ``rate`` per second, at most ``burst`` at once."""

    def __init__(self, rate: float, burst: int, clock: Any) -> None:
        self._rate, self._burst, self._clock = rate, float(burst), clock
        self._tokens, self._at = float(burst), clock()

    def take(self) -> float:
        """0 when a token was taken, else the seconds until one is there."""
        now = self._clock()
        self._tokens = min(self._burst, self._tokens + (now - self._at) * self._rate)
        self._at = now
        if self._tokens >= 1:
            self._tokens -= 1
            return 0.0
        return (1 - self._tokens) / self._rate


class OpenWebUI:
    """A client of one Open WebUI (``proxy.openwebui_url``)."""

    def __init__(
        self,
        base_url: str,
        client: httpx.AsyncClient,
        *,
        cache_seconds: float = 60.0,
        checks_per_second: float = 2.0,
        clock: Any = time.monotonic,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self._client = client
        self._cache_seconds = cache_seconds
        self._clock = clock
        self._verified: OrderedDict[bytes, _Verified] = OrderedDict()
        self._refused: OrderedDict[bytes, float] = OrderedDict()
        self._flights: dict[bytes, _Flight] = {}
        self._rate = checks_per_second
        #: one bucket per client address (a flood from one locks out that one only), and
        #: one for all of them at ALL_CLIENTS times the rate (Open WebUI's own bound)
        self._buckets: OrderedDict[str, _Bucket] = OrderedDict()
        self._bucket = _Bucket(checks_per_second * ALL_CLIENTS, CHECK_BURST * ALL_CLIENTS, clock)
        #: calls made to Open WebUI to check a session (a metric for tests and operators)
        self.checks = 0

    @classmethod
    def from_config(cls, config: Any) -> OpenWebUI | None:
        """The client of ``proxy.openwebui_url``, or None when it is not configured."""
        url = config.proxy.openwebui_url
        if not url:
            return None
        client = new_client(connect_timeout=config.upstream.connect_timeout_seconds)
        return cls(
            url,
            client,
            cache_seconds=config.proxy.session_cache_seconds,
            checks_per_second=config.proxy.session_checks_per_second,
        )

    async def aclose(self) -> None:
        await self._client.aclose()

    def _remember(self, key: bytes, user: OpenWebUIUser | None) -> None:
        now = self._clock()
        if user is None:
            self._verified.pop(key, None)  # logged out, or the password changed
            self._refused[key] = now + min(NEGATIVE_CACHE_SECONDS, self._cache_seconds)
            self._refused.move_to_end(key)
            while len(self._refused) > REFUSED_ENTRIES:
                self._refused.popitem(last=False)
            return
        self._refused.pop(key, None)
        self._verified[key] = _Verified(now + self._cache_seconds, now + KNOWN_SECONDS, user)
        self._verified.move_to_end(key)
        while len(self._verified) > CACHE_ENTRIES:
            self._verified.popitem(last=False)

    def _from_memory(self, key: bytes) -> tuple[bool, OpenWebUIUser | None, bool]:
        """(answered, user, known): a fresh answer, or whether a check may skip the bucket."""
        now = self._clock()
        hit = self._verified.get(key)
        if hit is not None and hit.fresh_until >= now:
            self._verified.move_to_end(key)
            return True, hit.user, True
        until = self._refused.get(key)
        if until is not None and until >= now:
            return True, None, False
        return False, None, hit is not None and hit.known_until >= now

    def _take(self, client: str) -> float:
        """A check of an unknown session from ``client``: 0, or the seconds to wait."""
        bucket = self._buckets.get(client)
        if bucket is None:
            bucket = self._buckets[client] = _Bucket(self._rate, CHECK_BURST, self._clock)
            while len(self._buckets) > CLIENT_ENTRIES:
                self._buckets.popitem(last=False)
        self._buckets.move_to_end(client)
        return bucket.take() or self._bucket.take()

    async def verify(self, token: str, client: str = "") -> OpenWebUIUser | None:
        """The user of a session token, or None when Open WebUI refuses it (or it cannot
        be one); Throttled (429) when ``client`` (the caller's address) checks too many
        unknown sessions, or all clients together do."""
        if not token or len(token) > 8192 or not _TOKEN_SHAPE.fullmatch(token):
            return None
        key = hashlib.sha256(token.encode()).digest()
        answered, user, known = self._from_memory(key)
        if answered:
            return user
        flight = self._flights.get(key)
        if flight is not None:  # the same token is being checked: its answer is ours
            await flight.done.wait()
            if flight.error is not None:
                raise flight.error
            return flight.user if flight.finished else await self.verify(token, client)
        if not known:
            wait = self._take(client)
            if wait:
                raise Throttled(
                    "Too many Open WebUI sessions are being checked right now; open the "
                    "link again in a moment.",
                    code="too_many_session_checks",
                    retry_after=wait,
                )
        flight = self._flights[key] = _Flight()
        try:
            flight.user = await self._ask(key, token)
            flight.finished = True
        except GatewayError as exc:
            flight.error = exc
            raise
        finally:
            del self._flights[key]
            flight.done.set()
        return flight.user

    async def _ask(self, key: bytes, token: str) -> OpenWebUIUser | None:
        """One call to Open WebUI; the answer remembered (refusals too)."""
        self.checks += 1
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
