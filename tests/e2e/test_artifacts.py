"""Managed-download links end to end (issue 4, "Must show").

Real hypercorn on 127.0.0.1, a real SQLite store and real files under ``tmp_path``;
the upstream is a :class:`harness.transport.ScriptedTransport` so every test picks
the exact SSE bytes (and chunk boundaries) the gateway receives. Link expiry runs on
a fake clock passed to ``create_app(clock=...)``.

Every response a test receives (stream bytes, headers, error bodies) goes through
:class:`Seen`; at teardown no form of ``tmp_path`` may occur in any of them.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import time
import urllib.parse
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

import httpx
import pytest
import trio

from gateway.api.app import create_app
from gateway.cli.demo_upstream import DemoFiles, write_demo_files
from gateway.core.sse import DONE, SSEDecoder, encode_json
from gateway.http.serve import serve_app
from gateway.ops.config import Config
from harness.transport import Scripted, ScriptedTransport, split_at
from tests.conftest import ALICE_KEY, BOB_KEY, PROXY_KEY, make_config

PUBLIC_BASE = "http://127.0.0.1:8642"  # make_config's server.public_base_url
T0 = 1_780_000_000  # the fake clock's start (whole seconds keep expiry exact)
TTL = 3600
LINK_RE = re.compile(
    re.escape(PUBLIC_BASE) + r"/v1/artifacts/[A-Za-z0-9_-]+(?:\?exp=[0-9]+&sig=[A-Za-z0-9._-]+)?"
)


# --------------------------------------------------------------------------- helpers


class FakeClock:
    def __init__(self, now: float = T0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


class Seen:
    """Everything the gateway sent back in one test; must never name ``tmp_path``."""

    def __init__(self, tmp_path: Path) -> None:
        forms = {str(tmp_path), os.path.realpath(tmp_path)}
        forms |= {urllib.parse.quote(f) for f in list(forms)}
        forms |= {json.dumps(f)[1:-1] for f in list(forms)}
        self.needles = sorted({f.encode() for f in forms})
        self.blobs: list[tuple[str, bytes]] = []

    def record(self, what: str, resp: httpx.Response) -> None:
        for k, v in resp.headers.raw:
            self.blobs.append((f"{what} header {k.decode()}", v))
        self.blobs.append((f"{what} body", resp.content))

    def leaks(self) -> list[str]:
        return [what for what, blob in self.blobs for n in self.needles if n in blob]


@pytest.fixture
def seen(tmp_path: Path) -> Iterator[Seen]:
    s = Seen(tmp_path)
    yield s
    assert s.blobs, "the test recorded no responses"
    assert s.leaks() == [], "an absolute path of tmp_path reached a client"


@pytest.fixture
def files(tmp_path: Path) -> DemoFiles:
    return write_demo_files(tmp_path / "artifacts", tmp_path / "outside")


def chunk(content: str | None = None, finish: str | None = None) -> dict[str, Any]:
    delta: dict[str, Any] = {} if content is None else {"content": content}
    return {
        "id": "chatcmpl-test",
        "object": "chat.completion.chunk",
        "created": 1,
        "model": "scripted",
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
    }


def sse_events(*deltas: str) -> list[bytes]:
    """One encoded upstream event per delta, a finish chunk, then ``[DONE]``."""
    return [encode_json(chunk(d)) for d in deltas] + [encode_json(chunk(None, "stop")), DONE]


def completion(content: str) -> bytes:
    return json.dumps(
        {
            "id": "chatcmpl-test",
            "object": "chat.completion",
            "created": 1,
            "model": "scripted",
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": content},
                    "finish_reason": "stop",
                }
            ],
        }
    ).encode()


@dataclass
class Chat:
    status: int
    raw: bytes
    content: str = ""
    terminal: dict[str, Any] = field(default_factory=dict)

    @property
    def manifest(self) -> dict[str, Any]:
        m: dict[str, Any] = self.terminal["gateway"]
        return m

    @property
    def links(self) -> list[str]:
        return LINK_RE.findall(self.content)

    @property
    def error(self) -> dict[str, Any]:
        e: dict[str, Any] = json.loads(self.raw)["error"]
        return e


def local(url: str) -> str:
    """A minted URL (on public_base_url) as a path + query for the test's gateway."""
    assert url.startswith(PUBLIC_BASE + "/v1/artifacts/"), url
    return url[len(PUBLIC_BASE) :]


def auth(key: str | None, **extra: str) -> dict[str, str]:
    h = {"Authorization": f"Bearer {key}"} if key is not None else {}
    h.update(extra)
    return h


