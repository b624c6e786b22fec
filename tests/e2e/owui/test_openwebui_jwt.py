"""JWT mode: Open WebUI started with ``FORWARD_USER_INFO_HEADER_JWT_SECRET`` sends the
user as a signed ``X-OpenWebUI-User-Jwt`` instead of the bare user headers; the proxy
(``proxy.openwebui_jwt_secret``, the same secret) mints links for the JWT's user and no
longer trusts bare forwarded headers.

It needs its own Open WebUI (the secret is read at start): the session launches it as
soon as the first one is healthy, and runs this test last."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import time
from pathlib import Path
from typing import Any

import pytest
import trio

from tests.e2e.owui.checks import PRIVATE_NOTE, ask, owned_artifacts, private_link_re
from tests.e2e.owui.conftest import JWT_SECRET, start_owui_chain

pytestmark = pytest.mark.openwebui


def jwt(claims: dict[str, Any], secret: str) -> str:
    def b64(data: bytes) -> str:
        return base64.urlsafe_b64encode(data).rstrip(b"=").decode()

    head = b64(json.dumps({"alg": "HS256", "typ": "JWT"}).encode())
    body = b64(json.dumps(claims).encode())
    sig = hmac.new(secret.encode(), f"{head}.{body}".encode(), hashlib.sha256).digest()
    return f"{head}.{body}.{b64(sig)}"


async def test_jwt_mode_links_for_the_jwt_user(
    nursery: trio.Nursery, tmp_path: Path, openwebui_jwt: Any, browser: Any, open_page: Any
) -> None:
    owui = openwebui_jwt
    chain = await start_owui_chain(
        nursery,
        tmp_path,
        owui,
        proxy={"openwebui_jwt_secret": JWT_SECRET, "openwebui_url": owui.url},
    )
    files = chain.files
    user = owui.user

    def scenario() -> tuple[Any, Any]:
        page = open_page(owui.url, "owner")
        answer = ask(page, user, "demo-private")
        return answer, page.click_link("report.pdf")

    answer, opened = await browser.run(scenario)

    # private links were minted (the proxy knew the user: bare headers are not trusted
    # with a secret set, so it came from the verified JWT), all owned by that user
    link_re = private_link_re(chain.gateway.url)
    ids = {m.group(1) for link in answer.links if (m := link_re.match(link.href))}
    assert len(ids) == len(files.in_root), answer.links
    owned = await owned_artifacts(chain, "openwebui:" + user.id)
    assert {a["id"] for a in owned} == ids
    assert PRIVATE_NOTE in answer.text
    assert opened.download == files.report_pdf.read_bytes(), opened

    body = {
        "model": "demo",
        "messages": [{"role": "user", "content": "Make me a report"}],
        "stream": True,
        "download_link_mode": "private",
    }
    bare = {
        "X-OpenWebUI-User-Id": user.id,
        "X-OpenWebUI-User-Email": user.email,
        "X-OpenWebUI-User-Name": "Bob",
        "X-OpenWebUI-User-Role": "user",
    }
    now = int(time.time())
    claims = {"sub": user.id, "email": user.email, "iss": "open-webui", "iat": now}
    forged = jwt({**claims, "exp": now + 300}, "not-the-secret-0123456789")
    async with chain.proxy.client() as c:
        # bare forwarded user headers (what a caller with the client key could forge)
        r = await c.post("/v1/chat/completions", json=body, headers=bare)
        assert r.status_code == 400 and r.json()["error"]["code"] == "identity_required", r.text
        # a JWT signed with another secret
        r = await c.post(
            "/v1/chat/completions", json=body, headers={"X-OpenWebUI-User-Jwt": forged}
        )
        assert r.status_code == 401 and r.json()["error"]["code"] == "invalid_user_jwt", r.text
    # and the owner's list did not grow
    assert len(await owned_artifacts(chain, "openwebui:" + user.id)) == len(ids)