@dataclass
class GW:
    app: Any
    url: str
    config: Config
    root: Path
    clock: FakeClock
    transport: ScriptedTransport
    client: httpx.AsyncClient
    seen: Seen
    script: list[Scripted] = field(default_factory=list)

    def upstream(self, *chunks: bytes, **kw: Any) -> None:
        """The next upstream response: exactly these byte chunks."""
        self.script.append(Scripted(chunks=list(chunks), **kw))

    async def chat(
        self,
        *deltas: str,
        key: str | None = ALICE_KEY,
        headers: dict[str, str] | None = None,
        body: dict[str, Any] | None = None,
        chunks: list[bytes] | None = None,
    ) -> Chat:
        """POST a streaming chat completion whose upstream answer carries ``deltas``."""
        if chunks is None:
            chunks = sse_events(*deltas)
        self.upstream(*chunks)
        req = {"model": "m", "stream": True, "messages": [{"role": "user", "content": "go"}]}
        req.update(body or {})
        n_before = len(self.transport.requests)
        with trio.fail_after(10):
            r = await self.client.post(
                "/v1/chat/completions", json=req, headers=auth(key, **(headers or {}))
            )
        self.seen.record("chat", r)
        if r.status_code != 200:
            assert r.headers["content-type"] == "application/json"
            assert len(self.transport.requests) == n_before, "upstream was called"
            self.script.pop()
            return Chat(r.status_code, r.content)
        assert r.headers["content-type"].startswith("text/event-stream")
        dec = SSEDecoder()
        events = dec.feed(r.content)
        dec.close()
        assert events[-1].data == "[DONE]"
        objs = [json.loads(e.data) for e in events[:-1]]
        content = "".join(
            c["delta"].get("content") or ""
            for o in objs
            for c in o.get("choices", [])
            if isinstance(c.get("delta"), dict)
        )
        return Chat(200, r.content, content, objs[-1])

    async def get(self, url: str, key: str | None = ALICE_KEY, **headers: str) -> httpx.Response:
        path = local(url) if url.startswith("http") else url
        with trio.fail_after(10):
            r = await self.client.get(path, headers=auth(key, **headers))
        self.seen.record(f"GET {path}", r)
        return r

    async def delete(self, url: str, key: str | None = ALICE_KEY, **headers: str) -> httpx.Response:
        path = local(url).partition("?")[0] if url.startswith("http") else url
        r = await self.client.delete(path, headers=auth(key, **headers))
        self.seen.record(f"DELETE {path}", r)
        return r

    def record(self, artifact_url: str) -> Any:
        art_id = local(artifact_url).partition("?")[0].rsplit("/", 1)[1]
        return self.app.gateway.store.get_artifact(art_id)


async def _serve(nursery: trio.Nursery, app: Any) -> str:
    urls: list[str] = await nursery.start(
        partial(serve_app, app, "127.0.0.1:0", shutdown_trigger=trio.sleep_forever)
    )
    return urls[0]


async def _close_when_cancelled(app: Any, client: httpx.AsyncClient) -> None:
    try:
        await trio.sleep_forever()
    finally:
        with trio.CancelScope(shield=True):
            await client.aclose()
            await app.gateway.aclose()


async def start_gw(nursery: trio.Nursery, tmp_path: Path, seen: Seen, **overrides: Any) -> GW:
    artifacts = {"public_ttl_seconds": TTL, **overrides.pop("artifacts", {})}
    config = make_config(tmp_path, "http://upstream.invalid/v1", artifacts=artifacts, **overrides)
    clock = FakeClock()
    script: list[Scripted] = []

    def script_for(request: httpx.Request) -> Scripted:
        assert script, f"unexpected upstream request {request.url}"
        return script.pop(0)

    transport = ScriptedTransport(script_for)
    app = create_app(config, upstream_transport=transport, clock=clock)
    url = await _serve(nursery, app)
    client = httpx.AsyncClient(base_url=url, timeout=httpx.Timeout(10, read=30))
    nursery.start_soon(_close_when_cancelled, app, client)
    return GW(app, url, config, tmp_path / "artifacts", clock, transport, client, seen, script)


@pytest.fixture
async def gw(
    nursery: trio.Nursery, tmp_path: Path, seen: Seen, files: DemoFiles
) -> AsyncIterator[GW]:
    yield await start_gw(nursery, tmp_path, seen)


def assert_json_error(r: httpx.Response, status: int, code: str) -> None:
    assert r.status_code == status, (r.status_code, r.text)
    assert r.headers["content-type"] == "application/json"
    err = r.json()["error"]
    assert err["code"] == code, err
    assert err["message"]


async def mint_one(gw: GW, path: Path | str, *, key: str = ALICE_KEY, **kw: Any) -> str:
    """Stream one answer mentioning ``path`` in prose; return its only link."""
    res = await gw.chat(f"Saved to {path} for you.", key=key, **kw)
    assert res.status == 200, res.raw
    assert len(res.links) == 1, res.content
    return res.links[0]


# --------------------------------------------------------------------------- private links


async def test_path_split_at_every_point_downloads_identical_bytes(
    gw: GW, files: DemoFiles
) -> None:
    path = str(files.report_pdf)
    expected = files.report_pdf.read_bytes()
    prefix, suffix = "The report is at ", " and it is ready."
    urls: set[str] = set()
    for k in range(1, len(path)):
        # the path is split across two content deltas at k, and the raw bytes of the
        # second event are cut once more inside its path part
        events = sse_events(prefix + path[:k], path[k:] + suffix)
        body = b"".join(events)
        second = body.index(path[k:].encode(), len(events[0]))
        cuts = [
            len(events[0]),
            second + max(1, len(path[k:]) // 2),
            len(events[0]) + len(events[1]),
        ]
        res = await gw.chat(chunks=split_at(body, cuts))
        assert res.status == 200 and len(res.links) == 1, (k, res.content)
        assert res.content == f"{prefix}[report.pdf]({res.links[0]}){suffix}"
        assert [a["url"] for a in res.manifest["artifacts"]] == res.links
        urls.add(res.links[0])
        r = await gw.get(res.links[0])
        assert r.status_code == 200 and r.content == expected
    assert len(urls) == len(path) - 1  # one fresh link per response
    # byte-level splits of one event at every byte of the path
    event = encode_json(chunk(prefix + path + suffix))
    start = event.index(path.encode())
    for b in range(start, start + len(path.encode()) + 1):
        res = await gw.chat(chunks=split_at(b"".join([event, *sse_events()]), [b]))
        assert len(res.links) == 1
        assert (await gw.get(res.links[0])).content == expected


async def test_private_link_is_the_owners_only(gw: GW, files: DemoFiles) -> None:
    url = await mint_one(gw, files.report_pdf)
    assert "?" not in url
    data = files.report_pdf.read_bytes()

    ok = await gw.get(url)
    assert ok.status_code == 200 and ok.content == data
    assert ok.headers["cache-control"] == "private, no-store"

    assert_json_error(await gw.get(url, key=BOB_KEY), 404, "artifact_not_found")
    unauth = await gw.get(url, key=None)
    assert_json_error(unauth, 401, "missing_api_key")
    assert unauth.headers["www-authenticate"].startswith("Bearer")
    assert_json_error(await gw.get(url, key="not-a-key-of-this-gateway"), 401, "invalid_api_key")
    # an unknown id answers exactly like someone else's
    bogus = url.rsplit("/", 1)[0] + "/" + "A" * 32
    assert_json_error(await gw.get(bogus), 404, "artifact_not_found")
    assert_json_error(await gw.get(bogus, key=None), 401, "missing_api_key")

    # the proxy acts only for owners in its namespace (openwebui:...): never for alice
    assert_json_error(
        await gw.get(url, key=PROXY_KEY, **{"X-Gateway-Owner": "alice"}), 403, "forbidden_owner"
    )
    assert_json_error(
        await gw.get(url, key=PROXY_KEY, **{"X-Gateway-Owner": "openwebui:alice"}),
        404,
        "artifact_not_found",
    )
    assert_json_error(await gw.get(url, key=PROXY_KEY), 404, "artifact_not_found")
    # a user key may not assert an owner
    assert_json_error(
        await gw.get(url, key=BOB_KEY, **{"X-Gateway-Owner": "alice"}), 403, "forbidden_assertion"
    )
    # a private link with a made-up signature is not a public link
    assert_json_error(
        await gw.get(url + "?exp=9999999999&sig=x", key=None), 404, "artifact_not_found"
    )


async def test_a_browser_without_open_webui_sessions_is_told_to_use_a_key(
    gw: GW, files: DemoFiles
) -> None:
    """No ``proxy.openwebui_url``: a private link opened in a browser gets a page that
    says how to fetch it with a key (not "sign in to Open WebUI", which cannot help)."""
    url = await mint_one(gw, files.report_pdf)
    page = await gw.get(url, key=None, Accept="text/html,application/xhtml+xml")
    assert page.status_code == 401 and page.headers["content-type"].startswith("text/html")
    assert "Open WebUI" not in page.text
    assert "curl -OJ -H &#x27;Authorization: Bearer &lt;your key&gt;&#x27;" in page.text
    assert url in page.text and "Traceback" not in page.text


async def test_two_authorization_headers_are_refused(gw: GW, files: DemoFiles) -> None:
    """Which of two keys counts would depend on the hop that reads them: neither."""
    url = await mint_one(gw, files.report_pdf)
    for second in (f"Bearer {ALICE_KEY}", f"Bearer {BOB_KEY}", "Bearer nope"):
        two = [("Authorization", f"Bearer {ALICE_KEY}"), ("Authorization", second)]
        r = await gw.client.get(local(url), headers=two)
        assert_json_error(r, 401, "invalid_api_key")
        assert "one Authorization header" in r.json()["error"]["message"]
    r = await gw.client.post("/v1/chat/completions", headers=two, json={"model": "m"})
    assert_json_error(r, 401, "invalid_api_key")


async def test_proxy_asserting_owner_mints_for_that_owner(gw: GW, files: DemoFiles) -> None:
    as_carol = {"X-Gateway-Owner": "openwebui:carol"}
    url = await mint_one(gw, files.plot_png, key=PROXY_KEY, headers=as_carol)
    rec = gw.record(url)
    assert rec.owner == "openwebui:carol" and rec.link_mode == "private"
    got = await gw.get(url, key=PROXY_KEY, **as_carol)
    assert got.content == files.plot_png.read_bytes()
    assert (await gw.get(url)).status_code == 404  # alice's key: another principal
    assert (await gw.get(url, key=BOB_KEY)).status_code == 404
    assert (await gw.get(url, key=PROXY_KEY)).status_code == 404  # owui-proxy itself
    other = {"X-Gateway-Owner": "openwebui:dave"}
    assert (await gw.get(url, key=PROXY_KEY, **other)).status_code == 404


async def test_proxy_key_is_limited_to_its_namespace(gw: GW, files: DemoFiles) -> None:
    """A proxy key may assert owners under its owner_prefix only (default openwebui:)."""
    for owner in ("alice", "bob", "openwebui:", "openwebuiX:alice", "owui-proxy"):
        res = await gw.chat(
            f"Saved to {files.plot_png}.", key=PROXY_KEY, headers={"X-Gateway-Owner": owner}
        )
        assert res.status == 403 and res.error["code"] == "forbidden_owner", owner
    assert gw.transport.requests == []


async def test_list_shows_only_the_callers_artifacts(gw: GW, files: DemoFiles) -> None:
    a1 = await mint_one(gw, files.report_pdf)
    a2 = await mint_one(gw, files.plot_png, body={"download_link_mode": "public"})
    carol = {"X-Gateway-Owner": "openwebui:carol"}
    a3 = await mint_one(gw, files.results_csv, key=PROXY_KEY, headers=carol)
    b1 = await mint_one(gw, files.report_pdf, key=BOB_KEY)
    assert gw.record(b1).owner == "bob"

    async def listing(key: str, **h: str) -> list[dict[str, Any]]:
        r = await gw.get("/v1/artifacts", key=key, **h)
        assert r.status_code == 200
        body = r.json()
        assert body["object"] == "list"
        data: list[dict[str, Any]] = body["data"]
        return data

    alice = await listing(ALICE_KEY)
    assert {d["url"] for d in alice} == {a1, a2}
    assert {d["filename"] for d in alice} == {"report.pdf", "plot.png"}
    assert all("path" not in d for d in alice)
    by_url = {d["url"]: d for d in alice}
    assert by_url[a2]["link_mode"] == "public" and by_url[a2]["expires"] == T0 + TTL
    assert by_url[a1]["expires"] is None and by_url[a1]["revoked"] is False
    assert {d["url"] for d in await listing(BOB_KEY)} == {b1}
    assert {d["url"] for d in await listing(PROXY_KEY, **carol)} == {a3}
    assert await listing(PROXY_KEY) == []
    assert_json_error(await gw.get("/v1/artifacts", key=None), 401, "missing_api_key")


async def test_delete_revokes_for_the_owner_only(gw: GW, files: DemoFiles) -> None:
    priv = await mint_one(gw, files.report_pdf)
    pub = await mint_one(gw, files.plot_png, body={"download_link_mode": "public"})
    for url in (priv, pub):
        assert_json_error(await gw.delete(url, key=BOB_KEY), 404, "artifact_not_found")
        assert_json_error(
            await gw.delete(url, key=PROXY_KEY, **{"X-Gateway-Owner": "openwebui:bob"}),
            404,
            "artifact_not_found",
        )
        assert_json_error(await gw.delete(url, key=None), 401, "missing_api_key")
    assert (await gw.get(priv)).status_code == 200
    assert (await gw.get(pub, key=None)).status_code == 200

    for url in (priv, pub):
        r = await gw.delete(url)
        assert r.status_code == 200 and r.json()["revoked"] is True
        assert gw.record(url).revoked
    assert_json_error(await gw.get(priv), 410, "artifact_revoked")
    assert_json_error(await gw.get(pub, key=None), 410, "artifact_revoked")
    assert_json_error(await gw.get(pub), 410, "artifact_revoked")  # owner, no signature
    # bob still cannot tell that it existed
    assert_json_error(await gw.get(priv, key=BOB_KEY), 404, "artifact_not_found")
    assert_json_error(await gw.delete("/v1/artifacts/" + "B" * 32), 404, "artifact_not_found")


# --------------------------------------------------------------------------- public links


def _flip(ch: str, alphabet: str) -> str:
    return alphabet[(alphabet.index(ch) + 1) % len(alphabet)] if ch in alphabet else alphabet[0]


B64URL = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"


async def test_public_link_and_every_single_character_flip(gw: GW, files: DemoFiles) -> None:
    url = await mint_one(gw, files.report_pdf, body={"download_link_mode": "public"})
    data = files.report_pdf.read_bytes()
    m = re.fullmatch(r".*/v1/artifacts/([^?]+)\?exp=([0-9]+)&sig=(.+)", url)
    assert m is not None
    art_id, exp, sig = m.groups()
    assert int(exp) == T0 + TTL
    assert gw.record(url).link_mode == "public"

    for key in (None, BOB_KEY, "garbage-key-garbage"):
        r = await gw.get(url, key=key)
        assert r.status_code == 200 and r.content == data
        assert "private" in r.headers["cache-control"]

    def link(i: str, e: str, s: str) -> str:
        return f"/v1/artifacts/{i}?exp={e}&sig={s}"

    tampered: list[str] = []
    for n in range(len(art_id)):
        tampered.append(link(art_id[:n] + _flip(art_id[n], B64URL) + art_id[n + 1 :], exp, sig))
    for n in range(len(exp)):
        tampered.append(link(art_id, exp[:n] + _flip(exp[n], "0123456789") + exp[n + 1 :], sig))
    for n in range(len(sig)):
        tampered.append(link(art_id, exp, sig[:n] + _flip(sig[n], B64URL + ".") + sig[n + 1 :]))
    # not flips, but other spellings that must not verify either
    tampered += [
        link(art_id, exp, ""),
        link(art_id, "", sig),
        link(art_id, exp + "0", sig),
        link(art_id, exp, sig + "A"),
        link(art_id, exp, sig[:-1]),
        link(art_id, "-" + exp, sig),
        link(art_id, str(int(exp) - 1), sig),
        f"/v1/artifacts/{art_id}?sig={sig}",
        f"/v1/artifacts/{art_id}?exp={exp}",
    ]
    assert len(set(tampered)) == len(tampered)
    for t in tampered:
        r = await gw.get(t, key=None)
        assert r.status_code != 200
        assert_json_error(r, 404, "artifact_not_found")
    # tampering is judged before expiry: even an expired tampered link is 404
    gw.clock.now = T0 + TTL + 10
    for t in tampered[:5]:
        assert_json_error(await gw.get(t, key=None), 404, "artifact_not_found")


@pytest.mark.parametrize(
    "exp_text",
    [
        "\u00b2",  # superscript two: str.isdigit() is True, int() raises
        "\u0661\u0667\u0668\u0660\u0660\u0660\u0663\u0666\u0660\u0660",  # Arabic-Indic digits
        "0{exp}",  # leading zero: same number, not the signed text
        " {exp}",
        "{exp} ",
        "+{exp}",
        "{exp}.0",
        "1_780_003_600",
    ],
)
async def test_non_canonical_exp_is_404(gw: GW, files: DemoFiles, exp_text: str) -> None:
    url = await mint_one(gw, files.report_pdf, body={"download_link_mode": "public"})
    m = re.fullmatch(r".*/v1/artifacts/([^?]+)\?exp=([0-9]+)&sig=(.+)", url)
    assert m is not None
    art_id, exp, sig = m.groups()
    assert exp == str(T0 + TTL)
    q = urllib.parse.urlencode({"exp": exp_text.format(exp=exp), "sig": sig})
    assert_json_error(
        await gw.get(f"/v1/artifacts/{art_id}?{q}", key=None), 404, "artifact_not_found"
    )


async def test_public_link_expires_on_the_clock(gw: GW, files: DemoFiles) -> None:
    url = await mint_one(gw, files.report_pdf, body={"download_link_mode": "public"})
    gw.clock.now = T0 + TTL  # the last valid second
    assert (await gw.get(url, key=None)).status_code == 200
    gw.clock.now = T0 + TTL + 1
    assert_json_error(await gw.get(url, key=None), 410, "artifact_expired")
    gw.clock.now = T0 + 10 * TTL
    r = await gw.get(url, key=None, Range="bytes=0-9")
    assert_json_error(r, 410, "artifact_expired")
    # the owner's bearer key still reaches their own record
    assert (await gw.get(url.partition("?")[0])).status_code == 200


async def test_default_ttl_is_from_config(
    nursery: trio.Nursery, tmp_path: Path, seen: Seen, files: DemoFiles
) -> None:
    gw = await start_gw(nursery, tmp_path, seen, artifacts={"public_ttl_seconds": 5})
    url = await mint_one(gw, files.plot_png, body={"download_link_mode": "public"})
    assert f"exp={T0 + 5}&" in url
    gw.clock.now = T0 + 6
    assert_json_error(await gw.get(url, key=None), 410, "artifact_expired")


# --------------------------------------------------------------------------- refused paths


Setup = Callable[[Path, Path], tuple[str, str]]
"""(root, outside) -> (path as the agent writes it, the file name the stream must show)"""


def _traversal(root: Path, outside: Path) -> tuple[str, str]:
    (outside / "x.txt").write_text("outside\n")
    (root / "sub").mkdir()
    return f"{root}/sub/../../outside/x.txt", "x.txt"


def _symlink_out(root: Path, outside: Path) -> tuple[str, str]:
    (outside / "secret.txt").write_text("secret\n")
    (root / "innocent.txt").symlink_to(outside / "secret.txt")
    return f"{root}/innocent.txt", "innocent.txt"


def _symlink_dir_out(root: Path, outside: Path) -> tuple[str, str]:
    (outside / "secret.txt").write_text("secret\n")
    (root / "shared").symlink_to(outside, target_is_directory=True)
    return f"{root}/shared/secret.txt", "secret.txt"


def _directory(root: Path, outside: Path) -> tuple[str, str]:
    (root / "folder.d").mkdir()
    (root / "folder.d" / "f.txt").write_text("f\n")
    return f"{root}/folder.d", "folder.d"


def _fifo(root: Path, outside: Path) -> tuple[str, str]:
    os.mkfifo(root / "pipe.txt")
    return f"{root}/pipe.txt", "pipe.txt"


def _too_big(root: Path, outside: Path) -> tuple[str, str]:
    (root / "big.bin").write_bytes(b"\0" * 1025)  # max_bytes = 1024 in this test
    return f"{root}/big.bin", "big.bin"


def _denied(root: Path, outside: Path) -> tuple[str, str]:
    (root / ".ssh").mkdir()
    (root / ".ssh" / "id_rsa").write_text("-----BEGIN OPENSSH PRIVATE KEY-----\n")
    return f"{root}/.ssh/id_rsa", "id_rsa"


def _denied_name(root: Path, outside: Path) -> tuple[str, str]:
    (root / "proj").mkdir()
    (root / "proj" / ".env").write_text("TOKEN=1\n")
    return f"{root}/proj/.env", ".env"


def _symlink_to_denied(root: Path, outside: Path) -> tuple[str, str]:
    (root / ".ssh").mkdir()
    (root / ".ssh" / "id_rsa").write_text("-----BEGIN OPENSSH PRIVATE KEY-----\n")
    (root / "notes.txt").symlink_to(root / ".ssh" / "id_rsa")
    return f"{root}/notes.txt", "notes.txt"


def _windows(root: Path, outside: Path) -> tuple[str, str]:
    return r"C:\Users\bob\out\plot.png", "plot.png"


def _missing(root: Path, outside: Path) -> tuple[str, str]:
    return f"{root}/missing.pdf", "missing.pdf"


def _outside(root: Path, outside: Path) -> tuple[str, str]:
    return f"{outside}/draft-notes.txt", "draft-notes.txt"


REFUSED: dict[str, Setup] = {
    "traversal": _traversal,
    "symlink-outside": _symlink_out,
    "symlinked-dir-outside": _symlink_dir_out,
    "directory": _directory,
    "fifo": _fifo,
    "over-max-bytes": _too_big,
    "denied-dir": _denied,
    "denied-name": _denied_name,
    "symlink-to-denied": _symlink_to_denied,
    "windows": _windows,
    "missing": _missing,
    "outside-root": _outside,
}


@pytest.mark.parametrize("case", list(REFUSED))
async def test_refused_paths_become_the_name_alone(
    nursery: trio.Nursery, tmp_path: Path, seen: Seen, files: DemoFiles, case: str
) -> None:
    gw = await start_gw(nursery, tmp_path, seen, artifacts={"max_bytes": 1024})
    path, name = REFUSED[case](gw.root, tmp_path / "outside")
    for mode in ("private", "public"):
        with trio.fail_after(5):  # a FIFO must not hang the stream
            prose = await gw.chat(f"See {path} now.", body={"download_link_mode": mode})
            quoted = await gw.chat(f'See "{path}" and `{path}`.', body={"download_link_mode": mode})
        assert prose.content == f"See {name} now."
        assert quoted.content == f'See "{name}" and `{name}`.'
        for res in (prose, quoted):
            assert res.links == []
            assert res.manifest == {"download_link_mode": mode, "artifacts": []}
    listing = await gw.get("/v1/artifacts")
    assert listing.json()["data"] == []


# --------------------------------------------------------------------------- changed files


def _rewrite_same_size(p: Path) -> None:
    old = p.read_bytes()
    st = p.stat()
    time.sleep(0.03)  # file timestamps are coarse (a kernel tick); let one pass
    with open(p, "r+b") as fh:  # same inode, same size
        fh.write(bytes(b ^ 0xFF for b in old))
    assert p.stat().st_mtime_ns != st.st_mtime_ns  # precondition: the clock ticked


def _rewrite_other_size(p: Path) -> None:
    with open(p, "ab") as fh:
        fh.write(b"NEW BYTES")


def _replace_same_size(p: Path) -> None:
    new = p.with_name("incoming.tmp")
    new.write_bytes(b"N" * p.stat().st_size)
    os.replace(new, p)


def _replace_other_size(p: Path) -> None:
    new = p.with_name("incoming.tmp")
    new.write_bytes(b"NEW BYTES")
    os.replace(new, p)


def _deleted(p: Path) -> None:
    p.unlink()


def _symlink_to_moved_original(p: Path) -> None:
    # the very same inode, moved outside the root and linked back by name
    moved = p.parent.parent.parent / "outside" / "moved.bin"
    os.replace(p, moved)
    p.symlink_to(moved)


def _symlink_inside_root(p: Path) -> None:
    # same inode, still inside the root, but the recorded name is now a symlink:
    # O_NOFOLLOW refuses it (a path that became a symlink is a changed file)
    moved = p.parent.parent / "elsewhere.bin"
    os.replace(p, moved)
    p.symlink_to(moved)


def _parent_dir_moved_out(p: Path) -> None:
    # the same inode again, now reached through a symlinked directory outside the root
    moved = p.parent.parent.parent / "outside" / "movedsub"
    os.replace(p.parent, moved)
    p.parent.symlink_to(moved, target_is_directory=True)


def _became_directory(p: Path) -> None:
    p.unlink()
    p.mkdir()


def _became_fifo(p: Path) -> None:
    p.unlink()
    os.mkfifo(p)


CHANGES: dict[str, Callable[[Path], None]] = {
    "rewrite-same-size": _rewrite_same_size,
    "rewrite-other-size": _rewrite_other_size,
    "replace-same-size-new-inode": _replace_same_size,
    "replace-other-size": _replace_other_size,
    "deleted": _deleted,
    "symlink-to-moved-original": _symlink_to_moved_original,
    "symlink-inside-root-same-inode": _symlink_inside_root,
    "parent-dir-moved-outside": _parent_dir_moved_out,
    "became-directory": _became_directory,
    "became-fifo": _became_fifo,
}


@pytest.mark.parametrize("case", list(CHANGES))
async def test_changed_file_is_gone_never_new_bytes(gw: GW, tmp_path: Path, case: str) -> None:
    target = gw.root / "sub" / "data.bin"
    target.parent.mkdir()
    original = bytes(range(256)) * 4
    target.write_bytes(original)
    priv = await mint_one(gw, target)
    pub = await mint_one(gw, target, body={"download_link_mode": "public"})
    assert (await gw.get(priv)).content == original
    assert (await gw.get(pub, key=None)).content == original

    CHANGES[case](target)
    for url, key in ((priv, ALICE_KEY), (pub, None)):
        for rng in (None, "bytes=0-9"):
            extra = {"Range": rng} if rng else {}
            with trio.fail_after(5):
                r = await gw.get(url, key=key, **extra)
            assert_json_error(r, 410, "artifact_changed")
            assert b"NEW BYTES" not in r.content and b"NNNN" not in r.content
    # a new mention of the same path makes a new link to whatever is there now, if anything
    res = await gw.chat(f"Again: {target} here.")
    assert res.content.startswith("Again: ")


# --------------------------------------------------------------------------- HTTP details


async def test_range_requests(gw: GW) -> None:
    data = bytes((i * 7) % 256 for i in range(1000))
    (gw.root / "blob.bin").write_bytes(data)
    for url, key in (
        (await mint_one(gw, gw.root / "blob.bin"), ALICE_KEY),
        (await mint_one(gw, gw.root / "blob.bin", body={"download_link_mode": "public"}), None),
    ):
        full = await gw.get(url, key=key)
        assert full.status_code == 200 and full.content == data
        assert full.headers["accept-ranges"] == "bytes"
        assert "content-range" not in full.headers

        cases = [
            ("bytes=0-9", 0, 9),
            ("bytes=-5", 995, 999),
            ("bytes=10-", 10, 999),
            ("bytes=990-5000", 990, 999),
            ("bytes=999-999", 999, 999),
            ("bytes=-5000", 0, 999),
        ]
        for header, a, b in cases:
            r = await gw.get(url, key=key, Range=header)
            assert r.status_code == 206, header
            assert r.headers["content-range"] == f"bytes {a}-{b}/1000"
            assert r.headers["content-length"] == str(b - a + 1)
            assert r.content == data[a : b + 1]
            assert r.headers["etag"] == full.headers["etag"]

        for header in ("bytes=99999-", "bytes=1000-", "bytes=-0"):
            r = await gw.get(url, key=key, Range=header)
            assert_json_error(r, 416, "range_not_satisfiable")
            assert r.headers["content-range"] == "bytes */1000"
        # forms the gateway does not do: the whole file (RFC 9110 lets it ignore Range);
        # invalid ones (last < first, what int() takes beyond ASCII digits) must be ignored
        for header in (
            "bytes=0-1,5-6",
            "lines=1-2",
            "bytes=abc",
            "bytes=5-3",
            "bytes=5-2",
            "bytes=+5-9",
            "bytes=5_0-",
        ):
            r = await gw.get(url, key=key, Range=header)
            assert r.status_code == 200 and r.content == data, header
            assert "content-range" not in r.headers


async def test_download_headers_and_unicode_name(gw: GW, files: DemoFiles) -> None:
    res = await gw.chat(f"Your CV: `{files.resume_txt}` (mind the space).")
    assert len(res.links) == 1
    name = files.resume_txt.name  # the code span becomes a clickable link with the name
    assert res.content == f"Your CV: [`{name}`]({res.links[0]}) (mind the space)."
    assert res.manifest["artifacts"][0]["filename"] == "r\u00e9sum\u00e9 2026.txt"
    r = await gw.get(res.links[0])
    body = files.resume_txt.read_bytes()
    assert r.status_code == 200 and r.content == body
    cd = r.headers["content-disposition"]
    assert cd.startswith("attachment; ")
    assert "filename*=UTF-8''r%C3%A9sum%C3%A9%202026.txt" in cd
    fallback = re.search(r'filename="([^"]*)"', cd)
    assert (
        fallback is not None and fallback.group(1).isascii() and fallback.group(1).endswith(".txt")
    )
    assert r.headers["content-type"].startswith("text/plain")
    assert r.headers["content-length"] == str(len(body))
    assert re.fullmatch(r'"[^"]+"', r.headers["etag"])
    assert r.headers["x-content-type-options"] == "nosniff"
    assert r.headers["cache-control"] == "private, no-store"

    pdf = await gw.get(await mint_one(gw, files.report_pdf))
    assert pdf.headers["content-type"] == "application/pdf"
    assert pdf.headers["content-disposition"] == (
        "attachment; filename=\"report.pdf\"; filename*=UTF-8''report.pdf"
    )
    assert pdf.headers["etag"] != r.headers["etag"]


# --------------------------------------------------------------------------- consistency


async def test_same_path_same_link_and_manifest(gw: GW, files: DemoFiles) -> None:
    pdf, png = files.report_pdf, files.plot_png
    res = await gw.chat(
        f"First {pdf} then {png}",
        f" and again {pdf}, also `{pdf}`",
        f" via {gw.root}/data/../report.pdf and {files.outside_txt} and {gw.root}/nope.txt.",
        f" As a URL: file://{urllib.parse.quote(str(pdf))} and"
        f" file://{urllib.parse.quote(str(files.resume_txt))} too.",
    )
    pdf_links = {u for u in res.links if res.content.count(u) >= 3}
    assert len(pdf_links) == 1
    (pdf_url,) = pdf_links
    assert res.content.count(pdf_url) == 5  # four spellings of one file, five mentions
    assert "draft-notes.txt" in res.content and "nope.txt" in res.content
    manifest = res.manifest
    assert manifest["download_link_mode"] == "private"
    arts = manifest["artifacts"]
    assert [a["url"] for a in arts] == list(dict.fromkeys(res.links))
    assert [(a["filename"], a["link_mode"], a["bytes"]) for a in arts] == [
        ("report.pdf", "private", pdf.stat().st_size),
        ("plot.png", "private", png.stat().st_size),
        ("r\u00e9sum\u00e9 2026.txt", "private", files.resume_txt.stat().st_size),
    ]
    for a in arts:
        assert set(a) == {"id", "filename", "url", "link_mode", "bytes"}
        assert a["url"].endswith("/" + a["id"])
    # only the terminal chunk carries the manifest
    dec = SSEDecoder()
    objs = [json.loads(e.data) for e in dec.feed(res.raw) if e.data != "[DONE]"]
    assert [("gateway" in o) for o in objs] == [False] * (len(objs) - 1) + [True]

    # another response mints other links for the same files
    again = await gw.chat(f"Once more {pdf}.")
    assert again.links and again.links[0] != pdf_url


async def test_non_streaming_response_carries_the_manifest(gw: GW, files: DemoFiles) -> None:
    text = f"Report: {files.report_pdf} and {files.report_pdf}; draft {files.outside_txt}."
    for mode in ("private", "public"):
        gw.upstream(completion(text), headers={"content-type": "application/json"})
        r = await gw.client.post(
            "/v1/chat/completions",
            json={
                "model": "m",
                "messages": [{"role": "user", "content": "go"}],
                "download_link_mode": mode,
            },
            headers=auth(ALICE_KEY),
        )
        gw.seen.record("chat (non-streaming)", r)
        assert r.status_code == 200
        out = r.json()
        content = out["choices"][0]["message"]["content"]
        links = LINK_RE.findall(content)
        assert len(links) == 2 and links[0] == links[1]
        assert ("?exp=" in links[0]) == (mode == "public")
        assert "draft-notes.txt" in content
        assert out["gateway"]["download_link_mode"] == mode
        assert out["gateway"]["artifacts"] == [
            {
                "id": links[0].partition("?")[0].rsplit("/", 1)[1],
                "filename": "report.pdf",
                "url": links[0],
                "link_mode": mode,
                "bytes": files.report_pdf.stat().st_size,
            }
        ]
        dl = await gw.get(links[0], key=None if mode == "public" else ALICE_KEY)
        assert dl.content == files.report_pdf.read_bytes()
    # the upstream never saw the gateway's own key
    sent = json.loads(gw.transport.requests[-1].content)
    assert "download_link_mode" not in sent and sent["user"].startswith("p_")


# --------------------------------------------------------------------------- link mode


ABSENT, INVALID = "absent", "invalid"
MODES = (ABSENT, "private", "public", INVALID)


def _expected(header: str, body: str, hermes: str, default: str) -> str:
    """The precedence table: the first one consulted decides; invalid → 400."""
    for value in (header, body, hermes):
        if value != ABSENT:
            return "error" if value == INVALID else value
    return default


@pytest.mark.parametrize("default", ["private", "public"])
@pytest.mark.parametrize("hermes", MODES)
@pytest.mark.parametrize("body_mode", MODES)
@pytest.mark.parametrize("header", MODES)
async def test_link_mode_precedence(
    nursery: trio.Nursery,
    tmp_path: Path,
    seen: Seen,
    files: DemoFiles,
    header: str,
    body_mode: str,
    hermes: str,
    default: str,
) -> None:
    gw = await start_gw(nursery, tmp_path, seen, artifacts={"default_link_mode": default})
    headers = {"X-Gateway-Owner": "openwebui:alice"}
    if header != ABSENT:
        headers["X-Gateway-Link-Mode"] = "Public" if header == INVALID else header
    body: dict[str, Any] = {}
    if body_mode != ABSENT:
        body["download_link_mode"] = "shared" if body_mode == INVALID else body_mode
    if hermes != ABSENT:
        body["metadata"] = {"hermes": {"download_link_mode": 1 if hermes == INVALID else hermes}}
    expected = _expected(header, body_mode, hermes, default)

    res = await gw.chat(f"Here: {files.report_pdf}", key=PROXY_KEY, headers=headers, body=body)
    if expected == "error":
        assert res.status == 400  # and gw.chat checked: JSON, upstream never called
        assert res.error["code"] == "invalid_download_link_mode"
        assert gw.transport.requests == []
        return
    assert res.status == 200
    assert res.manifest["download_link_mode"] == expected
    (url,) = res.links
    assert ("?exp=" in url and "&sig=" in url) == (expected == "public")
    assert res.manifest["artifacts"][0]["link_mode"] == expected
    assert gw.record(url).link_mode == expected and gw.record(url).owner == "openwebui:alice"


@pytest.mark.parametrize(
    ("body", "code"),
    [
        ({"download_link_mode": ""}, "invalid_download_link_mode"),
        ({"download_link_mode": "PUBLIC"}, "invalid_download_link_mode"),
        ({"download_link_mode": ["public"]}, "invalid_download_link_mode"),
        ({"download_link_mode": True}, "invalid_download_link_mode"),
        (
            {"metadata": {"hermes": {"download_link_mode": "everyone"}}},
            "invalid_download_link_mode",
        ),
        ({"metadata": {"hermes": {"download_link_mode": {"a": 1}}}}, "invalid_download_link_mode"),
    ],
)
async def test_invalid_mode_from_a_user_key_streams_nothing(
    gw: GW, files: DemoFiles, body: dict[str, Any], code: str
) -> None:
    res = await gw.chat(f"Here: {files.report_pdf}", body=body)
    assert res.status == 400 and res.error["code"] == code
    assert gw.transport.requests == []
    assert (await gw.get("/v1/artifacts")).json()["data"] == []


async def test_user_keys_may_not_assert(gw: GW, files: DemoFiles) -> None:
    for headers in (
        {"X-Gateway-Link-Mode": "public"},
        {"X-Gateway-Link-Mode": "private"},
        {"X-Gateway-Link-Mode": "bogus"},
        {"X-Gateway-Owner": "bob"},
    ):
        res = await gw.chat(f"Here: {files.report_pdf}", headers=headers)
        assert res.status == 403 and res.error["code"] == "forbidden_assertion"
    assert gw.transport.requests == []
    # a user key's body mode works
    res = await gw.chat(f"Here: {files.report_pdf}", body={"download_link_mode": "public"})
    assert res.manifest["download_link_mode"] == "public" and "?exp=" in res.links[0]


async def test_config_default_public(
    nursery: trio.Nursery, tmp_path: Path, seen: Seen, files: DemoFiles
) -> None:
    gw = await start_gw(nursery, tmp_path, seen, artifacts={"default_link_mode": "public"})
    res = await gw.chat(f"Here: {files.report_pdf}")
    assert res.manifest["download_link_mode"] == "public"
    assert (await gw.get(res.links[0], key=None)).content == files.report_pdf.read_bytes()
    shutil.rmtree(gw.root)  # everything gone: 410 for the link, name only for new mentions
    assert_json_error(await gw.get(res.links[0], key=None), 410, "artifact_changed")


# --------------------------------------------------------------------------- descriptors


def _fds_on(path: Path) -> list[str]:
    out = []
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue
        if target == str(path):
            out.append(fd)
    return out


async def _no_fds_on(path: Path) -> list[str]:
    """The descriptors still open on ``path`` once the server had up to 5 s to close them."""
    for _ in range(250):
        if not _fds_on(path):
            break
        await trio.sleep(0.02)
    return _fds_on(path)


@pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="needs /proc/self/fd")
async def test_aborted_downloads_and_head_release_the_file(gw: GW) -> None:
    big = gw.root / "big.bin"
    big.write_bytes(os.urandom(8 * 1024 * 1024))
    url = await mint_one(gw, big)
    host, port = gw.url.removeprefix("http://").rsplit(":", 1)
    for rng in ("", "Range: bytes=100-\r\n"):
        for _ in range(3):  # a client that reads a little and hangs up
            stream = await trio.open_tcp_stream(host, int(port))
            request = (
                f"GET {local(url)} HTTP/1.1\r\nHost: {host}\r\n"
                f"Authorization: Bearer {ALICE_KEY}\r\n{rng}\r\n"
            )
            await stream.send_all(request.encode())
            head = await stream.receive_some(65536)
            assert head.startswith(b"HTTP/1.1 20"), head[:100]
            await stream.aclose()
    assert await _no_fds_on(big) == []
    r = await gw.client.head(local(url), headers=auth(ALICE_KEY))
    gw.seen.record("HEAD", r)
    assert r.status_code == 200 and r.content == b""
    assert r.headers["content-length"] == str(8 * 1024 * 1024)
    assert await _no_fds_on(big) == []
    # and the server is still fine
    assert (await gw.get(url, Range="bytes=0-3")).content == big.read_bytes()[:4]
